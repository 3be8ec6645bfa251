"""A hand-started train.py job on 127.0.0.1 under supervisors, for the lost-task tests and
their measurement: every task is `python tests/gated_train.py <flags> --worker_id=k`
(or `--ps_id=k`) with --worker_hosts/--ps_hosts, each under a Supervisor that reruns it
with the same command when it exits with a retryable status (128-255: what Kubernetes'
ExitCode policy and Slurm's --requeue restart), as long as restarts are allowed.

Every line a task writes is kept with its time (monotonic), so a test can wait for an event
(a task held at its gate, an exit) and measure from the fault to each exit, the lines
written while waiting, and the statuses.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from helpers import ENV, ROOT, cluster_run_flags, write_dataset
from mlimages.distributed import ports

GATED = os.path.join(ROOT, 'tests', 'gated_train.py')
RETRYABLE = range(128, 256)
# TensorFlow's own report when a peer's connection resets: three lines for each all-reduce
# in flight and for the abort, written once at the fault, as many as the step's all-reduces.
RUNTIME_ABORT = re.compile(r'ring_alg\.cc.*Aborting RingReduce|base_collective_executor\.cc'
                           r'.*StartAbort|^Additional GRPC error information|^:\{"created"')


def exit_status(returncode):
    """A shell's view of a Popen returncode: 128 + signal for a task killed by one."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor(object):
    """Runs `args` and, while `restart` is true and the exit is retryable, runs it again
    (at most `limit` times). exits: [(monotonic time, status)]; lines: [(time, incarnation,
    text)]."""

    def __init__(self, name, args, env, restart=True, limit=6):
        self.name, self.args, self.env = name, args, env
        self.restart, self.limit = restart, limit
        self.exits, self.lines, self.incarnation = [], [], 0
        self.process = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._supervise, daemon=True)
        self._thread.start()

    def _supervise(self):
        while True:
            with self._changed:
                self.incarnation += 1
                self.process = subprocess.Popen(
                    [sys.executable, GATED] + self.args, cwd=ROOT, env=self.env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                self._changed.notify_all()
            for line in self.process.stderr:
                with self._changed:
                    self.lines.append((time.monotonic(), self.incarnation, line.rstrip('\n')))
                    self._changed.notify_all()
            status = exit_status(self.process.wait())
            with self._changed:
                self.exits.append((time.monotonic(), status))
                self._changed.notify_all()
                if not (self.restart and status in RETRYABLE and len(self.exits) <= self.limit):
                    return

    def wait_for(self, predicate, timeout):
        """Blocks until predicate(self) is true (re-checked on every line and exit);
        returns its value, or None when `timeout` s pass first (a bound of the test, not a
        measurement: every event waited for comes from work left by construction)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = predicate(self)
                if value or time.monotonic() > deadline:
                    return value
                self._changed.wait(min(5.0, max(0.01, deadline - time.monotonic())))

    def line_matching(self, pattern, incarnation=None):
        for t, k, text in self.lines:
            if (incarnation is None or k == incarnation) and re.search(pattern, text):
                return t, text
        return None

    def done(self):
        return not self._thread.is_alive()

    def join(self, timeout):
        self._thread.join(timeout)
        return self.done()

    def kill(self):
        self.restart = False
        if self.process and self.process.poll() is None:
            self.process.kill()


class Job(object):
    """A chief and `workers - 1` workers (and `ps` parameter servers) of one model_dir, all
    held before their local step `hold` until release() (with save_hold, the chief instead
    before its first checkpoint save of a global step >= save_hold). extra: more train.py
    flags; env: the tasks' environment."""

    def __init__(self, data, model_dir, gate_dir, max_iter, workers=2, ps=0, hold=7,
                 restart=True, extra=(), env=ENV, save_hold=None, snapshot=100):
        addresses = ['127.0.0.1:%d' % p for p in ports.free_ports(workers + ps)]
        self.gate = os.path.join(gate_dir, 'gate')
        env = dict(env, TRAIN_TEST_GATE='%d:%s' % (hold, self.gate))
        chief_env = env if not save_hold else dict(
            {k: v for k, v in env.items() if k != 'TRAIN_TEST_GATE'},
            TRAIN_TEST_SAVE_GATE='%d:%s' % (save_hold, self.gate))
        base = cluster_run_flags(data, model_dir, max_iter, snapshot) + [
            '--worker_num=%d' % workers, '--worker_hosts=' + ','.join(addresses[:workers])
        ] + list(extra)
        if ps:
            base += ['--ps_hosts=' + ','.join(addresses[workers:]), '--distribution=ps']
        self.addresses = addresses
        self.tasks = {}
        for k in range(ps):
            self.tasks['ps:%d' % k] = Supervisor('ps:%d' % k, base + ['--ps_id=%d' % k],
                                                 env, restart)
        for k in range(workers):
            name = 'chief:0' if k == 0 else 'worker:%d' % (k - 1)
            self.tasks[name] = Supervisor(name, base + ['--worker_id=%d' % k],
                                          chief_env if k == 0 else env, restart)

    def release(self):
        open(self.gate, 'w').close()

    def kill_all(self):
        for task in self.tasks.values():
            task.kill()

    def text(self, last=30):
        return '\n'.join('[%s#%d] %s' % (name, k, line) for name, task in self.tasks.items()
                         for _, k, line in task.lines[-last:])


def saved_steps(model_dir):
    """The global steps of the checkpoints in model_dir, sorted."""
    return sorted(int(m.group(1)) for m in (re.match(r'model\.ckpt-(\d+)\.index$', f)
                                            for f in os.listdir(model_dir)) if m)


def stopped(pid):
    """Waits until the kernel shows the process stopped (the signal is asynchronous)."""
    while open('/proc/%d/stat' % pid).read().rsplit(')', 1)[1].split()[0] != 'T':
        time.sleep(0.01)


def held(task):
    return task.line_matching(r'test gate: holding before local step')


def held_in_save(task):
    return task.line_matching(r'test gate: holding before the checkpoint save')


# A save case: the chief held before its first save of a global step >= SAVE_STEP, of
# --snapshot=SAVE_STEP (the fault lands in that save).
SAVE_STEP = 5


class Case(object):
    """One lost-task case run to its end: a job of `mode` (collective: chief + 1 worker;
    ps: chief + 1 worker + 1 ps), `fault` (SIGKILL or SIGSTOP) sent to `target` once every
    training task is held at its gate (at='save': once the chief is held before its
    checkpoint save of SAVE_STEP), then the gates opened. restart: the supervisors
    rerun retryable exits; a SIGSTOPped target is SIGKILLed (as a liveness probe would)
    once another task has exited, and so restarted too. Afterwards: exits[name] =
    [(seconds after the fault, status)], waiting_lines[name] = lines a task wrote after the
    fault up to its first exit, abort_lines[name] = those of them that are TensorFlow's report
    of the all-reduces in flight (all_reduces[name] = the all-reduces its first run logged
    building its graph), checkpoints = the global steps saved, restored[name] = the
    checkpoints each run of a task restored, lines = every line."""

    def __init__(self, data, root, mode, fault, target, restart, max_iter, peer_timeout=10,
                 bound=600, at='step'):
        model_dir = os.path.join(root, 'model')
        self.max_iter, self.model_dir = max_iter, model_dir
        job = Job(data, model_dir, root, max_iter, ps=1 if mode == 'ps' else 0,
                  hold=7 if mode == 'collective' else 3, restart=restart,
                  extra=[] if peer_timeout is None else ['--peer_timeout=%d' % peer_timeout],
                  save_hold=SAVE_STEP if at == 'save' else None,
                  snapshot=SAVE_STEP if at == 'save' else 100)
        victim = job.tasks[target]
        try:
            trainers = [t for n, t in job.tasks.items() if not n.startswith('ps')]
            if at == 'save':  # a collective worker waits for the chief in its step 6
                assert job.tasks['chief:0'].wait_for(held_in_save, bound), job.text()
                trainers = trainers[1:] if mode == 'ps' else []
            assert all(t.wait_for(held, bound) for t in trainers), job.text()
            others = [t for t in job.tasks.values() if t is not victim]
            pid = victim.process.pid
            os.kill(pid, signal.SIGKILL if fault == 'kill' else signal.SIGSTOP)
            start = time.monotonic()
            if fault == 'stop':
                stopped(pid)
            job.release()
            self.saved_at_fault = saved_steps(model_dir)
            self.step_at_fault = max([int(m.group(1)) for t in job.tasks.values()
                                      for _, _, line in t.lines
                                      for m in [re.search(r'\bstep (\d+): ', line)] if m] or [0])
            if fault == 'stop' and restart:
                any_exit = lambda _: any(t.exits for t in others)
                if victim.wait_for(any_exit, bound):
                    os.kill(pid, signal.SIGKILL)  # a liveness probe's kill: restarted
            deadline = start + bound
            for task in others:  # a task still running at the bound has no exit (asserted)
                task.join(max(0.0, deadline - time.monotonic()))
            if fault == 'stop' and not restart:
                victim.kill()  # it never ends by itself: stopped
            victim.join(max(1.0, deadline - time.monotonic()))
            self.seconds = time.monotonic() - start
        finally:
            job.kill_all()
        self.exits = {n: [(t - start, s) for t, s in task.exits]
                      for n, task in job.tasks.items()}
        waiting = {n: [line for t, _, line in task.lines
                       if t > start and (not task.exits or t <= task.exits[0][0])]
                   for n, task in job.tasks.items()}
        # Not counting the interval lines of a task that trains on (ps mode), nor the
        # runtime's report of the collectives in flight at the fault (counted apart).
        self.waiting_lines = {
            n: len([1 for line in lines
                    if not re.search(r'\bstep \d+: ', line) and not RUNTIME_ABORT.search(line)])
            for n, lines in waiting.items()}
        self.abort_lines = {n: len([1 for line in lines if RUNTIME_ABORT.search(line)])
                            for n, lines in waiting.items()}
        self.all_reduces = {n: len([1 for _, k, line in task.lines
                                    if k == 1 and 'Collective all_reduce tensors' in line])
                            for n, task in job.tasks.items()}
        self.errors = {n: [line for _, _, line in task.lines if line.startswith('train.py:')]
                       for n, task in job.tasks.items()}
        self.restored = {n: [(k, m.group(1)) for _, k, line in task.lines
                             for m in [re.search(r'Restoring parameters from .*?([^/]+)$',
                                                 line)] if m]
                         for n, task in job.tasks.items()}
        self.checkpoints = saved_steps(model_dir)
        self.text = job.text()


def matrix(mode, cases):
    """The fault x target x restart cases of `mode`; those not in `cases` (the ones the
    suite runs) are marked `matrix` (pytest -m matrix runs all)."""
    params = []
    for fault in ('kill', 'stop'):
        for target in ('worker:0', 'chief:0') + (('ps:0',) if mode == 'ps' else ()):
            for restart in (False, True):
                marks = [] if (fault, target, restart) in cases else [pytest.mark.matrix]
                params.append(pytest.param(fault, target, restart, marks=marks,
                                           id='%s-%s-%s' % (fault, target, 'restarted'
                                                            if restart else 'not-restarted')))
    return params


def check_case(case, target, restart, lost_names):
    """What every case must show: within the bound every task ended; with restarts the
    job ended at --max_iter, every task's last exit 0; without, each task that lost
    `target` ended with its one line and status 200; never a flood of lines (TensorFlow's
    report of the all-reduces in flight at the fault: at most three lines each)."""
    victim = case.exits[target]
    assert victim and victim[0][1] == 137, case.text  # SIGKILL (a stopped one is killed)
    for name, exits in case.exits.items():
        assert exits, (name, case.text)
        assert case.waiting_lines[name] <= 30, (name, case.waiting_lines, case.text)
        assert case.abort_lines[name] <= 3 * (case.all_reduces[name] + 1), (
            name, case.abort_lines, case.all_reduces, case.text)
        assert 'Traceback' not in ' '.join(case.errors[name]), case.text
    for name in lost_names:
        first = [s for _, s in case.exits[name]][0]
        assert first == 200, (name, case.exits, case.text)
        line = case.errors[name][0]
        # A worker's lines add its worker id (the chief is 0): Task.label.
        label = target if not target.startswith('worker:') else '%s (worker id %d)' % (
            target, int(target.split(':')[1]) + 1)
        assert line.startswith('train.py: error: %s at 127.0.0.1:' % label) and \
            line.endswith('exiting with status 200 (retryable): rerun every task of the job '
                          'with the same command (supervisors restart this status) to resume '
                          'from the last checkpoint'), line
    if restart:
        assert all(exits[-1][1] == 0 for exits in case.exits.values()), (case.exits, case.text)
        assert case.checkpoints[-1] in case.final_steps, (case.checkpoints, case.text)
    else:
        for name, exits in case.exits.items():
            if name != target:
                assert [s for _, s in exits] in ([0], [200]), (name, case.exits, case.text)


def table_row(case, mode, fault, target, restart):
    """One markdown row of the lost-task table: each task's exits (seconds after the fault,
    status; '-' for a task still running at the bound), the lines each wrote while waiting,
    the global step at the fault, the checkpoint then, and the last one."""
    exits = '; '.join('%s %s' % (name, ', '.join('%.0f s: %d' % e for e in ex) or '-')
                      for name, ex in sorted(case.exits.items()))
    lines = ', '.join('%s %d' % (n, k) + (' (+%d runtime abort report)' % case.abort_lines[n]
                                          if case.abort_lines[n] else '')
                      for n, k in sorted(case.waiting_lines.items()))
    resumed = case.saved_at_fault[-1] if case.saved_at_fault else None
    return '| %s | %s %s | %s | %s | %s | %s | %s | %s |' % (
        mode, fault, target, 'yes' if restart else 'no', exits, lines, case.step_at_fault,
        resumed, case.checkpoints[-1] if case.checkpoints else None)


def main(argv):
    """python tests/cluster_job.py [collective|ps] [--peer_timeout S|none] [--bound S]
    [--at step|save] [--case fault,target,restart ...]: runs the lost-task cases and prints
    the table."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument('modes', nargs='*', default=['collective', 'ps'])
    parser.add_argument('--peer_timeout', default='10')
    parser.add_argument('--bound', type=float, default=600)
    parser.add_argument('--at', choices=('step', 'save'), default='step',
                        help='the fault lands in a step or in the chief\'s checkpoint save')
    parser.add_argument('--case', action='append', default=[],
                        help='fault,target,restart e.g. kill,worker:0,1 (default: all)')
    args = parser.parse_args(argv)
    timeout = None if args.peer_timeout == 'none' else int(args.peer_timeout)
    root = tempfile.mkdtemp(prefix='lost-tasks-')
    data = write_dataset(os.path.join(root, 'ds'))
    print('| mode | fault | restarted | exits (s after the fault: status) | lines while '
          'waiting | step at fault | checkpoint at fault | last checkpoint |')
    print('|---|---|---|---|---|---|---|---|')
    for mode in args.modes:
        for p in matrix(mode, set()):
            fault, target, restart = p.values
            key = '%s,%s,%d' % (fault, target, restart)
            if args.case and key not in args.case:
                continue
            work = tempfile.mkdtemp(dir=root)
            case = Case(data, work, mode, fault, target, restart,
                        max_iter=12 if mode == 'collective' else 30, peer_timeout=timeout,
                        bound=args.bound, at=args.at)
            print(table_row(case, mode, fault, target, restart), flush=True)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main(sys.argv[1:])
