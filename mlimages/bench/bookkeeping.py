"""The record tools' bookkeeping at many shards, for tools/benchmark.py --bookkeeping:
each cost before and after issue #23's changes, measured at --bk_shards (20,000) shards.

    .venv/bin/python tools/benchmark.py --bookkeeping                  # ~10 min, most of it "before"
    .venv/bin/python tools/benchmark.py --bookkeeping --bk_shards 2000 --bk_lines 50000

Measured (wall and CPU seconds; the "before" code is restated here as it was):
  list parsing    make_tfrecords --num_shards K on one list. Before, every shard task
                  scanned the whole list for its lines (position % K == k): one task's
                  scan of --bk_lines ML-Images-like lines is timed, the rest is that per
                  line x --bk_full_lines x K. After, the parent's one validating pass
                  makes the plan (shard_plan.py) and all K tasks read their slices: both
                  timed on --bk_lines, scaled per line to --bk_full_lines.
  resume listing  shards_to_write over K finished (empty) shard files: before one
                  directory listing per shard (K^2 entries), after one listing.
  resume counting records.txt written only at the end, so a resumed run read every
                  finished shard to count it (K one-record shards here; real shards are
                  read whole, at disk speed), against append_count as each shard finishes
                  (timed for all K) plus the resume's read of records.txt.
  check parent    check_tfrecords' parent memory over K files of --class_num classes:
                  before the summaries kept with their per-class counts until the end,
                  after shard_checks.Totals summing them as they arrive. Summaries are
                  made as check_file makes them (counts of a shard of --bk_per_shard
                  images with ~8 labels, sent through pickle as the pipe does).
  archive cost    CPU core-hours per million images of make_tfrecords --image_tars
                  (one worker, in this process) on --bk_cost_images photograph-like
                  500x375 JPEGs (pipelines.photo_like, ~100 KB, ImageNet's typical size)
                  in per-synset tars, as they are and at --short_side 320, dense and
                  sparse labels of 11,166 classes; the archive index included.
"""
import os
import pickle
import shutil
import tempfile
import time

import numpy as np

from mlimages.cli import lazy_tensorflow
from mlimages.recordkit import shard_checks
from mlimages.recordkit import shard_plan
from mlimages.recordkit import shards
from mlimages.recordkit.image_lists import scan_list


def add_arguments(parser):
    group = parser.add_argument_group('bookkeeping at many shards (mlimages/bench/bookkeeping.py)')
    group.add_argument('--bookkeeping', action='store_true',
                       help='measure the record tools\' per-shard bookkeeping before and '
                            'after issue #23 at --bk_shards shards, instead of the default')
    group.add_argument('--bk_shards', type=int, default=20000, help='shards K')
    group.add_argument('--bk_lines', type=int, default=200000,
                       help='lines of the list timed for the parsing costs')
    group.add_argument('--bk_full_lines', type=int, default=17600000,
                       help='list lines the parsing figures are scaled to (ML-Images)')
    group.add_argument('--bk_per_shard', type=int, default=880,
                       help='images a shard in the check-parent summaries')
    group.add_argument('--bk_cost_images', type=int, default=200,
                       help='images for the archive cost (0: not measured)')
    group.add_argument('--bk_dir', default='',
                       help='scratch directory (default: a temporary one, removed)')


class _Timer(object):
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def _rss_mb():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024.0
    return float('nan')


def _write_list(path, lines, class_num, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, 'w') as f:
        for i in range(lines):
            classes = rng.choice(class_num, 8, replace=False)
            f.write('n%08d/n%08d_%d.JPEG\t%s\n' % (i % 21841, i % 21841, i, '\t'.join(
                '%d:%s' % (c, '1' if k < 6 else '0.9') for k, c in enumerate(classes))))


def parsing(work, args):
    path = os.path.join(work, 'list.txt')
    _write_list(path, args.bk_lines, args.class_num)
    K, full = args.bk_shards, args.bk_full_lines
    with _Timer() as before:  # one shard task of the old make_tfrecords
        mine = sum(1 for position, _ in enumerate(scan_list(path, args.class_num))
                   if position % K == 0)
    assert mine == len(range(0, args.bk_lines, K))
    per_line = before.cpu / args.bk_lines
    with _Timer() as parent:
        plans, _ = shard_plan.scan([path], args.class_num)
        plan, bounds = shard_plan.shard_order(plans, K)
        plan_path = os.path.join(work, 'plan.npy')
        shard_plan.save(plan, plan_path)
    with _Timer() as tasks:
        for number, start, stop in bounds:
            task = {'plan': plan_path, 'start': start, 'stop': stop, 'list': path,
                    'class_num': args.class_num}
            for _ in shard_plan.task_lines(task):
                pass
    with _Timer() as empty:  # what a task costs beyond its lines: open, mmap
        for number, start, stop in bounds:
            for _ in shard_plan.task_lines({'plan': plan_path, 'start': start,
                                            'stop': start, 'list': path,
                                            'class_num': args.class_num}):
                pass
    per_task = empty.cpu / K
    after_full = (parent.cpu + tasks.cpu - empty.cpu) / args.bk_lines * full + empty.cpu
    return [
        'list parsing, one list, K = %d shards:' % K,
        '  before: a shard task scans the whole list: %.2f us a line, %.1f s a task at '
        '%d lines, %.1f core-hours for K tasks' % (
            per_line * 1e6, per_line * full, full, per_line * full * K / 3600),
        '  after: parent pass %.2f s + all K tasks %.2f s (CPU) at %d lines; at %d lines '
        '%.1f core-minutes in all (%.2f ms a task beyond its lines)' % (
            parent.cpu, tasks.cpu, args.bk_lines, full, after_full / 60, per_task * 1e3)]


def _old_shards_to_write(paths):
    """shards.shards_to_write before: remove_stale_tmp listed the directory per path."""
    to_write, existing = [], []
    for path in paths:
        directory, name = os.path.split(path)
        prefix = name + shards.TMP_MARKER
        for entry in os.listdir(directory or '.'):
            if entry.startswith(prefix):
                os.remove(os.path.join(directory, entry))
        (existing if os.path.exists(path) else to_write).append(path)
    return to_write, existing


def resume(work, args):
    import file_db
    import tensorflow.compat.v1 as tf
    split_dir = os.path.join(work, 'train')
    os.makedirs(split_dir)
    K = args.bk_shards
    paths = [shards.shard_path(split_dir, k) for k in range(K)]
    for path in paths:  # finished one-record shards
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(b'x' * 100)
    with _Timer() as new_listing:
        _, existing = shards.shards_to_write(paths)
    assert len(existing) == K
    with _Timer() as old_listing:
        _, existing = _old_shards_to_write(paths)
    assert len(existing) == K
    with _Timer() as old_count:  # no records.txt: every finished shard read
        counts = {os.path.basename(p): sum(1 for _ in tf.io.tf_record_iterator(p))
                  for p in paths}
    assert sum(counts.values()) == K
    with _Timer() as appends:
        for path in paths:
            shards.append_count(path, 1)
    with _Timer() as new_count:
        listed = file_db.read_counts(split_dir)
        shards.record_counts(split_dir, {})
    assert len(listed) == K
    return [
        'resume of a run with K = %d finished shards:' % K,
        '  listing: before %.1f s (a listing per shard), after %.3f s (one listing)'
        % (old_listing.wall, new_listing.wall),
        '  counting: before %.1f s reading the K shards (one record each; real shards are '
        'read whole), after %.3f s reading records.txt + %.3f s for the K appends '
        'during the run' % (old_count.wall, new_count.wall, appends.wall)]


def _summaries(args):
    """check_file summaries as the pipe delivers them."""
    rng = np.random.default_rng(1)
    for _ in range(args.bk_shards):
        positives = np.bincount(rng.integers(0, args.class_num, 8 * args.bk_per_shard),
                                minlength=args.class_num)
        summary = {'path': 'x.tfrecords', 'records': args.bk_per_shard, 'bad': [],
                   'warnings': [], 'corrupt': False, 'warning_count': 0,
                   'warning_kinds': {}, 'labelled_records': args.bk_per_shard,
                   'positives': positives.tolist(), 'cardinality': [0] * 8 + [880],
                   'ignored_entries': 0, 'unclosed_records': 0, 'kept_pairs': 0,
                   'unclosed_pairs': None, 'seconds': 0.1}
        yield pickle.loads(pickle.dumps(summary))


def check_parent(args):
    start = _rss_mb()
    acc = shard_checks.Totals(args.class_num)
    with _Timer() as after:
        kept = [acc.add(s) for s in _summaries(args)]
        totals = acc.totals()
    after_mb = _rss_mb() - start
    del kept
    start = _rss_mb()
    with _Timer() as before:
        kept = list(_summaries(args))
        old = shard_checks.totals(kept, args.class_num)
        before_mb = _rss_mb() - start
    assert old == totals
    del kept
    return ['check_tfrecords parent over K = %d files of %d classes:' % (
        args.bk_shards, args.class_num),
        '  before: %.0f MB held until the end (%.1f s); after: %.0f MB (%.1f s)' % (
            before_mb, before.wall, after_mb, after.wall)]


def archive_cost(work, args):
    import io
    import tarfile
    from PIL import Image
    from mlimages.recordkit import archives
    from mlimages.recordkit import make_tfrecords
    from mlimages.bench import pipelines
    rng = np.random.default_rng(2)
    tars = os.path.join(work, 'tars')
    os.makedirs(tars)
    names = []
    for s in range(10):
        wnid = 'n%08d' % (1000 + s)
        with tarfile.open(os.path.join(tars, wnid + '.tar'), 'w') as tar:
            for i in range(s, args.bk_cost_images, 10):
                out = io.BytesIO()
                Image.fromarray(pipelines.photo_like(rng)).save(out, 'JPEG', quality=90)
                info = tarfile.TarInfo('%s_%d.JPEG' % (wnid, i))
                info.size = len(out.getvalue())
                tar.addfile(info, io.BytesIO(out.getvalue()))
                names.append('%s/%s_%d.JPEG' % (wnid, wnid, i))
    lst = os.path.join(work, 'cost_list.txt')
    with open(lst, 'w') as f:
        for name in names:
            f.write('%s\t%s\n' % (name, '\t'.join('%d:1' % c for c in
                                                  rng.choice(11166, 8, replace=False))))
    out = ['make_tfrecords --image_tars, %d 500x375 JPEGs, one worker:' % len(names)]
    lazy_tensorflow.tensorflow()  # TensorFlow imported beforehand
    from mlimages.data import records  # noqa: F401
    for short_side in (0, 320):
        for layout in ('dense', 'sparse'):
            target = os.path.join(work, 'cost-%d-%s' % (short_side, layout))
            with _Timer() as t:
                summary = make_tfrecords.build_records(
                    make_tfrecords.Inputs(lst, None, archives.Source('tars', tars)),
                    make_tfrecords.Records(11166, layout, short_side=short_side),
                    make_tfrecords.Output(target, num_shards=2),
                    make_tfrecords.Work(workers=1, progress=False))
            assert summary['images_written'] == len(names)
            size = sum(os.path.getsize(p) for p in summary['shards_written'])
            out.append('  short side %s, %s labels: %.1f CPU ms an image = %.1f core-hours '
                       'a million images; %.1f KB a record' % (
                           short_side or 'as stored', layout, t.cpu / len(names) * 1e3,
                           t.cpu / len(names) * 1e6 / 3600, size / len(names) / 1e3))
    return out


def main(args):
    work = args.bk_dir or tempfile.mkdtemp(prefix='bookkeeping-')
    os.makedirs(work, exist_ok=True)
    try:
        out = []
        for part in (lambda: parsing(work, args), lambda: resume(work, args),
                     lambda: check_parent(args)) + (
                        (lambda: archive_cost(work, args),) if args.bk_cost_images else ()):
            lines = part()
            print('\n'.join(lines), flush=True)
            out += lines
    finally:
        if not args.bk_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0
