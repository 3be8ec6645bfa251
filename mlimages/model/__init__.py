"""The formulas beside the network, one formula a function.

    loss.py         the multi-label loss of ML-Images
    lr_schedule.py  the learning-rate schedules (SCHEDULES)
    metrics.py      streaming multi-label evaluation metrics
    precision.py    --dtype: what the model computes in
    memory.py       the GPU memory one training replica needs (no TensorFlow)"""
