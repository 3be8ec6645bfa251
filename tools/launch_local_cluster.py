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
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), '..', 'mlimages/config/interpreter.py'))
import argparse
import ctypes
import ctypes.util
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from mlimages import errors
from mlimages.config import startup
from mlimages.cli import ports as ports_lib
from mlimages.distributed import devices

PROGRAM = 'launch_local_cluster.py'


# Seconds the training tasks get to save and exit after a forwarded SIGTERM / SIGINT:
# inside Kubernetes' 30 s grace (a ResNet-101 save takes about 2 s).
STOP_GRACE = 25.0
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """A preexec_fn: the child gets SIGKILL when the launcher's thread that started it
    dies (prctl PR_SET_PDEATHSIG; Linux only, elsewhere None). Resolved before any fork: the
    child only calls it, and exits at once if the launcher died before the call."""
    if not sys.platform.startswith('linux'):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6', use_errno=True).prctl
    parent = os.getpid()

    def preexec():
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
    return preexec


def pinned(preexec, cpus):
    """preexec, then (in the child, before train.py starts) affinity to `cpus` if given."""
    if not cpus:
        return preexec

    def both():
        if preexec:
            preexec()
        os.sched_setaffinity(0, cpus)
    return both


def make_cluster(workers, ps, host='127.0.0.1', ports=None):
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


def tf_config(cluster, task_type, index):
    return json.dumps({'cluster': cluster, 'task': {'type': task_type, 'index': index}})


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


def loopback_up():
    """Brings up `lo` in this (new) network namespace: SIOCGIFFLAGS, then SIOCSIFFLAGS with
    IFF_UP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack('16sh', b'lo', 0)
        flags = struct.unpack('16sh', fcntl.ioctl(s, 0x8913, request))[1]
        fcntl.ioctl(s, 0x8914, struct.pack('16sh', b'lo', flags | 0x1))


def isolated_command(argv):
    """This launcher again, under `unshare --net` (with --map-root-user when not root),
    marked so that it brings loopback up and runs the cluster there."""
    unshare = shutil.which('unshare')
    if unshare is None or not sys.platform.startswith('linux'):
        return None
    user = [] if os.geteuid() == 0 else ['--map-root-user']
    return [unshare, '--net'] + user + ['--', sys.executable, os.path.abspath(__file__),
                                        ISOLATED_MARK] + argv


ISOLATED_MARK = '--_in_namespace'
SECURITY_NOTE = ('the tasks\' servers listen on every network interface and accept any '
                 'connection without authentication (TensorFlow\'s distributed runtime); '
                 'use trusted networks only, or --isolate')


class Console(object):
    """Whole lines to one stream from several threads (the tasks' readers, the launcher)."""

    def __init__(self, out):
        self._out, self._lock = out, threading.Lock()

    def line(self, prefix, text):
        with self._lock:
            self._out.write('%s %s\n' % (prefix, text))
            self._out.flush()

    def say(self, text):
        """A line of the launcher's own."""
        self.line(PROGRAM + ':', text)


DIE_WITH_PARENT = die_with_parent()


class Task(object):
    """One process of the cluster, started and restarted with the same TF_CONFIG."""

    def __init__(self, task_type, index, command, env, console, cpus=None):
        self.type, self.index, self.command, self.env = task_type, index, command, env
        self.cpus = cpus  # the CPUs it is pinned to, None: not pinned
        self.name = '%s:%d' % (task_type, index)
        self.process, self.restarts, self.returncode = None, 0, None
        self._console = console
        self._reader = None

    @property
    def trains(self):
        return self.type in ('chief', 'worker')

    @property
    def finishes(self):
        """Ends the job by its exit (every task but a ps, which ends after them)."""
        return self.type != 'ps'

    def start(self):
        self.returncode = None
        self.process = subprocess.Popen(
            self.command, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=pinned(DIE_WITH_PARENT, self.cpus))
        self._console.say('started %s, pid %d' % (self.name, self.process.pid))
        self._reader = threading.Thread(target=self._stream, args=(self.process,),
                                        daemon=True)
        self._reader.start()

    def _stream(self, process):
        for raw in iter(process.stdout.readline, b''):
            self._console.line('[%s]' % self.name, raw.decode('utf-8', 'replace').rstrip('\n'))

    def poll(self):
        if self.process is not None and self.returncode is None:
            self.returncode = self.process.poll()
        return self.returncode

    def terminate(self, signum=signal.SIGTERM):
        """SIGTERM (or signum) to this task's process (by PID) if it is running."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def flush(self):
        if self._reader is not None:
            self._reader.join(5)


def stop_all(tasks, grace, signum=signal.SIGTERM):
    """SIGTERM (or signum) to every running task at once, SIGKILL to any still running
    `grace` seconds later; then their output is drained. Bounded: grace + 5 s a task at
    most for the draining, which only waits for a pipe a killed process can no longer
    hold."""
    for task in tasks:
        task.terminate(signum)
    deadline = time.time() + grace
    for task in tasks:
        if task.process is None:
            continue
        try:
            task.process.wait(max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            task.process.kill()
            task.process.wait()
    for task in tasks:
        task.flush()


def describe_exit(code):
    return 'killed by signal %d' % -code if code < 0 else 'exited with status %d' % code


# train.py's retryable exit statuses, as a kill is: 143 / 130 stopped by SIGTERM / SIGINT,
# 200 a lost peer (what Kubernetes' ExitCode policy restarts).
RETRYABLE = range(128, 256)
# Seconds the ps tasks get to exit by themselves after the chief and the workers finished.
PS_GRACE = 30.0


def run_cluster(tasks, distribution, restarts, timeout, say, stop_requested):
    """Runs the tasks to the end; returns the exit status (0 = every training task ok,
    128 + the signal when stop_requested was set by SIGTERM or SIGINT, 1 otherwise).
    stop_requested: a threading.Event, and its attribute signum."""
    start = time.time()
    for task in tasks:
        if stop_requested.is_set():
            break
        task.start()
    trainers = [t for t in tasks if t.trains]
    finishing = [t for t in tasks if t.finishes]
    while not stop_requested.wait(0.2):
        if timeout and time.time() - start > timeout:
            say('timeout: %d s passed; stopping every task' % timeout)
            return 1
        died = [t for t in tasks if t.poll() is not None and t.returncode != 0]
        # A task that ended because its peer was lost is named after the peer's own exit.
        died.sort(key=lambda t: t.returncode == errors.PEER_LOST_STATUS)
        for task in died:
            if task.poll() is None:  # restarted already, with the others of its job
                continue
            task.flush()
            killed = task.returncode < 0 or task.returncode in RETRYABLE
            if not (killed and task.restarts < restarts):
                say('%s %s; stopping every task' % (task.name, describe_exit(task.returncode)))
                return 1
            task.restarts += 1
            if distribution == 'collective' and task.trains:
                # The others wait for it in their all-reduce: restart them all.
                say('%s %s; restarting every training task with the same TF_CONFIG '
                    '(restart %d of %d)' % (task.name, describe_exit(task.returncode),
                                            task.restarts, restarts))
                stop_all(trainers, grace=5.0)
                for other in trainers:
                    other.start()
            else:
                say('%s %s; restarting it with the same TF_CONFIG (restart %d of %d)'
                    % (task.name, describe_exit(task.returncode), task.restarts, restarts))
                task.start()
        if all(t.poll() == 0 for t in finishing):
            say('the chief and every worker%s finished in %.1f s' % (
                '' if finishing == trainers else ' and the evaluator', time.time() - start))
            serving = [t for t in tasks if not t.finishes]
            deadline = time.time() + PS_GRACE
            while any(t.poll() is None for t in serving) and time.time() < deadline:
                time.sleep(0.2)
            return 0
    say('%s; forwarding it to every training task (the chief saves a checkpoint), then '
        'stopping the ps tasks' % signal.Signals(stop_requested.signum).name)
    return 128 + stop_requested.signum


def make_parser():
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
    startup.check_versions('launch_local_cluster.py')
    argv = sys.argv[1:] if argv is None else argv
    in_namespace = bool(argv) and argv[0] == ISOLATED_MARK
    if in_namespace:
        argv = argv[1:]
        loopback_up()
    if '--' in argv:
        split = argv.index('--')
        own, train_flags = argv[:split], argv[split + 1:]
    else:
        own, train_flags = argv, []
    parser = make_parser()
    args = parser.parse_args(own)
    if args.workers < 1:
        parser.error('--workers must be >= 1, got %d' % args.workers)
    if args.distribution == 'ps' and args.ps < 1:
        parser.error('--distribution=ps needs --ps >= 1, got %d' % args.ps)
    if args.restarts < 0:
        parser.error('--restarts must be >= 0, got %d' % args.restarts)
    if any(f.startswith(('--distribution', '--worker_num', '--worker_id', '--worker_hosts',
                         '--ps_hosts', '--ps_id')) for f in train_flags):
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
    if args.isolate and not in_namespace:
        command = isolated_command(own + ['--'] + train_flags)
        if command is None:
            parser.error('--isolate needs Linux and the unshare command')
        sys.stdout.flush()
        os.execv(command[0], command)  # the same process, signals and all, in the namespace

    ps = args.ps if args.distribution == 'ps' else 0
    cluster = make_cluster(args.workers, ps, args.host)
    console = Console(sys.stdout)
    say = console.say
    command = [args.python, args.program] + train_flags + [
        '--distribution=' + args.distribution]
    tasks = []
    names = task_names(cluster) + ([('evaluator', 0)] if args.evaluator else [])
    gpus = task_gpus(names, gpus_per_task, args.evaluator_gpus, gpu_list(os.environ))
    cpus, share_env = devices.cpu_plan(['%s:%d' % n for n in names])
    for task_type, index in names:
        name = '%s:%d' % (task_type, index)
        env = dict(os.environ, TF_CONFIG=tf_config(cluster, task_type, index),
                   CUDA_VISIBLE_DEVICES=gpus[name], **share_env)
        tasks.append(Task(task_type, index, command, env, console, cpus[name]))

    say('cluster %s (%s); every task runs: %s' % (
        json.dumps(cluster), args.distribution, ' '.join(command)))
    say('GPUs (CUDA_VISIBLE_DEVICES): %s' % ', '.join(
        '%s %s' % (name, value or 'none') for name, value in gpus.items()))
    say('CPUs (affinity; each task sizes its threads to its share): %s' % (', '.join(
        '%s %s' % (name, devices.cpu_ranges(c)) for name, c in cpus.items()) if any(cpus.values())
        else 'not pinned (fewer than one a task, or no affinity on this OS): the %s tasks '
        'share them' % share_env[devices.LOCAL_TASKS_ENV]))
    say('isolated: the cluster runs in its own network namespace (loopback only)'
        if in_namespace else 'warning: ' + SECURITY_NOTE)

    # Ctrl-C and SIGTERM only set a flag that the launcher's loop polls: an exception
    # raised asynchronously could land inside a Popen or a lock and leave a task unknown.
    stop_requested = threading.Event()
    stop_requested.signum = None

    def stop(signum, frame):
        stop_requested.signum = stop_requested.signum or signum
        stop_requested.set()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    status = 1
    try:
        status = run_cluster(tasks, args.distribution, args.restarts, args.timeout, say,
                             stop_requested)
    finally:
        # Training tasks first (a worker must not outlive its ps), then the ps tasks.
        if stop_requested.signum:
            stop_all([t for t in tasks if t.finishes], STOP_GRACE, stop_requested.signum)
        else:
            stop_all([t for t in tasks if t.finishes], grace=5.0 if status else 30.0)
        stop_all([t for t in tasks if not t.finishes], grace=10.0)
        for task in tasks:
            code = task.process.returncode if task.process else None
            say('%s (pid %s) %s%s' % (
                task.name, task.process.pid if task.process else '-',
                'not started' if code is None else describe_exit(code),
                ' (stopped by the launcher)' if not task.finishes and code is not None and
                code != 0 and status == 0 else ''))
    say('exit status %d' % status)
    return status


if __name__ == '__main__':
    sys.exit(main())
