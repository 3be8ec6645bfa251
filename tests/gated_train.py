"""train.py with a step gate, for the process tests that kill or interrupt a run.

    TRAIN_TEST_GATE=N:PATH python tests/gated_train.py <train.py flags>

runs train.py's command line with one more hook (train.from_command_line's extra_hooks):
the process holds before its own N-th step (in --mode=eval: batch) until PATH exists. A test that kills or interrupts a run at step
k < N thereby knows that work is left, whatever the machine's speed; it creates PATH to let
the run finish.

    TRAIN_TEST_SAVE_GATE=N:PATH python tests/gated_train.py <train.py flags>

holds before the first checkpoint save of a global step >= N (before the save's first
run) until PATH exists: a test that stops or kills a peer then knows that the save is left
to run, whatever the machine's speed.

    TRAIN_TEST_RUNS=PATH python tests/gated_train.py <train.py flags>

counts every tf.Session.run of the process (helpers.RunCounter) and writes to PATH, as a
JSON list, the runs between the starts of consecutive steps of the completed run. Without
either variable it is train.py.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train  # train.py's start-up: quiet TensorFlow, the version checks
import tensorflow.compat.v1 as tf
from tensorflow.python.client import session as session_lib

from helpers import RunCounter
from mlimages.run import hooks

GATE_ENV = 'TRAIN_TEST_GATE'
SAVE_GATE_ENV = 'TRAIN_TEST_SAVE_GATE'
RUNS_ENV = 'TRAIN_TEST_RUNS'


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


def hold_before_save(step, path):
    """Makes the product's saver hold before its first save of a global step >= `step`
    until `path` exists (this process only)."""
    save = hooks.CheckpointSaverHook._save
    held = []

    def gated_save(self, session, global_step):
        if global_step >= step and not held:
            held.append(global_step)
            tf.logging.info('test gate: holding before the checkpoint save of global step '
                            '%d until %s exists', global_step, path)
            while not os.path.exists(path):
                time.sleep(0.05)
        return save(self, session, global_step)
    hooks.CheckpointSaverHook._save = gated_save


class WrittenRunCounter(RunCounter):
    """helpers.RunCounter that writes per_step() to `path` when the run ends."""

    def __init__(self, path):
        super().__init__()
        self._path = path
        session_lib.BaseSession.run = self.wrap(session_lib.BaseSession.run)

    def end(self, session):
        with open(self._path, 'w') as f:
            json.dump(self.per_step(), f)


def hooks_from_environment():
    found = []
    if os.environ.get(RUNS_ENV):
        found.append(WrittenRunCounter(os.environ[RUNS_ENV]))
    value = os.environ.get(GATE_ENV)
    if value:
        step, path = value.split(':', 1)
        found.append(GateHook(int(step), path))
    value = os.environ.get(SAVE_GATE_ENV)
    if value:
        step, path = value.split(':', 1)
        hold_before_save(int(step), path)
    return found


if __name__ == '__main__':
    train.from_command_line(hooks_from_environment())
