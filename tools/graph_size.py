#!/usr/bin/env python
"""Size of the training graph against the number of replicas: the command. The measure, and
the whole description, are mlimages/bench/graph_size.py's; see --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.bench import graph_size

if __name__ == '__main__':
    sys.exit(graph_size.main())
