"""failures.py: the one line of a run that stopped early -- each TensorFlow error, a session
that only restarts, a signal to this task or to another task of a synchronous job."""
import signal

import pytest
import tensorflow.compat.v1 as tf

from mlimages.distributed import distribute
from mlimages.run import failures
from mlimages.run import preemption
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
    text = failures.describe_failure(error, options(model_dir=str(tmp_path)), 4)
    assert text.startswith(start), text


def test_a_session_that_only_restarts_gets_its_own_message(tmp_path):
    text = failures.describe_restart_loop(6, options(model_dir=str(tmp_path)), 3)
    assert text == ('the session failed 6 times in a row at step 3 without completing a '
                    'step, each time with an AbortedError or UnavailableError (logged above '
                    'as "An error was raised"): not a passing preemption; no checkpoint was '
                    'written')


def test_a_placement_error_is_named_as_one_not_as_a_bad_record(tmp_path):
    opts = options(model_dir=str(tmp_path), num_gpus=2, visiable_gpu=0)
    error = tf.errors.InvalidArgumentError(
        None, None, "Cannot assign a device for operation images: Could not satisfy "
        "explicit device specification '/device:GPU:0' because no supported kernel for "
        "GPU devices is available.")
    text = failures.describe_failure(error, opts, 1)
    assert text.startswith('an op could not be placed on the devices') and \
        'bad record' not in text and '--num_gpus=2' in text, text


def stopped(signum=None, elsewhere=None):
    preempt = preemption.Preemption('train.py')
    preempt.signum, preempt.elsewhere = signum, elsewhere
    return preempt


def task_plan(task_type):
    environ = {'TF_CONFIG': '{"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, '
                            '"task": {"type": "%s", "index": 0}}' % task_type}
    return distribute.plan('collective', 1, 1, 0, 4, gpu_count=0, environ=environ)


@pytest.mark.parametrize('preempt,task,words', [
    (stopped(signal.SIGTERM), 'chief', 'stopped by SIGTERM at global step 7'),
    (stopped(elsewhere=signal.SIGINT), 'chief',
     'stopped by SIGINT to another task of the job at global step 7'),
    (stopped(signal.SIGTERM), 'worker', 'worker:0 stopped by SIGTERM after global step 7'),
    (stopped(elsewhere=signal.SIGTERM), 'worker',
     'worker:0 stopped by SIGTERM to another task of the job after global step 7'),
])
def test_a_signal_names_itself_the_step_and_the_checkpoint(tmp_path, preempt, task, words):
    error = failures.interrupted(preempt, options(model_dir=str(tmp_path)), task_plan(task), 7)
    assert error.signum == (preempt.signum or preempt.elsewhere)
    assert str(error).startswith(words), str(error)
    if task == 'chief':
        assert str(error).endswith(': the last checkpoint is none; rerun the same command to '
                                   'resume'), str(error)
    else:
        assert str(error).endswith('; the chief saves the checkpoint; rerun the same command '
                                   'to resume'), str(error)
