"""Starts a whole TF_CONFIG training cluster of train.py as processes on this machine.

    .venv/bin/python tools/launch_local_cluster.py --workers 2 --ps 1 -- --data_dir=... \
        --model_dir=...
    .venv/bin/python tools/launch_local_cluster.py --workers 2 --distribution collective -- ...

Every task (chief, worker, ps) is `train.py <the flags after -->
--distribution=<ps|collective>` run by the launcher's own Python, with its own TF_CONFIG,
on 127.0.0.1 and free ports (below the ephemeral range). --workers counts the training
workers: the chief (worker 0, which writes the checkpoints and summaries) and --workers - 1
`worker` tasks. The tasks'
output is streamed with a prefix `[chief:0]`, `[worker:0]`, `[ps:0]`; each task also writes
<log_dir>/train_<type>_<index>.log.

GPUs: each training task gets --gpus_per_task GPUs of its own (default: train.py's
--num_gpus, 1 when not given) through CUDA_VISIBLE_DEVICES -- the chief the first block,
worker k the (k+2)-th -- counted in the launcher's own CUDA_VISIBLE_DEVICES when that is
set; the ps tasks none and the evaluator --evaluator_gpus. Each task runs in the
launcher's working directory, so relative paths mean the same to every task.

Security: TensorFlow's servers listen on every interface whatever --host says, and run
whatever a connection asks, without authentication. Run clusters on trusted networks only;
--isolate (Linux) runs the whole local cluster in a network namespace of its own that has
only a loopback interface, unreachable from anywhere else.

With --evaluator an `evaluator` task (not a member of the cluster; it reads the chief's
checkpoints) evaluates each new checkpoint on the val split and exits after the last.
A ps task exits 0 by itself once the chief (and every worker still there) has finished;
one still running PS_GRACE s after that is stopped (SIGTERM, then SIGKILL). A task killed
by a signal or exiting with a retryable status (128-255: 143 / 130 stopped by a signal,
200 a lost peer) is restarted with the same TF_CONFIG and flags (up to --restarts times;
it resumes from the chief's checkpoints: in ps mode it rejoins the running job, in
collective mode -- where the other workers cannot go on without it -- every training task
is restarted). Any other failure stops every task. SIGTERM or SIGINT to the launcher is
forwarded to the training tasks (the chief saves a checkpoint at its step) and waited for
up to STOP_GRACE s before the ps tasks stop; exit status 128 + the signal. The tasks die
with the launcher even when it is SIGKILLed (PR_SET_PDEATHSIG, Linux): SIGKILL, as without
the launcher nobody would stop the ps tasks, and a chief whose ps is gone cannot save
anyway (a rerun resumes from the last checkpoint). Exit status 0 when the chief, every
worker and the evaluator exited 0, 1 otherwise (2 on bad usage).
"""
import argparse
import collections
import json
import os
import shutil
import signal
import sys
import threading

from mlimages.config import startup
from mlimages.distributed import cluster_flags, devices, local_tasks
from mlimages.distributed import ports as ports_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = 'launch_local_cluster.py'
SCRIPT = os.path.join(ROOT, 'tools', PROGRAM)  # what --isolate runs again, in the namespace

# Seconds the training tasks get to save and exit after a forwarded SIGTERM / SIGINT:
# inside Kubernetes' 30 s grace (a ResNet-101 save takes about 2 s).
STOP_GRACE = 25.0
ISOLATED_MARK = '--_in_namespace'
SECURITY_NOTE = ('the tasks\' servers listen on every network interface and accept any '
                 'connection without authentication (TensorFlow\'s distributed runtime); '
                 'use trusted networks only, or --isolate')
# The flags the launcher sets in every task, from its options and the task's TF_CONFIG.
LAUNCHER_FLAGS = ('--distribution', '--worker_num', '--worker_id', '--worker_hosts',
                  '--ps_hosts', '--ps_id')


def cluster_addresses(workers, ps, host='127.0.0.1', ports=None):
    """{'chief': [addr], 'worker': [...], 'ps': [...]} for `workers` training workers (the
    chief included) and `ps` parameter servers."""
    count = workers + ps
    ports = list(ports) if ports is not None else ports_lib.free_ports(count, host)
    addresses = ['%s:%d' % (host, p) for p in ports]
    cluster = {'chief': addresses[:1]}
    if workers > 1:
        cluster['worker'] = addresses[1:workers]
    if ps:
        cluster['ps'] = addresses[workers:workers + ps]
    return cluster


def task_names(cluster):
    """(type, index) of every task, training tasks first."""
    return [(t, i) for t in ('chief', 'worker', 'ps') for i in range(len(cluster.get(t, [])))]


def gpu_list(environ):
    """The GPU ids the launcher may hand out: CUDA_VISIBLE_DEVICES' entries when it is set
    (empty: none), else None (ids 0, 1, ... of the host)."""
    value = environ.get('CUDA_VISIBLE_DEVICES')
    if value is None:
        return None
    return [d.strip() for d in value.split(',') if d.strip()]


def task_gpus(names, gpus_per_task, evaluator_gpus, available):
    """{task name: CUDA_VISIBLE_DEVICES value}: consecutive blocks of `gpus_per_task` for
    the training tasks in order (chief first), `evaluator_gpus` after them for the
    evaluator, none for a ps task. `available`: gpu_list's answer. A block past the end
    of `available` is empty (the task's own device check then names the shortfall)."""
    if available is not None and not available:
        return {'%s:%d' % name: '' for name in names}
    assigned, next_gpu = {}, 0
    for task_type, index in names:
        count = {'chief': gpus_per_task, 'worker': gpus_per_task,
                 'evaluator': evaluator_gpus}.get(task_type, 0)
        ids = range(next_gpu, next_gpu + count)
        next_gpu += count
        if available is not None:
            ids = [available[i] for i in ids if i < len(available)]
        assigned['%s:%d' % (task_type, index)] = ','.join(str(i) for i in ids)
    return assigned


def flag_value(flags, name, default):
    """The value of --name=V or --name V in a train.py flag list, else default."""
    for i, flag in enumerate(flags):
        if flag.startswith('--%s=' % name):
            return flag.split('=', 1)[1]
        if flag == '--' + name and i + 1 < len(flags):
            return flags[i + 1]
    return default


def isolated_command(argv):
    """This launcher again, under `unshare --net` (with --map-root-user when not root),
    marked so that it brings loopback up and runs the cluster there."""
    unshare = shutil.which('unshare')
    if unshare is None or not sys.platform.startswith('linux'):
        return None
    user = [] if os.geteuid() == 0 else ['--map-root-user']
    return [unshare, '--net'] + user + ['--', sys.executable, SCRIPT, ISOLATED_MARK] + argv


def build_parser():
    """The launcher's own options (those before --)."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM, description=__doc__.split('\n')[0],
        usage='%(prog)s [options] -- <train.py flags>',
        epilog='Everything after -- is passed to every task\'s train.py.')
    parser.add_argument('--workers', type=int, default=2,
                        help='training workers, the chief included (default 2: chief + 1 '
                             'worker)')
    parser.add_argument('--ps', type=int, default=1,
                        help='parameter servers with --distribution=ps (default 1)')
    parser.add_argument('--distribution', choices=('ps', 'collective'), default='ps',
                        help='ps: asynchronous, variables on the ps tasks; collective: '
                             'synchronous all-reduce, no ps (default ps)')
    parser.add_argument('--evaluator', action='store_true',
                        help='also start an evaluator task: it evaluates every new '
                             'checkpoint of --model_dir on the val split (at most one each '
                             '--eval_throttle_secs) and exits after the one of --max_iter')
    parser.add_argument('--restarts', type=int, default=3,
                        help='how often a training task killed by a signal is restarted '
                             'with the same TF_CONFIG (default 3; 0 = never)')
    parser.add_argument('--timeout', type=float, default=0,
                        help='stop every task and fail after this many seconds (0 = never)')
    parser.add_argument('--host', default='127.0.0.1', help='address the tasks listen on')
    parser.add_argument('--python', default=sys.executable,
                        help='Python that runs train.py (default: this one)')
    parser.add_argument('--program', default=os.path.join(ROOT, 'train.py'),
                        help='the trainer every task runs (default: train.py of this '
                             'checkout; a program that wraps train.py, e.g. to add hooks, '
                             'takes the same flags)')
    parser.add_argument('--gpus_per_task', type=int, default=None,
                        help='GPUs of each training task, consecutive blocks of this host\'s '
                             'GPUs (default: train.py\'s --num_gpus, else 1; 0 = no GPU)')
    parser.add_argument('--evaluator_gpus', type=int, default=0,
                        help='GPUs of the evaluator task, after the training tasks\' '
                             '(default 0: it evaluates on the CPU)')
    parser.add_argument('--isolate', action='store_true',
                        help='run the whole cluster in a network namespace of its own with '
                             'only loopback (Linux, unshare): no other machine or namespace '
                             'can reach the tasks\' ports')
    return parser


def main(argv=None):
    """The launcher: parse, start the cluster, run it to the end; returns the exit status."""
    startup.check_versions(PROGRAM)
    argv = sys.argv[1:] if argv is None else argv
    in_namespace = bool(argv) and argv[0] == ISOLATED_MARK
    if in_namespace:
        argv = argv[1:]
        local_tasks.loopback_up()
    if '--' in argv:
        split = argv.index('--')
        own, train_flags = argv[:split], argv[split + 1:]
    else:
        own, train_flags = argv, []
    parser = build_parser()
    args = parser.parse_args(own)
    gpus_per_task = checked_gpus_per_task(parser, args, train_flags)
    if args.isolate and not in_namespace:
        command = isolated_command(own + ['--'] + train_flags)
        if command is None:
            parser.error('--isolate needs Linux and the unshare command')
        sys.stdout.flush()
        os.execv(command[0], command)  # the same process, signals and all, in the namespace

    console = local_tasks.Console(sys.stdout, PROGRAM)
    plan = cluster_plan(args, train_flags, gpus_per_task, console)
    say_plan(console.say, plan, args.distribution, in_namespace)
    return run_to_the_end(plan.tasks, args, console.say)


def checked_gpus_per_task(parser, args, train_flags):
    """The GPUs of each training task (--gpus_per_task, else train.py's --num_gpus, else
    1), after the options are checked: parser.error (exit status 2) on bad usage."""
    if args.workers < 1:
        parser.error('--workers must be >= 1, got %d' % args.workers)
    if args.distribution == 'ps' and args.ps < 1:
        parser.error('--distribution=ps needs --ps >= 1, got %d' % args.ps)
    if args.restarts < 0:
        parser.error('--restarts must be >= 0, got %d' % args.restarts)
    if any(f.startswith(LAUNCHER_FLAGS) for f in train_flags):
        parser.error('--distribution, --worker_num, --worker_id and the cluster\'s hosts are '
                     'set by the launcher (from its options and each task\'s TF_CONFIG); '
                     'leave them out after --')
    try:
        num_gpus = int(flag_value(train_flags, 'num_gpus', '1'))
    except ValueError:
        parser.error('--num_gpus after -- must be a whole number')
    gpus_per_task = num_gpus if args.gpus_per_task is None else args.gpus_per_task
    if gpus_per_task < 0 or args.evaluator_gpus < 0:
        parser.error('--gpus_per_task and --evaluator_gpus must be >= 0')
    if gpus_per_task and any(f.startswith('--visiable_gpu') for f in train_flags):
        parser.error('--visiable_gpu is set by the launcher (each task gets its own GPUs, '
                     'see --gpus_per_task); leave it out after --')
    return gpus_per_task


Plan = collections.namedtuple('Plan', 'cluster command tasks gpus cpus share_env')


def cluster_plan(args, train_flags, gpus_per_task, console):
    """The cluster's addresses, the command every task runs and its Tasks (not started),
    with the GPUs and CPUs of each."""
    ps = args.ps if args.distribution == 'ps' else 0
    cluster = cluster_addresses(args.workers, ps, args.host)
    command = [args.python, args.program] + train_flags + [
        '--distribution=' + args.distribution]
    tasks = []
    names = task_names(cluster) + ([('evaluator', 0)] if args.evaluator else [])
    gpus = task_gpus(names, gpus_per_task, args.evaluator_gpus, gpu_list(os.environ))
    cpus, share_env = cpu_plan(['%s:%d' % n for n in names])
    for task_type, index in names:
        name = '%s:%d' % (task_type, index)
        env = dict(os.environ, TF_CONFIG=cluster_flags.tf_config(cluster, task_type, index),
                   CUDA_VISIBLE_DEVICES=gpus[name], **share_env)
        tasks.append(local_tasks.Task(task_type, index, command, env, console, cpus[name]))
    return Plan(cluster, command, tasks, gpus, cpus, share_env)


def say_plan(say, plan, distribution, in_namespace):
    """The launcher's first lines: the cluster and command, the GPUs and CPUs of each task,
    whether the cluster is isolated."""
    say('cluster %s (%s); every task runs: %s' % (
        json.dumps(plan.cluster), distribution, ' '.join(plan.command)))
    say('GPUs (CUDA_VISIBLE_DEVICES): %s' % ', '.join(
        '%s %s' % (name, value or 'none') for name, value in plan.gpus.items()))
    cpus = plan.cpus
    say('CPUs (affinity; each task sizes its threads to its share): %s' % (', '.join(
        '%s %s' % (name, cpu_ranges(c)) for name, c in cpus.items()) if any(cpus.values())
        else 'not pinned (fewer than one a task, or no affinity on this OS): the %s tasks '
        'share them' % plan.share_env[devices.LOCAL_TASKS_ENV]))
    say('isolated: the cluster runs in its own network namespace (loopback only)'
        if in_namespace else 'warning: ' + SECURITY_NOTE)


def stop_request():
    """A threading.Event set (its attribute signum: the first signal) by SIGINT or SIGTERM.
    Ctrl-C and SIGTERM only set a flag that the launcher's loop polls: an exception raised
    asynchronously could land inside a Popen or a lock and leave a task unknown."""
    stop_requested = threading.Event()
    stop_requested.signum = None

    def stop(signum, frame):
        stop_requested.signum = stop_requested.signum or signum
        stop_requested.set()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    return stop_requested


def run_to_the_end(tasks, args, say):
    """The exit status of the cluster run to its end (local_tasks.run_cluster), every task
    stopped after it and its exit said."""
    stop_requested = stop_request()
    status = 1
    try:
        status = local_tasks.run_cluster(tasks, args.distribution, args.restarts,
                                         args.timeout, say, stop_requested)
    finally:
        stop_every_task(tasks, status, stop_requested.signum)
        for task in tasks:
            code = task.process.returncode if task.process else None
            say('%s (pid %s) %s%s' % (
                task.name, task.process.pid if task.process else '-',
                'not started' if code is None else local_tasks.exit_text(code),
                ' (stopped by the launcher)' if not task.finishes and code is not None and
                code != 0 and status == 0 else ''))
    say('exit status %d' % status)
    return status


def stop_every_task(tasks, status, signum):
    """Training tasks first (a worker must not outlive its ps), then the ps tasks."""
    if signum:
        local_tasks.stop_all([t for t in tasks if t.finishes], STOP_GRACE, signum)
    else:
        local_tasks.stop_all([t for t in tasks if t.finishes],
                             grace=5.0 if status else 30.0)
    local_tasks.stop_all([t for t in tasks if not t.finishes], grace=10.0)


# ------------------------------------------------------------ the tasks' CPUs

def partition_cpus(cpus, tasks):
    """`tasks` (at most len(cpus)) contiguous blocks of the sorted `cpus`, of len(cpus) //
    tasks CPUs (the first ones a CPU more when they do not divide)."""
    cpus = sorted(cpus)
    size, extra = divmod(len(cpus), tasks)
    starts = [i * size + min(i, extra) for i in range(tasks + 1)]
    return [set(cpus[starts[i]:starts[i + 1]]) for i in range(tasks)]


def cpu_plan(names):
    """({task name: its CPUs, or None}, the environment every task gets): the launcher's
    CPUs (sched_getaffinity) split among the tasks (partition_cpus) when each can
    have one of its own and the OS pins processes, else none pinned; with how many tasks
    share the node (its cgroup quota) and each one's CPUs, for devices.cpu_share."""
    count = str(len(names))
    try:
        own = os.sched_getaffinity(0)
    except AttributeError:  # no affinity on this OS
        own = ()
    if len(own) < len(names):  # pinned, two tasks on one CPU wait for each other's bursts
        return {name: None for name in names}, {devices.LOCAL_TASKS_ENV: count,
                                                devices.CPU_SET_TASKS_ENV: count}
    return dict(zip(names, partition_cpus(own, len(names)))), {
        devices.LOCAL_TASKS_ENV: count, devices.CPU_SET_TASKS_ENV: '1'}


def cpu_ranges(cpus):
    """{0, 1, 2, 5} -> '0-2,5'."""
    found, cpus = [], sorted(cpus)
    for cpu in cpus:
        if found and cpu == found[-1][1] + 1:
            found[-1][1] = cpu
        else:
            found.append([cpu, cpu])
    return ','.join('%d' % a if a == b else '%d-%d' % (a, b) for a, b in found)
