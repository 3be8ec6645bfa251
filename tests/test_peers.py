"""peers.py: the gRPC probe and the held connection against a real TensorFlow server in a
child process (running, SIGSTOPped, killed), and the Watch's rule on a scripted clock and
probe (every case of the module docstring's rule, no real waiting)."""
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

import cluster_job
from helpers import ENV, ROOT
from mlimages.distributed import ports
from mlimages.distributed import peers
from mlimages.run import checkpoints

SERVER = '''
import sys
import tensorflow.compat.v1 as tf
server = tf.distribute.Server({"worker": ["127.0.0.1:%s" % sys.argv[1]]}, job_name="worker",
                              task_index=0, start=True)
print("up", flush=True)
server.join()
'''


@pytest.fixture
def server():
    """A real gRPC server of TensorFlow in a child process: (process, address)."""
    port = ports.free_ports(1)[0]
    child = subprocess.Popen([sys.executable, '-c', SERVER, str(port)], cwd=ROOT, env=ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout.readline().strip() == 'up'
    yield child, '127.0.0.1:%d' % port
    child.kill()
    child.wait()


def test_the_probe_tells_a_live_a_stopped_and_a_gone_server_apart(server):
    child, address = server
    assert peers.answer(address) == peers.ANSWERS
    child.send_signal(signal.SIGSTOP)
    cluster_job.stopped(child.pid)
    # The kernel completes the TCP handshake of a stopped process; only gRPC answers.
    assert peers.answer(address, timeout=1.0) == peers.SILENT
    child.send_signal(signal.SIGCONT)
    assert peers.answer(address) == peers.ANSWERS
    child.kill()
    child.wait()
    assert peers.answer(address) == peers.REFUSED


def test_a_held_connection_closes_when_the_peer_process_ends(server):
    child, address = server
    link = peers.Link(address)
    assert link.open() == peers.ANSWERS
    link.socket.settimeout(None)
    child.kill()
    child.wait()
    while link.read():  # frames the server sent before; then the close
        pass
    link.close()


def frame(kind, flags=0, payload=b''):
    return len(payload).to_bytes(3, 'big') + bytes([kind, flags]) + bytes(4) + payload


@pytest.mark.parametrize('goaway,gone', [(False, True), (True, False)])
def test_a_closed_connection_is_a_peer_gone_unless_the_server_dismissed_it(goaway, gone):
    """A stand-in gRPC server (SETTINGS, then a close): a process that ends closes without
    a word, a live server that drops a connection sends GOAWAY first."""
    listener = socket.create_server(('127.0.0.1', 0))
    closing = threading.Event()

    def serve():
        connection, _ = listener.accept()
        connection.recv(len(peers.PREFACE))
        connection.sendall(frame(peers.Link.SETTINGS))
        closing.wait()
        if goaway:
            connection.sendall(frame(peers.Link.GOAWAY, payload=bytes(8)))
        connection.close()
    threading.Thread(target=serve, daemon=True).start()
    address = '127.0.0.1:%d' % listener.getsockname()[1]
    watch = peers.Watch({'worker:0': address}, 300, True, print, print)
    watch._hold_links()
    assert 'worker:0' in watch._links
    closing.set()
    while 'worker:0' in watch._links:
        watch._read_links(1.0)
    listener.close()
    assert ('worker:0' in watch._gone) == gone


class Script(object):
    """A clock that only moves when told and a probe that answers what it is told."""

    def __init__(self):
        self.now, self.states, self.probed, self.logged, self.ended = 0.0, {}, [], [], []

    def clock(self):
        return self.now

    def probe(self, address):
        self.probed.append(address)
        return self.states.get(address, peers.ANSWERS)

    def watch(self, timeout=300, synchronous=True):
        return peers.Watch({'worker:0': 'h:1', 'chief:0': 'h:0'}, timeout, synchronous,
                           self.logged.append, self.ended.append, probe=self.probe,
                           clock=self.clock)


def test_between_steps_and_in_a_short_step_nothing_is_probed():
    s = Script()
    watch = s.watch()
    assert watch.check() is None  # not waiting
    watch.waiting()
    s.now += peers.TICK_SECONDS / 2
    assert watch.check() is None and s.probed == []
    watch.stepped(4)
    s.now += 1000
    assert watch.check() is None and s.probed == [] and s.ended == []


def test_a_silent_peer_ends_the_task_after_the_timeout_with_a_few_lines_meanwhile():
    s = Script()
    watch = s.watch(timeout=300)
    watch.waiting()
    watch.stepped(6)
    watch.waiting()
    s.states['h:1'] = peers.SILENT
    for _ in range(int(299 / peers.TICK_SECONDS)):
        s.now += peers.TICK_SECONDS
        assert watch.check() is None
    assert s.ended == []
    # At most one line a minute while it waits, each naming the peer and the bound.
    assert 4 <= len(s.logged) <= 6, s.logged
    assert all('worker:0 at h:1 does not answer' in l and '--peer_timeout=300' in l
               for l in s.logged), s.logged
    s.now += 2 * peers.TICK_SECONDS
    line = watch.check()
    assert s.ended == [line]
    assert line.startswith('worker:0 at h:1 stopped answering (no answer for 30')
    assert 'after global step 6; exiting with status 200 (retryable)' in line


def test_an_answer_resets_the_count_and_a_timeout_of_0_never_ends_on_silence():
    s = Script()
    watch = s.watch(timeout=60)
    watch.waiting()
    s.states['h:1'] = peers.SILENT
    s.now += 50
    watch.check()
    s.states['h:1'] = peers.ANSWERS
    s.now += 5
    watch.check()
    s.states['h:1'] = peers.SILENT
    s.now += 50
    assert watch.check() is None and s.ended == []  # 50 s since the answer, not 105
    forever = s.watch(timeout=0)
    forever.waiting()
    s.now += 10 ** 6
    assert forever.check() is None and s.ended == []


def test_a_peer_that_never_came_up_ends_the_task_before_the_first_step():
    s = Script()
    watch = s.watch(timeout=100)
    watch.waiting()
    s.states['h:0'] = peers.REFUSED
    s.now += peers.TICK_SECONDS
    watch.check()
    s.now += 100
    line = watch.check()
    assert line.startswith('chief:0 at h:0 refused connections for 100 s (gone, or never '
                           'started) before the first step'), line


def test_a_collective_peer_whose_connection_closed_ends_the_task_once_it_waits():
    s = Script()
    watch = s.watch()
    watch.gone('worker:0')
    assert watch.check() is None  # between steps: its own work first
    watch.waiting()
    line = watch.check()  # at once, not after a tick or a timeout
    assert s.ended == [line] and s.probed == []
    assert line.startswith('worker:0 at h:1 ended (its connection closed: killed or '
                           'restarted; a synchronous job cannot go on without it) before '
                           'the first step; exiting with status 200 (retryable)'), line


def test_a_long_step_with_every_peer_answering_is_reported_not_ended():
    s = Script()
    watch = s.watch(timeout=60)
    for step in range(5):
        watch.waiting()
        s.now += 0.5
        watch.stepped(step)
    watch.waiting()
    for _ in range(100):
        s.now += peers.TICK_SECONDS
        watch.check()
    assert s.ended == []
    assert s.logged and all('every task of the job answers' in l and
                            '(the median step: 0.50 s)' in l for l in s.logged), s.logged
    assert len(s.logged) <= 500 / 60 + 1


def test_a_wait_after_the_step_is_probed_and_named_in_the_lines():
    """A checkpoint save after the step completed (its hook after the watch's): probed
    after a tick, a line a minute naming it, the end after the timeout naming it."""
    s = Script()
    watch = s.watch(timeout=60)
    watch.waiting()
    watch.stepped(5)
    with watch.waiting_in('the checkpoint save at global step 5'):
        s.states['h:1'] = peers.SILENT
        assert watch.check() is None and s.probed == []  # not a tick yet
        for _ in range(int(59 / peers.TICK_SECONDS) + 1):
            s.now += peers.TICK_SECONDS
            assert watch.check() is None
        assert s.logged[0].startswith('waiting in the checkpoint save at global step 5 for '
                                      '5 s: worker:0 at h:1 does not answer for 0 s'), s.logged
        s.now += 2 * peers.TICK_SECONDS
        line = watch.check()
    assert s.ended == [line]
    assert line.startswith('worker:0 at h:1 stopped answering (no answer for 6'), line
    assert ' in the checkpoint save at global step 5; exiting with status 200 (retryable)' \
        in line, line


def test_a_wait_inside_the_step_names_the_innermost_and_leaving_it_starts_afresh():
    s = Script()
    watch = s.watch(timeout=60)
    watch.waiting()  # a ps chief: its saver's hook runs before the watch's
    with watch.waiting_in('the checkpoint save at global step 5'):
        s.states['h:1'] = peers.SILENT
        s.now += peers.TICK_SECONDS
        watch.check()
        assert s.logged[-1].startswith('waiting in the checkpoint save at global step 5 '), \
            s.logged
    s.states['h:1'] = peers.ANSWERS
    watch.stepped(5)
    watch.gone('worker:0')
    assert watch.check() is None  # its own work: not a wait
    with watch.waiting_in('the checkpoint save at the end of training'):
        line = watch.check()
    assert line.startswith('worker:0 at h:1 ended (its connection closed') and \
        ' in the checkpoint save at the end of training; ' in line, line


def test_a_stopped_watch_ends_nothing():
    s = Script()
    watch = s.watch()
    watch.gone('worker:0')
    watch.stop()
    with watch.waiting_in('the checkpoint save at global step 5'):
        assert watch.check() is None and s.ended == []


@pytest.mark.parametrize('me,distribution,watched', [
    ('chief:0', 'collective', ['worker:0', 'worker:1']),
    ('worker:1', 'collective', ['chief:0', 'worker:0']),
    ('chief:0', 'ps', ['ps:0', 'ps:1']),
    ('worker:0', 'ps', ['chief:0', 'ps:0', 'ps:1']),
    ('ps:1', 'ps', ['chief:0']),
])
def test_each_task_watches_the_tasks_it_cannot_go_on_without(me, distribution, watched):
    cluster = {'chief': ['c:0'], 'worker': ['w:0', 'w:1']}
    if distribution == 'ps':
        cluster['ps'] = ['p:0', 'p:1']
    assert sorted(peers.peers_to_watch(cluster, me, distribution)) == watched


# ------------------------------------------------------------ whole jobs, real processes

@pytest.mark.slow
@pytest.mark.parametrize('fault,target,restart', cluster_job.matrix('collective', {
    ('kill', 'worker:0', True), ('kill', 'chief:0', False), ('stop', 'worker:0', False)}))
def test_a_collective_job_ends_every_task_when_one_is_lost_and_its_rerun_ends_at_max_iter(
        dataset, tmp_path, fault, target, restart):
    """Two tasks held before their 7th step, then the target SIGKILLed or SIGSTOPped: the
    other task ends with status 200 naming it (at once for a killed one: its connection
    closed; after --peer_timeout=10 for a stopped one); rerun, the job ends at exactly
    --max_iter."""
    case = cluster_job.Case(dataset, str(tmp_path), 'collective', fault, target, restart,
                            max_iter=12)
    case.final_steps = (12,)
    other = 'worker:0' if target == 'chief:0' else 'chief:0'
    cluster_job.check_case(case, target, restart, [other])
    how = 'ended (its connection closed' if fault == 'kill' else 'stopped answering'
    assert how in case.errors[other][0], case.errors


@pytest.mark.slow
@pytest.mark.parametrize('fault,restart', [
    pytest.param('stop', False, id='stop-worker:0-not-restarted'),
    pytest.param('stop', True, marks=pytest.mark.matrix, id='stop-worker:0-restarted'),
    pytest.param('kill', False, marks=pytest.mark.matrix, id='kill-worker:0-not-restarted')])
def test_a_worker_lost_while_the_chief_saves_ends_it_and_the_rerun_resumes_from_a_complete_one(
        dataset, tmp_path, fault, restart):
    """The chief held before its checkpoint save of global step 5 (a save waits for every
    worker in a collective job), the worker SIGSTOPped or SIGKILLed, the save let go: the
    chief ends with status 200 naming the save -- after --peer_timeout=10 plus a tick or two
    for a stopped worker (the bound allows a loaded machine), at once for a killed one. The
    cut save leaves the `checkpoint` file naming step 0's complete checkpoint; rerun (-m
    matrix), the chief restores it and the job ends at --max_iter."""
    case = cluster_job.Case(dataset, str(tmp_path), 'collective', fault, 'worker:0', restart,
                            max_iter=12, at='save')
    case.final_steps = (12,)
    cluster_job.check_case(case, 'worker:0', restart, ['chief:0'])
    seconds, _ = case.exits['chief:0'][0]
    line = case.errors['chief:0'][0]
    assert ' in the checkpoint save at global step %d; ' % cluster_job.SAVE_STEP in line, line
    if fault == 'stop':
        assert 'stopped answering' in line and seconds < 10 + 60, (seconds, case.text)
    else:
        assert 'ended (its connection closed' in line, line
    if restart:
        assert [c for k, c in case.restored['chief:0'] if k == 2] == ['model.ckpt-0'], (
            case.restored, case.text)
    else:
        named, problem = checkpoints.state_checkpoint(case.model_dir)
        assert problem is None and named.endswith('model.ckpt-0'), (named, problem)
        assert checkpoints.damage(named) is None
