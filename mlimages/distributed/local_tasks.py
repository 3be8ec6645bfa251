"""The processes of a local cluster (local_cluster): each task a train.py process whose output
is streamed with a prefix, started again with the same TF_CONFIG when it may be, and the
loop that runs them to the end."""
import ctypes
import ctypes.util
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from mlimages import errors

PR_SET_PDEATHSIG = 1
# train.py's retryable exit statuses, as a kill is: 143 / 130 stopped by SIGTERM / SIGINT,
# 200 a lost peer (what Kubernetes' ExitCode policy restarts).
RETRYABLE = range(128, 256)
# Seconds the ps tasks get to exit by themselves after the chief and the workers finished.
PS_GRACE = 30.0


def die_with_parent_preexec():
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


def pinned_preexec(preexec, cpus):
    """preexec, then (in the child, before train.py starts) affinity to `cpus` if given."""
    if not cpus:
        return preexec

    def both():
        if preexec:
            preexec()
        os.sched_setaffinity(0, cpus)
    return both


def loopback_up():
    """Brings up `lo` in this (new) network namespace: SIOCGIFFLAGS, then SIOCSIFFLAGS with
    IFF_UP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack('16sh', b'lo', 0)
        flags = struct.unpack('16sh', fcntl.ioctl(s, 0x8913, request))[1]
        fcntl.ioctl(s, 0x8914, struct.pack('16sh', b'lo', flags | 0x1))


class Console(object):
    """Whole lines to one stream from several threads (the tasks' readers, the launcher)."""

    def __init__(self, out, program):
        self._out, self._lock = out, threading.Lock()
        self._program = program

    def line(self, prefix, text):
        with self._lock:
            self._out.write('%s %s\n' % (prefix, text))
            self._out.flush()

    def say(self, text):
        """A line of the launcher's own."""
        self.line(self._program + ':', text)


DIE_WITH_PARENT = die_with_parent_preexec()


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
            preexec_fn=pinned_preexec(DIE_WITH_PARENT, self.cpus))
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


def exit_text(code):
    return 'killed by signal %d' % -code if code < 0 else 'exited with status %d' % code


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
        if not _restarted_the_failed(tasks, trainers, distribution, restarts, say):
            return 1
        if all(t.poll() == 0 for t in finishing):
            say('the chief and every worker%s finished in %.1f s' % (
                '' if finishing == trainers else ' and the evaluator', time.time() - start))
            _wait_for_the_ps_tasks([t for t in tasks if not t.finishes])
            return 0
    say('%s; forwarding it to every training task (the chief saves a checkpoint), then '
        'stopping the ps tasks' % signal.Signals(stop_requested.signum).name)
    return 128 + stop_requested.signum


def _restarted_the_failed(tasks, trainers, distribution, restarts, say):
    """Whether every task that failed was restarted (False: one may not be, after saying
    so: the job fails)."""
    died = [t for t in tasks if t.poll() is not None and t.returncode != 0]
    # A task that ended because its peer was lost is named after the peer's own exit.
    died.sort(key=lambda t: t.returncode == errors.PEER_LOST_STATUS)
    for task in died:
        if task.poll() is None:  # restarted already, with the others of its job
            continue
        task.flush()
        killed = task.returncode < 0 or task.returncode in RETRYABLE
        if not (killed and task.restarts < restarts):
            say('%s %s; stopping every task' % (task.name, exit_text(task.returncode)))
            return False
        task.restarts += 1
        if distribution == 'collective' and task.trains:
            # The others wait for it in their all-reduce: restart them all.
            say('%s %s; restarting every training task with the same TF_CONFIG '
                '(restart %d of %d)' % (task.name, exit_text(task.returncode),
                                        task.restarts, restarts))
            stop_all(trainers, grace=5.0)
            for other in trainers:
                other.start()
        else:
            say('%s %s; restarting it with the same TF_CONFIG (restart %d of %d)'
                % (task.name, exit_text(task.returncode), task.restarts, restarts))
            task.start()
    return True


def _wait_for_the_ps_tasks(serving):
    """Up to PS_GRACE s for the ps tasks to exit by themselves."""
    deadline = time.time() + PS_GRACE
    while any(t.poll() is None for t in serving) and time.time() < deadline:
        time.sleep(0.2)
