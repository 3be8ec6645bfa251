"""Writing shard files so that a killed run can be resumed: every shard goes to a temporary
name (<path>.tmp-<pid>) and is renamed only when complete, so `N.tfrecords` is always
whole; a rerun skips the shards that exist (unless overwrite) and removes the temporary
leftovers of the ones it writes again. Tasks run in parallel through worker_processes.run_tasks.
"""
import os

SHARD_SUFFIX = '.tfrecords'
TMP_MARKER = '.tmp-'


def shard_path(directory, index):
    """<directory>/<index>.tfrecords"""
    return os.path.join(directory, '%d%s' % (index, SHARD_SUFFIX))


def temporary_path(path):
    """The name `path` is written under until it is complete (one per process)."""
    return '%s%s%d' % (path, TMP_MARKER, os.getpid())


def shards_to_write(paths, overwrite=False, note=None):
    """(to_write, existing): the paths to (re)write and those skipped because they exist.

    Stale temporary files of every path to write are removed; note(message) is told
    about each skipped shard. Each directory is listed once, whatever the number of
    shards (a listing per shard made a resume quadratic in the shards).
    """
    listings = {}
    for path in paths:
        directory = os.path.dirname(path) or '.'
        if directory not in listings:
            listings[directory] = _listing(directory)
    to_write, existing = [], []
    for path in paths:
        directory, name = os.path.split(path)
        names, stale = listings[directory or '.']
        if name in names and not overwrite:
            if note is not None:
                note('skipping existing shard %s' % name)
            existing.append(path)
        else:
            for leftover in stale.get(name, ()):
                os.remove(os.path.join(directory, leftover))
            to_write.append(path)
    return to_write, existing


def _listing(directory):
    """(names of the files in directory, {shard name: its temporary leftovers})."""
    names, stale = set(), {}
    for entry in os.listdir(directory):
        base, marker, _ = entry.partition(TMP_MARKER)
        if marker:
            stale.setdefault(base, []).append(entry)
        else:
            names.add(entry)
    return names, stale


class ShardWriter(object):
    """A TFRecord file written under temporary_path(path), as a context manager.

    On a clean exit the file is renamed to `path` when it holds a record and removed
    when it holds none (a rerun then retries it instead of skipping an empty file); on
    an exception it is removed. `count` is the number of records written.
    """

    def __init__(self, path):
        import tensorflow.compat.v1 as tf  # on first use: list validation stays fast
        self.path = path
        self.tmp_path = temporary_path(path)
        self.count = 0
        self._writer = tf.io.TFRecordWriter(self.tmp_path)

    def write(self, serialized):
        self._writer.write(serialized)
        self.count += 1

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        try:
            self._writer.close()
            if kind is None and self.count:
                os.replace(self.tmp_path, self.path)
        finally:
            if os.path.exists(self.tmp_path):
                os.remove(self.tmp_path)
        return False


def write_text_atomically(path, lines):
    """Write text lines to `path` through a temporary file in its directory."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    tmp_path = temporary_path(path)
    with open(tmp_path, 'w', encoding='utf-8') as f:
        for line in lines:
            f.write(line + '\n')
    os.replace(tmp_path, path)


def append_count(path, count):
    """Adds '<shard name> <count>' to records.txt beside the finished shard `path`, so
    that a resumed run need not read the shards a killed one finished. One write of an
    O_APPEND file: concurrent workers' lines do not mix. record_counts rewrites the file
    sorted at the end of a run; read_counts keeps the last line of a name."""
    import file_db
    directory, name = os.path.split(path)
    fd = os.open(os.path.join(directory, file_db.COUNTS_FILE),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ('%s %d\n' % (name, count)).encode('utf-8'))
    finally:
        os.close(fd)


def record_counts(split_dir, written):
    """Adds the shards of this run to <split_dir>/records.txt (file_db.write_counts):
    `written` = {path: records}, plus any shard of the directory not listed yet (one a
    run finished before append_count existed, or after records.txt was removed, which a
    rerun skips), counted by reading it."""
    import file_db
    import tensorflow.compat.v1 as tf
    counts = {os.path.basename(path): n for path, n in written.items() if n}
    listed = file_db.read_counts(split_dir)
    for name in os.listdir(split_dir):
        if name.endswith(SHARD_SUFFIX) and name not in listed and name not in counts:
            counts[name] = sum(1 for _ in tf.io.tf_record_iterator(
                os.path.join(split_dir, name)))
    if counts or listed:
        file_db.write_counts(split_dir, counts)
