#!/usr/bin/env python
"""Classify images with a trained model: the command. The classifier, and the whole
description of what it writes, is mlimages/cli/predict.py; every option is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.errors import stop_raises
from mlimages.cli import predict

if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(predict.main())
