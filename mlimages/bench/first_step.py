"""Time to the first training step, in parts, for MirroredStrategy in one process and for
one process per device (a local collective job), side by side: tools/benchmark.py
--startup (issue #33; docs/measurements.md has the figures).

    python tools/benchmark.py --startup                        # ResNet-101, 1 and 8 replicas
    python tools/benchmark.py --startup --startup_sizes 50 101 --startup_replicas 1 2 4 8

Every run is train.py's own command line (train.from_command_line) on synthetic data, in fresh
processes that stop right after their first step:
  single       one process, one device, no strategy (train.py --num_gpus=1): the base
  mirrored R   one process whose CPU is split into R logical devices, MirroredStrategy
               over them (train.py --num_gpus=R on a GPU box; tools/graph_size.py builds it
               the same way)
  processes R  R processes of one device each started at once, a collective job on
               127.0.0.1 (TF_CONFIG chief + R-1 workers, MultiWorkerMirroredStrategy, RING
               between CPU processes; on a GPU box NCCL: tools/launch_local_cluster.py
               --workers R --distribution collective -- --num_gpus=1)

Parts of a process's time to its first step (seconds, from its spawn):
  start       Python, TensorFlow and the trainer imported
  setup       train.py to the Estimator's train: flags parsed and checked, the run's plan,
              the Estimator and its strategy (a cluster task also starts its server)
  graph       to the finalized graph: model_fn on every replica, the optimizer, the
              Scaffold's init / ready ops and the Saver
  session     the session, its ready checks (report_uninitialized_variables), and the
              other runs of preparing it
  variables   the run that initializes the variables (or restores them): the first run
              of the session, so it also places and optimizes the init graph
  checkpoint  CheckpointSaverHook's start: graph.pbtxt, the meta graph, the checkpoint of
              step 0 (every task of a collective job writes one: the others to
              model_dir/tmp_worker_<k>, TensorFlow's way of running their collective
              save ops)
  step        the first training step: pruning, placing and optimizing the training graph,
              then one batch; in a collective job also waiting for the last task to join
  total       spawn to the end of the first step; of a collective job, its last task's
The processes' CPU seconds (user + system) and peak resident memory are summed over the
job's processes. Each turn runs every variant once, the order rotating from turn to turn;
the table shows medians over the turns and each variant's total as the median of the
per-turn ratios to `single`: on a shared machine only ratios taken side by side mean much.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from mlimages.distributed import ports as ports_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ('start', 'setup', 'graph', 'session', 'variables', 'checkpoint', 'step')
MODES = ('mirrored', 'processes')

# One process of a measured run: train.py's command line with timing patches. argv:
# mode (single, mirrored, task), replicas, then train.py's flags.
CHILD = r'''
import json, os, resource, sys, time
T = {'spawned': float(os.environ.pop('STARTUP_SPAWNED')), 'process': time.time()}
mode, replicas = sys.argv[1], int(sys.argv[2])
sys.argv = ['train.py'] + sys.argv[3:]
import train
import tensorflow.compat.v1 as tf
from tensorflow.python.training import basic_session_run_hooks, session_manager
from mlimages.distributed import distribute
from mlimages.run import estimator
T['imported'] = time.time()
if mode == 'mirrored':
    cpu = tf.config.list_physical_devices('CPU')[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    distribute.mirrored_devices = lambda k: ['/device:CPU:%d' % i for i in range(k)]
    distribute.check_num_gpus = lambda num_gpus, gpu_count: None
    config_of = estimator.session_config
    def session_config(*args, **kwargs):
        config = config_of(*args, **kwargs)
        config.device_count['CPU'] = replicas
        return config
    estimator.session_config = session_config

def timed(owner, name, key):
    """T[key_start] and T[key_end] of the first call of owner.name."""
    method = getattr(owner, name)
    def wrapper(*args, **kwargs):
        first = key + '_start' not in T
        if first:
            T[key + '_start'] = time.time()
        try:
            return method(*args, **kwargs)
        finally:
            if first:
                T[key + '_end'] = time.time()
    setattr(owner, name, wrapper)

timed(tf.estimator.Estimator, 'train', 'estimator')
timed(tf.Graph, 'finalize', 'finalize')
timed(session_manager.SessionManager, 'prepare_session', 'prepare')
timed(basic_session_run_hooks.CheckpointSaverHook, 'after_create_session', 'checkpoint')
timed(tf.train.Saver, 'restore', 'restore')
run_of = tf.Session.run
def run(self, fetches, *args, **kwargs):
    start = time.time()
    try:
        return run_of(self, fetches, *args, **kwargs)
    finally:
        if 'prepare_start' in T and 'prepare_end' not in T and 'init_end' not in T \
                and 'restore_start' not in T:
            T['init_start'], T['init_end'] = start, time.time()
tf.Session.run = run

class FirstStep(tf.train.SessionRunHook):
    def before_run(self, run_context):
        T.setdefault('step_start', time.time())

    def after_run(self, run_context, run_values):
        T['step_end'] = time.time()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        T['cpu_s'] = usage.ru_utime + usage.ru_stime
        T['peak_kb'] = usage.ru_maxrss
        sys.stdout.write('STARTUP %s\n' % json.dumps(T))
        sys.stdout.flush()
        os._exit(0)  # the first step is what is measured: no final checkpoint, no teardown

T['train'] = time.time()
train.from_command_line([FirstStep()])
'''


def parts(t):
    """The PARTS of one process's timestamps (see the module docstring), and its total."""
    restored = 'restore_end' in t
    variables = (t['restore_end'] - t['restore_start'] if restored
                 else t.get('init_end', 0) - t.get('init_start', 0))
    values = {
        'start': t['train'] - t['spawned'],
        'setup': t['estimator_start'] - t['train'],
        'graph': t['finalize_start'] - t['estimator_start'],
        'session': t['prepare_end'] - t['finalize_start'] - variables,
        'variables': variables,
        'checkpoint': t.get('checkpoint_end', 0) - t.get('checkpoint_start', 0),
        'total': t['step_end'] - t['spawned'],
    }
    values['step'] = values['total'] - sum(values[p] for p in PARTS if p != 'step')
    return values


def child_command(mode, replicas, flags):
    return [sys.executable, '-c', CHILD, mode, str(replicas)] + list(flags)


def train_flags(args, model_dir, replicas):
    return ['--use_synthetic_data', '--resnet_size=%d' % args.resnet_size,
            '--class_num=%d' % args.class_num, '--image_size=%d' % args.startup_image_size,
            '--batch_size=%d' % args.startup_batch_size, '--num_gpus=%d' % replicas,
            '--data_format=NHWC', '--visiable_gpu=-1', '--max_iter=1', '--log_interval=1',
            '--model_dir=' + model_dir, '--log_dir=' + model_dir]


def run_processes(commands, envs, timeout, checkout=ROOT):
    """Starts the commands at once in `checkout` (its trainer imported, not the installed
    one); each one's STARTUP record (a dict). Raises RuntimeError naming the first process
    that failed."""
    procs, logs = [], []
    spawned = time.time()
    for command, env in zip(commands, envs):
        log = tempfile.TemporaryFile(mode='w+')
        env = dict(env, STARTUP_SPAWNED=repr(spawned), PYTHONPATH=checkout)
        procs.append(subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.PIPE,
                                      stderr=log, text=True))
        logs.append(log)
    records, failure = [], None
    try:
        for proc, log in zip(procs, logs):
            out, _ = proc.communicate(timeout=max(1.0, timeout - (time.time() - spawned)))
            lines = [l for l in out.splitlines() if l.startswith('STARTUP ')]
            if not lines and failure is None:
                log.seek(0)
                failure = 'exit %s\n%s' % (proc.returncode, log.read()[-3000:])
            if lines:
                records.append(json.loads(lines[-1][len('STARTUP '):]))
    except subprocess.TimeoutExpired:
        failure = failure or 'no first step within %d s' % timeout
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    if failure:
        raise RuntimeError(failure)
    return records


def available_gb(path='/proc/meminfo'):
    """The memory the kernel says new processes can take (MemAvailable), None elsewhere."""
    try:
        with open(path) as f:
            fields = dict(line.split(':', 1) for line in f)
        return int(fields['MemAvailable'].split()[0]) / 1024.0 ** 2
    except (OSError, KeyError, ValueError):
        return None


def measure(variant, replicas, args, checkout=ROOT, single_gb=0.0):
    """One run of a variant ('single', 'mirrored', 'processes') of the trainer in
    `checkout`: the parts of its process (of the chief, for processes), its total, and
    the CPU and memory of all. single_gb: a single device's peak; R processes that would
    need more than the memory available are not started (RuntimeError): on a shared
    machine the kernel would kill the largest process, whoever's."""
    free = available_gb()
    if variant == 'processes' and free is not None and replicas * single_gb > 0.9 * free:
        raise RuntimeError('not started: %d processes need about %.1f GB, %.1f GB available'
                           % (replicas, replicas * single_gb, free))
    model_dir = tempfile.mkdtemp(prefix='startup_')
    base = dict(os.environ, CUDA_VISIBLE_DEVICES='', TF_CPP_MIN_LOG_LEVEL='3')
    base.pop('TF_CONFIG', None)
    try:
        flags = train_flags(args, model_dir, 1 if variant == 'processes' else replicas)
        if variant == 'processes':
            hosts = ['127.0.0.1:%d' % p for p in ports_lib.free_ports(replicas)]
            cluster = {'chief': hosts[:1]}
            if replicas > 1:
                cluster['worker'] = hosts[1:]
            tasks = [('chief', 0)] + [('worker', i) for i in range(replicas - 1)]
            envs = [dict(base, TF_CONFIG=json.dumps({'cluster': cluster, 'task': {
                'type': kind, 'index': index}})) for kind, index in tasks]
            commands = [child_command('task', 1, flags + ['--distribution=collective'])
                        for _ in tasks]
        else:
            envs = [base]
            commands = [child_command(variant, replicas, flags)]
        records = run_processes(commands, envs, args.startup_timeout, checkout)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    result = parts(records[0])
    result['total'] = max(r['step_end'] for r in records) - records[0]['spawned']
    result['cpu_s'] = sum(r['cpu_s'] for r in records)
    result['peak_gb'] = sum(r['peak_kb'] for r in records) / 1024.0 ** 2
    return result


def variants(replica_counts, before=False, modes=MODES):
    """(name, variant, replicas, checkout) of one turn: single, then each of `modes` for
    each count > 1; before: each also on the checkout `before` (names ending in ' <')."""
    out = [('single', 'single', 1)]
    for r in replica_counts:
        if r > 1:
            out += [('%s x%d' % (mode, r), mode, r) for mode in modes]
    out = [run + (ROOT,) for run in out]
    if before:
        out += [(name + ' <', variant, r, before) for name, variant, r, _ in out]
    return out


def run_turns(runs, repeats, measure_one, say):
    """{name: [result of each turn]} and {name: [total / single's total, per turn]}."""
    results = {run[0]: [] for run in runs}
    ratios = {run[0]: [] for run in runs}
    for turn in range(repeats):
        order = runs[turn % len(runs):] + runs[:turn % len(runs)]
        this_turn = {}
        for name, variant, replicas, checkout in order:
            say('turn %d/%d: %s ...' % (turn + 1, repeats, name))
            try:
                this_turn[name] = measure_one(variant, replicas, checkout)
            except RuntimeError as e:  # e.g. killed for memory: the others still count
                say('%s failed: %s' % (name, str(e).strip().splitlines()[0]))
                continue
            results[name].append(this_turn[name])
            say('%s: %s' % (name, json.dumps({k: round(v, 2) for k, v in
                                               this_turn[name].items()})))
        for name in this_turn:
            base = 'single <' if name.endswith(' <') else 'single'
            if base in this_turn:
                ratios[name].append(this_turn[name]['total'] / this_turn[base]['total'])
    return results, ratios


def format_table(title, results, ratios):
    columns = PARTS + ('total',)
    lines = [title, '  %-15s %s %7s %7s %8s' % (
        'variant', ' '.join('%10s' % c for c in columns), 'ratio', 'CPU s', 'peak GB')]
    for name, rows in results.items():
        if not rows:
            lines.append('  %-15s failed in every turn' % name)
            continue
        median = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
        lines.append('  %-15s %s %6.2fx %7.1f %8.2f' % (
            name, ' '.join('%10.1f' % median[c] for c in columns),
            float(np.median(ratios[name] or [np.nan])), median['cpu_s'], median['peak_gb']))
    lines.append('  (seconds, medians of %d turn(s); ratio = median per-turn total / single\'s of '
                 'the same checkout; '
                 'processes: the chief\'s parts, the job\'s total, CPU and memory summed '
                 'over its processes; " <": the --startup_before checkout)'
                 % max(len(rows) for rows in results.values()))
    return '\n'.join(lines)


def add_arguments(parser):
    group = parser.add_argument_group('time to the first step (mlimages/bench/first_step.py)')
    group.add_argument('--startup', action='store_true',
                       help='measure the time to the first training step of one device, '
                            'MirroredStrategy and one process per device, instead of the '
                            'default')
    group.add_argument('--startup_sizes', type=int, nargs='+', default=[101],
                       help='ResNet depths')
    group.add_argument('--startup_replicas', type=int, nargs='+', default=[8],
                       help='replica counts (> 1) besides the single device')
    group.add_argument('--startup_modes', nargs='+', choices=MODES, default=list(MODES),
                       help='layouts of the replicas (processes x 8 of ResNet-101 take about '
                            '20 GB of host memory in all: R processes are started only when '
                            'R x the single device\'s peak fits in the memory available)')
    group.add_argument('--startup_repeats', type=int, default=2, help='turns')
    group.add_argument('--startup_batch_size', type=int, default=1, help='per replica')
    group.add_argument('--startup_image_size', type=int, default=64,
                       help='small: the step\'s compute is not what is measured')
    group.add_argument('--startup_timeout', type=float, default=1800,
                       help='seconds a run may take to its first step')
    group.add_argument('--startup_before', default='',
                       help='a checkout of another commit (e.g. git worktree add DIR main): '
                            'every variant also runs its trainer, in the same turns; rows '
                            'ending in " <"')


def main(args):
    say = lambda text: sys.stderr.write('benchmark.py: %s\n' % text)
    out = []
    for size in args.startup_sizes:
        args.resnet_size = size
        runs = variants(args.startup_replicas,
                        os.path.abspath(args.startup_before) if args.startup_before else False,
                        args.startup_modes)
        single = {}

        def measure_one(variant, replicas, checkout):
            result = measure(variant, replicas, args, checkout, single.get('peak_gb', 0.0))
            if variant == 'single':
                single['peak_gb'] = max(single.get('peak_gb', 0.0), result['peak_gb'])
            return result
        results, ratios = run_turns(runs, args.startup_repeats, measure_one, say)
        out.append(format_table(
            'time to the first step, ResNet-%d, %d classes, batch %d per replica, image %d:'
            % (size, args.class_num, args.startup_batch_size, args.startup_image_size),
            results, ratios))
    out.append('benchmark.py: %d cores; load average at the end %.1f' % (
        os.cpu_count(), os.getloadavg()[0]))
    print('\n'.join(out))
    return 0
