"""The worker count and the two ways the commands run tasks in worker processes ('spawn'
context: forking a process that has imported TensorFlow is unsafe).

run_tasks / run_pool: independent tasks, `func(task, report)` in a Pool; what a worker
  passes to report(...) reaches the parent's on_progress(...) through a queue, and a
  worker's exception is re-raised in the parent (make_tfrecords; any shard rewriter).
run_workers: one process and one pipe per worker (check_tfrecords): a worker that dies
  (a native crash) costs its item only, and the parent learns the position the worker
  was at and the last lines it wrote to stderr.
"""
import collections
import multiprocessing
import multiprocessing.connection
import os
import queue as queue_module
import signal
import tempfile

from mlimages.cli import progress as _progress
from mlimages.cli.lazy_tensorflow import quiet_tensorflow


def default_workers():
    """Usable CPUs (honours CPU pinning in containers)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ------------------------------------------------------------------------ task pool

def run_tasks(func, tasks, workers, on_progress):
    """[func(task, on_progress) for task in tasks], in `workers` processes when > 1.

    func: a module-level function (it is pickled by name). Results come in task order.
    """
    if workers <= 1 or len(tasks) <= 1:
        return [func(task, on_progress) for task in tasks]
    return run_pool(func, tasks, workers, on_progress)


_worker_queue = None


def _init_pool_worker(progress_queue):
    global _worker_queue
    _worker_queue = progress_queue
    # The parent handles Ctrl-C and terminates the pool; workers dying on their own
    # would only add tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_tensorflow()


def _report(*args):
    _worker_queue.put(args)


def _pool_call(func, task):
    return func(task, _report)


def run_pool(func, tasks, workers, on_progress):
    """func(task, report) for every task in a Pool of `workers` spawned processes."""
    ctx = multiprocessing.get_context('spawn')
    progress_queue = ctx.Queue()
    pool = ctx.Pool(workers, initializer=_init_pool_worker, initargs=(progress_queue,))

    def drain(timeout):
        try:
            on_progress(*progress_queue.get(timeout=timeout))
            while True:
                on_progress(*progress_queue.get_nowait())
        except queue_module.Empty:
            pass

    try:
        pending = {i: pool.apply_async(_pool_call, (func, task))
                   for i, task in enumerate(tasks)}
        results = [None] * len(tasks)
        while pending:
            drain(_progress.PROGRESS_INTERVAL / 2)
            for i, async_result in list(pending.items()):
                if async_result.ready():
                    results[i] = async_result.get()  # re-raises a worker's error
                    del pending[i]
        drain(0)  # workers must not block on a full pipe while being joined
        pool.close()
        pool.join()
    except BaseException:
        pool.terminate()
        pool.join()
        raise
    finally:
        progress_queue.close()
    return results


# ------------------------------------------------------------ crash-tolerant workers

def serve(conn, position, log_path, handle):
    """The loop of a run_workers process: handle(item, progress, at) for every item the
    parent sends over `conn`, until None.

    progress(payload) reaches the parent's on_progress; at(n) records the position
    (e.g. the record) the worker is at, for a crash report. The process's stderr (fd 2,
    where native code writes) goes to log_path, emptied at every position, so a crash
    report quotes what the worker wrote about the position it died at.
    """
    quiet_tensorflow()
    # Ctrl-C reaches the whole process group; the parent handles it and ends the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 2)
    os.close(log)

    def progress(payload):
        conn.send(('progress', payload))

    def at(index):
        position.value = index
        os.ftruncate(2, 0)

    while True:
        try:
            item = conn.recv()
        except EOFError:  # the parent is gone
            return
        if item is None:
            return
        try:
            result = handle(item, progress, at)
        except Exception as exc:  # a bug in handle: the parent re-raises it
            conn.send(('error', '%s: %s' % (type(exc).__name__, exc)))
        else:
            conn.send(('done', result))


class _Worker(object):
    """One worker process, its end of the pipe and the item it is working on."""

    def __init__(self, ctx, target, args, log_prefix):
        self.conn, child_conn = ctx.Pipe()
        self.position = ctx.RawValue('q', -1)
        handle, self.log_path = tempfile.mkstemp(prefix=log_prefix, suffix='.log')
        os.close(handle)
        self.process = ctx.Process(
            target=target, daemon=True,
            args=(child_conn,) + tuple(args) + (self.position, self.log_path))
        self.process.start()
        child_conn.close()
        self.task = None  # index into items

    def last_output(self, lines=3, limit=500):
        """The last lines the process wrote to its stderr, on one line."""
        try:
            with open(self.log_path, 'rb') as f:
                text = f.read().decode('utf-8', 'replace')
        except OSError:
            return ''
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return ' | '.join(tail)[-limit:]

    def assign(self, task, item):
        self.task = task
        self.position.value = -1
        try:
            self.conn.send(item)
        except OSError:
            pass  # it died already: reported as a crash on this item, like any other

    def messages(self):
        """The messages waiting in the pipe; a closed pipe (the process died) ends them."""
        out = []
        try:
            while self.conn.poll():
                out.append(self.conn.recv())
        except (EOFError, OSError):
            pass
        return out

    def dead(self):
        return not self.process.is_alive()

    def stop(self, kill=False):
        if kill:
            self.process.terminate()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
        try:
            os.remove(self.log_path)
        except OSError:
            pass


def run_workers(items, target, args, workers, on_progress, on_finished, on_crash,
                what='working on', log_prefix='tools-', on_result=None):
    """Results of `target` processes for `items`, in item order.

    on_result(result), when given, sees every result as it arrives and returns what is
    kept of it (a caller that sums results need not hold them whole until the end).

    target(conn, *args, position, log_path): a module-level function that calls serve().
    on_progress(payload): a worker's progress. on_finished(): an item is done (or lost).
    on_crash(item, exitcode, position, last_output): the result of an item whose worker
      died; the worker is replaced. A handler's exception is raised as RuntimeError
      '<what> <item> failed: ...'.
    """
    # Own processes and one pipe each, not a Pool: a worker that dies (a crash in native
    # code) must cost its item only -- a Pool would wait for it forever, and a queue
    # shared with the others could be left locked.
    ctx = multiprocessing.get_context('spawn')
    todo = collections.deque(enumerate(items))
    results = [None] * len(items)
    live = []

    def finish(worker, result):
        results[worker.task] = result if on_result is None else on_result(result)
        worker.task = None
        on_finished()

    try:
        while todo or any(w.task is not None for w in live):
            while todo and len(live) < workers:
                worker = _Worker(ctx, target, args, log_prefix)
                worker.assign(*todo.popleft())
                live.append(worker)
            multiprocessing.connection.wait(
                [w.conn for w in live] + [w.process.sentinel for w in live],
                timeout=_progress.PROGRESS_INTERVAL / 2)
            for worker in list(live):
                dead = worker.dead()  # before reading: then every message it sent is read
                _take_messages(worker, dead, todo, on_progress, finish,
                               lambda payload: '%s %s failed: %s' % (
                                   what, items[worker.task], payload))
                if dead:
                    if worker.task is not None:
                        finish(worker, on_crash(
                            items[worker.task], worker.process.exitcode,
                            worker.position.value, worker.last_output()))
                    live.remove(worker)
                    worker.stop(kill=True)
                elif worker.task is None and not todo:
                    live.remove(worker)
                    worker.stop()
    finally:
        for worker in live:
            worker.stop(kill=True)
    return results


def _take_messages(worker, dead, todo, on_progress, finish, failure):
    """Acts on the messages a worker sent: progress to on_progress, a result to
    finish(worker, result) and the next item to a live worker, a handler's error raised
    as RuntimeError(failure(payload))."""
    for kind, payload in worker.messages():
        if kind == 'progress':
            on_progress(payload)
        elif kind == 'done':
            finish(worker, payload)
            if todo and not dead:
                worker.assign(*todo.popleft())
        else:
            raise RuntimeError(failure(payload))
