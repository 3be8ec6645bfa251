"""The one line of a training run that stopped early, with what to do about it: an error of
TensorFlow's (describe_failure: a full or read-only disk, a NaN loss, an op no device can
run, a damaged shard, a bad record), a session that failed on every restart
(describe_restart_loop), a signal (interrupted). Each names what is kept in --model_dir.
"""
import os
import re

import tensorflow.compat.v1 as tf

from mlimages.run import checkpoints
from mlimages.distributed import devices
from mlimages.run import model_fn
from mlimages.run import preemption
from mlimages.errors import PEER_LOST_STATUS, Interrupted, op_error_text

# TensorFlow's words for an op it cannot put on a device: a placement problem, not data.
PLACEMENT_ERRORS = ('Cannot assign a device for operation',
                    'Could not satisfy explicit device specification',
                    'no supported kernel for GPU devices')


# A file system that refuses a write (a checkpoint, an event file): the fix of each.
DISK_ERRORS = {'No space left on device': 'free space on the disk of --model_dir=%s (or give '
                                          'another --model_dir)',
               'Read-only file system': 'give a --model_dir on a writable disk (not %s)',
               'Permission denied': 'make --model_dir=%s writable for this user'}


def describe_failure(error, opts, step):
    """One line for an error that stopped training, with what to do about it."""
    first_line = op_error_text(error)
    kept = what_is_kept(opts.model_dir)
    at = ' at step %d' % step if step is not None else ''
    for cause, fix in DISK_ERRORS.items():
        if cause in error.message:
            saving = re.search(r'(model\.ckpt-\d+)_temp', first_line)
            return ('%s writing %s in --model_dir=%s%s: %s, then rerun the same command to '
                    'resume; %s' % (cause.lower(), 'the checkpoint ' + saving.group(1)
                                    if saving else 'a file', opts.model_dir, at,
                                    fix % opts.model_dir, kept))
    if model_fn.NON_FINITE_LOSS in error.message or \
            model_fn.NON_FINITE_SUMMARY in error.message:
        return 'the training loss became NaN or Inf%s; training stopped, %s' % (at, kept)
    if any(text in error.message for text in PLACEMENT_ERRORS):
        return ('an op could not be placed on the devices (%s); --num_gpus=%d and '
                '--visiable_gpu=%d must fit the GPUs this process sees '
                '(CUDA_VISIBLE_DEVICES=%s); %s' % (
                    first_line, opts.num_gpus, opts.visiable_gpu,
                    os.environ.get(devices.GPU_ENV, '<unset>'), kept))
    if isinstance(error, tf.errors.DataLossError):
        return ('a shard is truncated or corrupt (%s)%s; find it with: python '
                'tools/check_tfrecords.py --class_num=%d %s' % (
                    first_line, at, opts.class_num, os.path.join(opts.data_dir, 'train')))
    if isinstance(error, tf.errors.InvalidArgumentError):
        return ('bad record%s: %s; find it with tools/check_tfrecords.py, or train on with '
                '--skip_bad_records; %s' % (at, first_line, kept))
    return '%s%s; %s' % (first_line, at, kept)


# TensorFlow's words for a step that failed because another task of the job went away.
PEER_ERRORS = ('Collective ops is aborted', 'failed to connect to all addresses',
               'Socket closed', 'Connection reset by peer', 'connection refused')


def peer_failure(error, distribution):
    """An error of a cluster job's step that means a peer was lost (the rerun of every task
    resumes), not a fault of this task."""
    if distribution not in ('ps', 'collective'):
        return False
    return isinstance(error, (tf.errors.UnavailableError, tf.errors.CancelledError)) or any(
        text.lower() in error.message.lower() for text in PEER_ERRORS)


def describe_peer_failure(error, step):
    """The one line of errors.PeerLost for peer_failure's errors."""
    return ('a task of the job was lost (%s) %s; exiting with status %d (retryable): rerun '
            'every task of the job with the same command to resume from the last checkpoint'
            % (op_error_text(error), 'after global step %s' % step if step is not None
               else 'before the first step', PEER_LOST_STATUS))


def describe_restart_loop(restarts, opts, step):
    """One line for a session that failed on every attempt (hooks.RestartLimitHook)."""
    return ('the session failed %d times in a row%s without completing a step, each time '
            'with an AbortedError or UnavailableError (logged above as "An error was '
            'raised"): not a passing preemption; %s' % (
                restarts, ' at step %d' % step if step is not None else '',
                what_is_kept(opts.model_dir)))


def what_is_kept(model_dir):
    last = checkpoints.latest_checkpoint(model_dir)
    return ('the last checkpoint %s is kept' % os.path.basename(last) if last
            else 'no checkpoint was written')


def interrupted(preempt, opts, plan, step):
    """errors.Interrupted for a run a signal stopped after its step in flight (preempt, the
    Preemption: this task's signal, or in a synchronous job another task's)."""
    signum = preempt.signum or preempt.elsewhere
    name = preemption.signal_name(signum)
    cause = name if preempt.signum else '%s to another task of the job' % name
    if plan.task is not None and plan.task.type != 'chief':
        return Interrupted(signum, '%s stopped by %s after global step %s; the chief saves '
                           'the checkpoint; rerun the same command to resume' % (
                               plan.task.name, cause, step))
    last = checkpoints.latest_checkpoint(opts.model_dir)
    saved = ('saved %s' % last if last and last.endswith('-%s' % step)
             else 'the last checkpoint is %s' % (last or 'none'))
    return Interrupted(signum, 'stopped by %s at global step %s: %s; rerun the same '
                       'command to resume' % (cause, step, saved))
