"""Whether the other tasks of a job still answer, and the bound on waiting for them.

Why this module exists: TensorFlow waits for a lost peer without end. In a collective job
every step is an all-reduce of all the training tasks; in a ps job every step reads the
variables on the ps tasks, and a worker's first session waits for the chief's
initialisation. A SIGSTOPped peer (a hung host, a stuck NFS read) leaves the others silent
forever; a SIGKILLed one leaves them waiting in the step or re-creating sessions, and in a
collective job the survivors can never go on with a restarted peer (their collective state
is aborted). Supervisors (Kubernetes' ExitCode policy, Slurm's --requeue, the launcher)
restart only a task that exits, so every task must end by itself.

The probe (`answer`): every task runs a gRPC server, and a live gRPC server answers the
HTTP/2 connection preface with its SETTINGS frame from gRPC's own threads within
milliseconds, whatever the process computes -- a checkpoint save, the graph build, an
evaluation. So a refused connection is a task that is gone (or not started yet), a
connection without an answer within PROBE_SECONDS a task that is stopped or a host that
hangs, and a long step alone is never taken for a lost peer. In a collective job the watch
also holds one such connection to each peer (`Link`): it closes when the peer's process
ends, so a peer that died is seen at once, even when it is already restarted on its port
(its old collective state is what the others still hold).

The rule (`Watch`), while this task waits for the job -- in a step, for its session, or in
any other run that reads the ps tasks' variables or runs collective ops, named by a
`waiting_in` context (a checkpoint save: in a collective job it waits for every worker, in
a ps job it reads the ps tasks):

    a peer is lost  = collective: its held connection closed (killed, crashed, restarted):
                      the survivors cannot go on with it, every task must restart
                    or it has refused or not answered every probe for --peer_timeout
                      seconds (probed every TICK_SECONDS once the wait has lasted a
                      tick; a peer that never comes up at the start of a job included)

A lost peer ends this task: one line naming it and what this task waited in, exit status
PEER_LOST_STATUS (200, retryable: 128-255); the chief's last checkpoint is where the rerun
resumes (a save cut by the exit is never named by the `checkpoint` file: TensorFlow writes
it after the checkpoint's files). While it waits the task writes one line a minute at most.
0 for --peer_timeout waits forever for a silent peer (TensorFlow's behaviour) but still
ends on a closed connection. An evaluation (an evaluator task's; --mode=train_and_eval
runs in no cluster) and --export_dir's export read checkpoint files in a local session:
they are no wait on the job.
"""
import contextlib
import os
import select
import socket
import statistics
import sys
import threading
import time

from mlimages.errors import PEER_LOST_STATUS

TICK_SECONDS = 5.0
PROBE_SECONDS = 5.0
REPORT_SECONDS = 60.0
# HTTP/2's client connection preface, then an empty SETTINGS frame (RFC 7540, 3.5 and 6.5).
PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + b'\x00\x00\x00\x04\x00\x00\x00\x00\x00'
ANSWERS, REFUSED, SILENT = 'answers', 'refused', 'silent'


def answer(address, timeout=PROBE_SECONDS):
    """How the gRPC server at host:port answers a new connection: ANSWERS (its SETTINGS
    frame came), REFUSED (nothing listens, or the host is unreachable) or SILENT (no
    answer within `timeout` s: the process is stopped or the host hangs)."""
    link = Link(address)
    state = link.open(timeout)
    link.close()
    return state


class Link(object):
    """One HTTP/2 connection to a peer's gRPC server, held open: it closes when the peer's
    process ends, so a peer that died -- even one already restarted on the same port --
    is seen at once (`closed`). It answers the server's SETTINGS and PINGs, as a client
    must, so the server keeps it."""

    SETTINGS, PING, GOAWAY, ACK = 4, 6, 7, 1

    def __init__(self, address):
        host, port = address.rsplit(':', 1)
        self._where = (host.strip('[]'), int(port))
        self.socket = None
        self._buffer = b''
        # The server said it closes this connection (GOAWAY): its process lives on. A
        # process that ends closes without one.
        self.dismissed = False

    def open(self, timeout=PROBE_SECONDS):
        """Connects and waits for the server's first frame: ANSWERS, REFUSED or SILENT."""
        try:
            self.socket = socket.create_connection(self._where, timeout=timeout)
            self.socket.sendall(PREFACE)
            if self.read():
                return ANSWERS
            self.close()
            return REFUSED
        except socket.timeout:
            self.close()
            return SILENT
        except OSError:
            self.close()
            return REFUSED

    def read(self):
        """Reads what the server sent (answering SETTINGS and PINGs); False once the
        connection is closed."""
        try:
            data = self.socket.recv(4096)
        except socket.timeout:
            raise
        except OSError:
            return False
        if not data:
            return False
        self._buffer += data
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], 'big')
            if len(self._buffer) < 9 + length:
                break
            kind, flags = self._buffer[3], self._buffer[4]
            payload = self._buffer[9:9 + length]
            self._buffer = self._buffer[9 + length:]
            if kind == self.SETTINGS and not flags & self.ACK:
                self._send(self.SETTINGS, self.ACK, b'')
            elif kind == self.PING and not flags & self.ACK:
                self._send(self.PING, self.ACK, payload)
            elif kind == self.GOAWAY:
                self.dismissed = True
        return True

    def _send(self, kind, flags, payload):
        self.socket.sendall(len(payload).to_bytes(3, 'big') + bytes([kind, flags]) +
                            b'\x00\x00\x00\x00' + payload)

    def close(self):
        if self.socket is not None:
            self.socket.close()
            self.socket = None


def peers_to_watch(cluster, me, distribution):
    """{task name: address} of the tasks this one cannot go on without. collective: every
    other training task. ps, a training task: the ps tasks (and, for a worker, the chief,
    which initialises the variables). A ps task: the chief."""
    def tasks(types):
        return {'%s:%d' % (t, i): a for t in types for i, a in enumerate(cluster.get(t, []))}
    if distribution == 'collective':
        found = tasks(('chief', 'worker'))
    elif me.startswith('ps:'):
        found = tasks(('chief',))
    else:
        found = tasks(('ps',) if me.startswith('chief:') else ('ps', 'chief'))
    found.pop(me, None)
    return found


def for_task(plan, timeout, program, info, warn):
    """The Watch of a task of a cluster job (distribute.plan's; None for a single process
    and an evaluator), its peers announced with info(); it logs with warn() and ends the
    task (exit_lost) when a task it cannot go on without is lost."""
    if plan.task is None or plan.evaluates or plan.distribution not in ('ps', 'collective'):
        return None
    # Named in its lines as the log names tasks (Task.label: with the worker id).
    watched = {plan.task.label_of(name): address for name, address in
               peers_to_watch(plan.task.cluster, plan.task.name, plan.distribution).items()}
    info('%s watches %s (a task that does not answer for --peer_timeout=%s ends this one '
         'with exit status %d, retryable)' % (
             plan.task.label, ', '.join(sorted(watched)) or 'no other task',
             '%d s' % timeout if timeout else '0 (no bound)', PEER_LOST_STATUS))
    return Watch(watched, timeout, plan.distribution == 'collective', log=warn,
                 lost=lambda line: exit_lost(program, line),
                 activity='serving the variables' if plan.task.type == 'ps' else None)


def lost_line(name, address, state, step, waited, activity=None, within=None):
    """The one line of a task that ends because `name` was lost: its process ended (state
    'ended': the connection this task held closed), or it refused or did not answer
    (REFUSED, SILENT) for `waited` s; within: the wait it ended in (Watch.waiting_in), else
    the step after `step`."""
    after = ('while ' + activity if activity else 'in ' + within if within else
             'after global step %s' % step if step is not None else 'before the first step')
    how = {'ended': 'ended (its connection closed: killed or restarted; a synchronous job '
                    'cannot go on without it)',
           REFUSED: 'refused connections for %.0f s (gone, or never started)' % waited,
           SILENT: 'stopped answering (no answer for %.0f s: stopped or hung)' % waited}[state]
    return ('%s at %s %s %s; exiting with status %d (retryable): rerun every task of the '
            'job with the same command (supervisors restart this status) to resume from '
            'the last checkpoint' % (name, address, how, after, PEER_LOST_STATUS))


def exit_lost(program, line):
    """Ends the process from the watch's thread: the main thread is blocked inside
    TensorFlow, where no exception reaches it."""
    import logging
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.write('%s: error: %s\n' % (program, line))
    sys.stderr.flush()
    os._exit(PEER_LOST_STATUS)


class Watch(object):
    """The rule of the module docstring in a daemon thread. peers: {name: address};
    timeout: --peer_timeout (0: no bound on silence); synchronous: a collective job (a peer
    whose held connection closed is lost at once); log(text): a log line; lost(line): what
    ends the task (exit_lost). probe, clock: seams for tests."""

    def __init__(self, peers, timeout, synchronous, log, lost, probe=answer,
                 clock=time.monotonic, activity=None):
        self.peers, self.timeout, self.synchronous = dict(peers), timeout, synchronous
        self._activity = activity  # what the task waits in, for the log (default: a step)
        self._log, self._lost, self._probe, self._clock = log, lost, probe, clock
        self._lock = threading.Lock()
        self._waiting_since = None  # in a step or session creation since then
        self._waits = []            # [what, since] of the waiting_in contexts, innermost last
        self._step = None           # the global step after the last completed step
        self._durations = []        # of the recent steps, for the median
        self._failing = {}          # name -> (first failed probe time, state)
        self._gone = {}             # name -> when its held connection closed
        self._links = {}            # name -> Link (synchronous only)
        self._reported = None
        self._thread = None
        self._stop = threading.Event()

    # -- what the training loop tells the watch
    def start(self):
        if self._thread is None and self.peers:
            self._thread = threading.Thread(target=self._run, name='peer-watch', daemon=True)
            self._thread.start()

    def waiting(self):
        """This task now waits for the job (a step, a session)."""
        with self._lock:
            self._waiting_since = self._clock()

    def stepped(self, global_step):
        """A step completed; the task does its own work until the next waiting()."""
        with self._lock:
            if self._waiting_since is not None:
                self._durations = (self._durations + [self._clock() - self._waiting_since])[-100:]
            self._waiting_since, self._step = None, global_step
            self._failing.clear()

    @contextlib.contextmanager
    def waiting_in(self, what):
        """This task waits for the job in `what` ('the checkpoint save at global step 5'),
        whatever the step's state: a run of the hooks after a step or at the end of the
        session. Left normally, it answered: the count of failed probes starts afresh."""
        entry = [what, self._clock()]
        with self._lock:
            self._waits.append(entry)
        try:
            yield
        finally:
            with self._lock:
                self._waits = [w for w in self._waits if w is not entry]
        with self._lock:
            self._failing.clear()

    def _current(self):
        """(what, since) of the innermost wait (what None: the step or the session), or
        None while the task does its own work. Called with the lock held."""
        if self._waits:
            return tuple(self._waits[-1])
        return None if self._waiting_since is None else (None, self._waiting_since)

    def stop(self):
        with self._lock:
            self._waiting_since = None
        self._stop.set()

    def median_step(self):
        with self._lock:
            return statistics.median(self._durations) if self._durations else None

    # -- the thread
    def _run(self):
        deadline = self._clock()
        while not self._stop.is_set():
            if self.synchronous:
                self._hold_links()
                self._read_links(max(0.0, deadline - self._clock()))
            else:
                self._stop.wait(max(0.0, deadline - self._clock()))
            if self._clock() >= deadline:
                deadline = self._clock() + TICK_SECONDS
            if not self._stop.is_set():
                self.check()

    def _hold_links(self):
        """A held connection to every peer that answers and has none yet."""
        for name, address in sorted(self.peers.items()):
            if name not in self._links and name not in self._gone:
                link = Link(address)
                if link.open() == ANSWERS:
                    self._links[name] = link

    def _read_links(self, timeout):
        """Waits up to `timeout` s for what the held connections bring; a closed one is a
        peer gone."""
        links = {link.socket: name for name, link in self._links.items()}
        if not links:
            self._stop.wait(timeout)
            return
        try:
            readable, _, _ = select.select(list(links), [], [], timeout)
        except (OSError, ValueError):
            readable = list(links)
        for sock in readable:
            name = links[sock]
            try:
                alive = self._links[name].read()
            except socket.timeout:
                alive = True
            if not alive:
                link = self._links.pop(name)
                link.close()
                if not link.dismissed:  # else held anew on the next round
                    self.gone(name)

    def gone(self, name):
        """Marks a peer's process as ended (what a closed held connection says)."""
        with self._lock:
            self._gone.setdefault(name, self._clock())

    def check(self):
        """One tick: ends the task on a lost peer (returns its line); probes the peers
        once this task has waited more than a tick; logs at most one line a minute."""
        with self._lock:
            wait, step, gone = self._current(), self._step, dict(self._gone)
        if wait is None or self._stop.is_set():
            return None
        within, since = wait
        now = self._clock()
        for name in sorted(gone):
            line = lost_line(name, self.peers[name], 'ended', step, now - gone[name],
                             self._activity, within)
            self._lost(line)
            return line
        if now - since < TICK_SECONDS:
            return None
        states = {name: self._probe(address) for name, address in sorted(self.peers.items())}
        with self._lock:
            if self._current() != wait:  # the wait ended meanwhile
                return None
            for name, state in states.items():
                if state == ANSWERS:
                    self._failing.pop(name, None)
                else:
                    self._failing[name] = (self._failing.get(name, (now,))[0], state)
            failing = dict(self._failing)
        for name, (first, state) in sorted(failing.items()):
            if self.timeout and now - first >= self.timeout:
                line = lost_line(name, self.peers[name], state, step, now - first,
                                 self._activity, within)
                self._lost(line)
                return line
        self._report(now, now - since, failing, step, within)
        return None

    def _report(self, now, waited, failing, step, within=None):
        if self._reported is not None and now - self._reported < REPORT_SECONDS:
            return
        if not failing and waited < REPORT_SECONDS:
            return
        self._reported = now
        at = self._activity or ('waiting in ' + within if within else
                                'waiting in global step %s' % (step + 1) if step is not None
                                else 'waiting in the first step')
        if failing:
            name, (first, state) = sorted(failing.items())[0]
            bound = ('this task exits if it does not answer for --peer_timeout=%g s' %
                     self.timeout if self.timeout else 'no bound: --peer_timeout=0')
            self._log('%s for %.0f s: %s at %s %s for %.0f s (%s)' % (
                at, waited, name, self.peers[name],
                'refuses connections' if state == REFUSED else 'does not answer',
                now - first, bound))
        else:
            median = self.median_step()
            self._log('%s for %.0f s%s; every task of the job answers (a slow task, a long '
                      'checkpoint save)' % (
                          at, waited, ' (the median step: %.2f s)' % median if median else ''))
