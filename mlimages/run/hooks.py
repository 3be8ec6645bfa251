"""Session hooks of a training run: the log line of every interval, the step a failure
happened at, the asynchronous stop at the last global step, and the end of a session that
only ever restarts.

The log line, every `every_n` steps of this worker and once more at the end:

    step S: cross_entropy = ..., learning_rate = ..., train_accuracy = ... (R images/s,
    T s/step[, whole job J images/s][, ETA h:mm:ss])[; slowest step X s = K x the median
    M s: a slow task of the job]

R = steps x images a step of this worker / wall time of the interval (not a mean of
per-step rates), T = wall time / steps, J = the global step's advance x images a global
step / wall time (in a TF_CONFIG cluster only: in ps mode every worker's step advances the
global step, in collective mode one synchronous step of all workers does), ETA = the
global steps left to max_steps / the global step's advance per second (the job's rate:
with K asynchronous workers K times this worker's). At the end one more line gives R and J
over the whole run. In a cluster job the line says when a step of the interval took more
than SLOW_FACTOR times the median step (of the last 100, once there are 5): in a
synchronous job every step waits for the slowest task.

A training step is one session.run (but for a checkpoint's save, the Estimator's summary
and step-rate hooks at their steps, and its check at the last step): these hooks read the
global step as it is after the step's own update from a fetch of that same run
(`publish_step_after`: a read that waits on the train op). The tracker's read after each
step and TensorFlow's checkpoint saver's (CheckpointSaverHook) were two more round trips a
step, to the ps tasks in a ps job.

ProfileHook traces the steps of --profile_steps with TensorFlow's profiler.
"""
import contextlib
import glob
import os
import statistics
import time

import tensorflow.compat.v1 as tf
# tf.profiler.experimental of TF2, which compat.v1 does not name: it traces graph-mode
# sessions too, as TensorBoard's Profile tab reads them (*.xplane.pb).
from tensorflow.python.profiler import profiler_v2 as profiler
from tensorflow.python.client import session as session_lib

from mlimages.errors import RestartLoop

SLOW_FACTOR = 10
# The graph collection of the global step read after the train op (publish_step_after).
STEP_AFTER = 'mlimages_global_step_after_step'


def publish_step_after(train_op):
    """The global step read after `train_op` in the same run, for the hooks to fetch:
    this step's increment included (and any other ps worker's that landed before the
    read), never the value before it. Under a strategy each replica publishes its own
    copy's read (every copy is incremented in the step); the hooks fetch the first."""
    with tf.control_dependencies([train_op]):
        value = tf.identity(tf.train.get_global_step().read_value())
    tf.add_to_collection(STEP_AFTER, value)
    return value


def step_after():
    """The tensor publish_step_after put in this graph; raises ValueError without one."""
    found = tf.get_collection(STEP_AFTER)
    if not found:
        raise ValueError('the training graph has no global step read after its train op '
                         '(model_fn calls hooks.publish_step_after)')
    return found[0]


class TrainingLogHook(tf.train.SessionRunHook):
    """The interval's log line (see the module docstring); tensors: {name: scalar}."""

    def __init__(self, *, tensors, images_per_step, every_n, max_steps=None,
                 images_per_global_step=None, worker_name=None, job=False):
        self._tensors = tensors
        self._images = images_per_step
        self._global_images = images_per_global_step or images_per_step
        self._every_n = max(1, every_n)
        self._max_steps = max_steps
        self._worker = worker_name or 'worker'
        self._job = job

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._step_after = step_after()
        self._iter = 0
        self._values = None  # until a step completes
        self._durations, self._slowest = [], 0.0

    def after_create_session(self, session, coord):
        self._start = self._last_time = time.time()
        self._last_iter = 0
        self._first_global = self._last_global = self._global = int(
            session.run(self._global_step))

    def before_run(self, run_context):
        # The scalars are computed by the training step anyway; fetching them every step
        # lets end() log the last step without running the graph (which would draw a
        # batch and advance the loss counters).
        self._iter += 1
        self._step_start = time.time()
        return tf.train.SessionRunArgs((self._tensors, self._step_after))

    def after_run(self, run_context, run_values):
        self._values, step = run_values.results
        self._global = max(self._global, int(step))
        duration = time.time() - self._step_start
        self._slowest = max(self._slowest, duration)
        self._durations = (self._durations + [duration])[-100:]
        if self._iter % self._every_n == 0:
            self._log()

    def end(self, session):
        if self._iter != self._last_iter and self._values is not None:
            self._log()
        elapsed = time.time() - self._start
        tf.logging.info('throughput %s, whole run: %s over %.1f s (%d steps of this worker, '
                        'global step %d -> %d)', self._worker,
                        self._rates(elapsed, self._iter, self._global - self._first_global),
                        elapsed, self._iter, self._first_global, self._global)

    def _rates(self, elapsed, steps, global_steps):
        elapsed = max(elapsed, 1e-9)
        return 'this worker %.1f images/s, whole job %.1f images/s' % (
            steps * self._images / elapsed, global_steps * self._global_images / elapsed)

    def _log(self):
        now = time.time()
        steps = self._iter - self._last_iter
        elapsed = max(now - self._last_time, 1e-9)
        step = self._global
        text = ', '.join('%s = %.6g' % (k, v) for k, v in sorted(self._values.items()))
        rate = steps / elapsed
        line = 'step %d: %s (%.1f images/s, %.3f s/step' % (
            step, text, rate * self._images, elapsed / steps)
        if self._job:
            line += ', whole job %.1f images/s' % (
                (step - self._last_global) * self._global_images / elapsed)
        global_rate = (step - self._last_global) / elapsed
        if self._max_steps and global_rate > 0:
            eta = int(max(0, self._max_steps - step) / global_rate)
            line += ', ETA %d:%02d:%02d' % (eta // 3600, eta // 60 % 60, eta % 60)
        tf.logging.info(line + ')' + self._slow_note())
        self._last_time, self._last_iter, self._last_global = now, self._iter, step
        self._slowest = 0.0

    def _slow_note(self):
        if not self._job or len(self._durations) < 5:
            return ''
        median = statistics.median(self._durations)
        if self._slowest <= SLOW_FACTOR * median:
            return ''
        return '; slowest step %.1f s = %.0fx the median %.3f s: a slow task of the job' % (
            self._slowest, self._slowest / median, median)


class StepTracker(tf.train.SessionRunHook):
    """Remembers the global step after the last completed step; a failure is at the next.
    The value after a step is the step's own fetch of publish_step_after's read (a plain
    fetch of the variable may see it before or after the increment)."""

    def __init__(self):
        self.last_step = None

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._step_after = step_after()

    def after_create_session(self, session, coord):
        self.last_step = session.run(self._global_step)

    def before_run(self, run_context):
        return tf.train.SessionRunArgs(self._step_after)

    def after_run(self, run_context, run_values):
        self.last_step = int(run_values.results)

    @property
    def failed_step(self):
        return None if self.last_step is None else self.last_step + 1


class PeerWatchHook(tf.train.SessionRunHook):
    """Tells a peers.Watch when this task waits for the job (from the session's creation,
    and in each step) and when a step completed (the global step: the StepTracker's, which
    runs before this hook); the watch ends the task when a peer it cannot go on without is
    lost. The runs of the hooks after a step (a checkpoint save) are waits of their own
    (WatchedSession), whatever the order of the hooks; the trainer stops the watch once
    the session is closed. last_step: a ps job's --max_iter. After the step that reaches
    it, TensorFlow's own stop hook reads the global step from the ps tasks once more: from
    there to the session's end is a wait too. (Never in a collective job: a peer that has
    finished may exit then, and that is no loss.)"""

    def __init__(self, watch, tracker, last_step=None):
        self._watch, self._tracker, self._last_step = watch, tracker, last_step
        self._ending = contextlib.ExitStack()

    def begin(self):
        self._watch.start()
        self._watch.waiting()

    def before_run(self, run_context):
        self._watch.waiting()

    def after_run(self, run_context, run_values):
        step = self._tracker.last_step
        self._watch.stepped(step)
        if self._last_step is not None and step >= self._last_step:
            self._ending.close()
            self._ending.enter_context(self._watch.waiting_in(
                'the end of training at global step %d' % step))

    def end(self, session):
        self._ending.close()


class WatchedSession(session_lib.SessionInterface):
    """`session` for a hook's runs outside the step (TensorFlow's saver): each run is a
    wait on the job named `what` to the peers.Watch (Watch.waiting_in), so a peer lost
    then ends the task as in a step."""

    def __init__(self, session, watch, what):
        self.unwatched, self._watch, self._what = session, watch, what

    @property
    def graph(self):
        return self.unwatched.graph

    @property
    def sess_str(self):
        return self.unwatched.sess_str

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        with self._watch.waiting_in(self._what):
            return self.unwatched.run(fetches, feed_dict, options, run_metadata)


class RestartLimitHook(tf.train.SessionRunHook):
    """Ends a run whose session is created more than `limit` + 1 times in a row without
    completing a step. The Estimator's MonitoredSession takes every AbortedError and
    UnavailableError for a preempted peer (a ps or worker restarting) and creates the
    session anew; after a real preemption steps follow, but an error that recurs on every
    step (a kernel that cannot run: oneDNN reports its failures as AbortedError) would
    restart the session forever."""

    def __init__(self, limit=5):
        self._limit = limit

    def begin(self):
        self._creations = 0

    def after_create_session(self, session, coord):
        self._creations += 1
        if self._creations > self._limit + 1:
            raise RestartLoop(self._creations - 1)

    def after_run(self, run_context, run_values):
        self._creations = 0


class StopAtGlobalStepHook(tf.train.SessionRunHook):
    """Asynchronous training (ps): stops once the global step, which the other workers
    advance too, has reached last_step, as read after this worker's own update in the same
    run (publish_step_after). The Estimator's own hook extrapolates from the value before
    the step and so runs late when other workers step in between; with this one a worker
    overshoots only with a step it started while another worker's was in flight: a step
    past last_step reads at least last_step + 1 and stops its worker, so each of the other
    workers - 1 adds at most one (at most workers - 1 steps past last_step in all)."""

    def __init__(self, last_step):
        self._last_step = last_step

    def begin(self):
        self._step_after = step_after()

    def before_run(self, run_context):
        return tf.train.SessionRunArgs(self._step_after)

    def after_run(self, run_context, run_values):
        if run_values.results >= self._last_step:
            run_context.request_stop()


class CheckpointSaverHook(tf.train.CheckpointSaverHook):
    """TensorFlow's checkpoint saver, deciding from the global step after the step
    (publish_step_after). TensorFlow's own assumes that a run may hold up to 1,000,000
    steps (its _steps_per_run, for TPU loops) and so re-reads the global step after every
    step; this one saves at the same steps (every save_steps, and at the end) without.
    watch: the task's peers.Watch (None outside a cluster job): the runs of a save are
    waits on the job (a collective save waits for every worker, a ps job's reads the ps
    tasks). Only the runs: while this task writes the files, a collective peer that has
    finished the job may exit, and that is no loss."""

    def __init__(self, checkpoint_dir, watch=None, **kwargs):
        super().__init__(checkpoint_dir, **kwargs)
        self._watch = watch

    def _watched(self, session, what):
        if self._watch is None:
            return session
        return WatchedSession(getattr(session, 'unwatched', session), self._watch, what)

    def after_create_session(self, session, coord):
        super().after_create_session(self._watched(session, "the checkpoint saver's start"),
                                     coord)

    def end(self, session):
        super().end(self._watched(session, 'the checkpoint save at the end of training'))

    def _save(self, session, step):
        return super()._save(
            self._watched(session, 'the checkpoint save at global step %d' % step), step)

    def begin(self):
        super().begin()
        self._step_after = step_after()

    def before_run(self, run_context):
        return tf.train.SessionRunArgs(self._step_after)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            if self._save(run_context.session, step):
                run_context.request_stop()


class ProfileHook(tf.train.SessionRunHook):
    """TensorFlow's profiler over the steps that make global steps first .. last: started
    before the step that makes global step max(first, where the session starts), stopped
    after the one that reaches last, written to <logdir>/plugins/profile/<time>/<host>
    .xplane.pb (TensorBoard's Profile tab). A session that ends before (train_and_eval's
    pieces, with an evaluation between them) stops its part of the trace, and the next
    session traces the rest as a run of its own. log(line) says where each is and how to
    open it."""

    def __init__(self, logdir, first, last, log):
        self._logdir, self._first, self._last, self._log = logdir, first, last, log
        self._tracing = self._done = False
        self._from = None

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._step_after = step_after()

    def after_create_session(self, session, coord):
        self._step = int(session.run(self._global_step))
        if not self._done and self._step >= self._last:
            self._done = True
            self._log('--profile_steps=%d,%d: training resumes at global step %d, past '
                      'them: nothing traced' % (self._first, self._last, self._step))

    def before_run(self, run_context):
        if not (self._done or self._tracing) and self._step + 1 >= self._first:
            profiler.start(self._logdir)
            self._tracing, self._from = True, self._step + 1
        return tf.train.SessionRunArgs(self._step_after)

    def after_run(self, run_context, run_values):
        self._step = int(run_values.results)
        if self._tracing and self._step >= self._last:
            self._stop()

    def end(self, session):
        if self._tracing:
            self._stop()

    def _stop(self):
        profiler.stop()
        self._tracing, self._done = False, self._step >= self._last
        runs = sorted(glob.glob(os.path.join(self._logdir, 'plugins', 'profile', '*')),
                      key=os.path.getmtime)
        self._log('profile of global steps %d-%d in %s: open it with tensorboard --logdir %s, '
                  'Profile tab (its plugin: pip install -r requirements-profile.txt)' % (
                      self._from, self._step, runs[-1] if runs else self._logdir,
                      self._logdir))
