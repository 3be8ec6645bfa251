#!/usr/bin/env python
"""Where mlimages/model/memory.py's constants come from: the command. The measures and the
fit, and the whole description, are mlimages/bench/memory_peak.py's; see --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.bench import memory_peak

if __name__ == '__main__':
    sys.exit(memory_peak.main())
