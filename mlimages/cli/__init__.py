"""What the commands of tools/ share.

    entry.py             a command's main: parse, run, each error one line and its status
    arguments.py         argparse helpers and one-line errors
    lazy_tensorflow.py   TensorFlow imported on first use, quietly
    worker_processes.py  the worker count, process pools, one process a worker
    progress.py          the progress line on stderr
    predict_args.py      tools/predict.py's and extract_features.py's model and image
                         arguments, the checkpoint's trained settings
    predict.py           tools/predict.py: classify images with a trained model
    extract_features.py  tools/extract_features.py: the pooled feature of each image
    export_onnx.py       tools/export_onnx.py: the float signature as an ONNX model
    plan_run.py          tools/plan_run.py: what a training run's flags imply, untrained"""
