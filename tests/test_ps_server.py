"""ps_server.py: a real ps server in this process takes the training tasks' reports
through its queue and ends once the chief has reported and every other worker has
reported or no longer answers."""
import re
import threading

import pytest
import tensorflow.compat.v1 as tf

import cluster_job
from mlimages.distributed import ports
from mlimages.distributed import ps_server
import train  # noqa: F401 (graph mode, as train.py runs)


class Chief(object):
    """A stand-in for the watch of the chief: records what serve() tells it."""

    def __init__(self):
        self.calls = []

    def start(self):
        self.calls.append('start')

    def waiting(self):
        self.calls.append('waiting')

    def stop(self):
        self.calls.append('stop')


def serve_in_thread(cluster):
    server = tf.distribute.Server(tf.train.ClusterSpec({'ps': cluster['ps']}), job_name='ps',
                                  task_index=0)
    lines, watch = [], Chief()
    thread = threading.Thread(target=ps_server.serve,
                              args=(server, cluster, 0, watch, lines.append), daemon=True)
    thread.start()
    return thread, lines, watch


def cluster_of(worker_address):
    chief, ps = ports.free_ports(2)
    return {'chief': ['127.0.0.1:%d' % chief], 'worker': [worker_address],
            'ps': ['127.0.0.1:%d' % ps]}


def test_the_ps_ends_when_the_chief_and_the_worker_have_reported():
    worker = '127.0.0.1:%d' % ports.free_ports(1)[0]
    cluster = cluster_of(worker)
    thread, lines, watch = serve_in_thread(cluster)
    ps_server.report_done(cluster, 1, lines.append)  # the worker first: not yet the end
    thread.join(2 * ps_server.TAKE_SECONDS)
    assert thread.is_alive() and not lines
    ps_server.report_done(cluster, 0, lines.append)
    thread.join(60)
    assert not thread.is_alive()
    assert lines == ['ps:0: the chief has finished; every worker reported done; exiting']
    assert watch.calls == ['start', 'waiting', 'stop']  # the chief's exit is no loss


def test_a_worker_that_is_gone_does_not_hold_the_ps():
    # Nothing listens at the worker's address: it refuses, as a killed worker does.
    cluster = cluster_of('127.0.0.1:%d' % ports.free_ports(1)[0])
    thread, lines, _ = serve_in_thread(cluster)
    ps_server.report_done(cluster, 0, lines.append)
    thread.join(60)
    assert not thread.is_alive()
    assert lines == ['ps:0: the chief has finished; not waiting for worker:0 (gone or not '
                     'answering); exiting']


def test_a_report_to_a_ps_that_is_gone_is_skipped():
    cluster = cluster_of('127.0.0.1:1')
    lines = []
    ps_server.report_done(cluster, 0, lines.append)  # no ps listens: nothing to tell
    assert lines == []


@pytest.mark.parametrize('cluster,expected', [
    ({'chief': ['c'], 'worker': ['w0', 'w1']}, {0: ('chief:0', 'c'), 1: ('worker:0', 'w0'),
                                                2: ('worker:1', 'w1')}),
    ({'chief': ['c']}, {0: ('chief:0', 'c')}),
])
def test_worker_ids_follow_the_clusters_order(cluster, expected):
    assert ps_server.workers(cluster) == expected


# ------------------------------------------------------------ whole jobs, real processes

# What the other tasks do when `target` is lost and not restarted: the tasks that end with
# status 200 naming it (the rest finish with 0).
LOST_BY = {'worker:0': [], 'chief:0': ['ps:0'], 'ps:0': ['chief:0', 'worker:0']}


@pytest.mark.slow
@pytest.mark.parametrize('fault,target,restart', cluster_job.matrix('ps', {
    ('kill', 'worker:0', False), ('stop', 'chief:0', False), ('stop', 'ps:0', True)}))
def test_a_ps_job_ends_every_task_when_one_is_lost_and_its_rerun_ends_at_max_iter(
        dataset, tmp_path, fault, target, restart):
    """Chief, worker and ps, the two training tasks held before their 3rd step, then the
    target SIGKILLed or SIGSTOPped. A lost worker holds nobody; a lost chief ends the ps
    (200) while the worker finishes; a lost ps ends the chief and the worker (200) after
    --peer_timeout=10; restarted, every task's last exit is 0 and the job ends at
    --max_iter (asynchronous: at most one step past it with two workers); the ps tasks
    exit by themselves."""
    case = cluster_job.Case(dataset, str(tmp_path), 'ps', fault, target, restart,
                            max_iter=30)
    case.final_steps = (30, 31)
    lost = [] if restart and fault == 'kill' else LOST_BY[target]
    cluster_job.check_case(case, target, restart, lost)


@pytest.mark.slow
@pytest.mark.matrix
def test_a_ps_task_lost_while_the_chief_saves_ends_it_and_the_rerun_resumes(dataset, tmp_path):
    """The chief held before its checkpoint save of a global step >= 5 (a save reads the
    ps tasks' variables), the worker before its 3rd step, the ps SIGSTOPped, the gates
    opened: the chief ends with status 200 naming the save, after --peer_timeout=10 plus a
    tick or two (the bound allows a loaded machine), the worker too; rerun (the ps killed and
    restarted), the chief restores step 0's complete checkpoint and the job ends at
    --max_iter."""
    case = cluster_job.Case(dataset, str(tmp_path), 'ps', 'stop', 'ps:0', True, max_iter=30,
                            at='save')
    case.final_steps = (30, 31)
    cluster_job.check_case(case, 'ps:0', True, LOST_BY['ps:0'])
    seconds, _ = case.exits['chief:0'][0]
    line = case.errors['chief:0'][0]
    # (a stopped ps's listen queue may also refuse: either is no answer)
    assert re.search(r' (stopped answering|refused connections) .* in the checkpoint save at '
                     r'global step \d+; ', line), line
    assert seconds < 10 + 60, (seconds, case.text)
    assert [c for k, c in case.restored['chief:0'] if k == 2] == ['model.ckpt-0'], (
        case.restored, case.text)
