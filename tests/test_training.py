"""training.py's own decisions, in process: how a failure is named, and what the first log
lines say of the global batch and the epochs."""
import os

import pytest
import tensorflow.compat.v1 as tf

import distribute
import file_db
import training
from helpers import options


@pytest.mark.parametrize('error,start', [
    (tf.errors.InvalidArgumentError(None, None, 'non-finite training loss : Tensor had NaN'),
     'the training loss became NaN or Inf at step 4; training stopped'),
    # A histogram summary that meets the NaN first names the same cause.
    (tf.errors.InvalidArgumentError(None, None, 'Nan in summary histogram for: sigmod_ce'),
     'the training loss became NaN or Inf at step 4; training stopped'),
    (tf.errors.DataLossError(None, None, 'corrupted record at 12'),
     'a shard is truncated or corrupt (corrupted record at 12) at step 4; find it with'),
    (tf.errors.InvalidArgumentError(None, None, 'Invalid JPEG data'),
     'bad record at step 4: Invalid JPEG data; find it with tools/check_tfrecords.py'),
])
def test_each_failure_gets_its_own_message(error, start, tmp_path):
    text = training.describe_failure(error, options(model_dir=str(tmp_path)), 4)
    assert text.startswith(start), text


def test_a_session_that_only_restarts_gets_its_own_message(tmp_path):
    text = training.describe_restart_loop(6, options(model_dir=str(tmp_path)), 3)
    assert text == ('the session failed 6 times in a row at step 3 without completing a '
                    'step, each time with an AbortedError or UnavailableError (logged above '
                    'as "An error was raised"): not a passing preemption; no checkpoint was '
                    'written')


def test_the_epochs_max_iter_makes(tmp_path):
    split = tmp_path / 'train'
    split.mkdir()
    for name in ('0.tfrecords', '1.tfrecords'):
        (split / name).write_bytes(b'')
    opts = options(data_dir=str(tmp_path), max_iter=300, batch_size=8)
    plan = distribute.plan('none', 1, 1, 0, 8, gpu_count=0, environ={})
    assert training.describe_epochs(opts, plan) == (
        'global batch 8 images a global step; the number of training records is unknown (%s '
        'does not list every shard; the record tools write it)'
        % os.path.join(str(tmp_path), 'train', 'records.txt'))
    file_db.write_counts(str(split), {'0.tfrecords': 1000, '1.tfrecords': 1400})
    assert training.describe_epochs(opts, plan) == (
        'global batch 8 images a global step; --max_iter=300 steps make 1.00 epochs of the '
        '2400 training records')
    forever = opts._replace(max_iter=-1)
    assert training.describe_epochs(forever, plan).endswith(
        '2400 training records, one epoch every 300 steps')
