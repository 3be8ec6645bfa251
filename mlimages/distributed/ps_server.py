"""A ps task's life: it serves the variables until the job is done, then exits 0.

Why this module exists: TensorFlow's ps task (train_and_evaluate's) serves until it is
killed, so a hand-started job never ends by itself. Here every training task, once it has
trained to --max_iter, puts its worker id into a small queue on each ps task (`report_done`,
through a session on the ps's own server); the ps task (`serve`) takes them and exits 0
once the chief has reported and every other worker has reported or no longer answers
(peers.answer): a worker that is gone or stopped does not hold the ps. Meanwhile it watches
the chief (peers.Watch rules): a chief that does not answer for --peer_timeout ends the ps
task with the retryable status, so that a job whose chief was lost for good ends too.
"""
import time

import tensorflow.compat.v1 as tf

from mlimages.distributed import peers

QUEUE_NAME = 'mlimages_job_done'
# How long a ps waits between looks at its queue (and at the workers once the chief is done).
TAKE_SECONDS = peers.TICK_SECONDS


def _queue(index, capacity):
    with tf.device('/job:ps/task:%d' % index):
        return tf.FIFOQueue(capacity, [tf.int32], shapes=[[]], shared_name=QUEUE_NAME,
                            name=QUEUE_NAME)


def _session(target, index, graph):
    config = tf.ConfigProto(device_filters=['/job:ps/task:%d' % index],
                            operation_timeout_in_ms=int(peers.PROBE_SECONDS * 4000))
    return tf.Session(target, graph=graph, config=config)


def report_done(cluster, worker_id, log):
    """A training task that reached --max_iter tells every ps task (best effort: a ps that
    is gone already needs no word)."""
    for index, address in enumerate(cluster.get('ps', [])):
        if peers.answer(address) != peers.ANSWERS:
            continue
        graph = tf.Graph()
        with graph.as_default():
            enqueue = _queue(index, _capacity(cluster)).enqueue(tf.constant(worker_id))
        try:
            with _session('grpc://' + address, index, graph) as session:
                session.run(enqueue)
        except tf.errors.OpError as e:
            log('could not tell ps:%d at %s that this worker is done (%s); it ends when it '
                'no longer sees the chief' % (index, address, e.message.splitlines()[0]))


def _capacity(cluster):
    return 4 * (len(cluster.get('chief', [])) + len(cluster.get('worker', []))) + 4


def workers(cluster):
    """{worker id: (task name, address)}: the chief is 0, worker k is k + 1."""
    named = [('chief:0', a) for a in cluster.get('chief', [])] + [
        ('worker:%d' % i, a) for i, a in enumerate(cluster.get('worker', []))]
    return dict(enumerate(named))


def serve(server, cluster, index, watch, log):
    """Serves until the job is done (the line it logs says who reported); returns None.
    watch: a peers.Watch of the chief, held in the waiting state (it ends the process when
    the chief is lost)."""
    graph = tf.Graph()
    with graph.as_default():
        queue = _queue(index, _capacity(cluster))
        size, take = queue.size(), queue.dequeue()
    expected = workers(cluster)
    reported = set()
    watch.start()
    watch.waiting()
    with _session(server.target, index, graph) as session:
        while True:
            # Only what the queue holds is taken (this is its one reader, so no take blocks):
            # a blocking take cut by a run deadline can dequeue a report and drop it.
            for _ in range(session.run(size)):
                reported.add(int(session.run(take)))
            if 0 in reported:
                watch.stop()  # the chief is done: its exit is no loss
                missing = {k: v for k, v in expected.items() if k not in reported}
                gone = {k for k, (_, address) in missing.items()
                        if peers.answer(address) != peers.ANSWERS}
                if set(missing) <= gone:
                    break
            time.sleep(TAKE_SECONDS)
    log('ps:%d: the chief has finished; %s; exiting' % (index, 'every worker reported done'
        if not missing else 'not waiting for %s (gone or not answering)' % ', '.join(
            expected[k][0] for k in sorted(missing))))
