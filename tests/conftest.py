"""Puts the repository root on sys.path so tests import the modules as train.py does, and
hides GPUs: the suite's numeric bounds are stated for CPU kernels (on a GPU box, TF32
convolutions would change the rounding the tolerances describe). The shared fixtures are
below; the plain helpers they use are in helpers.py (`from helpers import ...`). A test
file may define a fixture of the same name for its own data (test_serving's `images`)."""
import os
import shutil
import sys

os.environ['CUDA_VISIBLE_DEVICES'] = ''
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest

import helpers


@pytest.fixture(scope='module')
def module_dir(tmp_path_factory, request):
    """module_dir(name): a new directory for the files a module's tests share (as
    tmp_path_factory.mktemp). All of them are removed when the module's tests are done unless
    one of them failed, as pytest.ini's tmp_path_retention_policy treats each test's
    tmp_path: the suite writes GBs of checkpoints, more than a CI disk holds at once."""
    made, failures = [], request.session.testsfailed

    def make(name):
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield make
    if request.session.testsfailed == failures:
        for path in made:
            shutil.rmtree(str(path), ignore_errors=True)


@pytest.fixture(scope='module')
def dataset(module_dir):
    """helpers.write_dataset: train/ and val/ shards of CLASSES classes."""
    return helpers.write_dataset(str(module_dir('ds')))


@pytest.fixture(scope='module')
def images(module_dir):
    """helpers.make_image_files: readable and broken image files of every kind."""
    return helpers.make_image_files(module_dir('images'))


@pytest.fixture(scope='module')
def shards(module_dir):
    """helpers.write_mixed_shards with 7 classes: the training shard paths."""
    return helpers.write_mixed_shards(str(module_dir('perf')), 7)
