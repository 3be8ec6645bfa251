#!/usr/bin/env python
"""Turn image lists into TFRecord shards for the multi-label trainer.

An image list has one image per line, fields separated by whitespace (tabs in the
published ML-Images lists):

    <path relative to --image_root> [<class>:<confidence> | <class>] ...

`<class>` is a 0-based class index and a bare `<class>` means confidence 1.0.
Confidences lie in [-1, 1]: -1 = ignore this class for this image, 0 = not annotated,
(0, 1] = confidence. Blank lines are skipped; a line with only a path is an image
without labels (all-zero label). The same class may appear twice on a line only with
the same confidence.

Every image becomes one `tf.train.Example` with exactly these features:

    image   bytes   the encoded JPEG. JPEG files in RGB or L (grayscale) mode are stored
                    byte for byte; anything else (PNG, GIF, BMP, WebP, MPO, CMYK/YCCK
                    JPEG, ...) is decoded with Pillow (first frame only), converted to
                    RGB and re-encoded as JPEG with --jpeg_quality. Transparency is
                    flattened onto black; CMYK uses Pillow's plain (profile-free)
                    conversion; 16-bit grey keeps its top 8 bits.
    label   bytes   little-endian float32 array of length --class_num (np '<f4' bytes)
    width   int64   width of the decoded image (Pillow's size, EXIF orientation ignored)
    height  int64   height of the decoded image
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
Images that are missing or that Pillow cannot decode are skipped and listed in a report
file. Every list is validated completely before anything is written.

Run from the repository root:

    python tools/make_tfrecords.py -idx image_lists/ -tfs data/ -im images/ -cls 11166
"""
import argparse
import io
import multiprocessing
import numbers
import os
import queue as queue_module
import re
import signal
import sys
import time

import numpy as np
from PIL import Image

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run as a script: python tools/make_tfrecords.py
    sys.path.insert(0, _ROOT)

from tools import progress as _progress  # noqa: E402

PROG = 'make_tfrecords.py'
SPLITS = ('train', 'val')
LABEL_LAYOUTS = ('dense', 'sparse')  # records.LABEL_LAYOUTS, named here without TensorFlow
SHARD_SUFFIX = '.tfrecords'
TMP_MARKER = '.tmp-'

# Strict token grammar: int() and float() alone would also accept '1_0', 'nan', 'inf'.
_INDEX_RE = re.compile(r'[+-]?\d+\Z')
_CONF_RE = re.compile(r'[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z')

_tf_module = None


class MakeRecordsError(Exception):
    """Bad input to build_records(); the CLI prints it as one line and exits 2."""


class InputError(MakeRecordsError, ValueError):
    """A bad argument: no list, a missing list file, class_num <= 0, ..."""


class ListFormatError(MakeRecordsError, ValueError):
    """A bad line in an image list; str() is '<source>:<lineno>: <what is wrong>'."""

    def __init__(self, source, lineno, what):
        super().__init__('%s:%d: %s' % (source, lineno, what))
        self.source = source
        self.lineno = lineno
        self.what = what


class AllImagesSkippedError(MakeRecordsError):
    """Every image of the job was skipped; `.summary` holds build_records' summary.

    The report has been written when this is raised. The CLI exits 1 for it.
    """

    def __init__(self, message, summary):
        super().__init__(message)
        self.summary = summary


class BadImageError(ValueError):
    """An image file that is missing or cannot be decoded; str() is the reason."""


def _tf():
    """tensorflow.compat.v1, imported on first use so list validation stays fast."""
    global _tf_module
    if _tf_module is None:
        import tensorflow.compat.v1 as tf
        _tf_module = tf
    return _tf_module


# ---------------------------------------------------------------------------- lists

def _parse_sparse(line, class_num, source, lineno):
    """(path, {class: confidence}) for one list line, or None for a blank line."""
    fields = line.split()
    if not fields:
        return None
    labels = {}
    for token in fields[1:]:
        index_text, sep, conf_text = token.partition(':')
        if not _INDEX_RE.match(index_text) or (sep and not _CONF_RE.match(conf_text)):
            raise ListFormatError(
                source, lineno, 'malformed label %r (expected <class> or '
                '<class>:<confidence>)' % token)
        index = int(index_text)
        if index < 0:
            raise ListFormatError(source, lineno, 'negative class index %d in %r'
                                  % (index, token))
        if index >= class_num:
            raise ListFormatError(source, lineno, 'class index %d out of range '
                                  '(class_num is %d)' % (index, class_num))
        confidence = float(conf_text) if sep else 1.0
        if not -1.0 <= confidence <= 1.0:
            raise ListFormatError(source, lineno, 'confidence %s of class %d outside '
                                  '[-1, 1]' % (conf_text, index))
        # Compare as float32, the precision the record keeps.
        if index in labels and np.float32(labels[index]) != np.float32(confidence):
            raise ListFormatError(source, lineno, 'class %d given twice with different '
                                  'confidences (%g and %g)'
                                  % (index, labels[index], confidence))
        labels[index] = confidence
    return fields[0], labels


def _dense(labels, class_num):
    label = np.zeros(class_num, dtype='<f4')
    for index, confidence in labels.items():
        label[index] = confidence
    return label


def parse_list_line(line, class_num, source='<list>', lineno=0):
    """Parse one image-list line.

    Returns (path, label) where label is a float32 ndarray of length class_num, or None
    for a blank line. Raises ListFormatError ("<source>:<lineno>: <what>") for a
    malformed token, a class index outside [0, class_num), a confidence outside [-1, 1]
    or a class repeated with a different confidence.
    """
    parsed = _parse_sparse(line, class_num, source, lineno)
    if parsed is None:
        return None
    path, labels = parsed
    return path, _dense(labels, class_num)


def _scan_list(path, class_num):
    """Yield (lineno, image path, {class: confidence}) for every image line of a list.

    Labels stay sparse here: a dense 11166-class label per line of a large list would
    not fit in memory.
    """
    with open(path, 'rb') as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode('utf-8')
            except UnicodeDecodeError:
                raise ListFormatError(path, lineno, 'line is not valid UTF-8') from None
            if lineno == 1:
                line = line.lstrip('\ufeff')  # editors on Windows add a BOM
            parsed = _parse_sparse(line, class_num, path, lineno)
            if parsed is not None:
                yield (lineno,) + parsed


def read_list(path, class_num):
    """Read and validate a whole image list.

    Returns a list of (lineno, image path, float32 label ndarray); blank lines are
    left out. Raises ListFormatError at the first bad line. Labels are dense, so this is
    meant for lists of moderate size (build_records itself streams).
    """
    return [(lineno, image, _dense(labels, class_num))
            for lineno, image, labels in _scan_list(path, class_num)]


def find_lists(list_dir):
    """The image lists in a directory: its regular files, sorted by name.

    Hidden files (names starting with '.') are left out so editor or OS droppings do
    not become shards. Plain string order: '10.txt' sorts before '2.txt'.
    """
    names = sorted(n for n in os.listdir(list_dir) if not n.startswith('.'))
    return [os.path.join(list_dir, n) for n in names
            if os.path.isfile(os.path.join(list_dir, n))]


# --------------------------------------------------------------------------- images

def _describe(exc):
    text = str(exc) or type(exc).__name__
    return ' '.join(text.split())  # the report has one line per image


def _to_rgb(img):
    """An RGB copy of a decoded Pillow image; transparency is flattened onto black."""
    mode = img.mode
    if mode == 'RGB':
        return img
    if mode.startswith('I;16'):
        grey = (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)
        return Image.fromarray(grey, 'L').convert('RGB')
    if mode in ('I', 'F'):
        values = np.asarray(img, dtype=np.float64)
        peak = values.max() if values.size else 0
        if peak > 255:  # wider than 8 bits (16-bit PNG/TIFF): rescale, don't clip to white
            values = values * (255.0 / (65535.0 if peak <= 65535 else peak))
        grey = np.clip(np.rint(values), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, 'L').convert('RGB')
    has_alpha = (mode in ('RGBA', 'RGBa', 'LA', 'La', 'PA')
                 or (mode == 'P' and 'transparency' in img.info))
    if has_alpha:
        rgba = img.convert('RGBA')
        flat = Image.new('RGB', img.size, (0, 0, 0))
        flat.paste(rgba, mask=rgba.getchannel('A'))
        return flat
    return img.convert('RGB')


def load_image(path, jpeg_quality=95):
    """Read one image file and return (jpeg_bytes, width, height).

    An RGB or greyscale JPEG is returned byte for byte; any other image is converted to
    RGB (see the module docstring) and re-encoded as JPEG at `jpeg_quality`. The file
    is always fully decoded, so truncated files are caught here rather than in
    training. Raises BadImageError(reason) for a missing, empty, unreadable or
    undecodable file.
    """
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        raise BadImageError('file not found') from None
    except IsADirectoryError:
        raise BadImageError('is a directory, not an image file') from None
    except OSError as exc:
        raise BadImageError('cannot read file: %s' % _describe(exc)) from None
    if not data:
        raise BadImageError('empty file (0 bytes)')
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except Image.UnidentifiedImageError:
        raise BadImageError('not an image Pillow can identify') from None
    except Image.DecompressionBombError as exc:
        raise BadImageError('too many pixels: %s' % _describe(exc)) from None
    except Exception as exc:  # Pillow raises many types (OSError, SyntaxError, ...)
        raise BadImageError('cannot decode image: %s' % _describe(exc)) from None
    width, height = img.size
    if img.format == 'JPEG' and img.mode in ('RGB', 'L'):
        return data, width, height
    try:
        rgb = _to_rgb(img)
        out = io.BytesIO()
        rgb.save(out, format='JPEG', quality=jpeg_quality)
    except Exception as exc:
        raise BadImageError('cannot convert %s image in mode %s to RGB JPEG: %s'
                            % (img.format, img.mode, _describe(exc))) from None
    return out.getvalue(), width, height


def make_example(jpeg_bytes, label, width, height, name, label_layout='dense'):
    """records.make_example: the tf.train.Example of one image."""
    return _records().make_example(jpeg_bytes, label, width, height, name, label_layout)


def make_sparse_example(jpeg_bytes, index, value, width, height, name):
    """records.make_sparse_example: the label as label/index + label/value."""
    return _records().make_sparse_example(jpeg_bytes, index, value, width, height, name)


def _records():
    """records.py, the record format (imports TensorFlow: on first use)."""
    _tf()
    import records
    return records


# --------------------------------------------------------------------------- shards

def _write_shard(task, on_progress=None):
    """Write one shard from a validated list; returns a result dict.

    The shard goes to a temporary name and is renamed only when complete, so a killed
    run never leaves a truncated N.tfrecords. A shard without any readable image is not
    written at all: a rerun after fixing the images then retries it instead of skipping
    an empty file.
    """
    tmp_path = '%s%s%d' % (task['path'], TMP_MARKER, os.getpid())
    skipped = []
    written = 0
    pending_done = pending_skipped = 0
    last_report = time.monotonic()
    writer = _tf().io.TFRecordWriter(tmp_path)
    try:
        try:
            position = -1
            for lineno, image, labels in _scan_list(task['list'], task['class_num']):
                position += 1
                if position % task['stride'] != task['offset']:
                    continue
                try:
                    data, width, height = load_image(
                        os.path.join(task['image_root'], image), task['jpeg_quality'])
                except BadImageError as exc:
                    skipped.append((task['list'], lineno, image, str(exc)))
                    pending_skipped += 1
                else:
                    if task.get('label_layout') == 'sparse':
                        classes = sorted(labels)
                        example = make_sparse_example(data, classes,
                                                      [labels[c] for c in classes],
                                                      width, height, image)
                    else:
                        example = make_example(data, _dense(labels, task['class_num']),
                                               width, height, image)
                    writer.write(example.SerializeToString())
                    written += 1
                pending_done += 1
                now = time.monotonic()
                if on_progress is not None and now - last_report >= _progress.PROGRESS_INTERVAL:
                    on_progress(pending_done, pending_skipped)
                    pending_done = pending_skipped = 0
                    last_report = now
        finally:
            writer.close()
        if written:
            os.replace(tmp_path, task['path'])
        else:
            os.remove(tmp_path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise
    if on_progress is not None and (pending_done or pending_skipped):
        on_progress(pending_done, pending_skipped)
    return {'index': task['index'], 'path': task['path'], 'written': written,
            'skipped': skipped}


_worker_queue = None


def _init_worker(progress_queue):
    global _worker_queue
    _worker_queue = progress_queue
    # The parent handles Ctrl-C and terminates the pool; workers dying on their own
    # would only add tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')


def _pool_write_shard(task):
    return _write_shard(task, lambda done, skipped: _worker_queue.put((done, skipped)))


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

    def text(self):
        return '%d/%d images, %d skipped, %.1f images/s' % (
            self.done, self.total, self.skipped, self.rate(self.done))


def _resolve_lists(lists):
    if lists is None:
        lists = []
    elif isinstance(lists, (str, bytes, os.PathLike)):
        lists = [lists]
    resolved = []
    for item in lists:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = find_lists(item)
            if not found:
                raise InputError('no list files in directory %s' % item)
            resolved.extend(found)
        elif os.path.isfile(item):
            resolved.append(item)
        elif os.path.exists(item):
            raise InputError('list is not a regular file: %s' % item)
        else:
            raise InputError('no such list file: %s' % item)
    return resolved


def _remove_stale_tmp(split_dir, shard_name):
    prefix = shard_name + TMP_MARKER
    for name in os.listdir(split_dir):
        if name.startswith(prefix):
            os.remove(os.path.join(split_dir, name))


def _write_report(report_path, skipped, summary_line):
    directory = os.path.dirname(report_path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    tmp_path = '%s%s%d' % (report_path, TMP_MARKER, os.getpid())
    with open(tmp_path, 'w', encoding='utf-8') as f:
        for source, lineno, image, reason in skipped:
            f.write('%s:%d\t%s\t%s\n' % (source, lineno, image, reason))
        f.write(summary_line + '\n')
    os.replace(tmp_path, report_path)


def build_records(lists, image_root, out_dir, split='train', class_num=None,
                  num_shards=None, start_index=0, workers=None, report_path=None,
                  jpeg_quality=95, overwrite=False, progress=True, label_layout='dense'):
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

    Every list is validated before anything is written. Raises InputError or
    ListFormatError for bad input (nothing is created then) and AllImagesSkippedError
    (after writing the report) when not a single image could be read.

    Returns a dict: out_dir (the split directory), shards_written, shards_skipped
    (already existed), shards_empty (no readable image, not written) -- each a list of
    paths --, images_written, images_skipped, skipped (a list of
    (list file, lineno, image path, reason)), report_path, seconds.
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
    if not 1 <= jpeg_quality <= 100:
        raise InputError('jpeg_quality must be in [1, 100], got %d' % jpeg_quality)
    list_files = _resolve_lists(lists)
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
    counts = [sum(1 for _ in _scan_list(path, class_num)) for path in list_files]
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
    tasks, shards_skipped = [], []
    for k, (path, stride, offset, count) in enumerate(plan):
        index = start_index + k
        name = '%d%s' % (index, SHARD_SUFFIX)
        _remove_stale_tmp(split_dir, name)
        shard_path = os.path.join(split_dir, name)
        if os.path.exists(shard_path) and not overwrite:
            note('skipping existing shard %s' % name)
            shards_skipped.append(shard_path)
            continue
        tasks.append({'index': index, 'path': shard_path, 'list': path,
                      'stride': stride, 'offset': offset, 'count': count,
                      'class_num': class_num, 'image_root': image_root,
                      'jpeg_quality': jpeg_quality, 'label_layout': label_layout})

    start = time.monotonic()
    meter = _Progress(sum(t['count'] for t in tasks), progress and bool(tasks))
    workers = min(workers or _progress.default_workers(), len(tasks))
    if workers <= 1:
        results = [_write_shard(task, meter.add) for task in tasks]
    else:
        results = _run_pool(tasks, workers, meter)
    results.sort(key=lambda r: r['index'])

    images_written = sum(r['written'] for r in results)
    order = {path: i for i, path in enumerate(list_files)}
    skipped = sorted((s for r in results for s in r['skipped']),
                     key=lambda s: (order[s[0]], s[1]))
    if tasks:
        meter.finish(images_written + len(skipped), len(skipped))
    shards_empty = [r['path'] for r in results if not r['written']]
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
    _write_report(report_path, skipped, '# %d shards written, %d existing shards skipped, '
                  '%d empty shards not written, %d images written, %d images skipped'
                  % (len(summary['shards_written']), len(shards_skipped),
                     len(shards_empty), images_written, len(skipped)))
    if skipped and not images_written:
        raise AllImagesSkippedError(
            'all %d images were skipped (none could be read); see %s'
            % (len(skipped), report_path), summary)
    return summary


def _run_pool(tasks, workers, meter):
    # 'spawn', not 'fork': forking a process that has imported TensorFlow is unsafe.
    ctx = multiprocessing.get_context('spawn')
    progress_queue = ctx.Queue()
    pool = ctx.Pool(workers, initializer=_init_worker, initargs=(progress_queue,))

    def drain(timeout):
        try:
            meter.add(*progress_queue.get(timeout=timeout))
            while True:
                meter.add(*progress_queue.get_nowait())
        except queue_module.Empty:
            pass

    try:
        pending = [pool.apply_async(_pool_write_shard, (task,)) for task in tasks]
        results = []
        while pending:
            drain(_progress.PROGRESS_INTERVAL / 2)
            still_running = []
            for async_result in pending:
                if async_result.ready():
                    results.append(async_result.get())  # re-raises a worker's error
                else:
                    still_running.append(async_result)
            pending = still_running
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


# ---------------------------------------------------------------------------- CLI

class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, '%s: error: %s (see --help)\n' % (self.prog, message))


def _one_hot_flag(value):
    if value.strip().lower() in ('true', '1', 'yes', 'y'):
        return True
    raise argparse.ArgumentTypeError(
        'only one-hot (float32 vector) labels are supported, got %r' % value)


def build_parser():
    """The argparse parser of the command line."""
    parser = _OneLineParser(
        prog=PROG, allow_abbrev=False,
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
                             % _progress.default_workers())
    parser.add_argument('--report', metavar='FILE',
                        help='where to list the skipped images '
                             '(default: <out_dir>/<split>_report.txt)')
    parser.add_argument('--jpeg_quality', type=int, default=95, metavar='Q',
                        help='JPEG quality for images that must be re-encoded: non-JPEG '
                             'files and CMYK/YCCK JPEGs (default: 95)')
    parser.add_argument('--label_layout', choices=LABEL_LAYOUTS, default='dense',
                        help='dense: the label as class_num float32 bytes (the original\'s, read by '
                             'the original program; default). sparse: label/index + '
                             'label/value lists of the non-zero classes, a few dozen bytes '
                             'instead of 4 x class_num (train.py reads both)')
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


def _print_summary(summary):
    print('shards written: %d (in %s)' % (len(summary['shards_written']),
                                          summary['out_dir']))
    print('shards skipped (already exist): %d' % len(summary['shards_skipped']))
    if summary['shards_empty']:
        print('shards not written (no readable image): %d' % len(summary['shards_empty']))
    print('images written: %d' % summary['images_written'])
    print('images skipped: %d' % summary['images_skipped'])
    print('report: %s' % summary['report_path'])
    sys.stdout.flush()


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
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
        summary = build_records(
            [args.list_dir] if args.list_dir is not None else args.lists,
            args.image_root, args.out_dir, split=args.split, class_num=args.class_num,
            num_shards=args.num_shards, start_index=args.start_index,
            workers=args.workers, report_path=args.report,
            jpeg_quality=args.jpeg_quality, overwrite=args.overwrite,
            progress=not args.quiet, label_layout=args.label_layout)
    except AllImagesSkippedError as exc:
        _print_summary(exc.summary)
        _error(exc)
        return 1
    except MakeRecordsError as exc:
        _error(exc)
        return 2
    except KeyboardInterrupt:
        _error('interrupted; finished shards are kept, rerun to complete the rest')
        return 130
    _print_summary(summary)
    return 0


if __name__ == '__main__':
    sys.exit(main())
