#!/usr/bin/env python
"""Check TFRecord shards (docs/original.md, Records) before a long training run.

    python tools/check_tfrecords.py --class_num 11166 data/            # train/ and val/
    python tools/check_tfrecords.py --class_num 12 data/train/3.tfrecords --json

Every record of every shard is read and checked the way train.py would consume it:

* the file: TensorFlow's record reader must get through it (a CRC mismatch or a
  truncated record is a DataLossError in training, too); a few trailing bytes that do not
  make up a record header are reported as a truncated file, although the reader (and so
  training) silently drops them. A zero-length file is a valid shard with 0 records and
  only a warning ("empty shard"). A file cut exactly at a record boundary cannot be told
  from a shorter shard.
* the record must be a serialized tf.train.Example. Feature names must be valid UTF-8
  (as the proto says); TensorFlow's own parser is laxer there, so this check is stricter
  than training in that one respect.
* features: `image` and `label` must be present; `width`, `height` and `name` have
  defaults in training, so their absence is a warning. Any of the five present with the
  wrong type or with other than exactly one value makes training's parse fail: bad.
* image: decoded with TensorFlow's decode_image(channels=3, expand_animations=False) --
  the decoder training uses -- so an image that decodes here decodes in training.
  Width/height features that disagree with the decoded size are a warning.
* label: little-endian float32 bytes, exactly class_num of them; every value finite and
  in [-1, 1]. Values in (-1, 0) are a warning (only -1 has a meaning: "ignore").

Totals: files, records, bad records, warnings, and over every record whose label is
valid: positives per class (label >= mask_thres) and the classes that never have one, the
label-cardinality histogram (positives per image) and the number of -1 entries.

Files are checked in parallel by --workers processes (spawned; one file per task). A
worker that dies -- a native crash in a decoder, which would kill training as well --
costs only its file, reported with the record it died on and its last stderr lines; with
one worker everything runs in the calling process. The text report lists --max_bad bad
records and warnings; --json prints everything on stdout. Progress goes to stderr.

Exit status: 0 nothing bad (warnings allowed), 1 something bad, 2 bad usage.
"""
import argparse
import collections
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

import file_db  # noqa: E402
from tools import progress as _progress  # noqa: E402

PROG = 'check_tfrecords.py'
SHARD_PATTERN = '*tfrecords'
SPLITS = ('train', 'val')
MAX_STORED_WARNINGS = 1000  # per file; counts stay exact (see check_file)
MAX_LISTED_VALUES = 5       # offending label entries quoted in one reason

# Reason prefixes, stable for scripts that grep the report.
NOT_EXAMPLE = 'not an Example'
MISSING_FEATURE = 'missing feature'
BAD_FEATURE = 'bad feature'
BAD_IMAGE = 'undecodable image'
LABEL_LENGTH = 'label length'
LABEL_VALUES = 'label values'
CORRUPT_FILE = 'corrupt file'
UNREADABLE_FILE = 'unreadable file'
CHECKER_CRASH = 'checker crashed'
# Warning prefixes.
EMPTY_SHARD = 'empty shard'
MISSING_OPTIONAL = 'missing optional feature'
SIZE_MISMATCH = 'size mismatch'
LABEL_NEGATIVE = 'label values in (-1, 0)'

CheckResult = collections.namedtuple('CheckResult',
                                     'ok reasons warnings label name positives')
CheckResult.__doc__ = """One record's verdict.

ok: no reasons. reasons: what makes the record bad (strings "<kind>: <detail>").
warnings: what is odd but trains (same form). label: the float32 label vector when it is
valid (right length, finite, in [-1, 1]), else None. name: the `name` feature as text
(undecodable bytes escaped), or None. positives: how many label values are >= mask_thres
(None without a valid label).
"""


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


_tf_module = None


def _tf():
    """tensorflow.compat.v1 in graph mode, imported on first use.

    Usage errors and --help then answer at once, and the parent of the worker
    processes, which only hands out files, never loads TensorFlow.
    """
    global _tf_module
    if _tf_module is None:
        import tensorflow.compat.v1 as tf
        # disable_v2_behavior logs a deprecation note, once in every (worker) process.
        verbosity = tf.logging.get_verbosity()
        tf.logging.set_verbosity(tf.logging.ERROR)
        tf.disable_v2_behavior()
        tf.logging.set_verbosity(verbosity)
        _tf_module = tf
    return _tf_module


# --------------------------------------------------------------------------- decoder

def _op_error_text(exc):
    """The useful part of a graph-mode OpError message (train.py's wording)."""
    import errors
    return errors.op_error_text(exc)


def _records():
    """records.py, the record format (imports TensorFlow: on first use)."""
    _tf()
    import records
    return records


class _TFDecoder(object):
    """bytes -> uint8 [H, W, 3] through TensorFlow's decode_image in a private graph."""

    def __init__(self):
        tf = _tf()
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._encoded = tf.placeholder(tf.string, [], name='encoded')
            image = tf.image.decode_image(self._encoded, channels=3,
                                          expand_animations=False)
        # Workers are processes already; more threads per session would only compete.
        config = tf.ConfigProto(intra_op_parallelism_threads=1,
                                inter_op_parallelism_threads=1, device_count={'GPU': 0})
        self._session = tf.Session(graph=self._graph, config=config)
        self._decode = self._session.make_callable(image, [self._encoded])

    def __call__(self, encoded):
        """Decoded uint8 array; raises tf.errors.OpError when TensorFlow cannot decode."""
        return self._decode(encoded)

    def close(self):
        self._session.close()


def make_tf_decoder():
    """A callable bytes -> uint8 [H, W, 3] array backed by one graph and one Session.

    It runs tf.image.decode_image(channels=3, expand_animations=False), the decoder
    training uses, and raises tf.errors.OpError for bytes it cannot decode. Build one per
    process and reuse it: building a graph and session per image is slow.
    """
    return _TFDecoder()


_default_decoder = None


def _process_decoder():
    global _default_decoder
    if _default_decoder is None:
        _default_decoder = make_tf_decoder()
    return _default_decoder


# ---------------------------------------------------------------------------- record

def _describe_values(values, indices):
    shown = ', '.join('class %d = %r' % (i, float(values[i]))
                      for i in indices[:MAX_LISTED_VALUES])
    more = len(indices) - MAX_LISTED_VALUES
    return shown + (' and %d more' % more if more > 0 else '')


def _check_label(raw, class_num, reasons, warnings):
    """The label vector, or None after appending to reasons."""
    expected = class_num * 4
    if len(raw) % 4:
        reasons.append('%s: %d bytes, not a multiple of 4 (float32); expected %d bytes '
                       '(class_num %d)' % (LABEL_LENGTH, len(raw), expected, class_num))
        return None
    if len(raw) != expected:
        reasons.append('%s: %d values, expected class_num=%d'
                       % (LABEL_LENGTH, len(raw) // 4, class_num))
        return None
    label = np.frombuffer(raw, dtype='<f4').astype(np.float32)
    with np.errstate(invalid='ignore'):
        finite = np.isfinite(label)
        outside = finite & ((label < -1.0) | (label > 1.0))
        negative = finite & (label > -1.0) & (label < 0.0)
    bad = False
    if not finite.all():
        reasons.append('%s: NaN/Inf at %s' % (LABEL_VALUES,
                                             _describe_values(label, np.flatnonzero(~finite))))
        bad = True
    if outside.any():
        reasons.append('%s: outside [-1, 1] at %s'
                       % (LABEL_VALUES, _describe_values(label, np.flatnonzero(outside))))
        bad = True
    if bad:
        return None
    if negative.any():
        warnings.append('%s: %s (only -1 means "ignore")'
                        % (LABEL_NEGATIVE, _describe_values(label, np.flatnonzero(negative))))
    return label


def _sparse_label_bytes(sparse, class_num, reasons):
    """label/index + label/value (records.sparse_entries) as the dense label's bytes, or
    None after a reason."""
    index, value = sparse
    if not len(index) or len(index) != len(value):
        reasons.append('%s: label/index has %d values, label/value %d (equal and > 0 '
                       'expected)' % (BAD_FEATURE, len(index), len(value)))
        return None
    index = np.asarray(index, np.int64)
    outside = index[(index < 0) | (index >= class_num)]
    if outside.size:
        reasons.append('%s: label/index %d outside [0, class_num=%d)'
                       % (LABEL_LENGTH, outside[0], class_num))
        return None
    return _records().dense_label(index, value, class_num).tobytes()


def check_record(serialized, class_num, decoder=None, mask_thres=0.7):
    """Check one serialized record; never raises for bad data.

    serialized: the record's bytes. class_num: the expected label length.
    decoder: a callable bytes -> decoded uint8 [H, W, 3] array that raises for bytes it
      cannot decode (see make_tf_decoder); None uses this process's TensorFlow decoder,
      built on first use.
    mask_thres: what counts as a positive in CheckResult.positives; the verdict does
      not depend on it.

    Returns a CheckResult(ok, reasons, warnings, label, name, positives); see its
    docstring.
    """
    tf = _tf()
    records = _records()
    reasons, warnings = [], []
    example = tf.train.Example()
    try:
        example.ParseFromString(bytes(serialized))
    except Exception as exc:  # DecodeError, or anything else the parser throws
        reason = '%s: cannot parse as tf.train.Example (%s)' % (
            NOT_EXAMPLE, str(exc) or type(exc).__name__)
        return CheckResult(False, [reason], [], None, None, None)

    feature_map = example.features.feature
    values = {}
    # The compact layout (make_tfrecords.py --label_layout sparse) instead of `label`.
    sparse = records.sparse_entries(feature_map)
    for key, (kind, default) in records.FEATURES.items():
        if key == 'label' and sparse is not None:
            continue
        if key not in feature_map:
            if default is None:
                reasons.append('%s: %r' % (MISSING_FEATURE, key))
            else:
                warnings.append('%s: %r (training uses %r)' % (MISSING_OPTIONAL, key, default))
            continue
        feature = feature_map[key]
        found_kind = feature.WhichOneof('kind')
        if found_kind is None:
            # TensorFlow's parser treats a Feature with no list at all as absent.
            if default is None:
                reasons.append('%s: %r has no value list' % (MISSING_FEATURE, key))
            else:
                warnings.append('%s: %r has no value list (training uses %r)'
                                % (MISSING_OPTIONAL, key, default))
            continue
        if found_kind != kind:
            reasons.append('%s: %r is a %s, training reads a %s'
                           % (BAD_FEATURE, key, found_kind, kind))
            continue
        items = getattr(feature, found_kind).value
        if len(items) != 1:
            reasons.append('%s: %r has %d values, training reads exactly 1'
                           % (BAD_FEATURE, key, len(items)))
            continue
        values[key] = items[0]

    name = None
    if 'name' in values:
        name = values['name'].decode('utf-8', 'backslashreplace')

    label = positives = None
    if sparse is not None:
        raw = _sparse_label_bytes(sparse, class_num, reasons)
        if raw is not None:
            values['label'] = raw
    if 'label' in values:
        label = _check_label(values['label'], class_num, reasons, warnings)
        if label is not None:
            # float32 against float32, as training compares: a label of 0.7 is positive
            positives = int((label >= np.float32(mask_thres)).sum())

    if 'image' in values:
        if decoder is None:
            decoder = _process_decoder()
        try:
            image = np.asarray(decoder(values['image']))
        except tf.errors.OpError as exc:
            image = None
            reasons.append('%s: %s' % (BAD_IMAGE, _op_error_text(exc)))
        except Exception as exc:  # a decoder must not turn bad data into a crash
            image = None
            reasons.append('%s: %s: %s' % (BAD_IMAGE, type(exc).__name__, exc))
        if image is not None:
            if image.ndim != 3 or image.shape[-1] != 3 or 0 in image.shape:
                reasons.append('%s: decoded to shape %s, expected [H>0, W>0, 3]'
                               % (BAD_IMAGE, list(image.shape)))
            elif 'width' in values and 'height' in values:
                height, width = image.shape[:2]
                if (values['width'], values['height']) != (width, height):
                    warnings.append('%s: width x height %d x %d in the record, the image '
                                    'decodes to %d x %d' % (SIZE_MISMATCH, values['width'],
                                                            values['height'], width, height))

    return CheckResult(not reasons, reasons, warnings, label, name, positives)


# ------------------------------------------------------------------------------ file

class _FileStats(object):
    """Label statistics of one file; merged into the totals."""

    def __init__(self, class_num, mask_thres):
        # Training compares float32 labels with a float32 threshold: 0.7 is a positive.
        self.mask_thres = np.float32(mask_thres)
        self.positives = np.zeros(class_num, np.int64)
        self.cardinality = np.zeros(1, np.int64)
        self.ignored = 0
        self.labelled = 0

    def add(self, label):
        positive = label >= self.mask_thres
        self.positives += positive
        count = int(positive.sum())
        if count >= len(self.cardinality):
            self.cardinality = np.concatenate(
                [self.cardinality, np.zeros(count + 1 - len(self.cardinality), np.int64)])
        self.cardinality[count] += 1
        self.ignored += int((label == -1.0).sum())
        self.labelled += 1


def _read_records(path):
    # tf_record_iterator is deprecated for eager code; in graph mode it is the plain
    # reader. Its deprecation note would be logged once per process.
    tf = _tf()
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity(tf.logging.ERROR)
    try:
        return tf.io.tf_record_iterator(path)
    finally:
        tf.logging.set_verbosity(verbosity)


def _record_size(length):
    return 8 + 4 + length + 4  # length, its CRC, data, data CRC


def check_file(path, class_num, mask_thres=0.7, decoder=None, on_progress=None):
    """Check every record of one shard file and return its summary dict.

    decoder: as for check_record (None: this process's TensorFlow decoder).
    on_progress: called now and then with the number of records read since the last call.

    The dict: path, records (records read), bad (a list of dicts file, index, name,
    reasons, reason), warnings (dicts file, index, name, warning; at most
    MAX_STORED_WARNINGS kept), warning_count (exact), warning_kinds ({prefix: count}),
    corrupt (True when the file could not be read to its end), labelled_records (records
    with a valid label), positives (per class, label >= mask_thres), cardinality
    (positives per image -> records, as a list), ignored_entries (-1 values), seconds.
    A corrupt file has one bad entry with index = the first unreadable record and
    last_good_index = the record before it (-1: none).
    """
    return _check_file(path, class_num, mask_thres, decoder, on_progress)


def _check_file(path, class_num, mask_thres, decoder, on_progress, on_record=None):
    # on_record(index) before each record: a worker notes where it is, so that the
    # parent can name the record if the worker dies on it.
    tf = _tf()
    start = time.monotonic()
    path = os.fspath(path)
    stats = _FileStats(class_num, mask_thres)
    bad, warnings = [], []
    warning_kinds = collections.Counter()
    summary = {'path': path, 'records': 0, 'bad': bad, 'warnings': warnings,
               'corrupt': False}

    def warn(index, name, text):
        warning_kinds[text.split(':')[0]] += 1
        if len(warnings) < MAX_STORED_WARNINGS:
            warnings.append({'file': path, 'index': index, 'name': name, 'warning': text})

    def file_problem(kind, detail, index):
        summary['corrupt'] = True
        bad.append({'file': path, 'index': index, 'last_good_index': index - 1,
                    'name': None, 'reasons': ['%s: %s' % (kind, detail)],
                    'reason': '%s: %s' % (kind, detail)})

    if decoder is None:
        decoder = _process_decoder()
    count = consumed = pending = 0
    last_report = time.monotonic()
    try:
        size = os.path.getsize(path)
        for record in _read_records(path):
            if on_record is not None:
                on_record(count)
            result = check_record(record, class_num, decoder)
            if not result.ok:
                bad.append({'file': path, 'index': count, 'name': result.name,
                            'reasons': result.reasons, 'reason': '; '.join(result.reasons)})
            for text in result.warnings:
                warn(count, result.name, text)
            if result.label is not None:
                stats.add(result.label)
            consumed += _record_size(len(record))
            count += 1
            pending += 1
            now = time.monotonic()
            if on_progress is not None and now - last_report >= _progress.PROGRESS_INTERVAL:
                on_progress(pending)
                pending, last_report = 0, now
        if consumed < size:
            # The reader takes a partial record header for the end of the file.
            file_problem(CORRUPT_FILE, 'truncated: %d bytes after the last complete record '
                         '%d are not a whole record' % (size - consumed, count - 1), count)
    except tf.errors.DataLossError as exc:
        file_problem(CORRUPT_FILE, 'unreadable from record %d on (last good record: %d): %s'
                     % (count, count - 1, _op_error_text(exc)), count)
    except (tf.errors.OpError, OSError) as exc:
        file_problem(UNREADABLE_FILE, _op_error_text(exc), count)
    if on_progress is not None and pending:
        on_progress(pending)
    if count == 0 and not summary['corrupt']:
        warn(None, None, '%s: the file holds no records' % EMPTY_SHARD)

    summary.update({
        'records': count,
        'warning_count': sum(warning_kinds.values()),
        'warning_kinds': dict(warning_kinds),
        'labelled_records': stats.labelled,
        'positives': stats.positives.tolist(),
        'cardinality': stats.cardinality.tolist(),
        'ignored_entries': stats.ignored,
        'seconds': time.monotonic() - start,
    })
    return summary


# ----------------------------------------------------------------------------- files

def _quiet_tensorflow():
    # TensorFlow's C++ start-up chatter (CUDA plugins, ...) would garble the progress
    # line; errors that matter reach Python as exceptions. Only before TF is loaded.
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')


def _worker_main(conn, class_num, mask_thres, position, log_path):
    """A worker process: check the files the parent sends over `conn` until None."""
    _quiet_tensorflow()
    # Ctrl-C reaches the whole process group; the parent handles it and ends the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Native decoders write to fd 2 (libjpeg's "Corrupt JPEG data: ..."): keep that off
    # the progress line, but keep the current record's share for a crash report.
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 2)
    os.close(log)

    def progress(records):
        conn.send(('progress', records))

    def at_record(index):
        position.value = index
        os.ftruncate(2, 0)

    while True:
        try:
            path = conn.recv()
        except EOFError:  # the parent is gone
            return
        if path is None:
            return
        try:
            summary = _check_file(path, class_num, mask_thres, None, progress, at_record)
        except Exception as exc:  # a checker bug: the parent re-raises it
            conn.send(('error', '%s: %s' % (type(exc).__name__, exc)))
        else:
            conn.send(('done', summary))


class _Progress(_progress.ProgressLine):
    """'files done/total, records, records/s'."""

    def __init__(self, total_files, enabled, stream=None):
        super(_Progress, self).__init__(enabled, stream)
        self.total = total_files
        self.files = self.records = 0

    def add(self, records=0, files=0):
        self.records += records
        self.files += files
        self.tick()

    def text(self):
        return '%d/%d files, %d records, %.1f records/s' % (
            self.files, self.total, self.records, self.rate(self.records))


def _crashed_file(path, exitcode, index, last_output):
    if exitcode is not None and exitcode < 0:
        try:
            how = 'killed by %s' % signal.Signals(-exitcode).name
        except ValueError:
            how = 'killed by signal %d' % -exitcode
    else:
        how = 'exit status %s' % exitcode
    where = 'record %d' % index if index >= 0 else 'opening the file'
    reason = ('%s: the checking process died (%s) at %s, most likely in TensorFlow, '
              'which training uses too; the rest of the file was not checked'
              % (CHECKER_CRASH, how, where))
    if last_output:
        reason += '; its last output: %s' % last_output
    return {'path': path, 'records': max(index, 0), 'corrupt': True,
            'bad': [{'file': path, 'index': index if index >= 0 else None,
                     'last_good_index': None, 'name': None,
                     'reasons': [reason], 'reason': reason}],
            'warnings': [], 'warning_count': 0, 'warning_kinds': {},
            'labelled_records': 0, 'positives': None, 'cardinality': [0],
            'ignored_entries': 0, 'seconds': 0.0}


class _Worker(object):
    """One worker process, its end of the pipe and the file it is checking."""

    def __init__(self, ctx, class_num, mask_thres):
        self.conn, child_conn = ctx.Pipe()
        self.position = ctx.RawValue('q', -1)
        handle, self.log_path = tempfile.mkstemp(prefix='check_tfrecords-', suffix='.log')
        os.close(handle)
        self.process = ctx.Process(
            target=_worker_main, daemon=True,
            args=(child_conn, class_num, mask_thres, self.position, self.log_path))
        self.process.start()
        child_conn.close()
        self.task = None  # index into paths

    def last_output(self, lines=3, limit=500):
        """The last lines the process wrote to its stderr, on one line."""
        try:
            with open(self.log_path, 'rb') as f:
                text = f.read().decode('utf-8', 'replace')
        except OSError:
            return ''
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return ' | '.join(tail)[-limit:]

    def assign(self, task, path):
        self.task = task
        self.position.value = -1
        try:
            self.conn.send(path)
        except OSError:
            pass  # it died already: reported as a crash on this file, like any other

    def messages(self):
        """The messages waiting in the pipe; a closed pipe (the process died) ends them."""
        out = []
        try:
            while self.conn.poll():
                out.append(self.conn.recv())
        except (EOFError, OSError):
            pass
        return out

    def dead(self):
        return not self.process.is_alive()

    def stop(self, kill=False):
        if kill:
            self.process.terminate()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
        try:
            os.remove(self.log_path)
        except OSError:
            pass


def _run_workers(paths, class_num, mask_thres, workers, meter):
    # Own processes and one pipe each, not a Pool: a worker that dies (a crash in a
    # native decoder) must cost its file only -- a Pool would wait for it forever, and a
    # queue shared with the others could be left locked -- and its shared position and
    # stderr name the record it died on and why.
    ctx = multiprocessing.get_context('spawn')  # forking a process with TF loaded is unsafe
    todo = collections.deque(enumerate(paths))
    results = [None] * len(paths)
    live = []
    try:
        while todo or any(w.task is not None for w in live):
            while todo and len(live) < workers:
                worker = _Worker(ctx, class_num, mask_thres)
                worker.assign(*todo.popleft())
                live.append(worker)
            multiprocessing.connection.wait(
                [w.conn for w in live] + [w.process.sentinel for w in live],
                timeout=_progress.PROGRESS_INTERVAL / 2)
            for worker in list(live):
                dead = worker.dead()  # before reading: then every message it sent is read
                for kind, payload in worker.messages():
                    if kind == 'progress':
                        meter.add(payload)
                    elif kind == 'done':
                        results[worker.task] = payload
                        worker.task = None
                        meter.add(files=1)
                        if todo and not dead:
                            worker.assign(*todo.popleft())
                    else:
                        raise RuntimeError('checking %s failed: %s'
                                           % (paths[worker.task], payload))
                if dead:
                    if worker.task is not None:
                        results[worker.task] = _crashed_file(
                            paths[worker.task], worker.process.exitcode,
                            worker.position.value, worker.last_output())
                        meter.add(files=1)
                        worker.task = None
                    live.remove(worker)
                    worker.stop(kill=True)
                elif worker.task is None and not todo:
                    live.remove(worker)
                    worker.stop()
    finally:
        for worker in live:
            worker.stop(kill=True)
    return results


def check_files(paths, class_num, workers=None, progress=True, mask_thres=0.7):
    """Check shard files, `workers` processes in parallel, and return the overall summary.

    paths: shard file paths (use resolve_inputs for directories). workers: processes
    ('spawn' context), one file per task; None = the number of usable CPUs; with one
    worker or one file everything runs in this process. A worker process that dies
    makes its file bad (reason "checker crashed: ..." naming the record) and is
    replaced. progress: draw a progress line on stderr.

    Returns a dict: class_num, mask_thres, ok (nothing bad), seconds, files (the per-file
    summaries of check_file, in the order of `paths`, without their per-class positives)
    and totals: files, records, bad_records, corrupt_files, warnings, labelled_records,
    ignored_entries, positives (per class), never_positive (classes without a positive),
    cardinality (list: positives per image -> records).
    """
    paths = [os.fspath(p) for p in paths]
    if class_num < 1:
        raise ValueError('class_num must be >= 1, got %d' % class_num)
    if workers is not None and workers < 1:
        raise ValueError('workers must be >= 1, got %d' % workers)
    start = time.monotonic()
    meter = _Progress(len(paths), progress)
    workers = min(workers or _progress.default_workers(), len(paths))
    if workers <= 1:
        per_file = []
        for path in paths:
            per_file.append(check_file(path, class_num, mask_thres,
                                       on_progress=lambda n: meter.add(n)))
            meter.add(files=1)
    else:
        per_file = _run_workers(paths, class_num, mask_thres, workers, meter)
    if paths:
        meter.finish()

    positives = np.zeros(class_num, np.int64)
    cardinality = np.zeros(1, np.int64)
    for summary in per_file:
        if summary['positives'] is not None:
            positives += np.asarray(summary['positives'], np.int64)
        found = np.asarray(summary['cardinality'], np.int64)
        if len(found) > len(cardinality):
            cardinality = np.concatenate([cardinality,
                                          np.zeros(len(found) - len(cardinality), np.int64)])
        cardinality[:len(found)] += found
    totals = {
        'files': len(per_file),
        'records': sum(s['records'] for s in per_file),
        'bad_records': sum(len(s['bad']) for s in per_file),
        'corrupt_files': sum(1 for s in per_file if s['corrupt']),
        'warnings': sum(s['warning_count'] for s in per_file),
        'labelled_records': sum(s['labelled_records'] for s in per_file),
        'ignored_entries': sum(s['ignored_entries'] for s in per_file),
        'positives': positives.tolist(),
        'never_positive': np.flatnonzero(positives == 0).tolist(),
        'cardinality': cardinality.tolist(),
    }
    # Per-class counts of every file would make the summary class_num x files large.
    files = [{k: v for k, v in s.items() if k != 'positives'} for s in per_file]
    return {'class_num': class_num, 'mask_thres': mask_thres,
            'ok': totals['bad_records'] == 0, 'totals': totals, 'files': files,
            'seconds': time.monotonic() - start}


def resolve_inputs(inputs):
    """Shard paths from files and directories; raises UsageError for bad input.

    A directory contributes its own *tfrecords files and those of its train/ and val/
    subdirectories, each listed in natural order (2 before 10). A file given twice (or
    both directly and through its directory) is checked once.
    """
    paths, seen = [], set()
    for item in inputs:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = []
            for sub in ('',) + SPLITS:
                try:
                    found.extend(file_db.list_shards(item, sub, SHARD_PATTERN))
                except file_db.DataError:
                    pass
            if not found:
                raise UsageError('no shard files (%s) in %s or its %s subdirectories'
                                 % (SHARD_PATTERN, item, '/ and '.join(SPLITS) + '/'))
        elif os.path.isfile(item):
            found = [item]
        elif os.path.exists(item):
            raise UsageError('not a regular file or directory: %s' % item)
        else:
            raise UsageError('no such file or directory: %s' % item)
        for path in found:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                paths.append(path)
    return paths


# ----------------------------------------------------------------------------- report

def _format_index(entry):
    text = 'record %d' % entry['index'] if entry['index'] is not None else 'file'
    if entry.get('name'):
        text += ' (%s)' % entry['name']
    return text


def format_report(summary, max_bad=50):
    """The text report of a check_files summary (a str ending in a newline)."""
    totals = summary['totals']
    out = []
    seconds = summary['seconds']
    out.append('checked %d files, %d records in %.1f s (%.1f records/s), class_num %d'
               % (totals['files'], totals['records'], seconds,
                  totals['records'] / max(seconds, 1e-9), summary['class_num']))
    out.append('')
    out.append('files:')
    for s in summary['files']:
        note = []
        if s['bad']:
            note.append('%d bad' % len(s['bad']))
        if s['corrupt']:
            note.append('CORRUPT')
        if s['warning_count']:
            note.append('%d warning%s' % (s['warning_count'],
                                          '' if s['warning_count'] == 1 else 's'))
        out.append('  %s: %d records%s' % (s['path'], s['records'],
                                           ', ' + ', '.join(note) if note else ''))

    bad = [b for s in summary['files'] for b in s['bad']]
    if bad:
        out.append('')
        out.append('bad records (%d):' % len(bad))
        for entry in bad[:max_bad]:
            out.append('  %s: %s: %s' % (entry['file'], _format_index(entry), entry['reason']))
        if len(bad) > max_bad:
            out.append('  ... and %d more (--max_bad, or --json for all)'
                       % (len(bad) - max_bad))
        lengths = collections.Counter(
            r for b in bad for r in b['reasons']
            if r.startswith(LABEL_LENGTH) and 'values, expected' in r)
        if len(lengths) == 1 and sum(lengths.values()) == totals['records']:
            found = lengths.most_common(1)[0][0].split(':')[1].split()[0]
            out.append('  every record has a label of another length: is --class_num %s?'
                       % found)

    if totals['warnings']:
        warnings = [w for s in summary['files'] for w in s['warnings']]
        kinds = collections.Counter()
        for s in summary['files']:
            kinds.update(s['warning_kinds'])
        out.append('')
        out.append('warnings (%d: %s):' % (totals['warnings'], ', '.join(
            '%s %d' % (k, n) for k, n in sorted(kinds.items()))))
        for entry in warnings[:max_bad]:
            out.append('  %s: %s: %s' % (entry['file'], _format_index(entry),
                                         entry['warning']))
        if totals['warnings'] > max_bad:
            out.append('  ... and %d more' % (totals['warnings'] - min(max_bad, len(warnings))))

    out.append('')
    out.append('labels (%d records with a valid label, positive = label >= %g):'
               % (totals['labelled_records'], summary['mask_thres']))
    out.append('  positives per image: %s' % ', '.join(
        '%d: %d' % (k, n) for k, n in enumerate(totals['cardinality']) if n))
    out.append('  -1 (ignore) entries: %d' % totals['ignored_entries'])
    never = totals['never_positive']
    shown = ', '.join(str(c) for c in never[:100]) + (', ...' if len(never) > 100 else '')
    out.append('  classes never positive: %d of %d%s' % (
        len(never), summary['class_num'], (': ' + shown) if never else ''))

    out.append('')
    if summary['ok']:
        out.append('OK: no bad records (%d warnings)' % totals['warnings'])
    else:
        out.append('BAD: %d bad records, %d corrupt files' % (totals['bad_records'],
                                                               totals['corrupt_files']))
    return '\n'.join(out) + '\n'


# -------------------------------------------------------------------------------- CLI

class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, '%s: error: %s\n' % (PROG, message))


def _int_at_least(minimum, bound):
    """An argparse type: an integer >= minimum; `bound` words the limit in the error."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError('not an integer: %r' % text) from None
        if value < minimum:
            raise argparse.ArgumentTypeError('must be %s, got %d' % (bound, value))
        return value
    return parse


_positive_int = _int_at_least(1, '> 0')
_non_negative_int = _int_at_least(0, '>= 0')


def _threshold(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('not a number: %r' % text) from None
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise argparse.ArgumentTypeError('must be in (0, 1], got %s' % text)
    return value


def build_parser():
    """The argparse parser of the command line."""
    parser = _OneLineParser(
        prog=PROG, allow_abbrev=False,
        description='Check TFRecord shards (records of image, label, width, height, name) '
                    'for everything that would break or silently spoil training, and '
                    'report label statistics.',
        epilog='Exit status: 0 nothing bad (warnings allowed), 1 bad records or corrupt '
               'files, 2 bad usage.')
    parser.add_argument('inputs', nargs='*', metavar='PATH',
                        help='shard files, or directories: their *tfrecords files and '
                             'those of their train/ and val/ subdirectories')
    parser.add_argument('--class_num', type=_positive_int, required=True, metavar='N',
                        help='label length every record must have (11166 for ML-Images)')
    parser.add_argument('--workers', type=_positive_int, default=None, metavar='N',
                        help='parallel processes, one file per task (default: the '
                             'number of CPUs, %d here)' % _progress.default_workers())
    parser.add_argument('--json', action='store_true',
                        help='print the whole summary as JSON on stdout (every bad record) '
                             'instead of the text report')
    parser.add_argument('--mask_thres', type=_threshold, default=0.7, metavar='T',
                        help='a label >= T counts as a positive (default: 0.7, as training)')
    parser.add_argument('--max_bad', type=_non_negative_int, default=50, metavar='N',
                        help='bad records (and warnings) listed in the text report '
                             '(default: 50)')
    parser.add_argument('--quiet', action='store_true', help='no progress line on stderr')
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (0 ok, 1 bad data, 2 usage)."""
    _quiet_tensorflow()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed as one line
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if not args.inputs:
            raise UsageError('no shard files or directories given')
        paths = resolve_inputs(args.inputs)
    except UsageError as exc:
        sys.stderr.write('%s: error: %s\n' % (PROG, exc))
        return 2
    try:
        summary = check_files(paths, args.class_num, workers=args.workers,
                              progress=not args.quiet, mask_thres=args.mask_thres)
    except KeyboardInterrupt:
        sys.stderr.write('\n%s: interrupted\n' % PROG)
        return 130
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=1) + '\n')
    else:
        sys.stdout.write(format_report(summary, args.max_bad))
    sys.stdout.flush()
    return 0 if summary['ok'] else 1


if __name__ == '__main__':
    sys.exit(main())
