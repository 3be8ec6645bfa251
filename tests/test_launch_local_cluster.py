"""tools/launch_local_cluster.py as a user runs it: whole clusters of train.py on loopback
(ps and collective), a worker SIGKILLed mid-run and restarted, a failing task.

Every process a test starts is killed by its PID at the end, pass or fail: the launcher,
and every task whose `started <task>, pid N` line it printed.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading

import pytest
import tensorflow.compat.v1 as tf

from helpers import CLASSES, ENV, assert_identical_weights, checkpoint_values, \
    cluster_run_flags, files_read, write_dataset
from mlimages.distributed import devices
from mlimages.distributed import local_cluster as launcher

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTED = re.compile(r'started (\S+), pid (\d+)')


@pytest.fixture(scope='module')
def dataset(module_dir):
    """4 training shards of 4 records (JPEG, 5 classes)."""
    return write_dataset(str(module_dir('cluster_ds')), train_lists=4,
                         per_list=4)


class Launch(object):
    """The launcher as a subprocess; its output lines are collected, the PIDs it started
    remembered; on_line(launch, line) may act on each line (e.g. kill a task).

    gate: a path; every task then holds before its local step `gate_step` until the test
    creates that file (open_gate), so a task is never done before the test has acted.
    """

    def __init__(self, args, on_line=None, gate=None, gate_step=3, cwd=ROOT):
        self.lines, self.pids, self.errors = [], {}, []
        self.gate = gate
        env = dict(ENV, TRAIN_TEST_GATE='%d:%s' % (gate_step, gate)) if gate else ENV
        program = ['--program', os.path.join(ROOT, 'tests', 'gated_train.py')] if gate else []
        self.process = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, 'tools', 'launch_local_cluster.py')]
            + program + args,
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._on_line = on_line
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line.rstrip('\n'))
            match = STARTED.search(line)
            if match and line.startswith(launcher.PROGRAM):
                self.pids.setdefault(match.group(1), []).append(int(match.group(2)))
            if self._on_line:
                try:
                    self._on_line(self, line)
                except Exception as e:  # noqa: BLE001 -- reported by the test, not lost
                    # The reader must go on draining the pipe, or the launcher blocks.
                    self.errors.append(repr(e))

    def open_gate(self):
        with open(self.gate, 'w'):
            pass

    def wait(self, timeout):
        try:
            self.process.wait(timeout)
        finally:
            self.kill_all()
        self._reader.join(10)
        return self.process.returncode

    def kill_all(self):
        """SIGKILL, by PID, the launcher and every task it started that is still alive."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pids in self.pids.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def task_lines(self, task):
        prefix = '[%s] ' % task
        return [l[len(prefix):] for l in self.lines if l.startswith(prefix)]

    @property
    def text(self):
        return '\n'.join(self.lines)


@pytest.mark.parametrize('args,fragment', [
    (['--workers', '0'], '--workers must be >= 1'),
    (['--ps', '0'], '--distribution=ps needs --ps >= 1'),
    (['--', '--worker_id=1'], 'set by the launcher'),
    (['--', '--distribution=none'], 'set by the launcher'),
    (['--', '--worker_hosts=127.0.0.1:1'], 'set by the launcher'),
    (['--', '--visiable_gpu=1'], '--visiable_gpu is set by the launcher'),
    (['--gpus_per_task', '-1'], '--gpus_per_task and --evaluator_gpus must be >= 0'),
])
def test_bad_usage_is_exit_status_2(args, fragment):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'launch_local_cluster.py')] + args,
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert fragment in result.stderr


@pytest.mark.slow
def test_a_task_that_fails_fails_the_launch(dataset, tmp_path):
    flags = cluster_run_flags(dataset, str(tmp_path / 'model'), 4) + ['--resnet_size=42']
    launch = Launch(['--workers', '2', '--ps', '1', '--timeout', '240', '--'] + flags)
    assert launch.wait(300) == 1, launch.text[-3000:]
    assert 'train.py: error: --resnet_size=42' in launch.text
    assert 'stopping every task' in launch.text


@pytest.mark.slow
def test_ps_two_workers_train_to_max_iter_on_disjoint_files(dataset, tmp_path):
    """Chief, worker, two ps tasks (the head in a slice on each) and an evaluator task that
    evaluates the final checkpoint on one device."""
    model_dir = str(tmp_path / 'model')
    max_iter = 6
    def open_gate_after_a_worker_step(launch, line):
        # The chief holds before its second step until worker:0 has trained one: the
        # Estimator starts a non-chief ps worker 5 s late, time enough for a fast chief to
        # reach max_iter alone.
        if line.startswith('[worker:0]') and step_lines(launch, 'worker:0'):
            launch.open_gate()

    launch = Launch(['--workers', '2', '--ps', '2', '--evaluator', '--timeout', '400', '--']
                    + cluster_run_flags(dataset, model_dir, max_iter)
                    + ['--eval_throttle_secs=1'],
                    on_line=open_gate_after_a_worker_step, gate=str(tmp_path / 'gate'),
                    gate_step=2)
    assert launch.wait(500) == 0, launch.text[-4000:]
    # The chief's final checkpoint; asynchronous workers may add one step in flight.
    values = checkpoint_values(model_dir)
    assert max_iter <= values['global_step'] <= max_iter + 1
    # The evaluator evaluated that checkpoint (its events in model_dir/eval) and exited 0.
    evaluated = eval_steps(os.path.join(model_dir, 'eval'))
    assert evaluated and max(evaluated) == values['global_step'], evaluated
    assert re.search(r'evaluator:0 \(pid \d+\) exited with status 0', launch.text)
    assert 'finished' in launch.text and 'and the evaluator' in launch.text
    assert values['pos_count'].shape == (CLASSES,)
    # The head was sliced over the 2 ps tasks; the checkpoint holds it whole, by its name.
    assert values['logits/dense/kernel'].shape == (512, CLASSES)
    assert values['logits/dense/kernel/Momentum'].shape == (512, CLASSES)
    assert not [name for name in values if 'part_' in name]
    # Each worker read only its own files (from the names it logged), together all.
    chief = files_read(launch.task_lines('chief:0'))
    worker = files_read(launch.task_lines('worker:0'))
    assert chief == [(0, ['0.tfrecords', '2.tfrecords'])]
    assert worker == [(1, ['1.tfrecords', '3.tfrecords'])]
    # ... and the same in each task's own log file
    with open(os.path.join(model_dir, 'log', 'train_worker_0.log')) as f:
        assert files_read(f.read().splitlines()) == worker
    assert [l for l in launch.task_lines('worker:0') if ' step ' in l and 'images/s' in l]
    assert any('whole job' in l and 'whole run' in l for l in launch.task_lines('chief:0'))
    # Each task pinned to CPUs of its own if there are enough (the launcher's line), and
    # each says its share.
    cpus, env = launcher.cpu_plan(['chief:0', 'worker:0', 'ps:0', 'ps:1', 'evaluator:0'])
    assert ('CPUs (affinity; each task sizes its threads to its share): ' + (
        'chief:0 %s, ' % launcher.cpu_ranges(cpus['chief:0']) if cpus['chief:0'] else
        'not pinned')) in launch.text
    for task in ('chief:0', 'worker:0', 'ps:0', 'evaluator:0'):
        sees = len(cpus[task] or os.sched_getaffinity(0))
        share = [l for l in launch.task_lines(task) if 'CPU share: ' in l]
        assert len(share) == 1 and '5 local tasks (%s on its CPUs; from the launcher)' % (
            env['MLIMAGES_CPU_SET_TASKS']) in share[0], share
        assert 'of the %d this process may run on' % sees in share[0], share
    # The ps task ends by itself once the chief and the worker are done.
    assert re.search(r'ps:0 \(pid \d+\) exited with status 0$', launch.text, re.M), launch.text
    # Only the chief writes checkpoints and summaries, in model_dir.
    assert not [name for name in os.listdir(model_dir) if name.startswith('tmp_worker')]


def eval_steps(eval_dir):
    """The global steps of the evaluations in an Estimator's eval event files."""
    steps = set()
    for path in tf.io.gfile.glob(os.path.join(eval_dir, 'events.out.tfevents.*')):
        for event in tf.train.summary_iterator(path):
            if any(v.tag == 'loss' for v in event.summary.value):
                steps.add(event.step)
    return sorted(steps)


def step_lines(launch, task):
    return [l for l in launch.task_lines(task) if re.search(r'step \d+: ', l)]


def kill_worker_then_open_gate(killed, restarted_steps=0):
    """An on_line callback for a gated launch (tasks hold before their third step): it
    SIGKILLs worker:0 once, after its second logged step -- the worker is alive with work
    left, held at the gate at the latest -- and appends the PID to `killed`; it opens the
    gate once the launcher has restarted the worker and the new one has logged
    `restarted_steps` steps."""
    def on_line(launch, line):
        if not killed and line.startswith('[worker:0]') and \
                len(step_lines(launch, 'worker:0')) >= 2:
            killed.append(launch.pids['worker:0'][-1])
            os.kill(killed[-1], signal.SIGKILL)
        elif killed and len(launch.pids.get('worker:0', [])) == 2 and \
                not os.path.exists(launch.gate) and \
                len(step_lines(launch, 'worker:0')) >= 2 + restarted_steps:
            launch.open_gate()
    return on_line


@pytest.mark.slow
def test_collective_two_workers_survive_a_kill_and_end_with_identical_weights(dataset,
                                                                               tmp_path):
    """Synchronous training; the worker is SIGKILLed after its second step: the launcher
    restarts both tasks with the same TF_CONFIG, they resume from the checkpoint and end
    at max_iter with identical weights."""
    model_dir = str(tmp_path / 'model')
    max_iter = 6
    killed = []

    launch = Launch(['--workers', '2', '--distribution', 'collective', '--timeout', '400',
                     '--'] + cluster_run_flags(dataset, model_dir, max_iter),
                    on_line=kill_worker_then_open_gate(killed), gate=str(tmp_path / 'gate'))
    assert launch.wait(500) == 0, launch.text[-4000:]
    assert killed and not launch.errors, (launch.errors, launch.text[-4000:])
    assert ('worker:0 killed by signal 9; restarting every training task with the same '
            'TF_CONFIG') in launch.text
    assert len(launch.pids['chief:0']) == len(launch.pids['worker:0']) == 2
    assert_identical_weights(model_dir, max_iter)
    assert files_read(launch.task_lines('chief:0')) == [(0, ['0.tfrecords', '2.tfrecords'])] * 2
    assert files_read(launch.task_lines('worker:0')) == [(1, ['1.tfrecords', '3.tfrecords'])] * 2
    assert any('4 a synchronous step of the 2 workers' in l
               for l in launch.task_lines('chief:0'))


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_restarted_and_the_job_finishes(dataset, tmp_path):
    model_dir = str(tmp_path / 'model')
    max_iter = 40
    killed = []

    # The chief holds before its third step until the restarted worker has trained: the
    # kill lands with work left and the restarted worker has steps to take.
    launch = Launch(['--workers', '2', '--ps', '1', '--timeout', '400', '--']
                    + cluster_run_flags(dataset, model_dir, max_iter, snapshot=10),
                    on_line=kill_worker_then_open_gate(killed, restarted_steps=1),
                    gate=str(tmp_path / 'gate'))
    assert launch.wait(500) == 0, launch.text[-4000:]
    assert killed and not launch.errors, (launch.errors, launch.text[-4000:])
    assert len(launch.pids['worker:0']) == 2, launch.text[-4000:]
    assert 'worker:0 killed by signal 9; restarting it with the same TF_CONFIG' in launch.text
    # The restarted worker came back as worker 1 of 2 with the same files, and finished.
    assert files_read(launch.task_lines('worker:0')) == [
        (1, ['1.tfrecords', '3.tfrecords'])] * 2
    values = checkpoint_values(model_dir)
    assert max_iter <= values['global_step'] <= max_iter + 1


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_ctrl_c_stops_every_task(dataset, tmp_path):
    interrupted = []

    def interrupt_once_all_started(launch, line):
        if not interrupted and 'started ps:0' in line:
            interrupted.append(True)
            launch.process.send_signal(signal.SIGINT)

    launch = Launch(['--workers', '2', '--ps', '1', '--'] +
                    cluster_run_flags(dataset, str(tmp_path / 'model'), 1000),
                    on_line=interrupt_once_all_started)
    try:
        launch.process.wait(120)
        launch._reader.join(10)
        # checked before kill_all (which kills any survivor by PID)
        pids = [pid for task in ('chief:0', 'worker:0', 'ps:0') for pid in launch.pids[task]]
        survivors = [pid for pid in pids if alive(pid)]
    finally:
        launch.kill_all()
    assert launch.process.returncode == 130, launch.text[-3000:]
    assert 'SIGINT; forwarding it to every training task' in launch.text
    assert len(pids) == 3 and not survivors


def connect(port):
    """Whether a TCP connection to 127.0.0.1:port succeeds from this process."""
    try:
        socket.create_connection(('127.0.0.1', port), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_isolated_cluster_is_unreachable_from_outside_and_finishes_in_the_callers_directory(
        dataset, tmp_path):
    """--isolate: while the job runs (held at a gate until checked), no task port accepts
    a connection from outside the namespace; relative paths resolve in the caller's
    directory."""
    if not launcher.isolated_command([]) or subprocess.run(
            ['unshare', '--net', 'true'], capture_output=True).returncode != 0:
        pytest.skip('this machine does not allow a network namespace (unshare --net)')
    reachable = {}

    def probe_then_open_gate(launch, line):
        if launch.gate and not os.path.exists(launch.gate) and step_lines(launch, 'chief:0'):
            cluster = json.loads(re.search(r'cluster (\{.*?\}) \(', launch.text).group(1))
            for addresses in cluster.values():
                for address in addresses:
                    reachable[address] = connect(int(address.rsplit(':', 1)[1]))
            launch.open_gate()

    data = os.path.relpath(dataset, str(tmp_path))
    flags = cluster_run_flags(data, 'model', 4)
    launch = Launch(['--isolate', '--workers', '2', '--ps', '1', '--timeout', '400', '--']
                    + flags, on_line=probe_then_open_gate, gate=str(tmp_path / 'gate'),
                    gate_step=2, cwd=str(tmp_path))
    assert launch.wait(500) == 0, launch.text[-4000:]
    assert 'isolated: the cluster runs in its own network namespace' in launch.text
    assert len(reachable) == 3 and not any(reachable.values()), reachable
    assert tf.train.latest_checkpoint(str(tmp_path / 'model')), launch.text[-3000:]


def test_without_isolation_the_launcher_warns_that_tasks_listen_everywhere(dataset, tmp_path):
    # A task that fails at once (a bad flag) ends the launch quickly; the warning comes first.
    launch = Launch(['--workers', '1', '--ps', '1', '--timeout', '120', '--']
                    + cluster_run_flags(dataset, str(tmp_path / 'model'), 1)
                    + ['--resnet_size=42'])
    assert launch.wait(200) == 1
    assert 'warning: the tasks\' servers listen on every network interface' in launch.text
