"""Writing shard files so that a killed run can be resumed: every shard goes to a temporary
name (<path>.tmp-<pid>) and is renamed only when complete, so `N.tfrecords` is always
whole; a rerun skips the shards that exist (unless overwrite) and removes the temporary
leftovers of the ones it writes again. Tasks run in parallel through common.run_tasks.
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


def remove_stale_tmp(path):
    """Remove the temporary files an earlier, killed run left for `path`."""
    directory, name = os.path.split(path)
    prefix = name + TMP_MARKER
    for entry in os.listdir(directory or '.'):
        if entry.startswith(prefix):
            os.remove(os.path.join(directory, entry))


def shards_to_write(paths, overwrite=False, note=None):
    """(to_write, existing): the paths to (re)write and those skipped because they exist.

    Stale temporary files of every path to write are removed; note(message) is told
    about each skipped shard.
    """
    to_write, existing = [], []
    for path in paths:
        remove_stale_tmp(path)
        if os.path.exists(path) and not overwrite:
            if note is not None:
                note('skipping existing shard %s' % os.path.basename(path))
            existing.append(path)
        else:
            to_write.append(path)
    return to_write, existing


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


def record_counts(split_dir, written):
    """Adds the shards of this run to <split_dir>/records.txt (file_db.write_counts):
    `written` = {path: records}, plus any shard of the directory not listed yet (a killed
    run's finished shard, which a rerun skips), counted by reading it."""
    import file_db
    import tensorflow.compat.v1 as tf
    counts = {os.path.basename(path): n for path, n in written.items() if n}
    listed = file_db.read_counts(split_dir)
    for name in os.listdir(split_dir):
        if name.endswith(SHARD_SUFFIX) and name not in listed and name not in counts:
            counts[name] = sum(1 for _ in tf.io.tf_record_iterator(
                os.path.join(split_dir, name)))
    if counts:
        file_db.write_counts(split_dir, counts)
