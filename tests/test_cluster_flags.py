"""cluster_flags: one job from --worker_num/--worker_id/--worker_hosts (and --ps_hosts,
--ps_id) or from a Slurm step, through the TF_CONFIG the launcher writes; the precedence
rule; independent runs with their own --model_dir. The process tests start the tasks by
hand on 127.0.0.1 (no launcher), and kill every process they started by its PID.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import tensorflow.compat.v1 as tf

from mlimages.config import flag_checks
from mlimages.distributed import cluster_flags, devices
import flags as flags_lib
from mlimages.errors import UsageError
from helpers import ENV, assert_identical_weights, checkpoint_values, cluster_run_flags, \
    files_read, write_dataset
from mlimages.distributed import local_cluster as launcher
from mlimages.distributed import ports as ports_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = re.compile(r'step \d+: ')


def settings(**given):
    return flags_lib.replace(flags_lib.default_settings(), **given)


def test_host_flags_make_the_launchers_tf_config():
    cluster = launcher.cluster_addresses(3, 1, ports=[1, 2, 3, 4])
    workers = ','.join(cluster['chief'] + cluster['worker'])
    for worker_id, task in [(0, ('chief', 0)), (1, ('worker', 0)), (2, ('worker', 1))]:
        assert json.loads(cluster_flags.from_host_flags(workers, '127.0.0.1:4', worker_id, -1)) \
            == json.loads(cluster_flags.tf_config(cluster, *task))
    assert json.loads(cluster_flags.from_host_flags(workers, '127.0.0.1:4', 0, 0)) == \
        json.loads(cluster_flags.tf_config(cluster, 'ps', 0))
    assert json.loads(cluster_flags.from_host_flags('a:1', '', 0, -1)) == {
        'cluster': {'chief': ['a:1']}, 'task': {'type': 'chief', 'index': 0}}


@pytest.mark.parametrize('given,fragment', [
    (dict(worker_num=3, worker_hosts='a:1,b:2'), '--worker_hosts lists 2 addresses but '
                                                 '--worker_num=3'),
    (dict(worker_num=2, worker_hosts='a:1,b'), "--worker_hosts: 'b' is not host:port"),
    (dict(worker_num=2, worker_hosts='a:1,b:2', ps_hosts='a:1'), 'name an address twice'),
    (dict(ps_hosts='c:3'), '--ps_hosts needs --worker_hosts'),
    (dict(worker_num=2, worker_hosts='a:1,b:2', ps_hosts='c:3', ps_id=1), '--ps_id=1 must be'),
    (dict(worker_num=2, worker_id=1, worker_hosts='a:1,b:2', ps_hosts='c:3', ps_id=0),
     'leave out --worker_id'),
    (dict(slurm_port_base=0), '--slurm_port_base must be'),
])
def test_bad_cluster_flags_are_one_line(given, fragment):
    found = flag_checks.problems(settings(**given))
    assert len(found) == 1 and fragment in found[0], found
    assert flag_checks.problems(settings(worker_num=2, worker_id=1,
                                         worker_hosts='a:1,[::1]:2', ps_hosts='c:3')) == []


SLURM = {'SLURM_JOB_ID': '7', 'SLURM_PROCID': '3', 'SLURM_LOCALID': '1',
         'SLURM_STEP_NUM_TASKS': '4', 'SLURM_STEP_NODELIST': 'gpu[01-02]',
         'SLURM_STEP_TASKS_PER_NODE': '2(x2)'}


def test_slurm_step_gives_hosts_ranks_ports_and_gpus():
    config = json.loads(cluster_flags.from_slurm(dict(SLURM), 9000))
    assert config == {'cluster': {'chief': ['gpu01:9000'],
                                  'worker': ['gpu01:9001', 'gpu02:9000', 'gpu02:9001']},
                      'task': {'type': 'worker', 'index': 2}}
    assert 'SLURM_PROCID' not in os.environ   # read from the given environment only
    # local task 1 of 2: the second block of --num_gpus GPUs of the node
    assert cluster_flags.slurm_gpus(dict(SLURM), 4) == '4,5,6,7'
    assert cluster_flags.slurm_gpus(dict(SLURM, CUDA_VISIBLE_DEVICES='2,3,5,7'), 2) == '5,7'
    assert cluster_flags.slurm_gpus(dict(SLURM, CUDA_VISIBLE_DEVICES='6'), 1) == '6'  # bound
    assert cluster_flags.slurm_gpus(dict(SLURM, CUDA_VISIBLE_DEVICES=''), 1) == ''
    with pytest.raises(UsageError, match='fewer than --num_gpus=2 for each of the 2 tasks'):
        cluster_flags.slurm_gpus(dict(SLURM, CUDA_VISIBLE_DEVICES='0,1,2'), 2)


def test_a_slurm_task_takes_its_block_of_the_gres_gpus_before_visiable_gpu():
    """srun -n4 --gres=gpu:4 over two nodes: Slurm lists the node's four GPUs for both of
    its tasks; local task 1 with --num_gpus=2 keeps GPUs 2,3, and --visiable_gpu=0 of
    devices.choose then counts in that block, as it did for --gpus-per-task."""
    environ = dict(SLURM, CUDA_VISIBLE_DEVICES='0,1,2,3')
    assert cluster_flags.narrow_to_slurm_task(2, environ) == '2,3'
    devices.choose(0, 2, environ=environ)
    assert environ['CUDA_VISIBLE_DEVICES'] == '2,3'
    gpus_per_task = dict(SLURM, CUDA_VISIBLE_DEVICES='5,7')  # --gpus-per-task=2
    assert cluster_flags.narrow_to_slurm_task(2, gpus_per_task) == '5,7'
    alone = {'CUDA_VISIBLE_DEVICES': '0,1'}  # no Slurm step, or TF_CONFIG: left as it is
    assert cluster_flags.narrow_to_slurm_task(1, alone) is None
    assert cluster_flags.narrow_to_slurm_task(1, dict(SLURM, TF_CONFIG='{}')) is None


def test_precedence_tf_config_then_slurm_then_host_flags():
    hosts = dict(worker_num=2, worker_id=1, worker_hosts='127.0.0.1:1,127.0.0.1:2')
    tf_config = cluster_flags.tf_config({'chief': ['h:1'], 'worker': ['h:2', 'h:3', 'h:4']},
                                        'chief', 0)
    environ = {'TF_CONFIG': tf_config}
    assert cluster_flags.setup(settings().cluster, 1, environ)[0] == 'TF_CONFIG'
    environ = dict(SLURM, TF_CONFIG=tf_config)   # the same 4 tasks: TF_CONFIG's
    assert cluster_flags.setup(settings().cluster, 1, environ)[0] == 'TF_CONFIG'
    assert environ['TF_CONFIG'] == tf_config
    with pytest.raises(UsageError, match='TF_CONFIG is set and so is --worker_hosts'):
        cluster_flags.setup(settings(**hosts).cluster, 1, {'TF_CONFIG': tf_config})
    with pytest.raises(UsageError, match='TF_CONFIG describes 4 tasks but this Slurm step '
                                         'has 2'):
        cluster_flags.setup(settings().cluster, 1, dict(SLURM, SLURM_STEP_NUM_TASKS='2', TF_CONFIG=tf_config))
    with pytest.raises(UsageError, match='Slurm step of 4 tasks and --ps_id is given'):
        cluster_flags.setup(settings(ps_id=0).cluster, 1, dict(SLURM))
    environ = dict(SLURM)
    assert cluster_flags.setup(settings().cluster, 1, environ)[0] == 'Slurm'
    assert json.loads(environ['TF_CONFIG'])['task'] == {'type': 'worker', 'index': 2}
    assert environ['CUDA_VISIBLE_DEVICES'] == '1'
    environ = dict(SLURM, SLURM_STEP_NUM_TASKS='1', SLURM_STEP_TASKS_PER_NODE='1')
    assert cluster_flags.setup(settings(**hosts).cluster, 1, environ)[0] == 'flags'   # a 1-task step
    assert json.loads(environ['TF_CONFIG'])['task'] == {'type': 'worker', 'index': 0}
    source, line = cluster_flags.setup(settings(worker_num=3, worker_id=2).cluster, 1, {})
    assert source == 'independent' and line.startswith('independent run 2 of 3')
    assert cluster_flags.setup(settings().cluster, 1, {}) == (None, None)


@pytest.fixture(scope='module')
def dataset(module_dir):
    """4 training shards of 4 records (JPEG, 5 classes)."""
    return write_dataset(str(module_dir('hosts_ds')), train_lists=4, per_list=4)


class Task(object):
    """One train.py process started by hand; its output lines are collected."""

    def __init__(self, args, env=ENV, gated=None, on_line=None, runs=None):
        """gated: TRAIN_TEST_GATE's value; runs: TRAIN_TEST_RUNS's (tests/gated_train.py)."""
        program = os.path.join(ROOT, 'tests', 'gated_train.py') if gated or runs else \
            os.path.join(ROOT, 'train.py')
        env = dict(env, TRAIN_TEST_GATE=gated) if gated else env
        env = dict(env, TRAIN_TEST_RUNS=runs) if runs else env
        self.lines, self._on_line = [], on_line
        self.process = subprocess.Popen([sys.executable, program] + args, cwd=ROOT, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line.rstrip('\n'))
            if self._on_line:
                self._on_line(line)

    def wait(self, timeout):
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code

    def kill(self):
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    @property
    def text(self):
        return '\n'.join(self.lines)


def run_tasks(tasks, trainers, timeout=400):
    """Waits for the training tasks; kills every task (by PID) at the end."""
    try:
        codes = [t.wait(timeout) for t in trainers]
    finally:
        for t in tasks:
            t.kill()
    return codes


def first_files_read(task):
    """The first 'worker k/n reads ...' line of a task as (k, shard names), or None."""
    found = files_read(task.lines)
    return found[0] if found else None


@pytest.mark.slow
def test_two_workers_started_by_hand_train_one_model_collectively(dataset, tmp_path):
    model_dir, max_iter = str(tmp_path / 'model'), 6
    hosts = ','.join('127.0.0.1:%d' % p for p in ports_lib.free_ports(2))
    flags = cluster_run_flags(dataset, model_dir, max_iter) + [
        '--worker_num=2', '--worker_hosts=' + hosts, '--log_interval=2', '--snapshot=4']
    runs = [str(tmp_path / ('runs_%d.json' % k)) for k in (0, 1)]
    tasks = [Task(flags + ['--worker_id=%d' % k], runs=runs[k]) for k in (0, 1)]
    codes = run_tasks(tasks, tasks)
    assert codes == [0, 0], (tasks[0].text[-3000:], tasks[1].text[-3000:])
    assert_identical_weights(model_dir, max_iter)
    # One tf.Session.run a step on each worker outside log steps (every 2 from the first)
    # and saves (step 4: the save's own run): the workers' savers read the global step in
    # the step's run (model_fn.saver_hook). TensorFlow's saver made it 4, 2, 4, 3, 4.
    for path in runs:
        with open(path) as f:
            assert json.load(f) == [3, 1, 3, 2, 3], path
    assert first_files_read(tasks[0]) == (0, ['0.tfrecords', '2.tfrecords'])
    assert first_files_read(tasks[1]) == (1, ['1.tfrecords', '3.tfrecords'])
    assert 'task chief:0 of a collective cluster (worker 0 of 2)' in tasks[0].text
    assert 'task worker:0 of a collective cluster (worker 1 of 2)' in tasks[1].text
    assert 'cluster from --worker_hosts: TF_CONFIG=' in tasks[1].text
    assert os.path.exists(os.path.join(model_dir, 'log', 'train_worker_0.log'))


@pytest.mark.slow
def test_ps_job_started_by_hand_shares_the_files_disjointly(dataset, tmp_path):
    model_dir, max_iter = str(tmp_path / 'model'), 6
    ports = ports_lib.free_ports(3)
    hosts = ['--worker_num=2', '--worker_hosts=127.0.0.1:%d,127.0.0.1:%d' % tuple(ports[:2]),
             '--ps_hosts=127.0.0.1:%d' % ports[2]]
    flags = cluster_run_flags(dataset, model_dir, max_iter) + hosts
    gate = str(tmp_path / 'gate')

    def open_gate(line):
        # The chief holds before its second step until the worker (which the Estimator
        # starts 5 s late) has trained one.
        if STEP.search(line) and not os.path.exists(gate):
            open(gate, 'w').close()

    ps = Task(flags + ['--ps_id=0'])
    chief = Task(flags + ['--worker_id=0'], gated='2:' + gate)
    worker = Task(flags + ['--worker_id=1'], on_line=open_gate)
    codes = run_tasks([chief, worker, ps], [chief, worker])
    assert codes == [0, 0], (chief.text[-3000:], worker.text[-3000:], ps.text[-2000:])
    chief_files, worker_files = first_files_read(chief), first_files_read(worker)
    assert chief_files[0] == 0 and worker_files[0] == 1
    assert not set(chief_files[1]) & set(worker_files[1])
    assert sorted(chief_files[1] + worker_files[1]) == ['%d.tfrecords' % i for i in range(4)]
    assert STEP.search(worker.text)
    assert max_iter <= checkpoint_values(model_dir)['global_step'] <= max_iter + 1
    assert 'task ps:0 of a ps cluster' in ps.text


@pytest.mark.slow
def test_a_slurm_step_of_two_tasks_trains_one_model(dataset, tmp_path):
    model_dir, max_iter = str(tmp_path / 'model'), 3
    base = next(p for p in ports_lib.free_ports(20) if ports_lib.bindable(p + 1, '127.0.0.1'))
    flags = cluster_run_flags(dataset, model_dir, max_iter) + ['--slurm_port_base=%d' % base]
    slurm = dict(ENV, SLURM_JOB_ID='7', SLURM_STEP_NUM_TASKS='2',
                 SLURM_STEP_NODELIST='127.0.0.1', SLURM_STEP_TASKS_PER_NODE='2')
    tasks = [Task(flags, env=dict(slurm, SLURM_PROCID=str(k), SLURM_LOCALID=str(k)))
             for k in (0, 1)]
    codes = run_tasks(tasks, tasks)
    assert codes == [0, 0], (tasks[0].text[-3000:], tasks[1].text[-3000:])
    assert_identical_weights(model_dir, max_iter)
    assert 'cluster from Slurm (task 1 of 2, CUDA_VISIBLE_DEVICES=)' in tasks[1].text
    assert '127.0.0.1:%d' % (base + 1) in tasks[1].text
    assert first_files_read(tasks[1]) == (1, ['1.tfrecords', '3.tfrecords'])


@pytest.mark.slow
def test_independent_runs_say_so_and_refuse_a_shared_model_dir(dataset, tmp_path):
    model_dir = str(tmp_path / 'model')
    flags = cluster_run_flags(dataset, model_dir, 1) + ['--worker_num=2']
    bad = Task(flags + ['--worker_id=1', '--data_dir=' + str(tmp_path / 'nowhere')])
    assert run_tasks([bad], [bad]) == [2]        # bad input: the directory is not claimed
    assert not os.path.exists(os.path.join(model_dir, cluster_flags.MARKER))
    first = Task(flags + ['--worker_id=0'])
    assert run_tasks([first], [first]) == [0], first.text[-3000:]
    logged = [l for l in first.lines if re.match(r'[IWEF]\d{4} ', l)]   # absl's lines
    assert logged[0].endswith('independent run 0 of 2 on its share of the shards; no '
                              'cluster (give --worker_hosts to train one model together)')
    assert 'single process (worker 0 of 2)' in first.text
    second = Task(flags + ['--worker_id=1'])   # later, on worker 0's model_dir
    assert run_tasks([second], [second]) == [2]
    assert second.lines[-1].startswith('train.py: error: --model_dir=%s belongs to '
                                       'independent run worker 0 of 2' % model_dir)
    assert tf.train.latest_checkpoint(model_dir).endswith('-1')
