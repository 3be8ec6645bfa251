#!/usr/bin/env python
"""Check TFRecord shards before a long training run: the command. The checker, and the whole
description of what it checks and reports, is mlimages/recordkit/check_tfrecords.py; every
flag is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.errors import stop_raises
from mlimages.recordkit import check_tfrecords

if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(check_tfrecords.main())
