"""Rewrite existing TFRecord shards: downscaled images and/or compact labels, shard for shard.

    .venv/bin/python tools/convert_tfrecords.py IN OUT --short_side 320 [--label_layout sparse]
                                      [--hierarchy FILE] [--workers K] [--jpeg_quality Q]

IN is a directory; every `*.tfrecords` file under it (subdirectories included: train/ and
val/ as make_tfrecords.py writes them, or the original's flat directory of shards) becomes
the file of the same relative path under OUT. OUT may not be IN or lie inside it.

Per record (a tf.train.Example in records.py's schema, either label layout):
  image         --short_side N > 0: shorter side > N -> downscaled to N, aspect kept,
                antialiased, re-encoded at --jpeg_quality (mlimages/recordkit/images.py); otherwise the
                bytes as they are. Every image is decoded once, so a broken one is found.
  width/height  the stored image's size.
  label         --label_layout keep (default): as it is; sparse: label/index + label/value
                (the non-zero classes: 44,664 bytes -> a few dozen at 11,166 classes).
                --hierarchy FILE: closed under ancestors (hierarchy.close_labels for dense,
                close_sparse for sparse), added = labels filled in.
                A single-label record (int64 class index) keeps its label as it is.
  name, other features: copied.

A record that is not an Example, has no image or no usable label, whose image cannot be
decoded, or whose label does not fit the hierarchy, is kept out of OUT and named in the
report (shard:record index, name, reason); a corrupt stretch of a shard (TFRecord CRC or
length error) ends that shard's reading and is named likewise. Nothing is dropped silently.

Resumable like make_tfrecords.py (mlimages/recordkit/shards.py): a shard is written under a temporary
name and renamed when complete; a rerun skips the shards OUT already has and carries
their report lines over from the previous report. Shards are converted in parallel
(--workers, one shard a worker at a time, worker_processes.run_tasks).

Report (default OUT/convert_report.txt), the builder's format:
  <shard>:<record index>\t<name or ->\t<reason>          a record kept out
  # shard <shard>: <n> records, <w> written, <d> downscaled, <k> kept, <b> bad, <l> labels
    added, <in> -> <out> bytes                            one line per converted shard
  # shard <shard>: skipped (exists in OUT)
  # totals: ...                                           the same counts over this run
"""
import os
import sys
import time

from mlimages.run import run_dirs
from mlimages import errors
from mlimages.errors import BadImageError, BadRecord, ConvertError
from mlimages.cli import arguments, entry, lazy_tensorflow, worker_processes
from mlimages.cli import progress as _progress
from mlimages.recordkit import shards
from mlimages.recordkit.images import downscale

PROG = 'convert_tfrecords.py'
LABEL_LAYOUTS = ('keep', 'sparse')
REPORT_NAME = 'convert_report.txt'
COUNTS = ('records', 'written', 'downscaled', 'kept', 'bad', 'labels_added', 'bytes_in',
          'bytes_out')


def find_shards(in_dir):
    """Relative paths of the *.tfrecords files under in_dir, sorted (temporary files of a
    killed run, '<shard>.tmp-<pid>', do not end in .tfrecords)."""
    found = []
    for directory, subdirs, files in os.walk(in_dir):
        subdirs.sort()
        for name in files:
            if name.endswith(shards.SHARD_SUFFIX):
                found.append(os.path.relpath(os.path.join(directory, name), in_dir))
    return sorted(found)


# ------------------------------------------------------------------------- one record

def _labels(example, task, h):
    """Rewrite the label features of `example` in place; returns the labels added."""
    import numpy as np
    from mlimages.data import hierarchy
    from mlimages.data import records
    feature = example.features.feature
    if 'label' in feature and feature['label'].int64_list.value:
        return 0  # a class index (--label_type=single): nothing to compact or close
    sparse = records.sparse_entries(feature)
    added = 0
    if sparse is None:  # dense: class_num little-endian float32
        if 'label' not in feature or len(feature['label'].bytes_list.value) != 1:
            raise BadRecord('no label (neither "label" bytes nor "%s")' % records.LABEL_INDEX)
        raw = feature['label'].bytes_list.value[0]
        if not raw or len(raw) % 4:
            raise BadRecord('"label" has %d bytes, not a float32 array' % len(raw))
        dense = np.frombuffer(raw, '<f4')
        if h is not None:
            if dense.size != len(h):
                raise BadRecord('label has %d classes, the hierarchy %d'
                                % (dense.size, len(h)))
            dense, added = hierarchy.close_labels(dense, h)
        if task['label_layout'] != 'sparse':
            if added:
                feature['label'].bytes_list.value[0] = dense.astype('<f4').tobytes()
            return added
        index = np.flatnonzero(dense)
        value = dense[index]
        del feature['label']
    else:
        index, value = sparse
        if len(index) != len(value) or not len(index):
            raise BadRecord('%s and %s differ in length or are empty'
                            % (records.LABEL_INDEX, records.LABEL_VALUE))
        if h is None:
            return 0
        try:
            index, value, added = hierarchy.close_sparse(index, value, h)
        except ValueError as exc:
            raise BadRecord('label does not fit the hierarchy: %s' % exc) from None
    compact = records.make_sparse_example(b'', index, value, 0, 0, b'').features.feature
    for key in (records.LABEL_INDEX, records.LABEL_VALUE):
        feature[key].CopyFrom(compact[key])
    return added


def convert_record(serialized, task, h=None):
    """One serialized record -> (serialized, downscaled, labels added); BadRecord(reason)."""
    import tensorflow.compat.v1 as tf
    try:
        example = tf.train.Example.FromString(serialized)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise BadRecord('not a tf.train.Example (%s)' % ' '.join(str(exc).split())) from None
    feature = example.features.feature
    if 'image' not in feature or len(feature['image'].bytes_list.value) != 1:
        raise BadRecord('no "image" bytes')
    try:
        data, width, height, downscaled = downscale(
            feature['image'].bytes_list.value[0], task['short_side'], task['jpeg_quality'])
    except BadImageError as exc:
        raise BadRecord('image: %s' % exc) from None
    added = _labels(example, task, h)
    if downscaled:
        feature['image'].bytes_list.value[0] = data
    for key, value in (('width', width), ('height', height)):
        feature[key].int64_list.value[:] = [value]
    return example.SerializeToString(), downscaled, added


def _name(serialized):
    import tensorflow.compat.v1 as tf
    try:
        value = tf.train.Example.FromString(serialized).features.feature['name']
        return value.bytes_list.value[0].decode('utf-8', 'replace') or '-'
    except Exception:
        return '-'


def convert_shard(task, on_progress=None):
    """Convert the shard task['rel'] (shards.ShardWriter); returns its counts and bad list."""
    import tensorflow.compat.v1 as tf
    h = None
    if task['hierarchy']:
        from mlimages.data import hierarchy
        h = hierarchy.load(task['hierarchy'])
    counts = dict.fromkeys(COUNTS, 0)
    bad = []
    src = os.path.join(task['in_dir'], task['rel'])
    counts['bytes_in'] = os.path.getsize(src)
    pending, last = [0, 0], time.monotonic()
    with shards.ShardWriter(task['path']) as writer:
        index = -1
        try:
            for index, serialized in enumerate(tf.io.tf_record_iterator(src)):
                try:
                    out, downscaled, added = convert_record(serialized, task, h)
                except BadRecord as exc:
                    bad.append((task['rel'], index, _name(serialized), str(exc)))
                    pending[1] += 1
                else:
                    writer.write(out)
                    counts['downscaled' if downscaled else 'kept'] += 1
                    counts['labels_added'] += added
                pending[0] += 1
                now = time.monotonic()
                if on_progress is not None and now - last >= _progress.PROGRESS_INTERVAL:
                    on_progress(*pending)
                    pending, last = [0, 0], now
        except tf.errors.DataLossError as exc:
            bad.append((task['rel'], index + 1, '-', 'corrupt TFRecord data, the rest of '
                        'the shard is unreadable (%s)' % ' '.join(exc.message.split())))
            pending[1] += 1
    if on_progress is not None and any(pending):
        on_progress(*pending)
    counts['records'] = index + 1
    counts['written'] = writer.count
    counts['bad'] = len(bad)
    counts['bytes_out'] = os.path.getsize(task['path']) if writer.count else 0
    return {'rel': task['rel'], 'counts': counts, 'bad': bad}


# ------------------------------------------------------------------------------- run

class _Progress(_progress.ProgressLine):
    """'records done, bad, records/s, shards'."""

    def __init__(self, shard_count, enabled):
        super(_Progress, self).__init__(enabled)
        self.shard_count, self.done, self.bad = shard_count, 0, 0

    def add(self, done, bad):
        self.done += done
        self.bad += bad
        self.tick()

    def text(self):
        return '%d records converted, %d kept out, %.1f records/s (%d shards)' % (
            self.done, self.bad, self.rate(self.done), self.shard_count)


def _shard_line(rel, c):
    return ('# shard %s: %d records, %d written, %d downscaled, %d kept, %d bad, %d labels '
            'added, %d -> %d bytes' % ((rel,) + tuple(c[k] for k in COUNTS[:6]) +
                                       (c['bytes_in'], c['bytes_out'])))


def _previous_lines(report_path, rels):
    """The lines of an earlier report that belong to the shards `rels` (skipped now)."""
    try:
        with open(report_path, encoding='utf-8') as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    kept = []
    for line in lines:
        if line.startswith('# shard '):
            rel = line[len('# shard '):].split(': ', 1)[0]
            if rel in rels and not line.endswith('skipped (exists in OUT)'):
                kept.append(line)
        elif not line.startswith('#') and line.split('\t', 1)[0].rsplit(':', 1)[0] in rels:
            kept.append(line)
    return kept


def convert(in_dir, out_dir, short_side=0, label_layout='keep', hierarchy_path=None,
            workers=None, jpeg_quality=95, report_path=None, progress=True):
    """Convert every shard under in_dir into out_dir (module docstring); returns a summary
    dict: shards_written, shards_skipped, shards_empty (relative paths), totals (COUNTS
    summed over this run), bad (list of (shard, record index, name, reason)),
    report_path, seconds. Raises ConvertError (nothing written) for bad arguments."""
    in_dir, out_dir = os.fspath(in_dir), os.fspath(out_dir)
    if not os.path.isdir(in_dir):
        raise ConvertError('IN is not a directory: %s' % in_dir)
    real_in, real_out = os.path.realpath(in_dir), os.path.realpath(out_dir)
    if real_out == real_in or real_out.startswith(real_in + os.sep):
        raise ConvertError('OUT %s is IN or inside it; give a separate directory' % out_dir)
    if short_side < 0:
        raise ConvertError('--short_side must be >= 0, got %d' % short_side)
    if not 1 <= jpeg_quality <= 100:
        raise ConvertError('--jpeg_quality must be in [1, 100], got %d' % jpeg_quality)
    if label_layout not in LABEL_LAYOUTS:
        raise ConvertError('--label_layout must be one of %s, got %r'
                           % ('/'.join(LABEL_LAYOUTS), label_layout))
    if not short_side and label_layout == 'keep' and not hierarchy_path:
        raise ConvertError('nothing to change: give --short_side N, --label_layout sparse '
                           'or --hierarchy FILE')
    if hierarchy_path:
        from mlimages.data import hierarchy
        try:
            hierarchy.load(hierarchy_path)
        except errors.HierarchyError as exc:
            raise ConvertError(str(exc)) from None
    rels = find_shards(in_dir)
    if not rels:
        raise ConvertError('no *.tfrecords file under %s' % in_dir)
    if report_path is None:
        report_path = os.path.join(out_dir, REPORT_NAME)

    def note(message):
        if progress:
            sys.stderr.write(message + '\n')
            sys.stderr.flush()

    os.makedirs(out_dir, exist_ok=True)
    try:  # one writer of OUT at a time (run_dirs: released by the kernel if we are killed)
        run_dirs.hold_lock(out_dir, PROG)
    except errors.DirectoryError as exc:
        raise ConvertError(str(exc)) from None
    try:
        return _convert_shards(in_dir, out_dir, rels, short_side, label_layout,
                               hierarchy_path, workers, jpeg_quality, report_path, note,
                               progress)
    finally:
        run_dirs.release_lock(out_dir)


def _convert_shards(in_dir, out_dir, rels, short_side, label_layout, hierarchy_path, workers,
                    jpeg_quality, report_path, note, progress):
    """convert's work once OUT is locked."""
    paths = [os.path.join(out_dir, rel) for rel in rels]
    for path in paths:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    to_write, existing = shards.shards_to_write(paths, note=note)
    skipped = [rel for rel, path in zip(rels, paths) if path in set(existing)]
    tasks = [{'rel': rel, 'path': path, 'in_dir': in_dir, 'short_side': short_side,
              'label_layout': label_layout, 'jpeg_quality': jpeg_quality,
              'hierarchy': hierarchy_path}
             for rel, path in zip(rels, paths) if path in set(to_write)]
    start = time.monotonic()
    meter = _Progress(len(tasks), progress and bool(tasks))
    workers = min(workers or worker_processes.default_workers(), max(len(tasks), 1))
    results = worker_processes.run_tasks(convert_shard, tasks, workers, meter.add)
    if tasks:
        meter.finish()
    totals = dict.fromkeys(COUNTS, 0)
    for r in results:
        for key in COUNTS:
            totals[key] += r['counts'][key]
    bad = [b for r in results for b in r['bad']]
    empty = [r['rel'] for r in results if not r['counts']['written']]
    for rel in empty:
        note('shard %s: no record could be converted; not written' % rel)
    for directory in sorted({os.path.dirname(os.path.join(out_dir, r['rel']))
                             for r in results}):
        shards.record_counts(directory, {
            os.path.join(out_dir, r['rel']): r['counts']['written'] for r in results
            if os.path.dirname(os.path.join(out_dir, r['rel'])) == directory})
    lines = _previous_lines(report_path, set(skipped))
    lines += ['%s:%d\t%s\t%s' % entry for entry in bad]
    lines += [_shard_line(r['rel'], r['counts']) for r in results]
    lines += ['# shard %s: skipped (exists in OUT)' % rel for rel in skipped]
    lines.append('# totals: %d shards converted, %d skipped (exist), %d empty (not written); '
                 '%s' % (len(results) - len(empty), len(skipped), len(empty), ', '.join(
                     '%d %s' % (totals[k], k.replace('_', ' ')) for k in COUNTS)))
    shards.write_text_atomically(report_path, lines)
    return {'shards_written': [r['rel'] for r in results if r['counts']['written']],
            'shards_skipped': skipped, 'shards_empty': empty, 'totals': totals, 'bad': bad,
            'report_path': report_path, 'seconds': time.monotonic() - start}


# ------------------------------------------------------------------------------- CLI

def build_parser():
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Rewrite the *.tfrecords shards under IN into OUT (same relative '
                    'paths) with downscaled images and/or compact labels; records that '
                    'cannot be converted are named in the report and kept out.',
        epilog='Exit status: 0 done (also with records kept out), 1 no shard could be '
               'written, 2 bad input, 143 / 130 stopped by SIGTERM / Ctrl-C. A rerun skips '
               'the shards OUT already has.')
    parser.add_argument('in_dir', metavar='IN', help='directory of the shards to convert '
                        '(searched recursively: train/, val/ or a flat directory)')
    parser.add_argument('out_dir', metavar='OUT', help='where the converted shards go')
    parser.add_argument('--short_side', type=arguments.non_negative_int, default=0,
                        metavar='N',
                        help='downscale an image whose shorter side exceeds N to N (aspect '
                             'kept, antialiased, re-encoded at --jpeg_quality); 0 = images '
                             'unchanged (default). 320 suits --image_size 224 '
                             '(docs/photos.md)')
    parser.add_argument('--label_layout', choices=LABEL_LAYOUTS, default='keep',
                        help='keep: labels in the layout they have (default); sparse: '
                             'label/index + label/value, a few dozen bytes instead of 4 x '
                             'class_num')
    parser.add_argument('--hierarchy', metavar='FILE',
                        help='close labels under ancestors with this hierarchy file '
                             '(dictionary_and_semantic_hierarchy.txt, see hierarchy.py)')
    parser.add_argument('--jpeg_quality', type=arguments.positive_int, default=95,
                        metavar='Q', help='JPEG quality of downscaled images (default: 95)')
    parser.add_argument('--workers', type=arguments.positive_int, default=None, metavar='K',
                        help='parallel worker processes, one shard each at a time '
                             '(default: the number of CPUs, %d here)'
                             % worker_processes.default_workers())
    parser.add_argument('--report', metavar='FILE',
                        help='the report file (default: OUT/%s)' % REPORT_NAME)
    parser.add_argument('--quiet', action='store_true',
                        help='no progress line or per-shard notes on stderr')
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    return entry.run(
        PROG, lambda: build_parser().parse_args(argv), convert_and_report, (ConvertError,),
        lambda args: 'finished shards are kept, rerun the same command to convert the rest')


def convert_and_report(args):
    """Converts the shards as the arguments say and prints the summary; returns the exit
    status (0, 1 when no shard could be written)."""
    lazy_tensorflow.quiet_tensorflow()
    summary = convert(args.in_dir, args.out_dir, args.short_side, args.label_layout,
                      args.hierarchy, args.workers, args.jpeg_quality, args.report,
                      progress=not args.quiet)
    t = summary['totals']
    print('shards converted: %d, skipped (exist in OUT): %d, empty (not written): %d'
          % (len(summary['shards_written']), len(summary['shards_skipped']),
             len(summary['shards_empty'])))
    print('records: %d read, %d written (%d downscaled, %d kept), %d kept out; %d labels '
          'added' % (t['records'], t['written'], t['downscaled'], t['kept'], t['bad'],
                     t['labels_added']))
    print('bytes: %d in, %d out (%.1fx smaller)' % (
        t['bytes_in'], t['bytes_out'], t['bytes_in'] / max(t['bytes_out'], 1)))
    print('report: %s' % summary['report_path'])
    written = summary['shards_written'] or summary['shards_skipped']
    if not written:
        arguments.error_line(PROG, 'no shard could be written; see %s'
                             % summary['report_path'])
        return 1
    return 0

