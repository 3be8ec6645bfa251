#!/usr/bin/env python
"""Turn image lists into TFRecord shards for the multi-label trainer.

An image list has one image per line (image_lists.py has the grammar):

    <path relative to --image_root> [<class>:<confidence> | <class>] ...

Every image becomes one `tf.train.Example` with exactly these features:

    image   bytes   the encoded JPEG: RGB or grey JPEG files byte for byte, anything else
                    converted to RGB and re-encoded with --jpeg_quality (images.py)
    label   bytes   little-endian float32 array of length --class_num (np '<f4' bytes)
    width   int64   width of the stored image (Pillow's size, EXIF orientation ignored)
    height  int64   height of the stored image
    name    bytes   the image's path exactly as written in the list (UTF-8)

With --label_layout sparse the label is stored compactly instead of `label`:

    label/index  int64 list    the classes with a non-zero confidence, ascending
    label/value  float list    their confidences (-1 = ignore), in the same order

(an image without labels stores the single entry 0 -> 0.0, so that every record names
its label). train.py reads both layouts, side by side; with 11,166 classes the dense
label is 44,664 bytes a record, the sparse one a few dozen.

Shards are written to `<out_dir>/<split>/<N>.tfrecords`, either one per list file
(list k -> shard start_index + k, as the original ML-Images tfrecord.py did), or, with
--num_shards K and a single list, with the lines dealt round-robin into K shards.
With --short_side N (default 0: off) an image whose shorter side exceeds N is stored
downscaled to N, aspect kept, antialiased, re-encoded with --jpeg_quality (images.py has
the resampling); smaller images are stored as without the flag. A 10 MP photo then costs
the input pipeline what an ImageNet one does (docs/photos.md).

Images that are missing or that Pillow cannot decode are skipped and listed in a report
file. Every list is validated completely before anything is written. A shard is written
under a temporary name and renamed when complete; a rerun skips finished shards
(shards.py).

--hierarchy FILE (dictionary_and_semantic_hierarchy.txt) closes each image's labels under
ancestors before they are written (hierarchy.close: an ancestor a with y_a == 0 gets
max(0, max of y over the descendants of a); any other y_a, -1 included, is kept) and the
report counts the labels added.

Run from the repository root:

    python tools/make_tfrecords.py -idx image_lists/ -tfs data/ -im images/ -cls 11166
"""
import argparse
import numbers
import os
import sys
import time

if __name__ == '__main__':
    import _checkout  # noqa: F401 -- python tools/make_tfrecords.py: the checkout importable

import hierarchy as hierarchy_lib  # noqa: E402
import run_dirs  # noqa: E402
import startup  # noqa: E402
from tools import common  # noqa: E402
from tools import progress as _progress  # noqa: E402
from tools import shards  # noqa: E402
from tools.image_lists import (InputError, MakeRecordsError, resolve_lists,  # noqa: E402
                               scan_list)
from tools.images import BadImageError, load_image  # noqa: E402

PROG = 'make_tfrecords.py'
SPLITS = ('train', 'val')
LABEL_LAYOUTS = ('dense', 'sparse')  # records.LABEL_LAYOUTS, named here without TensorFlow


class AllImagesSkippedError(MakeRecordsError):
    """Every image of the job was skipped; `.summary` holds build_records' summary.

    The report has been written when this is raised. The CLI exits 1 for it.
    """

    def __init__(self, message, summary):
        super().__init__(message)
        self.summary = summary



def make_example(jpeg_bytes, label, width, height, name, label_layout='dense'):
    """records.make_example: the tf.train.Example of one image."""
    import records  # imports TensorFlow: on first use
    return records.make_example(jpeg_bytes, label, width, height, name, label_layout)


def make_sparse_example(jpeg_bytes, index, value, width, height, name):
    """records.make_sparse_example: the label as label/index + label/value."""
    import records
    return records.make_sparse_example(jpeg_bytes, index, value, width, height, name)


def _write_shard(task, on_progress=None):
    """Write one shard from a validated list (shards.ShardWriter); returns a result dict."""
    skipped = []
    added = {'labels': 0, 'images': 0}
    pending_done = pending_skipped = 0
    last_report = time.monotonic()
    with shards.ShardWriter(task['path']) as writer:
        position = -1
        for lineno, image, labels in scan_list(task['list'], task['class_num']):
            position += 1
            if position % task['stride'] != task['offset']:
                continue
            try:
                data, width, height = load_image(
                    os.path.join(task['image_root'], image), task['jpeg_quality'],
                    task.get('short_side', 0))
            except BadImageError as exc:
                skipped.append((task['list'], lineno, image, str(exc)))
                pending_skipped += 1
            else:
                example, count = _labelled_example(task, data, labels, width, height, image)
                added['labels'] += count
                added['images'] += count > 0
                writer.write(example.SerializeToString())
            pending_done += 1
            now = time.monotonic()
            if on_progress is not None and now - last_report >= _progress.PROGRESS_INTERVAL:
                on_progress(pending_done, pending_skipped)
                pending_done = pending_skipped = 0
                last_report = now
    if on_progress is not None and (pending_done or pending_skipped):
        on_progress(pending_done, pending_skipped)
    return {'index': task['index'], 'path': task['path'], 'written': writer.count,
            'skipped': skipped, 'labels_added': added['labels'],
            'images_closed': added['images']}


def _labelled_example(task, data, labels, width, height, image):
    """(the Example of one image, labels added): with task['hierarchy'] the labels are
    closed under ancestors first (hierarchy.close_sparse, the module docstring's rule)."""
    classes = sorted(labels)
    values, added = [labels[c] for c in classes], 0
    if task.get('hierarchy') is not None:
        classes, values, added = hierarchy_lib.close_sparse(classes, values,
                                                            task['hierarchy'])
    if task.get('label_layout') == 'sparse':
        return make_sparse_example(data, classes, values, width, height, image), added
    import records
    return make_example(data, records.dense_label(classes, values, task['class_num']), width,
                        height, image), added


class _Progress(_progress.ProgressLine):
    """'images done/total, skipped, images/s'."""

    def __init__(self, total, enabled, stream=None):
        super(_Progress, self).__init__(enabled, stream)
        self.total = total
        self.done = 0
        self.skipped = 0

    def add(self, done, skipped):
        self.done += done
        self.skipped += skipped
        self.tick()

    def finish(self, done, skipped):
        self.done, self.skipped = done, skipped
        super(_Progress, self).finish()

    def done_total(self):
        return self.done, self.total

    def text(self):
        return '%d/%d images, %d skipped, %.1f images/s' % (
            self.done, self.total, self.skipped, self.rate(self.done))



def _one_writer_a_split(build):
    """build_records takes the lock of its split directory (run_dirs) once the input is
    valid: a second builder of the same split is refused naming the first; given back at
    the end."""
    def locked(lists, image_root, out_dir, split='train', *args, **kwargs):
        try:
            return build(lists, image_root, out_dir, split, *args, **kwargs)
        finally:
            run_dirs.release_lock(os.path.join(os.fspath(out_dir), split))
    locked.__doc__ = build.__doc__
    return locked


@_one_writer_a_split
def build_records(lists, image_root, out_dir, split='train', class_num=None,
                  num_shards=None, start_index=0, workers=None, report_path=None,
                  jpeg_quality=95, overwrite=False, progress=True, label_layout='dense',
                  hierarchy=None, short_side=0):
    """Write the TFRecord shards of `lists` to `<out_dir>/<split>/` and return a summary.

    lists: a list file, a directory of lists (its regular files, sorted by name), or a
      sequence of these. Without num_shards, list k becomes `<start_index + k>.tfrecords`;
      with num_shards=K (exactly one list) its image lines are dealt round-robin into
      shards start_index .. start_index + K - 1.
    image_root: the directory the image paths in the lists are relative to.
    class_num: the label length (required, > 0).
    workers: processes writing shards in parallel ('spawn' context); None = the number
      of usable CPUs. With one worker (or one shard) everything runs in this process.
    report_path: where the skipped images are listed; default `<out_dir>/<split>_report.txt`.
    overwrite: rewrite shards that already exist (by default they are skipped).
    progress: draw a progress line and per-shard notes on stderr.
    label_layout: 'dense' (the original's float32 bytes, the default) or 'sparse' (label/index +
      label/value, see the module docstring).
    hierarchy: a hierarchy.Hierarchy of class_num classes: close the labels under
      ancestors (module docstring); None writes them as listed.
    short_side: > 0 stores images whose shorter side exceeds it downscaled to it
      (images.downscale); 0 keeps every image as it is.

    Every list is validated before anything is written. Raises InputError or
    ListFormatError for bad input (nothing is created then) and AllImagesSkippedError
    (after writing the report) when not a single image could be read.

    Returns a dict: out_dir (the split directory), shards_written, shards_skipped
    (already existed), shards_empty (no readable image, not written) -- each a list of
    paths --, images_written, images_skipped, skipped (a list of
    (list file, lineno, image path, reason)), report_path, seconds, and with a hierarchy
    labels_added and images_closed (images that gained a label), over the shards written.
    """
    if class_num is None:
        raise InputError('class_num is required')
    if isinstance(class_num, bool) or not isinstance(class_num, numbers.Integral) \
            or class_num <= 0:
        raise InputError('class_num must be a positive integer, got %r' % (class_num,))
    if split not in SPLITS:
        raise InputError('split must be one of %s, got %r' % ('/'.join(SPLITS), split))
    if num_shards is not None and num_shards <= 0:
        raise InputError('num_shards must be > 0, got %d' % num_shards)
    if start_index < 0:
        raise InputError('start_index must be >= 0, got %d' % start_index)
    if workers is not None and workers < 1:
        raise InputError('workers must be >= 1, got %d' % workers)
    if label_layout not in LABEL_LAYOUTS:
        raise InputError('label_layout must be one of %s, got %r'
                         % ('/'.join(LABEL_LAYOUTS), label_layout))
    if short_side < 0:
        raise InputError('short_side must be >= 0, got %d' % short_side)
    if not 1 <= jpeg_quality <= 100:
        raise InputError('jpeg_quality must be in [1, 100], got %d' % jpeg_quality)
    if hierarchy is not None and len(hierarchy) != class_num:
        raise InputError(hierarchy_lib.class_num_mismatch(hierarchy, class_num))
    list_files = resolve_lists(lists)
    if not list_files:
        raise InputError('no image list given (pass list files or a list directory)')
    if num_shards is not None and len(list_files) != 1:
        raise InputError('num_shards needs exactly one list file, got %d'
                         % len(list_files))
    image_root = os.fspath(image_root)
    if not os.path.isdir(image_root):
        raise InputError('image root is not a directory: %s' % image_root)

    # Validate everything first: a bad line in the last list must not cost a
    # half-written output tree.
    counts = [sum(1 for _ in scan_list(path, class_num)) for path in list_files]
    if sum(counts) == 0:
        raise InputError('no images listed in %s' % ', '.join(list_files))

    split_dir = os.path.join(os.fspath(out_dir), split)
    if report_path is None:
        report_path = os.path.join(os.fspath(out_dir), '%s_report.txt' % split)
    report_path = os.fspath(report_path)

    # (list file, stride, offset, image count) per shard, in shard order
    if num_shards is None:
        plan = [(path, 1, 0, count) for path, count in zip(list_files, counts)]
    else:
        total = counts[0]
        plan = [(list_files[0], num_shards, k,
                 total // num_shards + (1 if k < total % num_shards else 0))
                for k in range(num_shards)]

    def note(message):
        if progress:
            sys.stderr.write(message + '\n')
            sys.stderr.flush()

    os.makedirs(split_dir, exist_ok=True)
    try:
        run_dirs.hold_lock(split_dir, 'make_tfrecords.py')
    except run_dirs.DirectoryError as e:
        raise InputError(str(e))
    paths = [shards.shard_path(split_dir, start_index + k) for k in range(len(plan))]
    to_write, shards_skipped = shards.shards_to_write(paths, overwrite, note)
    tasks = [{'index': start_index + k, 'path': shard_path, 'list': path,
              'stride': stride, 'offset': offset, 'count': count,
              'class_num': class_num, 'image_root': image_root,
              'jpeg_quality': jpeg_quality, 'label_layout': label_layout,
              'hierarchy': hierarchy, 'short_side': short_side}
             for k, (shard_path, (path, stride, offset, count))
             in enumerate(zip(paths, plan)) if shard_path in set(to_write)]

    start = time.monotonic()
    meter = _Progress(sum(t['count'] for t in tasks), progress and bool(tasks))
    workers = min(workers or common.default_workers(), len(tasks))
    results = common.run_tasks(_write_shard, tasks, workers, meter.add)
    results.sort(key=lambda r: r['index'])

    images_written = sum(r['written'] for r in results)
    order = {path: i for i, path in enumerate(list_files)}
    skipped = sorted((s for r in results for s in r['skipped']),
                     key=lambda s: (order[s[0]], s[1]))
    if tasks:
        meter.finish(images_written + len(skipped), len(skipped))
    shards_empty = [r['path'] for r in results if not r['written']]
    shards.record_counts(split_dir, {r['path']: r['written'] for r in results})
    for path in shards_empty:
        note('shard %s would be empty (no readable image); not written'
             % os.path.basename(path))

    summary = {
        'out_dir': split_dir,
        'shards_written': [r['path'] for r in results if r['written']],
        'shards_skipped': shards_skipped,
        'shards_empty': shards_empty,
        'images_written': images_written,
        'images_skipped': len(skipped),
        'skipped': skipped,
        'report_path': report_path,
        'seconds': time.monotonic() - start,
    }
    closure = []
    if hierarchy is not None:
        summary['labels_added'] = sum(r['labels_added'] for r in results)
        summary['images_closed'] = sum(r['images_closed'] for r in results)
        closure = ['# ' + _closure_line(summary, hierarchy)]
    shards.write_text_atomically(report_path, [
        '%s:%d\t%s\t%s' % entry for entry in skipped] + [
        '# %d shards written, %d existing shards skipped, %d empty shards not written, '
        '%d images written, %d images skipped'
        % (len(summary['shards_written']), len(shards_skipped), len(shards_empty),
           images_written, len(skipped))] + closure)
    if skipped and not images_written:
        raise AllImagesSkippedError(
            'all %d images were skipped (none could be read); see %s'
            % (len(skipped), report_path), summary)
    return summary


def _closure_line(summary, hierarchy):
    return ('labels added by --hierarchy %s: %d (ancestors of annotated classes), in %d '
            'of %d images written' % (hierarchy.path, summary['labels_added'],
                                      summary['images_closed'], summary['images_written']))


# ---------------------------------------------------------------------------- CLI

def _one_hot_flag(value):
    if value.strip().lower() in ('true', '1', 'yes', 'y'):
        return True
    raise argparse.ArgumentTypeError(
        'only one-hot (float32 vector) labels are supported, got %r' % value)


def build_parser():
    """The argparse parser of the command line."""
    parser = common.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Write image lists ("<path> <class>:<confidence> ...") to TFRecord '
                    'shards <out_dir>/<split>/<N>.tfrecords with the features image '
                    '(JPEG bytes), label (float32 bytes), width, height and name. '
                    'Every list is checked before anything is written; unreadable '
                    'images are skipped and listed in a report.',
        epilog='Exit status: 0 done (also with skipped images), 1 every image was '
               'skipped, 2 bad input. The short options of the original ML-Images '
               'tfrecord.py (-idx, -tfs, -im, -cls, -sidx, -one) still work.')
    parser.add_argument('lists', nargs='*', metavar='LIST',
                        help='image list files; each becomes one shard unless '
                             '--num_shards is given (a directory is read like --list_dir)')
    parser.add_argument('-idx', '--indexs', '--list_dir', dest='list_dir', metavar='DIR',
                        help='directory of image lists: every regular file in it, sorted '
                             'by name, hidden files excepted (instead of LIST arguments)')
    parser.add_argument('-tfs', '--tfrecords', '--out_dir', dest='out_dir', required=True,
                        metavar='DIR',
                        help='output directory; shards go to DIR/<split>/<N>.tfrecords '
                             '(the original tfrecord.py wrote them directly into DIR)')
    parser.add_argument('-im', '--images', '--image_root', dest='image_root', default='.',
                        metavar='DIR',
                        help='directory the image paths in the lists are relative to '
                             '(default: the current directory)')
    parser.add_argument('-cls', '--num_class', '--class_num', dest='class_num', type=int,
                        required=True, metavar='N',
                        help='number of classes = length of every label vector '
                             '(11166 for ML-Images, 1000 for ImageNet)')
    parser.add_argument('--split', choices=SPLITS, default='train',
                        help='subdirectory of the output directory (default: train)')
    parser.add_argument('-sidx', '--start_index', type=int, default=0, metavar='N',
                        help='number of the first shard file (default: 0)')
    parser.add_argument('--num_shards', type=int, metavar='K',
                        help='deal the lines of a single list round-robin into K shards')
    parser.add_argument('--workers', type=int, default=None, metavar='N',
                        help='parallel worker processes, one shard each at a time '
                             '(default: the number of CPUs, %d here)'
                             % common.default_workers())
    parser.add_argument('--report', metavar='FILE',
                        help='where to list the skipped images '
                             '(default: <out_dir>/<split>_report.txt)')
    parser.add_argument('--jpeg_quality', type=int, default=95, metavar='Q',
                        help='JPEG quality for images that must be re-encoded: non-JPEG '
                             'files, CMYK/YCCK JPEGs and downscaled images (default: 95)')
    parser.add_argument('--short_side', type=common.non_negative_int, default=0,
                        metavar='N',
                        help='store an image whose shorter side exceeds N downscaled to N '
                             '(aspect kept, antialiased, re-encoded at --jpeg_quality); '
                             'smaller images as they are. 0 = off, every image byte for '
                             'byte (default). 320 suits --image_size 224 (docs/photos.md)')
    parser.add_argument('--label_layout', choices=LABEL_LAYOUTS, default='dense',
                        help='dense: the label as class_num float32 bytes (the original\'s, read by '
                             'the original program; default). sparse: label/index + '
                             'label/value lists of the non-zero classes, a few dozen bytes '
                             'instead of 4 x class_num (train.py reads both)')
    parser.add_argument('--hierarchy', metavar='FILE',
                        help='the semantic hierarchy (dictionary_and_semantic_hierarchy.txt '
                             'of ML-Images, --class_num classes): close every image\'s '
                             'labels under ancestors -- an ancestor that is not annotated '
                             'gets the highest confidence of its annotated descendants, -1 '
                             'stays -1; the report counts the labels added')
    parser.add_argument('--overwrite', action='store_true',
                        help='rewrite shards that already exist (default: skip them, so '
                             'an interrupted run can be resumed)')
    parser.add_argument('--quiet', action='store_true',
                        help='no progress line or per-shard notes on stderr')
    parser.add_argument('-one', '--one_hot', type=_one_hot_flag, default=True,
                        metavar='TRUE',
                        help='accepted for compatibility with the original; labels are '
                             'always float32 vectors, so only true is allowed')
    return parser


def _error(message):
    sys.stderr.write('%s: error: %s\n' % (PROG, ' '.join(str(message).split())))


def _print_summary(summary, hierarchy=None):
    print('shards written: %d (in %s)' % (len(summary['shards_written']),
                                          summary['out_dir']))
    print('shards skipped (already exist): %d' % len(summary['shards_skipped']))
    if summary['shards_empty']:
        print('shards not written (no readable image): %d' % len(summary['shards_empty']))
    print('images written: %d' % summary['images_written'])
    print('images skipped: %d' % summary['images_skipped'])
    if hierarchy is not None:
        print(_closure_line(summary, hierarchy))
    print('report: %s' % summary['report_path'])
    sys.stdout.flush()


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    startup.check_versions('make_tfrecords.py')
    try:
        # intermixed: list files may come after options, as in "-cls 5 a.txt b.txt"
        args = build_parser().parse_intermixed_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 2
    if args.lists and args.list_dir:
        _error('give list files or --list_dir, not both')
        return 2
    if args.list_dir is not None and not os.path.isdir(args.list_dir):
        _error('no such list directory: %s' % args.list_dir)
        return 2
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    try:
        hierarchy = hierarchy_lib.load(args.hierarchy) if args.hierarchy else None
        summary = build_records(
            [args.list_dir] if args.list_dir is not None else args.lists,
            args.image_root, args.out_dir, split=args.split, class_num=args.class_num,
            num_shards=args.num_shards, start_index=args.start_index,
            workers=args.workers, report_path=args.report,
            jpeg_quality=args.jpeg_quality, overwrite=args.overwrite,
            progress=not args.quiet, label_layout=args.label_layout,
            hierarchy=hierarchy, short_side=args.short_side)
    except AllImagesSkippedError as exc:
        _print_summary(exc.summary, hierarchy)
        _error(exc)
        return 1
    except (MakeRecordsError, hierarchy_lib.HierarchyError) as exc:
        _error(exc)
        return 2
    except KeyboardInterrupt:
        _error('interrupted; finished shards are kept, rerun to complete the rest')
        return 130
    _print_summary(summary, hierarchy)
    return 0


if __name__ == '__main__':
    sys.exit(main())
