"""Which shard files a worker reads.

Shards live in `<data_dir>/train/` and `<data_dir>/val/` and are named `0.tfrecords`,
`1.tfrecords`, ...; they are listed in natural order (2 before 10) so that every worker
sees the same list, then dealt round-robin: worker k of n gets files k, k + n, k + 2n, ...
The shares are disjoint and together cover every file. This happens before any shuffle:
the original shuffled first with a per-worker seed, and then sharded, with the worker
count hard-coded to 1 so every worker read everything.
"""
import glob
import os
import re


class DataError(ValueError):
    """Bad or missing input data; its message is one line naming the path."""


def _natural_key(path):
    name = os.path.basename(path)
    return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', name)]


def list_shards(data_dir, split, pattern='*tfrecords'):
    """Sorted paths of the shard files `<data_dir>/<split>/<pattern>`.

    Raises DataError naming the directory and the pattern when there are none.
    """
    directory = os.path.join(data_dir, split)
    if not os.path.isdir(directory):
        raise DataError('no %s directory: %s does not exist (expected shard files %s in it)'
                        % (split, directory, pattern))
    files = [f for f in glob.glob(os.path.join(directory, pattern)) if os.path.isfile(f)]
    if not files:
        raise DataError('no shard files matching %r in %s' % (pattern, directory))
    return sorted(files, key=_natural_key)


def worker_share(files, worker_num, worker_id):
    """The files worker `worker_id` of `worker_num` reads: files[worker_id::worker_num]."""
    if worker_num < 1:
        raise ValueError('worker_num must be >= 1, got %d' % worker_num)
    if not 0 <= worker_id < worker_num:
        raise ValueError('worker_id must be in [0, worker_num=%d), got %d'
                         % (worker_num, worker_id))
    return list(files[worker_id::worker_num])
