#!/usr/bin/env python
"""A folder per class or a CSV of path,labels -> an image list for make_tfrecords.py and
its class dictionary: the command. The rules are mlimages/recordkit/own_images.py's, the
command line mlimages/recordkit/make_image_list.py's; every flag is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.errors import stop_raises
from mlimages.recordkit import make_image_list

if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(make_image_list.main())
