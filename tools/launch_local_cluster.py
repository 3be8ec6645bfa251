"""Starts a whole TF_CONFIG training cluster of train.py as processes on this machine: the
command. The launcher, and the whole description of what it does, is
mlimages/distributed/local_cluster.py (its tasks' processes: local_tasks.py); every option
is in --help."""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import sys

from mlimages.distributed import local_cluster

if __name__ == '__main__':
    sys.exit(local_cluster.main())
