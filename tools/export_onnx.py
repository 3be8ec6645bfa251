#!/usr/bin/env python
"""An export of train.py as an ONNX model: the command. The conversion and its check, and
the whole description, are mlimages/cli/export_onnx.py's; every option is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.errors import stop_raises
from mlimages.cli import export_onnx

if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(export_onnx.main())
