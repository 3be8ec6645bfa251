"""What the commands of tools/ share.

    common.py        argparse helpers and one-line errors, TensorFlow on first use, the
                     worker count and process pools
    progress.py      the progress line on stderr
    ports.py         free TCP ports for the tasks of a local cluster
    predict_args.py  tools/predict.py's and extract_features.py's model and image
                     arguments, the checkpoint's trained settings"""
