"""preemption.py in process: StopHook ends the session after the step in flight; with a
stop_agreement in the graph only the job's answer stops it (a signal that comes during a
step is fed in the next; another task's signal stops this one too), and stop_agreement's
answer is the max over the replicas. The signal is set by a hook, never sent: the process
tests of real signals are in test_faults.py."""
import json
import signal
import subprocess
import sys

import numpy as np
import tensorflow.compat.v1 as tf

from mlimages.run import preemption
from helpers import ENV, LOGICAL_CPUS, ROOT


class At(tf.train.SessionRunHook):
    """Calls act(step, feed) at the local steps given; runs before StopHook in the list,
    so its after_run comes first (as a signal handled when the step's run returns)."""

    def __init__(self, before=None, after=None):
        self._before, self._after, self.steps = before or {}, after or {}, 0

    def before_run(self, run_context):
        self.steps += 1
        feed = self._before.get(self.steps)
        return tf.train.SessionRunArgs([], feed_dict=feed() if feed else None)

    def after_run(self, run_context, run_values):
        if self.steps in self._after:
            self._after[self.steps]()


def steps_taken(graph_extra, at_hook, preempt, limit=10):
    """Local steps a MonitoredSession takes of a counter's increment with [at_hook,
    StopHook(preempt)] before it stops (at most `limit`)."""
    with tf.Graph().as_default():
        counter = tf.Variable(0, name='counter')
        train_op = tf.assign_add(counter, 1)
        graph_extra()
        hooks = [at_hook, preemption.StopHook(preempt)]
        with tf.train.MonitoredSession(hooks=hooks) as session:
            while not session.should_stop() and at_hook.steps < limit:
                session.run(train_op)
    return at_hook.steps


def test_without_agreement_a_signal_stops_after_the_step_in_flight():
    preempt = preemption.Preemption('test')

    def signal_in_step_2():
        preempt.signum = signal.SIGTERM

    assert steps_taken(lambda: None, At(after={2: signal_in_step_2}), preempt) == 2
    assert preempt.elsewhere is None


def test_with_agreement_a_signal_in_a_step_is_fed_to_the_next_and_stops_after_it():
    preempt = preemption.Preemption('test')

    def signal_in_step_2():
        preempt.signum = signal.SIGINT

    assert steps_taken(preemption.stop_agreement, At(after={2: signal_in_step_2}),
                       preempt) == 3
    assert (preempt.signum, preempt.elsewhere) == (signal.SIGINT, None)


def test_with_agreement_another_tasks_signal_stops_this_one_and_is_named():
    """The job's answer stands for the other tasks: here a placeholder of the test's, in
    the answers' collection, says SIGTERM (the first of SIGNALS) at step 4."""
    preempt = preemption.Preemption('test')
    answer = []

    def other_task():
        answer.append(tf.placeholder_with_default(tf.zeros([2]), [2]))
        tf.add_to_collection(preemption.STOP_AGREED, answer[0])

    def sigterm_elsewhere():
        return {answer[0]: np.array([1, 0], np.float32)}

    assert steps_taken(other_task, At(before={4: sigterm_elsewhere}), preempt) == 4
    assert (preempt.signum, preempt.elsewhere) == (None, signal.SIGTERM)
    assert preempt.requested()


AGREEMENT_CHILD = LOGICAL_CPUS + '''
import json
from mlimages.run import preemption

strategy = distribute.train_distribute('none', 2)
with strategy.scope():
    strategy.extended.call_for_each_replica(preemption.stop_agreement)
requests = tf.get_collection(preemption.STOP_REQUESTS)
agreed = tf.get_collection(preemption.STOP_AGREED)
out = {}
with tf.Session(config=tf.ConfigProto(device_count={'CPU': 2})) as sess:
    out['none'] = [a.tolist() for a in sess.run(agreed)]
    out['replica 1 SIGINT'] = [a.tolist() for a in sess.run(
        agreed, {requests[0]: [0, 0], requests[1]: [0, 1]})]
    out['both'] = [a.tolist() for a in sess.run(
        agreed, {requests[0]: [1, 0], requests[1]: [0, 1]})]
print(json.dumps({'requests': len(requests), 'agreed': out}))
'''


def test_the_agreement_is_the_max_over_the_replicas():
    """Two replicas (logical CPUs under MirroredStrategy): each gets the elementwise max of
    every replica's request."""
    result = subprocess.run([sys.executable, '-c', AGREEMENT_CHILD], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got['requests'] == 2
    assert got['agreed'] == {'none': [[0, 0], [0, 0]],
                             'replica 1 SIGINT': [[0, 1], [0, 1]],
                             'both': [[1, 1], [1, 1]]}
