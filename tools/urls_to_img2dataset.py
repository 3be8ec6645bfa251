#!/usr/bin/env python
"""A Tencent ML-Images URL list -> img2dataset's input (step 1 of docs/download.md): the
command. The conversion, and the whole description of what it checks and writes, is
mlimages/recordkit/urls_to_img2dataset.py; every flag is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.errors import stop_raises
from mlimages.recordkit import urls_to_img2dataset

if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(urls_to_img2dataset.main())
