"""Puts the repository root on sys.path so tests import the modules as train.py does, and
hides GPUs: the suite's numeric bounds are stated for CPU kernels (on a GPU box, TF32
convolutions would change the rounding the tolerances describe). The shared fixtures are
below; the plain helpers they use are in helpers.py (`from helpers import ...`). A test
file may define a fixture of the same name for its own data (test_serving's `images`)."""
import os
import sys

os.environ['CUDA_VISIBLE_DEVICES'] = ''
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

import helpers  # noqa: E402


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
    """helpers.write_dataset: train/ and val/ shards of CLASSES classes."""
    return helpers.write_dataset(str(tmp_path_factory.mktemp('ds')))


@pytest.fixture(scope='module')
def images(tmp_path_factory):
    """helpers.make_image_files: readable and broken image files of every kind."""
    return helpers.make_image_files(tmp_path_factory.mktemp('images'))


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    """helpers.write_mixed_shards with 7 classes: the training shard paths."""
    return helpers.write_mixed_shards(str(tmp_path_factory.mktemp('perf')), 7)
