"""hooks.py: the interval log line (images/s, the job's rate, the ETA from the job's rate)
the step a failure is reported at and the stop at the last global step, with a fake clock
and a real session; a step is one session.run."""
import contextlib
import os
import re

import pytest
import tensorflow.compat.v1 as tf

from mlimages.run import hooks
import train  # noqa: F401 (graph mode, as train.py runs)
from helpers import RunCounter


def run_steps(monkeypatch, steps, global_advance, seconds, job, max_steps=100):
    """`steps` local steps, each advancing the global step by `global_advance` (as K
    asynchronous workers do), `seconds` apart; returns the hook's log lines."""
    clock = [1000.0]
    monkeypatch.setattr(hooks.time, 'time', lambda: clock[0])
    lines = []
    monkeypatch.setattr(hooks.tf.logging, 'info', lambda fmt, *a: lines.append(fmt % a))
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        advance = tf.assign_add(step, global_advance)
        hooks.publish_step_after(advance)
        hook = hooks.TrainingLogHook(tensors={'cross_entropy': tf.constant(2.0)},
                                     images_per_step=8, every_n=2, max_steps=max_steps,
                                     images_per_global_step=8, worker_name='worker:0',
                                     job=job)
        with tf.train.MonitoredSession(hooks=[hook]) as session:
            for _ in range(steps):
                clock[0] += seconds
                session.run(advance)
    return lines


def test_interval_line_and_eta_from_the_jobs_rate(monkeypatch):
    # One worker of four: the global step advances 4 a local step, 0.5 s a step.
    lines = run_steps(monkeypatch, 4, 4, 0.5, job=True)
    steps = [l for l in lines if l.startswith('step ')]
    assert steps[0] == ('step 8: cross_entropy = 2 (16.0 images/s, 0.500 s/step, whole job '
                        '64.0 images/s, ETA 0:00:11)')  # (100 - 8) / (8 / 1 s)
    assert steps[1].startswith('step 16: ') and steps[1].endswith('ETA 0:00:10)')
    assert re.match(r'throughput worker:0, whole run: this worker 16\.0 images/s, whole job '
                    r'64\.0 images/s over 2\.0 s', lines[-1])


def test_single_process_line_has_no_job_rate(monkeypatch):
    lines = run_steps(monkeypatch, 2, 1, 1.0, job=False, max_steps=10)
    assert lines[0] == 'step 2: cross_entropy = 2 (8.0 images/s, 1.000 s/step, ETA 0:00:08)'


def test_step_tracker_names_the_step_that_failed():
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        advance = tf.assign_add(step, 1)
        hooks.publish_step_after(advance)
        tracker = hooks.StepTracker()
        fail = tf.debugging.check_numerics(tf.constant(float('nan')), 'boom')
        with tf.train.MonitoredSession(hooks=[tracker]) as session:
            session.run(advance)
            session.run(advance)
            with pytest.raises(tf.errors.InvalidArgumentError):
                session.run([advance, fail])
    assert tracker.failed_step == 3


class AbortBefore(tf.train.SessionRunHook):
    """Fails the run calls numbered in `runs` (1, 2, ...) as a kernel would: with an
    AbortedError, which MonitoredSession answers with a new session."""

    def __init__(self, runs):
        self.runs, self.calls = set(runs), 0

    def before_run(self, run_context):
        self.calls += 1
        if self.calls in self.runs:
            raise tf.errors.AbortedError(None, None, 'a kernel cannot run')


def test_a_session_that_only_restarts_is_ended_after_the_limit():
    with tf.Graph().as_default():
        advance = tf.assign_add(tf.train.get_or_create_global_step(), 1)
        abort = AbortBefore(range(1, 100))
        with pytest.raises(hooks.RestartLoop) as raised:
            with tf.train.MonitoredSession(hooks=[hooks.RestartLimitHook(3), abort]) as s:
                s.run(advance)
    assert raised.value.restarts == 4  # 3 restarts allowed, the 4th refused
    assert abort.calls == 4


def test_restarts_with_steps_in_between_go_on():
    with tf.Graph().as_default():
        advance = tf.assign_add(tf.train.get_or_create_global_step(), 1)
        # the first two runs fail, then every other run: never 2 restarts in a row after a step
        abort = AbortBefore([1, 2, 4, 6, 8, 10])
        with tf.train.MonitoredSession(hooks=[hooks.RestartLimitHook(2), abort]) as session:
            steps = [session.run(advance) for _ in range(5)]
    assert abort.calls == 11 and len(steps) == 5


class StepTime(tf.train.SessionRunHook):
    """Moves a fake clock by the next of `seconds` during each step (its after_run runs
    before the log hook's)."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, list(seconds)

    def after_run(self, run_context, run_values):
        self.clock[0] += self.seconds.pop(0)


@pytest.mark.parametrize('job,slow,noted', [(True, 10.0, True), (True, 4.0, False),
                                            (False, 10.0, False)])
def test_the_interval_line_names_a_step_slower_than_10x_the_median_in_a_job(
        monkeypatch, job, slow, noted):
    clock = [1000.0]
    monkeypatch.setattr(hooks.time, 'time', lambda: clock[0])
    lines = []
    monkeypatch.setattr(hooks.tf.logging, 'info', lambda fmt, *a: lines.append(fmt % a))
    with tf.Graph().as_default():
        advance = tf.assign_add(tf.train.get_or_create_global_step(), 1)
        hooks.publish_step_after(advance)
        hook = hooks.TrainingLogHook(tensors={'cross_entropy': tf.constant(2.0)},
                                     images_per_step=8, every_n=7, worker_name='chief:0',
                                     job=job)
        timer = StepTime(clock, [0.5] * 6 + [slow])
        with tf.train.MonitoredSession(hooks=[timer, hook]) as session:
            for _ in range(7):
                session.run(advance)
    line = [l for l in lines if l.startswith('step 7: ')][0]
    note = '; slowest step %.1f s = %.0fx the median 0.500 s: a slow task of the job' % (
        slow, slow / 0.5)
    assert line.endswith(note) == noted, line


def test_a_step_is_one_run_and_the_stop_sees_the_step_after_its_update(monkeypatch):
    """The tracker, the log line (every 2nd step) and the stop at global step 5 fetch the
    global step after the step's update from the step's own run: one session.run a step.
    The global step advances 2 a step (as with other ps workers): the values after the
    steps are 2, 4, 6, so the third step stops the run (a read before the update, 4, would
    not have)."""
    from tensorflow.python.client import session as session_lib
    counter = RunCounter()
    monkeypatch.setattr(session_lib.BaseSession, 'run', counter.wrap(session_lib.BaseSession.run))
    with tf.Graph().as_default():
        advance = tf.assign_add(tf.train.get_or_create_global_step(), 2)
        hooks.publish_step_after(advance)
        tracker = hooks.StepTracker()
        log = hooks.TrainingLogHook(tensors={'cross_entropy': tf.constant(2.0)},
                                    images_per_step=8, every_n=2)
        with tf.train.MonitoredSession(hooks=[counter, tracker, log,
                                              hooks.StopAtGlobalStepHook(5)]) as session:
            while not session.should_stop():
                session.run(advance)
    assert counter.per_step() == [1, 1] and len(counter.marks) == 3
    assert tracker.last_step == 6 and tracker.failed_step == 7


def test_hooks_need_the_published_step():
    with tf.Graph().as_default():
        tf.train.get_or_create_global_step()
        with pytest.raises(ValueError, match='publish_step_after'):
            hooks.StepTracker().begin()


class FakeProfiler(object):
    """profiler_v2's start / stop, noting how many global steps were done at each call."""

    def __init__(self):
        self.done, self.calls = 0, []

    def start(self, logdir):
        self.calls.append(('start', self.done))

    def stop(self):
        self.calls.append(('stop', self.done))


class Counted(hooks.StepTracker):
    def __init__(self, fake):
        super().__init__()
        self.fake = fake

    def after_run(self, run_context, run_values):
        super().after_run(run_context, run_values)
        self.fake.done = self.last_step


def profiled_sessions(monkeypatch, pieces, first, last, start_at=0):
    """Sessions of `pieces` steps each (train_and_eval's pieces) under one ProfileHook;
    (the fake profiler's calls as (what, global steps done when called), log lines)."""
    lines, fake = [], FakeProfiler()
    monkeypatch.setattr(hooks, 'profiler', fake)
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        advance = tf.assign_add(step, 1)
        hooks.publish_step_after(advance)
        hook = hooks.ProfileHook('/no/such/dir', first, last, lines.append)
        fake.done = start_at
        for count in pieces:
            # Each session resumes at the steps done (as from a checkpoint); the tracker's
            # after_run, before the profile hook's, notes each step done.
            scaffold = tf.train.Scaffold(init_fn=lambda _, session: step.load(fake.done,
                                                                               session))
            with tf.train.MonitoredSession(
                    tf.train.ChiefSessionCreator(scaffold), [Counted(fake), hook]) as session:
                for _ in range(count):
                    session.run(advance)
    return fake.calls, lines


def test_the_profile_covers_global_steps_first_to_last(monkeypatch):
    # Started with 1 step done (before the run of step 2), stopped once step 4 is done.
    calls, lines = profiled_sessions(monkeypatch, [6], 2, 4)
    assert calls == [('start', 1), ('stop', 4)]
    assert lines == ['profile of global steps 2-4 in /no/such/dir: open it with tensorboard '
                     '--logdir /no/such/dir, Profile tab (its plugin: pip install -r '
                     'requirements-profile.txt)']


def test_a_profile_across_sessions_is_traced_in_parts(monkeypatch):
    calls, lines = profiled_sessions(monkeypatch, [3, 3], 2, 5)
    assert calls == [('start', 1), ('stop', 3), ('start', 3), ('stop', 5)]
    assert [l.split(' in ')[0] for l in lines] == ['profile of global steps 2-3',
                                                   'profile of global steps 4-5']


def test_a_run_resumed_after_the_span_traces_nothing(monkeypatch):
    calls, lines = profiled_sessions(monkeypatch, [2], 2, 4, start_at=9)
    assert calls == []
    assert lines == ['--profile_steps=2,4: training resumes at global step 9, past them: '
                     'nothing traced']


class RecordingWatch(object):
    """A stand-in for peers.Watch: what the hooks tell it, and at each end of a named wait
    whether the checkpoint's index and the state file naming it exist yet."""

    def __init__(self, model_dir):
        self.events, self._model_dir = [], model_dir

    def start(self):
        pass

    def waiting(self):
        self.events.append('waiting')

    def stepped(self, step):
        self.events.append('stepped %d' % step)

    @contextlib.contextmanager
    def waiting_in(self, what):
        self.events.append('in ' + what)
        yield
        latest = tf.train.latest_checkpoint(self._model_dir)
        self.events.append('left (index %s, state file names %s)' % (
            sorted(f for f in os.listdir(self._model_dir) if f.endswith('.index')),
            latest and os.path.basename(latest)))


@pytest.mark.parametrize('saver_first', [False, True])
def test_every_run_of_a_save_is_a_named_wait_whatever_the_hook_order(tmp_path, saver_first):
    """The saver's runs (its start, every --snapshot steps, the end) are waits on the job
    named to the watch, before or after the watch's own hook; only the runs: the state file
    names a checkpoint after the run that wrote its index, outside the wait."""
    model_dir = str(tmp_path)
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        advance = tf.assign_add(step, 1)
        hooks.publish_step_after(advance)
        watch = RecordingWatch(model_dir)
        tracker = hooks.StepTracker()
        saver = hooks.CheckpointSaverHook(model_dir, watch=watch, save_steps=2)
        own = [tracker, hooks.PeerWatchHook(watch, tracker)]
        with tf.train.MonitoredSession(hooks=[saver] + own if saver_first else own + [saver]) \
                as session:
            for _ in range(3):
                session.run(advance)
    events = watch.events
    save_2 = events.index('in the checkpoint save at global step 2')
    assert events[save_2 + 1] == ("left (index ['model.ckpt-0.index', 'model.ckpt-2.index'], "
                                  "state file names model.ckpt-0)")
    assert events[save_2 - 1 if saver_first else save_2 - 2] == 'waiting'
    assert ('stepped 2' in events[:save_2]) != saver_first
    assert events[:2] == ['waiting', "in the checkpoint saver's start"]
    assert events[-4:] == ['in the checkpoint save at the end of training',
                           "left (index ['model.ckpt-0.index', 'model.ckpt-2.index'], state "
                           "file names model.ckpt-2)",
                           'in the checkpoint save at global step 3',
                           "left (index ['model.ckpt-0.index', 'model.ckpt-2.index', "
                           "'model.ckpt-3.index'], state file names model.ckpt-2)"]


class ReadAfterTheStep(tf.train.SessionRunHook):
    """What TensorFlow's StopAtStepHook does after the last step: one more read of the
    global step (from the ps tasks in a ps job), noted among the watch's events."""

    def __init__(self, events):
        self._events = events

    def after_run(self, run_context, run_values):
        self._events.append('read %d' % run_context.session.run(tf.train.get_global_step()))


def test_in_a_ps_job_the_reads_after_the_last_step_are_a_wait_until_the_session_ends(tmp_path):
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        advance = tf.assign_add(step, 1)
        hooks.publish_step_after(advance)
        watch = RecordingWatch(str(tmp_path))
        tracker = hooks.StepTracker()
        run_hooks = [tracker, hooks.PeerWatchHook(watch, tracker, last_step=2),
                     hooks.StopAtGlobalStepHook(2), ReadAfterTheStep(watch.events)]
        with tf.train.MonitoredSession(hooks=run_hooks) as session:
            while not session.should_stop():
                session.run(advance)
    assert watch.events == ['waiting', 'waiting', 'stepped 1', 'read 1', 'waiting',
                            'stepped 2', 'in the end of training at global step 2', 'read 2',
                            'left (index [], state file names None)']
