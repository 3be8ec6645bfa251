"""Which shard files a worker reads.

Shards live in `<data_dir>/train/` and `<data_dir>/val/` and are named `0.tfrecords`,
`1.tfrecords`, ...; they are listed in natural order (2 before 10) so that every worker
sees the same list, then dealt round-robin: worker k of n gets files k, k + n, k + 2n, ...
The shares are disjoint and together cover every file; with fewer files than workers
every worker reads every file and takes every n-th record instead (data_share). This
happens before any shuffle:
the original shuffled first with a per-worker seed, and then sharded, with the worker
count hard-coded to 1 so every worker read everything.

The record tools also keep `<split>/records.txt`, a line `<shard file name> <records>` per
shard they wrote, so that a run can say how many epochs its steps make
(record_count) without reading the shards.
"""
import glob
import os
import re
from mlimages.errors import DataError


def natural_key(text):
    """Sort key of natural order: the digit runs compare as numbers (2 before 10)."""
    return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', text)]


def _file_name_key(path):
    return natural_key(os.path.basename(path))


def list_shards(data_dir, split, pattern='*tfrecords'):
    """Sorted paths of the shard files `<data_dir>/<split>/<pattern>`.

    Raises DataError naming the directory and the pattern when there are none.
    """
    directory = os.path.join(data_dir, split)
    if not os.path.isdir(directory):
        raise DataError('no %s directory: %s does not exist (expected shard files %s in it)%s'
                        % (split, directory, pattern, images_hint(data_dir)))
    files = [f for f in glob.glob(os.path.join(directory, pattern)) if os.path.isfile(f)]
    if not files:
        raise DataError('no shard files matching %r in %s%s' % (pattern, directory,
                                                                 images_hint(directory)))
    return sorted(files, key=_file_name_key)


IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.gif')


def images_hint(directory, look=200):
    """'; <directory> holds images (<name>), not records: ...' when the directory or one of
    its first subdirectories (ImageNet's class folders) holds image files, else ''. At most
    `look` entries of each are read."""
    def entries(path):
        try:
            with os.scandir(path) as found:
                return [entry for _, entry in zip(range(look), found)]
        except OSError:
            return []
    top = entries(directory)
    for entry in top + [e for d in top[:5] if d.is_dir() for e in entries(d.path)]:
        if entry.name.lower().endswith(IMAGE_SUFFIXES) and entry.is_file():
            return ('; %s holds images (%s), not records: build the shards from an image '
                    'list with tools/make_tfrecords.py (docs/records.md)'
                    % (directory, os.path.relpath(entry.path, directory)))
    return ''


def check_worker(worker_num, worker_id):
    """worker_id must be in [0, worker_num) (and worker_num >= 1); ValueError otherwise."""
    if worker_num < 1 or not 0 <= worker_id < worker_num:
        raise ValueError('--worker_id=%d must be in [0, --worker_num=%d)'
                         % (worker_id, worker_num))


def worker_share(files, worker_num, worker_id):
    """The files worker `worker_id` of `worker_num` reads: files[worker_id::worker_num]."""
    check_worker(worker_num, worker_id)
    return list(files[worker_id::worker_num])


def data_share(files, worker_num, worker_id):
    """How worker `worker_id` of `worker_num` splits the sorted shard `files`:
    (files, record_shard). With at least as many files as workers its worker_share and
    record_shard None; with fewer, every file and record_shard (worker_num, worker_id): the
    records are dealt round-robin instead (tf.data.Dataset.shard after a deterministic
    interleave)."""
    check_worker(worker_num, worker_id)
    if len(files) >= worker_num:
        return worker_share(files, worker_num, worker_id), None
    return list(files), (worker_num, worker_id)


COUNTS_FILE = 'records.txt'


def read_counts(split_dir):
    """{shard file name: records} of <split_dir>/records.txt ({} without one)."""
    path = os.path.join(split_dir, COUNTS_FILE)
    if not os.path.isfile(path):
        return {}
    counts = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 2 and fields[1].isdigit():
                counts[fields[0]] = int(fields[1])
    return counts


def write_counts(split_dir, counts):
    """Adds {shard file name: records} to <split_dir>/records.txt (written whole, then
    renamed), keeping the entries of shards written before."""
    merged = dict(read_counts(split_dir), **counts)
    path = os.path.join(split_dir, COUNTS_FILE)
    with open(path + '.tmp', 'w') as f:
        for name in sorted(merged, key=_file_name_key):
            f.write('%s %d\n' % (name, merged[name]))
    os.replace(path + '.tmp', path)


def record_count(files):
    """The records in the shard `files` by their directories' records.txt, or None when
    a file is not listed there."""
    total = 0
    for directory in {os.path.dirname(f) for f in files}:
        counts = read_counts(directory)
        names = [os.path.basename(f) for f in files if os.path.dirname(f) == directory]
        if not all(name in counts for name in names):
            return None
        total += sum(counts[name] for name in names)
    return total
