"""A training run stopped by SIGTERM (Kubernetes' preemption: SIGKILL follows 30 s later) or
SIGINT (Ctrl-C) loses no work: the signal only sets a flag, StopHook ends the session after
the step in flight, the Estimator's CheckpointSaverHook then saves the current global step
(in a cluster: the chief's; the other tasks just stop), and training raises
errors.Interrupted, which train.py reports as one line with exit status 128 + signal
(143 / 130: retryable for Kubeflow's ExitCode restart policy). A second signal exits at
once.

In a synchronous job (--distribution=collective) every step is one all-reduce of all the
tasks, so a task that stopped alone would leave the others waiting in a step it never takes.
There the tasks agree in each step (stop_agreement): every task feeds the signal it got
(a one-hot over SIGNALS, zeros if none) and fetches the job's elementwise max, and all of
them stop after the same step; a task stopped for another's signal says so
(Preemption.elsewhere).

Outside a training session (start-up, evaluation, prediction, export) a signal raises
errors.Stopped where the program is (errors.stop_raises), reported as one line too.
"""
import os
import signal

import numpy as np
import tensorflow.compat.v1 as tf

from mlimages.distributed import distribute
from mlimages.errors import SIGNALS

# The graph collections of stop_agreement: each replica's request, and the job's answer.
STOP_REQUESTS, STOP_AGREED = 'stop_requests', 'stop_agreed'


def signal_name(signum):
    return signal.Signals(signum).name


class Preemption(object):
    """While entered (with ...:) SIGTERM and SIGINT set `signum` instead of stopping the
    program; the handlers before are restored on leaving. program: the prefix of the line
    a second signal writes before it exits at once."""

    def __init__(self, program):
        self.program = program
        self.signum = None
        self.elsewhere = None  # the signal another task of a synchronous job got
        self._previous = {}

    def requested(self):
        return self.signum is not None or self.elsewhere is not None

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


def stop_agreement():
    """In a replica's training step: the placeholder StopHook feeds (this task's signal,
    one-hot over SIGNALS; zeros by default) and its elementwise max over every replica of
    the job (distribute.all_reduce_max), in the graph collections STOP_REQUESTS and
    STOP_AGREED."""
    request = tf.placeholder_with_default(tf.zeros([len(SIGNALS)]), [len(SIGNALS)],
                                          name='stop_request')
    tf.add_to_collection(STOP_REQUESTS, request)
    tf.add_to_collection(STOP_AGREED, distribute.all_reduce_max(request))


class StopHook(tf.train.SessionRunHook):
    """Ends the session after the step in flight once a signal asked for it (preempt, a
    Preemption); the session's end then saves the checkpoint. In a graph with a
    stop_agreement every step feeds this task's signal and fetches the job's answer, and
    only the answer stops: every task ends after the same step (a signal that comes during
    a step is fed in the next)."""

    def __init__(self, preempt):
        self._preempt = preempt
        self._requests = self._agreed = ()

    def begin(self):
        self._requests = tf.get_collection(STOP_REQUESTS)
        self._agreed = tf.get_collection(STOP_AGREED)

    def before_run(self, run_context):
        if not self._agreed:
            return None
        mine = np.array([float(s == self._preempt.signum) for s in SIGNALS], np.float32)
        return tf.train.SessionRunArgs(list(self._agreed),
                                       feed_dict={r: mine for r in self._requests})

    def after_run(self, run_context, run_values):
        if not self._agreed:
            if self._preempt.requested():
                run_context.request_stop()
            return
        got = [s for s, on in zip(SIGNALS, run_values.results[0]) if on]
        if got:
            if self._preempt.signum is None:
                self._preempt.elsewhere = got[0]
            run_context.request_stop()
