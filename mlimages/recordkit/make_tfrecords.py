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
file. Every list is validated completely before anything is written, in the one pass
that makes the plan of the shards (shard_plan.py: each task then reads only its own
lines). A shard is written under a temporary name and renamed when complete, its record
count added to records.txt at once; a rerun skips finished shards (shards.py).

ImageNet's tar archives are read in place (archives.py): --image_tars DIR for the
per-synset tars of the 21k releases, with a list as usual; --imagenet_train_tar and
--imagenet_val_tar for ILSVRC2012, whose lists imagenet.py writes, with single-label
records (`label` one int64 class index, records.make_class_index_example); --label_type
single writes them from any list whose every line names one class (make_image_list.py's
of a folder per class).

--hierarchy FILE (dictionary_and_semantic_hierarchy.txt) closes each image's labels under
ancestors before they are written (hierarchy.close: an ancestor a with y_a == 0 gets
max(0, max of y over the descendants of a); any other y_a, -1 included, is kept) and the
report counts the labels added.

Run from the repository root:

    .venv/bin/python tools/make_tfrecords.py -idx image_lists/ -tfs data/ -im images/ -cls 11166
"""
import numbers
import os
import pickle
import sys
import time

from mlimages.data import hierarchy as hierarchy_lib
from mlimages.run import run_dirs
from mlimages.config import startup
from mlimages import errors
from mlimages.errors import (AllImagesSkippedError, BadImageError, InputError,
                             MakeRecordsError, stopped)
from mlimages.cli import common
from mlimages.cli import progress as _progress
from mlimages.recordkit import archives
from mlimages.recordkit import shard_plan
from mlimages.recordkit import shards
from mlimages.recordkit.image_lists import resolve_lists
from mlimages.recordkit.images import load_image, record_image
from mlimages.recordkit.make_options import (LABEL_LAYOUTS, PROG, SPLITS,
                                        archive_flag_problem, build_parser, inputs)



def _write_shard(task, on_progress=None):
    """Write one shard of the plan (shard_plan.py; shards.ShardWriter); returns a result
    dict. Archived images are read first, each archive opened once (archives.py), and
    written in list order; the task holds its shard's image bytes meanwhile."""
    skipped = []
    added = {'labels': 0, 'images': 0}
    pending_done = pending_skipped = 0
    last_report = time.monotonic()
    if task.get('hierarchy_file'):
        task = dict(task, hierarchy=_shared_hierarchy(task['hierarchy_file']))
    lines = list(shard_plan.task_lines(task))
    source = task.get('source')
    if source is not None:
        data_of = archives.read_members(source, [
            (i, source.split(line[1])[0], line[3], line[4]) for i, line in enumerate(lines)])
    with shards.ShardWriter(task['path']) as writer:
        for position, (lineno, image, labels, _, _) in enumerate(lines):
            try:
                if source is not None:
                    data, width, height = record_image(
                        data_of.pop(position), task['jpeg_quality'],
                        task.get('short_side', 0))
                else:
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
    if writer.count:
        shards.append_count(task['path'], writer.count)
    if on_progress is not None and (pending_done or pending_skipped):
        on_progress(pending_done, pending_skipped)
    return {'index': task['index'], 'path': task['path'], 'written': writer.count,
            'skipped': skipped, 'labels_added': added['labels'],
            'images_closed': added['images']}


_HIERARCHIES = {}


def _shared_hierarchy(path):
    """The hierarchy a run's parent pickled once for its workers, loaded once per worker:
    in every task it would be pickled per shard (0.9 MB, 30 ms at 11,166 classes)."""
    if path not in _HIERARCHIES:
        with open(path, 'rb') as f:
            _HIERARCHIES[path] = pickle.load(f)
    return _HIERARCHIES[path]


def _labelled_example(task, data, labels, width, height, image):
    """(the Example of one image, labels added): with task['hierarchy'] the labels are
    closed under ancestors first (hierarchy.close_sparse, the module docstring's rule)."""
    classes = sorted(labels)
    values, added = [labels[c] for c in classes], 0
    if task.get('hierarchy') is not None:
        classes, values, added = hierarchy_lib.close_sparse(classes, values,
                                                            task['hierarchy'])
    records = common.checkout_module('mlimages.data.records')
    if task.get('single_label'):
        return records.make_class_index_example(data, classes[0], width, height, image), 0
    if task.get('label_layout') == 'sparse':
        return records.make_sparse_example(data, classes, values, width, height, image), added
    label = records.dense_label(classes, values, task['class_num'])
    return records.make_example(data, label, width, height, image), added


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
                  hierarchy=None, short_side=0, source=None, single_label=False):
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
    source: an archives.Source: the images are read from tar archives instead of
      image_root (None); list paths missing from them are reported, not errors.
    single_label: write `label` as one int64 class index, the records of
      --label_type=single; every line must name exactly one class with confidence 1
      (ListFormatError otherwise).

    Every list is validated before anything is written. Raises InputError or
    ListFormatError for bad input (nothing is created then) and AllImagesSkippedError
    (after writing the report) when not a single image could be read.

    Returns a dict: out_dir (the split directory), shards_written, shards_skipped
    (already existed), shards_empty (no readable image, not written) -- each a list of
    paths --, images_written, images_skipped, skipped (a list of
    (list file, lineno, image path, reason)), report_path, seconds, and with a hierarchy
    labels_added and images_closed (images that gained a label), over the shards written;
    with a source images_missing (in skipped too, reason "missing from the release").
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
    if single_label and hierarchy is not None:
        raise InputError('a hierarchy closes multi-label labels, not single class indices')
    list_files = resolve_lists(lists)
    if not list_files:
        raise InputError('no image list given (pass list files or a list directory)')
    if num_shards is not None and len(list_files) != 1:
        raise InputError('num_shards needs exactly one list file, got %d'
                         % len(list_files))
    if source is None:
        image_root = os.fspath(image_root)
        if not os.path.isdir(image_root):
            raise InputError('image root is not a directory: %s' % image_root)
    elif source.layout == 'tars' and not os.path.isdir(source.path):
        raise InputError('--image_tars is not a directory: %s' % source.path)

    def note(message):
        if progress:
            sys.stderr.write(message + '\n')
            sys.stderr.flush()

    # Validate everything first: a bad line in the last list must not cost a
    # half-written output tree. The plan (shard_plan.py) is made in the same pass.
    plans, by_key = shard_plan.scan(list_files, class_num, source, single_label)
    if sum(len(p) for p in plans) == 0:
        raise InputError('no images listed in %s' % ', '.join(list_files))

    split_dir = os.path.join(os.fspath(out_dir), split)
    if report_path is None:
        report_path = os.path.join(os.fspath(out_dir), '%s_report.txt' % split)
    report_path = os.fspath(report_path)
    workers = workers or common.default_workers()

    missing = []
    if source is not None:
        missing = _resolve(plans, by_key, list_files, source, os.fspath(out_dir),
                           workers, note, progress)
    plan, bounds = shard_plan.shard_order(plans, num_shards, source)

    os.makedirs(split_dir, exist_ok=True)
    try:
        run_dirs.hold_lock(split_dir, 'make_tfrecords.py')
    except errors.DirectoryError as e:
        raise InputError(str(e))
    for name in os.listdir(split_dir):  # the plan a killed run left behind (we hold the lock)
        if name.startswith('.plan-') and name.endswith(('.npy', '.pickle')):
            os.remove(os.path.join(split_dir, name))
    paths = [shards.shard_path(split_dir, start_index + k) for k in range(len(bounds))]
    to_write, shards_skipped = shards.shards_to_write(paths, overwrite, note)
    plan_path = os.path.join(split_dir, '.plan-%d.npy' % os.getpid())
    to_write = set(to_write)
    tasks = [{'index': start_index + k, 'path': shard_path, 'list': list_files[number],
              'plan': plan_path, 'start': begin, 'stop': end, 'count': end - begin,
              'class_num': class_num, 'image_root': image_root,
              'jpeg_quality': jpeg_quality, 'label_layout': label_layout,
              'hierarchy': hierarchy, 'short_side': short_side, 'source': source,
              'single_label': single_label}
             for k, (shard_path, (number, begin, end))
             in enumerate(zip(paths, bounds)) if shard_path in to_write]

    start = time.monotonic()
    meter = _Progress(sum(t['count'] for t in tasks), progress and bool(tasks))
    workers = min(workers, len(tasks))
    shard_plan.save(plan, plan_path)
    shared = plan_path[:-len('.npy')] + '-hierarchy.pickle'
    try:
        if hierarchy is not None and workers > 1:
            with open(shared, 'wb') as f:
                pickle.dump(hierarchy, f)
            tasks = [dict(t, hierarchy=None, hierarchy_file=shared) for t in tasks]
        results = common.run_tasks(_write_shard, tasks, workers, meter.add)
    finally:
        for path in (plan_path, shared):
            if os.path.exists(path):
                os.remove(path)
    results.sort(key=lambda r: r['index'])

    images_written = sum(r['written'] for r in results)
    order = {path: i for i, path in enumerate(list_files)}
    skipped = sorted([s for r in results for s in r['skipped']] + missing,
                     key=lambda s: (order[s[0]], s[1]))
    if tasks:
        meter.finish(images_written + len(skipped) - len(missing),
                     len(skipped) - len(missing))
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
        'images_skipped': len(skipped) - len(missing),
        'skipped': skipped,
        'report_path': report_path,
        'seconds': time.monotonic() - start,
    }
    closure = []
    if hierarchy is not None:
        summary['labels_added'] = sum(r['labels_added'] for r in results)
        summary['images_closed'] = sum(r['images_closed'] for r in results)
        closure = ['# ' + _closure_line(summary, hierarchy)]
    if source is not None:
        summary['images_missing'] = len(missing)
        closure.append('# %d listed images missing from the release (%s)'
                       % (len(missing), source.describe()))
    shards.write_text_atomically(report_path, [
        '%s:%d\t%s\t%s' % entry for entry in skipped] + [
        '# %d shards written, %d existing shards skipped, %d empty shards not written, '
        '%d images written, %d images skipped'
        % (len(summary['shards_written']), len(shards_skipped), len(shards_empty),
           images_written, summary['images_skipped'])] + closure)
    if skipped and not images_written:
        raise AllImagesSkippedError(
            'all %d images were skipped (none could be read); see %s%s'
            % (len(skipped), report_path, archives_hint(image_root)), summary)
    return summary


def archives_hint(image_root, look=200):
    """'; <image_root> holds tar archives ...: read them with --image_tars' (or ImageNet-1k's
    own flag) when the first `look` entries of --image_root include a .tar file, else ''."""
    try:
        with os.scandir(image_root or '.') as found:
            tars = sorted(e.name for _, e in zip(range(look), found) if e.name.endswith('.tar'))
    except OSError:
        return ''
    if not tars:
        return ''
    flag = next(('--imagenet_%s_tar %s' % (split, os.path.join(image_root, name))
                 for name in tars for split in ('train', 'val') if '_img_%s' % split in name),
                '--image_tars %s' % image_root)
    return ('; --image_root %s holds tar archives (%s): they are read in place with %s '
            'instead (docs/records.md)' % (image_root, tars[0], flag))


def _resolve(plans, by_key, list_files, source, out_dir, workers, note, progress):
    """shard_plan.resolve with the archives indexed by `workers` processes; the
    report entries of the images missing from the release."""
    def index(tasks):
        archives.index_all(tasks, workers, progress)
    try:
        if shard_plan.resolve(plans, by_key, list_files, source, out_dir, index, note):
            return shard_plan.missing_entries(plans, list_files, source)
    except errors.ArchiveError as exc:
        raise InputError(str(exc)) from None
    return []


def _closure_line(summary, hierarchy):
    return ('labels added by --hierarchy %s: %d (ancestors of annotated classes), in %d '
            'of %d images written' % (hierarchy.path, summary['labels_added'],
                                      summary['images_closed'], summary['images_written']))


# ---------------------------------------------------------------------------- CLI

def _error(message):
    common.error_line(PROG, message)


def _print_summary(summary, hierarchy=None):
    print('shards written: %d (in %s)' % (len(summary['shards_written']),
                                          summary['out_dir']))
    print('shards skipped (already exist): %d' % len(summary['shards_skipped']))
    if summary['shards_empty']:
        print('shards not written (no readable image): %d' % len(summary['shards_empty']))
    print('images written: %d' % summary['images_written'])
    print('images skipped: %d' % summary['images_skipped'])
    if 'images_missing' in summary:
        print('images missing from the release: %d' % summary['images_missing'])
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
    problem = archive_flag_problem(args)
    if problem:
        _error(problem)
        return 2
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    hierarchy = None
    try:
        hierarchy = hierarchy_lib.load(args.hierarchy) if args.hierarchy else None
        lists, source, class_num = inputs(args)
        summary = build_records(
            lists, args.image_root, args.out_dir, split=args.split, class_num=class_num,
            num_shards=args.num_shards, start_index=args.start_index,
            workers=args.workers, report_path=args.report,
            jpeg_quality=args.jpeg_quality, overwrite=args.overwrite,
            progress=not args.quiet, label_layout=args.label_layout,
            hierarchy=hierarchy, short_side=args.short_side, source=source,
            single_label=bool(args.label_type == 'single' or args.imagenet_train_tar
                              or args.imagenet_val_tar))
    except AllImagesSkippedError as exc:
        _print_summary(exc.summary, hierarchy)
        _error(exc)
        return 1
    except (MakeRecordsError, errors.HierarchyError) as exc:
        _error(exc)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: one line, not a traceback
        words, status = stopped(exc)
        _error('%s; finished shards are kept, rerun the same command to complete the rest'
               % words)
        return status
    _print_summary(summary, hierarchy)
    return 0

