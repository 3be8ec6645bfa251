"""Puts the repository root on sys.path so tests import the modules as train.py does, and
hides GPUs: the suite's numeric bounds are stated for CPU kernels (on a GPU box, TF32
convolutions would change the rounding the tolerances describe)."""
import os
import sys

os.environ['CUDA_VISIBLE_DEVICES'] = ''
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
