"""Fault injection on real train.py processes (ResNet-18, 32 px, the small shared dataset):
signals (to a run, to one task of a synchronous job, to an evaluation, to each tool),
damaged checkpoint state, a second trainer, a dead launcher, a full disk, bad directories,
empty splits. Signals are sent on log-line events while tests/gated_train.py (or for a tool
tests/gated_tool.py) holds the run before a later step, so work is always left; each case
checks the exit status, the one line, the checkpoint files before and after, and that a
rerun ends at --max_iter."""
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import tensorflow.compat.v1 as tf

from helpers import CLASSES, ENV, ROOT, run_train, small_run_flags, train_model
from mlimages.distributed import ports

pytestmark = pytest.mark.slow

GATED = os.path.join(ROOT, 'tests', 'gated_train.py')
GATED_TOOL = os.path.join(ROOT, 'tests', 'gated_tool.py')
STEP_LINE = r'\bstep (\d+): '


def flags(data, model_dir, max_iter, *more):
    return small_run_flags(data, model_dir, max_iter) + list(more)


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


@pytest.mark.parametrize('signum,mode', [(signal.SIGTERM, 'train'), (signal.SIGINT, 'train'),
                                         (signal.SIGTERM, 'train_and_eval')])
def test_a_signal_saves_the_step_and_the_rerun_resumes(dataset, tmp_path, signum, mode):
    """The signal lands after step 3 while the run holds before its step 7: it stops at
    a step in [3, 7], saves it, says so in one line and exits 128 + signal; the rerun
    restores that checkpoint and ends at --max_iter."""
    model_dir = str(tmp_path / 'model')
    args = flags(dataset, model_dir, 12, '--mode=' + mode, '--test_interval=5',
                 '--test_iter=1')
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
    if mode == 'train_and_eval':
        # The first evaluation was due at step 5, after the signal: it did not start.
        assert not [l for l in run.lines if 'evaluated ' in l]
        return  # the rerun is the same as in train mode
    rerun = run_train(*args)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert 'Restoring parameters from %s' % match.group(2) in rerun.stderr
    assert steps_saved(model_dir) == [0, step, 12]


@pytest.fixture(scope='module')
def trained(dataset, module_dir):
    """A model directory trained to step 10 with checkpoints 0, 5 and 10 (copied by each
    test that changes it)."""
    _, model_dir, _ = train_model(module_dir('trained'), 10, '--snapshot=5', data=dataset)
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
        if last:  # what a run killed during a save leaves: removed at the next start
            os.makedirs(os.path.join(model_dir, 'model.ckpt-11_temp'))
            open(os.path.join(model_dir, 'model.ckpt-11_temp', 'part-00000-of-00001.index'),
                 'w').close()
            open(os.path.join(model_dir, 'checkpoint.tmp0123abcd'), 'w').close()
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
    assert not [n for n in os.listdir(model_dir) if '_temp' in n or '.tmp' in n]


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
        assert re.search(r'\[worker:0\] train\.py: worker:0 \(worker id 1\) stopped by SIGTERM',
                         text), text
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
    writer = None
    try:
        # The event: A holds the lock (its file names A's pid) and has opened the pipe to
        # read it (TensorFlow imported, its shard begun). A non-blocking open for writing
        # succeeds only once a reader has the pipe open; held open, unwritten, it keeps A
        # waiting in its read.
        lock = out / 'train' / '.lock'
        deadline = threading.Event()
        timer = threading.Timer(120, deadline.set)
        timer.start()
        while writer is None and a.poll() is None and not deadline.is_set():
            if lock.exists() and 'pid %d ' % a.pid in lock.read_text():
                try:
                    writer = os.open(str(images / 'pipe.jpg'), os.O_WRONLY | os.O_NONBLOCK)
                except OSError:  # ENXIO: no reader yet
                    pass
            deadline.wait(0.05)
        timer.cancel()
        b = subprocess.run(builder(tmp_path / 'b.txt'), cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=300)
        assert b.returncode == 2, b.stderr
        assert re.search(r'make_tfrecords\.py: error: another make_tfrecords\.py \(pid %d on '
                         r'host \S+ since .*\) is using %s' % (a.pid, re.escape(
                             str(out / 'train'))), b.stderr), b.stderr
        # B wrote nothing: the split holds A's lock, (since records are planned once) A's
        # shard plan and A's shard in progress, nothing else
        assert set(os.listdir(out / 'train')) <= {'.lock', '.plan-%d.npy' % a.pid,
                                                  '0.tfrecords.tmp-%d' % a.pid}
        a.send_signal(signal.SIGINT)
        a_err = a.communicate(timeout=120)[1]
    finally:
        a.kill()
        a.wait()
        if writer is not None:
            os.close(writer)
    assert a.returncode == 130, a_err
    assert a_err.strip().splitlines()[-1] == (
        'make_tfrecords.py: error: stopped by SIGINT; finished shards are kept, rerun the same '
        'command to complete the rest')
    assert 'Traceback' not in a_err
    b = subprocess.run(builder(tmp_path / 'b.txt'), cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert b.returncode == 0, b.stderr
    assert sorted(os.listdir(out / 'train')) == ['0.tfrecords', 'records.txt']


def test_a_second_signal_exits_at_once(dataset, tmp_path):
    """The first SIGINT asks for the save after the step in flight; while the run holds
    (the gate), a second one exits at once: status 130, one line, checkpoints unchanged."""
    model_dir = str(tmp_path / 'model')
    run = Run(flags(dataset, model_dir, 12), str(tmp_path), hold=4)
    assert run.until(r'test gate: holding'), run.text()
    before = checkpoint_files(model_dir)
    run.proc.send_signal(signal.SIGINT)
    assert run.until(r'SIGINT: finishing the step in flight'), run.text()
    run.proc.send_signal(signal.SIGINT)
    status, last = run.finish()
    assert status == 130, run.text()
    assert last.startswith('train.py: SIGINT again: exiting at once'), last
    assert checkpoint_files(model_dir) == before


def test_a_signal_to_one_task_of_a_synchronous_job_stops_every_task_at_one_step(dataset,
                                                                                tmp_path):
    """--distribution=collective, two tasks started by hand, both held before local step 7
    until the signal is sent: SIGTERM to the non-chief worker only, after its step 3. The
    tasks agree on the stop in each step, so both stop after the same global step (neither
    waits in a step the other never takes); the chief saves it; both exit 143 with their
    one line; the rerun of both ends at --max_iter."""
    model_dir = str(tmp_path / 'model')
    hosts = ','.join('127.0.0.1:%d' % p for p in ports.free_ports(2))
    args = flags(dataset, model_dir, 16, '--worker_num=2', '--worker_hosts=' + hosts)
    chief, worker = (Run(args + ['--worker_id=%d' % k], str(tmp_path), hold=7)
                     for k in (0, 1))
    drain = threading.Thread(target=chief.until, args=('$^',), daemon=True)
    drain.start()
    try:
        assert worker.until(r'\bstep 3: '), worker.text()
        worker.proc.send_signal(signal.SIGTERM)
        chief.release()
        worker.release()
        statuses = [worker.finish()]
        drain.join()
        statuses.append(chief.finish())
    finally:
        for run in (chief, worker):
            run.proc.kill()
    (w_status, w_last), (c_status, c_last) = statuses
    assert (w_status, c_status) == (143, 143), (worker.text(), chief.text())
    w_match = re.match(r'train\.py: worker:0 \(worker id 1\) stopped by SIGTERM after global '
                       r'step (\d+); the '
                       r'chief saves the checkpoint; rerun the same command to resume$', w_last)
    c_match = re.match(r'train\.py: stopped by SIGTERM to another task of the job at global '
                       r'step (\d+): saved (\S+); rerun the same command to resume$', c_last)
    assert w_match and c_match, (w_last, c_last)
    step = int(c_match.group(1))
    assert w_match.group(1) == c_match.group(1) and 3 <= step <= 8, (w_last, c_last)
    assert c_match.group(2) == os.path.join(model_dir, 'model.ckpt-%d' % step)
    assert steps_saved(model_dir) == [0, step]
    assert 'Traceback' not in ''.join(chief.lines + worker.lines)
    reruns = [Run(args + ['--worker_id=%d' % k], str(tmp_path)) for k in (0, 1)]
    drain = threading.Thread(target=reruns[0].until, args=('$^',), daemon=True)
    drain.start()
    statuses = [reruns[1].finish()]
    drain.join()
    statuses.append(reruns[0].finish())
    assert [s for s, _ in statuses] == [0, 0], (reruns[0].text(), reruns[1].text())
    assert steps_saved(model_dir) == [0, step, 16]


def test_an_evaluation_stopped_by_a_signal_is_one_line_and_changes_nothing(dataset, trained,
                                                                           tmp_path):
    """--mode=eval held before its second val batch (the gate): SIGTERM there is one line,
    status 143, no traceback, the checkpoints byte-equal."""
    model_dir = copy_model(trained, tmp_path)
    before = checkpoint_files(model_dir)
    run = Run(flags(dataset, model_dir, 10, '--mode=eval', '--test_iter=0'), str(tmp_path),
              hold=2)
    assert run.until(r'test gate: holding before local step 2'), run.text()
    run.proc.send_signal(signal.SIGTERM)
    status, last = run.finish()
    assert (status, last) == (143, 'train.py: stopped by SIGTERM; nothing was written'), \
        run.text()
    assert 'Traceback' not in ''.join(run.lines)
    assert not [line for line in run.lines if 'evaluated ' in line]
    assert checkpoint_files(model_dir) == before


def gated_tool(tool, args, gate, tmp_path):
    """tests/gated_tool.py running tools/<tool> held at the call `gate` names
    (MODULE:FUNCTION:N); a Run with stdout and stderr read."""
    path = str(tmp_path / 'tool-gate')
    env = dict(ENV, TOOL_TEST_GATE='%s:%s' % (gate, path))
    run = Run([os.path.join(ROOT, 'tools', tool)] + args, str(tmp_path), program=GATED_TOOL,
              env=env)
    run.gate = path
    return run


def tool_cases(dataset, trained, tmp_path):
    """(tool, arguments, gate, the one line's start after 'TOOL: ', what is left) of each
    tool; every gate holds with work left by construction."""
    out = tmp_path / 'out'
    lists = tmp_path / 'lists.txt'
    image_dir = os.path.join(os.path.dirname(dataset), 'images')  # helpers.write_dataset's
    lists.write_text(''.join('%s 0:1\n' % name for name in sorted(os.listdir(image_dir))[:4]))
    urls = tmp_path / 'urls.tsv'  # Tencent's URL list: a URL and its labels a line
    urls.write_text(''.join('https://farm1.staticflickr.com/1/%d_a_o.jpg\t0:1\n' % i
                            for i in range(4)))
    return {
        'check_tfrecords.py': (
            ['--class_num=%d' % CLASSES, '--workers=1', dataset],
            'mlimages.recordkit.shard_checks:check_file:2',
            'stopped by SIGTERM; nothing was reported, rerun to check the files'),
        'predict.py': (
            ['--checkpoint', trained, '--batch_size=1', '--output', str(out / 'p.tsv'),
             image_dir],
            'mlimages.inference.inference_io:read_image_file:3',
            'error: stopped by SIGTERM; nothing was written to %s' % (out / 'p.tsv')),
        'extract_features.py': (
            ['--checkpoint', trained, '--batch_size=1', '--output', str(out / 'f.npy'),
             image_dir],
            'mlimages.inference.inference_io:read_image_file:3',
            'error: stopped by SIGTERM; nothing was written to %s' % (out / 'f.npy')),
        'urls_to_img2dataset.py': (
            [str(urls), str(out / 'parquet'), '--rows_per_file=1'],
            'mlimages.recordkit.image_lists:parse_sparse:3',
            'error: stopped by SIGTERM; %s was left as it was, rerun the same command'
            % (out / 'parquet')),
        'make_tfrecords.py': (
            ['--out_dir', str(out), '--image_root', image_dir,
             '--class_num', str(CLASSES), '--workers', '1', '--num_shards', '2', str(lists)],
            'mlimages.recordkit.images:load_image:3',
            'error: stopped by SIGTERM; finished shards are kept, rerun the same command to '
            'complete the rest'),
        'convert_tfrecords.py': (
            ['--short_side', '16', '--workers', '1', os.path.join(dataset, 'train'),
             str(out / 'small')],
            'mlimages.recordkit.images:downscale:2',
            'error: stopped by SIGTERM; finished shards are kept, rerun the same command to '
            'convert the rest'),
    }


@pytest.mark.parametrize('tool', ['check_tfrecords.py', 'predict.py', 'extract_features.py',
                                  'urls_to_img2dataset.py', 'make_tfrecords.py',
                                  'convert_tfrecords.py'])
def test_a_tool_stopped_by_sigterm_is_one_line_and_leaves_nothing_half_written(
        dataset, trained, tmp_path, tool):
    """Each tool held before a later image or shard (tests/gated_tool.py) gets SIGTERM:
    status 143, one line naming the signal and what is kept, no traceback, no temporary
    file; the record tools' rerun completes."""
    (tmp_path / 'out').mkdir()
    args, gate, words = tool_cases(dataset, trained, tmp_path)[tool]
    run = gated_tool(tool, args, gate, tmp_path)
    assert run.until(r'test gate: holding'), run.text()
    run.proc.send_signal(signal.SIGTERM)
    status, last = run.finish()
    assert (status, last) == (143, '%s: %s' % (tool, words)), run.text()
    assert 'Traceback' not in ''.join(run.lines)
    left = [os.path.relpath(os.path.join(d, n), str(tmp_path / 'out'))
            for d, _, names in os.walk(str(tmp_path / 'out')) for n in names]
    assert not [n for n in left if n.endswith(('.tmp', '_temp')) or '/.tmp' in n], left
    if tool in ('predict.py', 'extract_features.py', 'urls_to_img2dataset.py'):
        assert left == []
    if tool in ('make_tfrecords.py', 'convert_tfrecords.py'):
        rerun = subprocess.run([sys.executable, os.path.join(ROOT, 'tools', tool)] + args,
                               cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stderr[-3000:]


def make_split_empty(dataset, tmp_path, split):
    import shutil
    data = str(tmp_path / ('empty_' + split))
    shutil.copytree(dataset, data)
    directory = os.path.join(data, split)
    shutil.rmtree(directory)
    os.makedirs(directory)
    open(os.path.join(directory, '0.tfrecords'), 'wb').close()
    return data


@pytest.mark.parametrize('split,mode', [('train', 'train'), ('val', 'eval'),
                                        ('val', 'train_and_eval')])
def test_an_empty_split_is_refused_before_anything_is_written(dataset, trained, tmp_path,
                                                              split, mode):
    data = make_split_empty(dataset, tmp_path, split)
    model_dir = copy_model(trained, tmp_path) if mode == 'eval' else str(tmp_path / 'model')
    before = sorted(os.listdir(model_dir)) if mode == 'eval' else None
    result = run_train(*flags(data, model_dir, 12, '--mode=' + mode, '--test_interval=5'))
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stderr[-2000:]
    assert last == ('train.py: error: the split %s holds no record (1 shard file, all '
                    'empty): build it again with tools/make_tfrecords.py'
                    % os.path.join(data, split)), last
    assert (sorted(os.listdir(model_dir)) == before) if mode == 'eval' else \
        not os.path.exists(model_dir)


@pytest.mark.parametrize('value', ['nan', 'inf', '-1'])
def test_a_learning_rate_out_of_range_is_refused_at_start(dataset, tmp_path, value):
    model_dir = str(tmp_path / 'model')
    result = run_train(*flags(dataset, model_dir, 4, '--lr=' + value))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2
    assert lines[-1] == 'train.py: error: --lr must be > 0 and finite, got %s' % value, lines
    assert not os.path.exists(model_dir)


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only file system (a tmpfs mounted ro; root ignores file modes)."""
    path = tmp_path / 'ro'
    path.mkdir()
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip('cannot mount a tmpfs here (needs root)')
    yield str(path)
    subprocess.run(['umount', str(path)])


def test_unusable_directories_are_one_line_before_anything_is_written(dataset, tmp_path,
                                                                      read_only_dir):
    a_file = str(tmp_path / 'a_file')
    open(a_file, 'w').close()
    model_dir = str(tmp_path / 'model')
    cases = [
        (['--model_dir=' + a_file], '--model_dir=%s is a file, not a directory: give a '
         'directory (or move the file away)' % a_file),
        (['--model_dir=' + os.path.join(read_only_dir, 'm')], '--model_dir=%s cannot be '
         'written (Read-only file system): give a directory this user can write'
         % os.path.join(read_only_dir, 'm')),
        (['--log_dir=' + os.path.join(read_only_dir, 'log')], '--log_dir=%s cannot be '
         'written (Read-only file system): give a directory this user can write'
         % os.path.join(read_only_dir, 'log')),
    ]
    for more, message in cases:
        result = run_train(*flags(dataset, model_dir, 4, '--log_dir=' + str(tmp_path / 'log'),
                                  *more))
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1] == 'train.py: error: ' + message
        assert 'Traceback' not in result.stderr
        assert not os.path.exists(model_dir) and os.path.getsize(a_file) == 0
        assert os.listdir(read_only_dir) == []


def test_a_full_disk_is_one_line_leaves_no_temporary_and_the_rerun_resumes(dataset,
                                                                          tmp_path):
    """A tmpfs with room for one checkpoint: the save of step 3 fails; one line naming
    --model_dir and the checkpoint, exit 1, no model.ckpt-3_temp/, model.ckpt-0 kept
    byte-equal; with room made, the rerun resumes from 0 and ends at --max_iter."""
    disk = tmp_path / 'disk'
    disk.mkdir()
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=140m', 'tmpfs', str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip('cannot mount a tmpfs here (needs root)')
    try:
        model_dir = str(disk / 'model')
        args = flags(dataset, model_dir, 6, '--snapshot=3')
        result = run_train(*args)
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode == 1, result.stderr[-2000:]
        assert last.startswith('train.py: error: no space left on device writing the '
                               'checkpoint model.ckpt-3 in --model_dir=%s at step 3: free '
                               'space' % model_dir), last
        assert last.endswith('rerun the same command to resume; the last checkpoint '
                             'model.ckpt-0 is kept') and 'Hint' not in last, last
        assert not [n for n in os.listdir(model_dir) if '_temp' in n or '.tmp' in n]
        assert steps_saved(model_dir) == [0]
        before = checkpoint_files(model_dir)
        subprocess.run(['mount', '-o', 'remount,size=400m', str(disk)], check=True)
        rerun = run_train(*args)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        assert steps_saved(model_dir) == [0, 3, 6]
        after = checkpoint_files(model_dir)
        assert {n: after[n] for n in before if n.startswith('model.ckpt-0.')} == \
            {n: h for n, h in before.items() if n.startswith('model.ckpt-0.')}
    finally:
        subprocess.run(['umount', '-l', str(disk)])
