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
import collections
import numbers
import os
import pickle
import sys
import time

from mlimages.data import hierarchy as hierarchy_lib
from mlimages.run import run_dirs
from mlimages import errors
from mlimages.errors import AllImagesSkippedError, InputError
from mlimages.cli import worker_processes
from mlimages.cli import progress as _progress
from mlimages.recordkit import archives
from mlimages.recordkit import shard_plan
from mlimages.recordkit import shards
from mlimages.recordkit.image_lists import resolve_lists
from mlimages.recordkit.make_options import LABEL_LAYOUTS, SPLITS
from mlimages.recordkit.shard_writing import write_shard

# build_records' settings by concern, frozen; build each with the fields it needs.
# Inputs: lists (a list file, a directory of lists -- its regular files, sorted by name
#   --, or a sequence of these); image_root, the directory their image paths are relative
#   to; source, an archives.Source: the images are read from tar archives instead of
#   image_root (None), list paths missing from them are reported, not errors.
Inputs = collections.namedtuple('Inputs', 'lists image_root source', defaults=(None, None))
# Records, what each record holds: class_num, the label length (required, > 0);
#   label_layout 'dense' (the original's float32 bytes) or 'sparse' (label/index +
#   label/value, module docstring); single_label: `label` is one int64 class index, the
#   records of --label_type=single, and every line must name exactly one class with
#   confidence 1 (ListFormatError otherwise); hierarchy, a hierarchy.Hierarchy of class_num
#   classes that closes the labels under ancestors (module docstring), None writes them as
#   listed; jpeg_quality of re-encoded images; short_side > 0 stores images whose shorter
#   side exceeds it downscaled to it (images.downscale), 0 keeps every image as it is.
Records = collections.namedtuple(
    'Records', 'class_num label_layout single_label hierarchy jpeg_quality short_side',
    defaults=('dense', False, None, 95, 0))
# Output: the shards go to <out_dir>/<split>/; without num_shards list k becomes
#   <start_index + k>.tfrecords, with num_shards=K (exactly one list) its image lines are
#   dealt round-robin into shards start_index .. start_index + K - 1; report_path, where
#   the skipped images are listed (default <out_dir>/<split>_report.txt); overwrite:
#   rewrite shards that already exist (by default they are skipped).
Output = collections.namedtuple('Output', 'out_dir split num_shards start_index report_path '
                                'overwrite', defaults=('train', None, 0, None, False))
# Work: workers, processes writing shards in parallel ('spawn' context), None = the number
#   of usable CPUs, with one worker (or one shard) everything runs in this process;
#   progress: draw a progress line and per-shard notes on stderr.
Work = collections.namedtuple('Work', 'workers progress', defaults=(None, True))


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



def build_records(inputs, records, output, work=Work()):
    """Write the TFRecord shards of inputs.lists to `<output.out_dir>/<output.split>/` and
    return a summary. inputs, records, output, work: the groups above (Inputs, Records,
    Output, Work).

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
    try:
        return _build(inputs, records, output, work)
    finally:  # the lock _hold_split_dir took once the input was valid, given back
        run_dirs.release_lock(os.path.join(os.fspath(output.out_dir), output.split))


def _build(inputs, records, output, work):
    """build_records, but for the lock."""
    _check_values(records, output, work)
    list_files, image_root = _checked_inputs(inputs, output.num_shards)
    note = _notes(work.progress)
    # Validate everything first: a bad line in the last list must not cost a
    # half-written output tree. The plan (shard_plan.py) is made in the same pass.
    plans, by_key = shard_plan.scan(list_files, records.class_num, inputs.source,
                                    records.single_label)
    if sum(len(p) for p in plans) == 0:
        raise InputError('no images listed in %s' % ', '.join(list_files))
    split_dir = os.path.join(os.fspath(output.out_dir), output.split)
    report_path = output.report_path
    if report_path is None:
        report_path = os.path.join(os.fspath(output.out_dir), '%s_report.txt' % output.split)
    report_path = os.fspath(report_path)
    workers = work.workers or worker_processes.default_workers()
    missing = []
    if inputs.source is not None:
        missing = _missing_from_release(plans, by_key, list_files, inputs.source,
                                        os.fspath(output.out_dir), workers, note,
                                        work.progress)
    plan, bounds = shard_plan.shard_order(plans, output.num_shards, inputs.source)

    _hold_split_dir(split_dir)
    paths = [shards.shard_path(split_dir, output.start_index + k) for k in range(len(bounds))]
    to_write, shards_skipped = shards.shards_to_write(paths, output.overwrite, note)
    plan_path = os.path.join(split_dir, '.plan-%d.npy' % os.getpid())
    tasks = _tasks(list(zip(paths, bounds)), set(to_write), list_files, plan_path,
                   image_root, inputs.source, records, output.start_index)
    start = time.monotonic()
    meter = _Progress(sum(t['count'] for t in tasks), work.progress and bool(tasks))
    results = _run_tasks(tasks, plan, plan_path, records.hierarchy,
                         min(workers, len(tasks)), meter)
    summary = _summary(results, missing, list_files, split_dir, shards_skipped, report_path,
                       meter if tasks else None, note, start)
    closure = _closure_totals(summary, results, missing, records.hierarchy, inputs.source)
    _write_report(report_path, summary, closure)
    if summary['skipped'] and not summary['images_written']:
        raise AllImagesSkippedError(
            'all %d images were skipped (none could be read); see %s%s'
            % (len(summary['skipped']), report_path, archives_hint(image_root)), summary)
    return summary


def _check_values(records, output, work):
    """Raises InputError for a setting out of range (checked before any list is read)."""
    class_num = records.class_num
    if class_num is None:
        raise InputError('class_num is required')
    if isinstance(class_num, bool) or not isinstance(class_num, numbers.Integral) \
            or class_num <= 0:
        raise InputError('class_num must be a positive integer, got %r' % (class_num,))
    if output.split not in SPLITS:
        raise InputError('split must be one of %s, got %r' % ('/'.join(SPLITS), output.split))
    if output.num_shards is not None and output.num_shards <= 0:
        raise InputError('num_shards must be > 0, got %d' % output.num_shards)
    if output.start_index < 0:
        raise InputError('start_index must be >= 0, got %d' % output.start_index)
    if work.workers is not None and work.workers < 1:
        raise InputError('workers must be >= 1, got %d' % work.workers)
    if records.label_layout not in LABEL_LAYOUTS:
        raise InputError('label_layout must be one of %s, got %r'
                         % ('/'.join(LABEL_LAYOUTS), records.label_layout))
    if records.short_side < 0:
        raise InputError('short_side must be >= 0, got %d' % records.short_side)
    if not 1 <= records.jpeg_quality <= 100:
        raise InputError('jpeg_quality must be in [1, 100], got %d' % records.jpeg_quality)
    if records.hierarchy is not None and len(records.hierarchy) != class_num:
        raise InputError(hierarchy_lib.class_num_mismatch(records.hierarchy, class_num))
    if records.single_label and records.hierarchy is not None:
        raise InputError('a hierarchy closes multi-label labels, not single class indices')


def _checked_inputs(inputs, num_shards):
    """(the list files, the image root as a str -- None with a source); raises InputError
    for no list, a num_shards without exactly one, or an image root or tar directory that
    is not a directory."""
    list_files = resolve_lists(inputs.lists)
    if not list_files:
        raise InputError('no image list given (pass list files or a list directory)')
    if num_shards is not None and len(list_files) != 1:
        raise InputError('num_shards needs exactly one list file, got %d'
                         % len(list_files))
    image_root, source = inputs.image_root, inputs.source
    if source is None:
        image_root = os.fspath(image_root)
        if not os.path.isdir(image_root):
            raise InputError('image root is not a directory: %s' % image_root)
    elif source.layout == 'tars' and not os.path.isdir(source.path):
        raise InputError('--image_tars is not a directory: %s' % source.path)
    return list_files, image_root


def _notes(enabled):
    """note(message): a line on stderr when progress is shown, else nothing."""
    def note(message):
        if enabled:
            sys.stderr.write(message + '\n')
            sys.stderr.flush()
    return note


def _hold_split_dir(split_dir):
    """Create split_dir and take its lock (run_dirs): a second builder of the same split
    is refused naming the first. Then remove the plan a killed run left behind."""
    os.makedirs(split_dir, exist_ok=True)
    try:
        run_dirs.hold_lock(split_dir, 'make_tfrecords.py')
    except errors.DirectoryError as e:
        raise InputError(str(e))
    for name in os.listdir(split_dir):  # the plan a killed run left behind (we hold the lock)
        if name.startswith('.plan-') and name.endswith(('.npy', '.pickle')):
            os.remove(os.path.join(split_dir, name))


def _tasks(shard_bounds, to_write, list_files, plan_path, image_root, source, records,
           start_index):
    """The task dicts of shard_writing.write_shard, one a shard to write: shard_bounds
    holds (path, (list number, begin, end)) of every shard, in shard order."""
    return [{'index': start_index + k, 'path': shard_path, 'list': list_files[number],
             'plan': plan_path, 'start': begin, 'stop': end, 'count': end - begin,
             'class_num': records.class_num, 'image_root': image_root,
             'jpeg_quality': records.jpeg_quality, 'label_layout': records.label_layout,
             'hierarchy': records.hierarchy, 'short_side': records.short_side,
             'source': source, 'single_label': records.single_label}
            for k, (shard_path, (number, begin, end)) in enumerate(shard_bounds)
            if shard_path in to_write]


def _run_tasks(tasks, plan, plan_path, hierarchy, workers, meter):
    """The results of write_shard for every task, by shard index, `workers` processes in
    parallel. The plan is saved to plan_path for them, the hierarchy pickled once beside it
    for more than one worker; both removed at the end."""
    shard_plan.save(plan, plan_path)
    shared = plan_path[:-len('.npy')] + '-hierarchy.pickle'
    try:
        if hierarchy is not None and workers > 1:
            with open(shared, 'wb') as f:
                pickle.dump(hierarchy, f)
            tasks = [dict(t, hierarchy=None, hierarchy_file=shared) for t in tasks]
        results = worker_processes.run_tasks(write_shard, tasks, workers, meter.add)
    finally:
        for path in (plan_path, shared):
            if os.path.exists(path):
                os.remove(path)
    results.sort(key=lambda r: r['index'])
    return results


def _summary(results, missing, list_files, split_dir, shards_skipped, report_path, meter,
             note, start):
    """build_records' summary but for the hierarchy and source totals; the shards' record
    counts saved (shards.record_counts), the meter (None: none drawn) finished and the
    empty shards noted."""
    images_written = sum(r['written'] for r in results)
    order = {path: i for i, path in enumerate(list_files)}
    skipped = sorted([s for r in results for s in r['skipped']] + missing,
                     key=lambda s: (order[s[0]], s[1]))
    if meter is not None:
        meter.finish(images_written + len(skipped) - len(missing),
                     len(skipped) - len(missing))
    shards_empty = [r['path'] for r in results if not r['written']]
    shards.record_counts(split_dir, {r['path']: r['written'] for r in results})
    for path in shards_empty:
        note('shard %s would be empty (no readable image); not written'
             % os.path.basename(path))
    return {
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


def _closure_totals(summary, results, missing, hierarchy, source):
    """Add the hierarchy's labels_added and images_closed, and the source's
    images_missing, to summary; returns the report's lines on them."""
    closure = []
    if hierarchy is not None:
        summary['labels_added'] = sum(r['labels_added'] for r in results)
        summary['images_closed'] = sum(r['images_closed'] for r in results)
        closure = ['# ' + closure_line(summary, hierarchy)]
    if source is not None:
        summary['images_missing'] = len(missing)
        closure.append('# %d listed images missing from the release (%s)'
                       % (len(missing), source.describe()))
    return closure


def _write_report(report_path, summary, closure):
    """The report: a line a skipped image, then the totals and the closure lines."""
    shards.write_text_atomically(report_path, [
        '%s:%d\t%s\t%s' % entry for entry in summary['skipped']] + [
        '# %d shards written, %d existing shards skipped, %d empty shards not written, '
        '%d images written, %d images skipped'
        % (len(summary['shards_written']), len(summary['shards_skipped']),
           len(summary['shards_empty']), summary['images_written'],
           summary['images_skipped'])] + closure)


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


def _missing_from_release(plans, by_key, list_files, source, out_dir, workers, note,
                          progress):
    """The report entries of the images missing from the release, after
    shard_plan.resolve with the archives indexed by `workers` processes."""
    def index(tasks):
        archives.index_all(tasks, workers, progress)
    try:
        if shard_plan.resolve(plans, by_key, list_files, source, out_dir, index, note):
            return shard_plan.missing_entries(plans, list_files, source)
    except errors.ArchiveError as exc:
        raise InputError(str(exc)) from None
    return []


def closure_line(summary, hierarchy):
    """The summary's line on the labels --hierarchy added."""
    return ('labels added by --hierarchy %s: %d (ancestors of annotated classes), in %d '
            'of %d images written' % (hierarchy.path, summary['labels_added'],
                                      summary['images_closed'], summary['images_written']))
