#!/usr/bin/env python
"""What a training run's flags imply, without training: the command. The plan, and the whole
description, are mlimages/cli/plan_run.py's (mlimages/run/run_plan.py); see --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.cli import plan_run

if __name__ == '__main__':
    sys.exit(plan_run.main())
