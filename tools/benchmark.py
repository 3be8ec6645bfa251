#!/usr/bin/env python
"""Input-pipeline and training-step speed: the command. The measures, and the whole
description of what they compare, are mlimages/bench/benchmark.py's; see --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.bench import benchmark

if __name__ == '__main__':
    sys.exit(benchmark.main())
