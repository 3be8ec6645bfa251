"""What the commands of tools/ share.

    arguments.py         argparse helpers and one-line errors
    lazy_tensorflow.py   TensorFlow imported on first use, quietly
    worker_processes.py  the worker count, process pools, one process a worker
    progress.py          the progress line on stderr
    predict_args.py      tools/predict.py's and extract_features.py's model and image
                         arguments, the checkpoint's trained settings"""
