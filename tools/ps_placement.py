#!/usr/bin/env python
"""Bytes of variables each ps task holds in --distribution=ps: the command. The measure, and
the whole description, are mlimages/bench/ps_placement.py's; see --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.bench import ps_placement

if __name__ == '__main__':
    sys.exit(ps_placement.main())
