#!/usr/bin/env python
"""The pooled feature of each image: the command. The extraction, and the whole description
of what it writes, is mlimages/cli/extract_features.py; every option is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.errors import stop_raises
from mlimages.cli import extract_features

if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(extract_features.main())
