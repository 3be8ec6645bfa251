"""train.py whose training step fails for real, for the tests of the one-line failures.

    TRAIN_TEST_FAILURE=KIND:N python tests/failing_train.py <train.py flags>

runs train.py's command line with one more hook (train.from_command_line's extra_hooks)
that adds an op to the training graph and fetches it with the N-th step of this process, in the same
session.run as the train op. KIND is what the op meets, each a real TensorFlow error:
  oom      a tensor of 3 x 2^44 floats (192 TB, beyond any address space): the CPU
           allocator's ResourceExhaustedError, as a GPU's BFC allocator raises it
  xla      a function XLA must compile but cannot (a string op): tf2xla's
           InvalidArgumentError, as --xla meets it on a GPU
  reshape  a reshape to the wrong size: an InvalidArgumentError of an op that is not the
           input pipeline's
Without TRAIN_TEST_FAILURE it is train.py.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train  # train.py's start-up: quiet TensorFlow, the version checks
import tensorflow.compat.v1 as tf

FAILURE_ENV = 'TRAIN_TEST_FAILURE'


def failing_op(kind):
    """(the op, its feed) of one KIND (the module docstring)."""
    if kind == 'oom':
        batch = tf.placeholder(tf.int32, [])  # fed: no constant folding at graph time
        return tf.reduce_sum(tf.random.uniform([batch, 4096, 4096, 3])), {batch: 2 ** 20}
    if kind == 'xla':
        text = tf.placeholder(tf.string, [None])

        @tf.function(jit_compile=True)
        def lengths(strings):
            return tf.strings.length(strings)
        return lengths(text), {text: [b'ab']}
    if kind == 'reshape':
        values = tf.placeholder(tf.float32, [None])
        return tf.reshape(values, [3]), {values: [1.0, 2.0, 3.0, 4.0]}
    raise ValueError('%s: unknown kind %r' % (FAILURE_ENV, kind))


class FailureHook(tf.train.SessionRunHook):
    """Fetches failing_op(kind) with this process's step-th step."""

    def __init__(self, kind, step):
        self._kind, self._step, self._steps = kind, step, 0

    def begin(self):
        self._fetch, self._feed = failing_op(self._kind)

    def before_run(self, run_context):
        self._steps += 1
        if self._steps == self._step:
            return tf.train.SessionRunArgs(self._fetch, feed_dict=self._feed)
        return None


def failure_from_environment():
    value = os.environ.get(FAILURE_ENV)
    if not value:
        return []
    kind, step = value.split(':')
    return [FailureHook(kind, int(step))]


if __name__ == '__main__':
    train.from_command_line(failure_from_environment())
