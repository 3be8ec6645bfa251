#!/usr/bin/env python
"""img2dataset's `files` output -> an image list for make_tfrecords.py and a failures file
(step 3 of docs/download.md): the command. The conversion, and the whole description of what
it checks and writes, is mlimages/recordkit/img2dataset_to_list.py; every flag is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.errors import stop_raises
from mlimages.recordkit import img2dataset_to_list

if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(img2dataset_to_list.main())
