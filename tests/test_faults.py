"""Fault injection on real train.py processes (ResNet-18, 32 px, the small shared dataset):
signals, damaged checkpoint state, a second trainer, a dead launcher, a full disk, bad
directories, empty splits. Signals are sent on log-line events while tests/gated_train.py
holds the run before a later step, so work is always left; each case checks the exit
status, the one line, the checkpoint files before and after, and that a rerun ends at
--max_iter."""
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import tensorflow.compat.v1 as tf

from helpers import ENV, ROOT, run_train, small_run_flags

pytestmark = pytest.mark.slow

GATED = os.path.join(ROOT, 'tests', 'gated_train.py')
STEP_LINE = r'\bstep (\d+): '


def flags(data, model_dir, max_iter, *more):
    out = small_run_flags(data, model_dir, max_iter)
    out[out.index('--resnet_size=50')] = '--resnet_size=18'
    return out + list(more)


def checkpoint_files(model_dir):
    """{name: sha256} of the checkpoint files and the state file in model_dir."""
    names = [n for n in os.listdir(model_dir)
             if n.startswith('model.ckpt-') or n == 'checkpoint']
    return {n: hashlib.sha256(open(os.path.join(model_dir, n), 'rb').read()).hexdigest()
            for n in names if os.path.isfile(os.path.join(model_dir, n))}


def steps_saved(model_dir):
    return sorted(int(m.group(1)) for m in (re.match(r'model\.ckpt-(\d+)\.index$', n)
                                            for n in os.listdir(model_dir)) if m)


class Run(object):
    """train.py (through the gate: it holds before local step `hold` until the gate file
    exists) with stderr read line by line; a watchdog bounds a broken run."""

    def __init__(self, args, gate_dir, hold=None, program=GATED, env=ENV):
        self.gate = os.path.join(gate_dir, 'gate-%d' % id(self))
        env = dict(env, TRAIN_TEST_GATE='%d:%s' % (hold, self.gate)) if hold else env
        self.proc = subprocess.Popen([sys.executable, program] + list(args), cwd=ROOT,
                                     env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self._watchdog = threading.Timer(600, self.proc.kill)
        self._watchdog.start()

    def until(self, pattern):
        """Reads lines until one matches; returns the match (None: the run ended)."""
        for line in self.proc.stderr:
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        return None

    def release(self):
        open(self.gate, 'w').close()

    def finish(self):
        """Waits for the exit; returns (status, the last line)."""
        self.lines += list(self.proc.stderr)
        self.proc.wait()
        self._watchdog.cancel()
        self.proc.stderr.close()
        return self.proc.returncode, (self.lines[-1].rstrip('\n') if self.lines else '')

    def text(self):
        return ''.join(self.lines[-40:])


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_the_step_and_the_rerun_resumes(dataset, tmp_path, signum):
    model_dir = str(tmp_path / 'model')
    args = flags(dataset, model_dir, 12)
    run = Run(args, str(tmp_path), hold=7)
    assert run.until(r'\bstep 3: '), run.text()
    run.proc.send_signal(signum)
    run.release()
    status, last = run.finish()
    assert status == 128 + signum, run.text()
    match = re.match(r'train\.py: stopped by %s at global step (\d+): saved (\S+); rerun the '
                     r'same command to resume$' % signal.Signals(signum).name, last)
    assert match, run.text()
    step = int(match.group(1))
    assert 3 <= step <= 7, last
    assert match.group(2) == os.path.join(model_dir, 'model.ckpt-%d' % step)
    assert steps_saved(model_dir) == [0, step]
    assert 'Traceback' not in ''.join(run.lines)
    rerun = run_train(*args)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert 'Restoring parameters from %s' % match.group(2) in rerun.stderr
    assert steps_saved(model_dir) == [0, step, 12]


@pytest.fixture(scope='module')
def trained(dataset, tmp_path_factory):
    """A model directory trained to step 10 with checkpoints 0, 5 and 10 (copied by each
    test that changes it)."""
    model_dir = str(tmp_path_factory.mktemp('trained') / 'model')
    result = run_train(*flags(dataset, model_dir, 10, '--snapshot=5'))
    assert result.returncode == 0, result.stderr[-2000:]
    assert steps_saved(model_dir) == [0, 5, 10]
    return model_dir


def copy_model(trained, tmp_path):
    import shutil
    model_dir = str(tmp_path / 'model')
    shutil.copytree(trained, model_dir)
    return model_dir


STATE_BREAKS = [
    ('deleted', None),
    ('garbled', b'this is not a checkpoint state\n{{{\n'),
    ('empty', b''),
    ('binary', bytes(range(256))),
    ('names a missing checkpoint', b'model_checkpoint_path: "model.ckpt-99"\n'),
]


def test_a_broken_state_file_resumes_from_the_newest_checkpoint(dataset, trained, tmp_path):
    """Each break of the state file: one warning naming model.ckpt-10, the state file
    rewritten, every checkpoint byte-equal; the last rerun trains on from 10, not 0."""
    model_dir = copy_model(trained, tmp_path)
    state = os.path.join(model_dir, 'checkpoint')
    before = checkpoint_files(model_dir)
    for i, (kind, content) in enumerate(STATE_BREAKS):
        os.remove(state)
        if content is not None:
            with open(state, 'wb') as f:
                f.write(content)
        last = i == len(STATE_BREAKS) - 1
        result = run_train(*flags(dataset, model_dir, 12 if last else 10, '--snapshot=5'))
        assert result.returncode == 0, (kind, result.stderr[-2000:])
        warnings = [l for l in result.stderr.splitlines() if 'state file' in l]
        assert len(warnings) == 1 and 'resuming from %s' % os.path.join(
            model_dir, 'model.ckpt-10') in warnings[0], (kind, warnings)
        assert 'Traceback' not in result.stderr and 'ParseError' not in result.stderr
        assert tf.train.latest_checkpoint(model_dir).endswith(
            'model.ckpt-%d' % (12 if last else 10)), kind
        after = checkpoint_files(model_dir)
        assert {n: h for n, h in after.items() if n in before and n != 'checkpoint'} == \
            {n: h for n, h in before.items() if n != 'checkpoint'}, kind
    assert 'Restoring parameters from %s' % os.path.join(model_dir, 'model.ckpt-10') \
        in result.stderr
    assert steps_saved(model_dir) == [0, 5, 10, 12]


def test_a_damaged_newest_checkpoint_is_moved_aside_and_the_run_resumes(dataset, trained,
                                                                       tmp_path):
    """model.ckpt-10's data truncated: eval names it in one line; training moves it to
    damaged/ (byte-equal), resumes from model.ckpt-5 and ends at --max_iter. Then the new
    model.ckpt-12's index deleted: moved aside too, the run resumes from model.ckpt-10."""
    model_dir = copy_model(trained, tmp_path)
    data = os.path.join(model_dir, 'model.ckpt-10.data-00000-of-00001')
    with open(data, 'r+b') as f:
        f.truncate(os.path.getsize(data) // 2)
    before = checkpoint_files(model_dir)
    evaluation = run_train(*flags(dataset, model_dir, 10), '--mode=eval', '--test_iter=1')
    last = evaluation.stderr.strip().splitlines()[-1]
    assert evaluation.returncode == 2, evaluation.stderr[-2000:]
    assert last.startswith('train.py: error: checkpoint %s is damaged (' % os.path.join(
        model_dir, 'model.ckpt-10')), last
    assert checkpoint_files(model_dir) == before
    result = run_train(*flags(dataset, model_dir, 12, '--snapshot=5'))
    assert result.returncode == 0, result.stderr[-2000:]
    warnings = [l for l in result.stderr.splitlines() if 'is damaged' in l]
    assert len(warnings) == 1 and 'model.ckpt-10' in warnings[0] and \
        'resuming from %s' % os.path.join(model_dir, 'model.ckpt-5') in warnings[0], warnings
    assert 'Restoring parameters from %s' % os.path.join(model_dir, 'model.ckpt-5') \
        in result.stderr
    damaged = os.path.join(model_dir, 'damaged')
    assert checkpoint_files(damaged) == {n: h for n, h in before.items()
                                         if n.startswith('model.ckpt-10.')}
    assert steps_saved(model_dir) == [0, 5, 10, 12]  # 10 anew, from 5
    os.remove(os.path.join(model_dir, 'model.ckpt-12.index'))
    result = run_train(*flags(dataset, model_dir, 12, '--snapshot=5'))
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'checkpoint %s is damaged (its .index file is missing): moved to %s; resuming ' \
        'from %s' % (os.path.join(model_dir, 'model.ckpt-12'), damaged,
                     os.path.join(model_dir, 'model.ckpt-10')) in result.stderr
    assert steps_saved(model_dir) == [0, 5, 10, 12]
    assert 'Traceback' not in result.stderr


def test_a_second_trainer_is_refused_naming_the_first(dataset, tmp_path):
    """The first run holds before its step 3; the second, on the same --model_dir, exits
    2 naming the holder and changes nothing; the first then ends at --max_iter."""
    model_dir = str(tmp_path / 'model')
    first = Run(flags(dataset, model_dir, 4), str(tmp_path), hold=3)
    try:
        assert first.until(r'test gate: holding'), first.text()
        before = checkpoint_files(model_dir)
        second = run_train(*flags(dataset, model_dir, 4))
        last = second.stderr.strip().splitlines()[-1]
        assert second.returncode == 2, second.stderr[-2000:]
        assert re.match(r'train\.py: error: another trainer \(pid %d on host \S+ since '
                        r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d .*\) is using %s: ' % (
                            first.proc.pid, re.escape(model_dir)), last), last
        assert checkpoint_files(model_dir) == before
    finally:
        first.release()
    status, last = first.finish()
    assert status == 0, first.text()
    assert steps_saved(model_dir) == [0, 4]


def gone(pid):
    """The process has ended (a zombie whose new parent has not reaped it yet counts)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] in 'ZX'
    except FileNotFoundError:
        return True


def launch(args, gate, hold):
    """tools/launch_local_cluster.py running tests/gated_train.py in every task."""
    env = dict(ENV, TRAIN_TEST_GATE='%d:%s' % (hold, gate))
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, 'tools', 'launch_local_cluster.py'), '--program',
         GATED] + args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    return proc


def read_until(proc, pattern, lines, pids):
    for line in proc.stdout:
        lines.append(line)
        started = re.search(r'started (\S+), pid (\d+)', line)
        if started:
            pids[started.group(1)] = int(started.group(2))
        if re.search(pattern, line):
            return True
    return False


def test_the_launchers_tasks_die_with_it_and_a_forwarded_sigterm_saves(dataset, tmp_path):
    """SIGKILL to the launcher (the OOM killer) while its tasks train: every task ends
    (PR_SET_PDEATHSIG), none keeps training or listening. Then SIGTERM to a new launcher
    on the same model directory: forwarded, the chief saves at its step and every task
    ends; the launcher exits 143."""
    model_dir = str(tmp_path / 'model')
    args = ['--workers', '2', '--ps', '1', '--'] + flags(dataset, model_dir, 40)
    for signum in (signal.SIGKILL, signal.SIGTERM):
        gate = str(tmp_path / ('gate-%d' % signum))
        proc = launch(args, gate, hold=30)
        watchdog = threading.Timer(600, proc.kill)
        watchdog.start()
        lines, pids = [], {}
        try:
            assert read_until(proc, r'\[chief:0\] .*\bstep \d+: ', lines, pids), ''.join(lines)
            assert set(pids) == {'chief:0', 'worker:0', 'ps:0'}, pids
            proc.send_signal(signum)
            open(gate, 'w').close()  # a task held at the gate goes on to its next step
            lines += list(proc.stdout)
            proc.wait()
            # The event is each task's end; the bound only stops a broken run's test.
            deadline = threading.Event()
            timer = threading.Timer(120, deadline.set)
            timer.start()
            while not all(gone(pid) for pid in pids.values()) and not deadline.is_set():
                deadline.wait(0.05)
            timer.cancel()
            survivors = [name for name, pid in pids.items() if not gone(pid)]
        finally:
            watchdog.cancel()
            for pid in pids.values():
                if not gone(pid):
                    os.kill(pid, signal.SIGKILL)
        assert not survivors, (signum, survivors, ''.join(lines[-30:]))
        if signum == signal.SIGKILL:
            assert proc.returncode == -signal.SIGKILL
            continue
        text = ''.join(lines)
        assert proc.returncode == 143, text[-3000:]
        saved = re.search(r'\[chief:0\] train\.py: stopped by SIGTERM at global step (\d+): '
                          r'saved (\S+); rerun the same command to resume', text)
        assert saved, text[-3000:]
        assert saved.group(2) == os.path.join(model_dir, 'model.ckpt-%s' % saved.group(1))
        assert tf.train.latest_checkpoint(model_dir) == saved.group(2)
        assert re.search(r'\[worker:0\] train\.py: worker:0 stopped by SIGTERM', text), text
        assert 'Traceback' not in text


def test_two_record_builders_on_one_split(tmp_path):
    """Builder A holds the train split (one image is a named pipe with no writer, so A
    waits there); builder B, with another list, exits 2 naming A and writes nothing. A
    stopped by SIGINT is one line, status 130; B then builds the split."""
    import numpy as np
    from PIL import Image
    images = tmp_path / 'images'
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3)).astype(np.uint8)).save(
            str(images / ('%d.jpg' % i)))
    os.mkfifo(str(images / 'pipe.jpg'))
    (tmp_path / 'a.txt').write_text('0.jpg 0:1\npipe.jpg 1:1\n')
    (tmp_path / 'b.txt').write_text('2.jpg 0:1\n3.jpg 1:1\n')
    out = tmp_path / 'out'

    def builder(list_file):
        return [sys.executable, os.path.join(ROOT, 'tools', 'make_tfrecords.py'), '--out_dir',
                str(out), '--image_root', str(images), '--class_num', '2', '--workers', '1',
                str(list_file)]
    a = subprocess.Popen(builder(tmp_path / 'a.txt'), cwd=ROOT, env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The event: A holds the lock (its file names A's pid); the pipe keeps A there.
        lock = out / 'train' / '.lock'
        deadline = threading.Event()
        timer = threading.Timer(120, deadline.set)
        timer.start()
        while not (lock.exists() and 'pid %d ' % a.pid in lock.read_text()) and \
                a.poll() is None and not deadline.is_set():
            deadline.wait(0.05)
        timer.cancel()
        b = subprocess.run(builder(tmp_path / 'b.txt'), cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=300)
        assert b.returncode == 2, b.stderr
        assert re.search(r'make_tfrecords\.py: error: another make_tfrecords\.py \(pid %d on '
                         r'host \S+ since .*\) is using %s' % (a.pid, re.escape(
                             str(out / 'train'))), b.stderr), b.stderr
        assert sorted(os.listdir(out / 'train')) == ['.lock']
        a.send_signal(signal.SIGINT)
        a_err = a.communicate(timeout=120)[1]
    finally:
        a.kill()
        a.wait()
    assert a.returncode == 130, a_err
    assert a_err.strip().splitlines()[-1].startswith('make_tfrecords.py: error: interrupted')
    assert 'Traceback' not in a_err
    b = subprocess.run(builder(tmp_path / 'b.txt'), cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert b.returncode == 0, b.stderr
    assert sorted(os.listdir(out / 'train')) == ['0.tfrecords', 'records.txt']
