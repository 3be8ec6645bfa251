"""train.py with a step gate, for the process tests that kill or interrupt a run.

    TRAIN_TEST_GATE=N:PATH python tests/gated_train.py <train.py flags>

runs train.py's command line with one more hook (train.run's extra_hooks): the process holds
before its own N-th step (in --mode=eval: batch) until PATH exists. A test that kills or interrupts a run at step
k < N thereby knows that work is left, whatever the machine's speed; it creates PATH to let
the run finish. Without TRAIN_TEST_GATE it is train.py.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train  # train.py's start-up: quiet TensorFlow, the version checks
import tensorflow.compat.v1 as tf

GATE_ENV = 'TRAIN_TEST_GATE'


class GateHook(tf.train.SessionRunHook):
    """Holds before this process's `step`-th step until `path` exists."""

    def __init__(self, step, path):
        self._step, self._path, self._steps = step, path, 0

    def before_run(self, run_context):
        self._steps += 1
        if self._steps == self._step:
            tf.logging.info('test gate: holding before local step %d until %s exists',
                            self._step, self._path)
            while not os.path.exists(self._path):
                time.sleep(0.05)


def gate_from_environment():
    value = os.environ.get(GATE_ENV)
    if not value:
        return []
    step, path = value.split(':', 1)
    return [GateHook(int(step), path)]


if __name__ == '__main__':
    train.run(gate_from_environment())
