"""A training run stopped by SIGTERM (Kubernetes' preemption: SIGKILL follows 30 s later) or
SIGINT (Ctrl-C) loses no work: the signal only sets a flag, hooks.StopOnRequestHook ends
the session after the step in flight, the Estimator's CheckpointSaverHook then saves the
current global step (in a cluster: the chief's; the other tasks just stop), and training
raises errors.Interrupted, which train.py reports as one line with exit status 128 +
signal (143 / 130: retryable for Kubeflow's ExitCode restart policy). A second signal
exits at once.

Outside a training session (start-up, evaluation, prediction, export) a signal raises
errors.Stopped where the program is (raise_stopped), reported as one line too.
"""
import os
import signal

import tensorflow.compat.v1 as tf

from errors import Stopped

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def signal_name(signum):
    return signal.Signals(signum).name


def raise_stopped(signum, frame):
    """The handler outside training: errors.Stopped where the program is."""
    raise Stopped(signum)


def stop_raises():
    """SIGTERM and SIGINT raise errors.Stopped (train.py's and the tools' start)."""
    for signum in SIGNALS:
        signal.signal(signum, raise_stopped)


class Preemption(object):
    """While entered (with ...:) SIGTERM and SIGINT set `signum` instead of stopping the
    program; the handlers before are restored on leaving. program: the prefix of the line
    a second signal writes before it exits at once."""

    def __init__(self, program):
        self.program = program
        self.signum = None
        self._previous = {}

    def requested(self):
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.signum is not None:
            # Nothing of Python's (logging, exceptions) past this point: out at once.
            os.write(2, ('%s: %s again: exiting at once (a checkpoint being written is '
                         'incomplete; the last complete one is kept)\n'
                         % (self.program, signal_name(signum))).encode())
            os._exit(128 + signum)
        self.signum = signum
        tf.logging.warning('%s: finishing the step in flight, then saving a checkpoint and '
                           'exiting (send it again to exit at once)', signal_name(signum))

    def __enter__(self):
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False
