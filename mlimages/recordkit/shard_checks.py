"""Checks of whole shard files and their label statistics, over record_checks.check_record.

* the file: TensorFlow's record reader must get through it (a CRC mismatch or a
  truncated record is a DataLossError in training, too); a few trailing bytes that do not
  make up a record header are reported as a truncated file, although the reader (and so
  training) silently drops them. A zero-length file is a valid shard with 0 records and
  only a warning ("empty shard"). A file cut exactly at a record boundary cannot be told
  from a shorter shard.
* statistics over every record whose label is valid: positives per class
  (label >= mask_thres) and the classes that never have one, the label-cardinality
  histogram (positives per image) and the number of -1 entries.
* with a hierarchy (hierarchy.violations): the records and the (class, ancestor) pairs
  where a positive class (label >= mask_thres) has an ancestor that is not positive
  (0 <= label < mask_thres; an ignored ancestor is none), pairs counted per class; of
  these, kept_pairs have an ancestor annotated below mask_thres (0 < label < mask_thres),
  which closure keeps as annotated: violations(close(y)), the pairs a rebuild leaves.
"""
import collections
import os
import signal
import time

import numpy as np

from mlimages.data import hierarchy as hierarchy_lib
from mlimages.cli import progress as _progress
from mlimages.errors import op_error_text
from mlimages.cli import lazy_tensorflow
from mlimages.recordkit.record_checks import (CHECKER_CRASH, CORRUPT_FILE, EMPTY_SHARD,
                                 UNREADABLE_FILE, check_record, process_decoder)

MAX_STORED_WARNINGS = 1000  # per file; counts stay exact (see check_file)


class _FileStats(object):
    """Label statistics of one file; merged into the totals."""

    def __init__(self, class_num, mask_thres, hierarchy=None):
        # Training compares float32 labels with a float32 threshold: 0.7 is a positive.
        self.mask_thres = np.float32(mask_thres)
        self.hierarchy = hierarchy
        self.unclosed_pairs = np.zeros(class_num, np.int64) if hierarchy else None
        self.unclosed_records = self.kept_pairs = 0
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
        if self.hierarchy is not None:
            per_class, pairs = hierarchy_lib.violations(label, self.hierarchy,
                                                        self.mask_thres)
            self.unclosed_pairs += per_class
            self.unclosed_records += pairs > 0
            if pairs:
                closed, _ = hierarchy_lib.close_labels(label, self.hierarchy)
                self.kept_pairs += hierarchy_lib.violations(closed, self.hierarchy,
                                                            self.mask_thres)[1]


def _read_records(path):
    # tf_record_iterator is deprecated for eager code; in graph mode it is the plain
    # reader. Its deprecation note would be logged once per process.
    tf = lazy_tensorflow.tensorflow()
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity(tf.logging.ERROR)
    try:
        return tf.io.tf_record_iterator(path)
    finally:
        tf.logging.set_verbosity(verbosity)


def _record_size(length):
    return 8 + 4 + length + 4  # length, its CRC, data, data CRC


def check_file(path, class_num, mask_thres=0.7, decoder=None, on_progress=None,
               on_record=None, hierarchy=None, label_type='multi'):
    """Check every record of one shard file and return its summary dict.

    decoder: as for check_record (None: this process's TensorFlow decoder).
    on_progress: called now and then with the number of records read since the last call.
    on_record: called with each record's index before it is checked (a worker notes
      where it is, so that the parent can name the record if the worker dies on it).
    hierarchy: a hierarchy.Hierarchy of class_num classes, to count the labels that are
      not closed under ancestors (module docstring); None: not counted.
    label_type: check_record's ('single': an int64 class index per record).

    The dict: path, records (records read), bad (a list of dicts file, index, name,
    reasons, reason), warnings (dicts file, index, name, warning; at most
    MAX_STORED_WARNINGS kept), warning_count (exact), warning_kinds ({prefix: count}),
    corrupt (True when the file could not be read to its end), labelled_records (records
    with a valid label), positives (per class, label >= mask_thres), cardinality
    (positives per image -> records, as a list), ignored_entries (-1 values), seconds,
    unclosed_records, unclosed_pairs (per class; None without a hierarchy) and
    kept_pairs (module docstring).
    A corrupt file has one bad entry with index = the first unreadable record and
    last_good_index = the record before it (-1: none).
    """
    tf = lazy_tensorflow.tensorflow()
    start = time.monotonic()
    path = os.fspath(path)
    stats = _FileStats(class_num, mask_thres, hierarchy)
    found = _Findings(path)
    if decoder is None:
        decoder = process_decoder()
    progress = _Batched(on_progress)
    try:
        size = os.path.getsize(path)
        consumed = 0
        for record in _read_records(path):
            if on_record is not None:
                on_record(found.records)
            result = check_record(record, class_num, decoder, label_type=label_type)
            found.add(result)
            if result.label is not None:
                stats.add(result.label)
            consumed += _record_size(len(record))
            found.records += 1
            progress.add()
        if consumed < size:
            # The reader takes a partial record header for the end of the file.
            found.file_problem(CORRUPT_FILE, 'truncated: %d bytes after the last complete '
                               'record %d are not a whole record'
                               % (size - consumed, found.records - 1))
    except tf.errors.DataLossError as exc:
        found.file_problem(CORRUPT_FILE, 'unreadable from record %d on (last good record: '
                           '%d): %s' % (found.records, found.records - 1, op_error_text(exc)))
    except (tf.errors.OpError, OSError) as exc:
        found.file_problem(UNREADABLE_FILE, op_error_text(exc))
    progress.flush()
    if found.records == 0 and not found.corrupt:
        found.warn(None, None, '%s: the file holds no records' % EMPTY_SHARD)
    return found.summary(stats, time.monotonic() - start)


class _Findings(object):
    """What check_file found in one file: records read, the bad ones, the warnings (at most
    MAX_STORED_WARNINGS kept, counted by kind exactly) and whether it is corrupt."""

    def __init__(self, path):
        self.path = path
        self.records = 0
        self.bad, self.warnings = [], []
        self.kinds = collections.Counter()
        self.corrupt = False

    def add(self, result):
        """The check_record result of record number self.records."""
        if not result.ok:
            self.bad.append({'file': self.path, 'index': self.records, 'name': result.name,
                             'reasons': result.reasons, 'reason': '; '.join(result.reasons)})
        for text in result.warnings:
            self.warn(self.records, result.name, text)

    def warn(self, index, name, text):
        self.kinds[text.split(':')[0]] += 1
        if len(self.warnings) < MAX_STORED_WARNINGS:
            self.warnings.append({'file': self.path, 'index': index, 'name': name,
                                  'warning': text})

    def file_problem(self, kind, detail):
        """The file cannot be read from record self.records on."""
        index = self.records
        self.corrupt = True
        self.bad.append({'file': self.path, 'index': index, 'last_good_index': index - 1,
                         'name': None, 'reasons': ['%s: %s' % (kind, detail)],
                         'reason': '%s: %s' % (kind, detail)})

    def summary(self, stats, seconds):
        """check_file's summary dict, its keys in the order --json prints them."""
        return {
            'path': self.path, 'records': self.records, 'bad': self.bad,
            'warnings': self.warnings, 'corrupt': self.corrupt,
            'warning_count': sum(self.kinds.values()),
            'warning_kinds': dict(self.kinds),
            'labelled_records': stats.labelled,
            'positives': stats.positives.tolist(),
            'cardinality': stats.cardinality.tolist(),
            'ignored_entries': stats.ignored,
            'unclosed_records': stats.unclosed_records, 'kept_pairs': stats.kept_pairs,
            'unclosed_pairs': (None if stats.unclosed_pairs is None
                               else stats.unclosed_pairs.tolist()),
            'seconds': seconds,
        }


class _Batched(object):
    """Calls on_progress(records since the last call) at most every PROGRESS_INTERVAL."""

    def __init__(self, on_progress):
        self.on_progress = on_progress
        self.pending = 0
        self.last_report = time.monotonic()

    def add(self):
        self.pending += 1
        now = time.monotonic()
        if self.on_progress is not None and \
                now - self.last_report >= _progress.PROGRESS_INTERVAL:
            self.on_progress(self.pending)
            self.pending, self.last_report = 0, now

    def flush(self):
        if self.on_progress is not None and self.pending:
            self.on_progress(self.pending)


def crashed_file(path, exitcode, index, last_output):
    """The summary of a file whose checking process died (exitcode) at record `index`
    (-1: opening it); last_output: what the process last wrote to stderr."""
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
            'ignored_entries': 0, 'unclosed_records': 0, 'unclosed_pairs': None,
            'kept_pairs': 0,
            'seconds': 0.0}



class Totals(object):
    """The totals of check_file summaries, added one by one as they arrive: the caller
    keeps one class_num vector (two with a hierarchy), not one per file."""

    def __init__(self, class_num, hierarchy=None):
        self.class_num = class_num
        self.hierarchy = hierarchy
        self.positives = np.zeros(class_num, np.int64)
        self.pairs = np.zeros(class_num, np.int64) if hierarchy is not None else None
        self.cardinality = np.zeros(1, np.int64)
        self.counts = collections.Counter()

    def add(self, summary):
        """Adds one file's summary; returns it without its per-class lists."""
        if summary['positives'] is not None:
            self.positives += np.asarray(summary['positives'], np.int64)
        if self.pairs is not None and summary.get('unclosed_pairs') is not None:
            self.pairs += np.asarray(summary['unclosed_pairs'], np.int64)
        found = np.asarray(summary['cardinality'], np.int64)
        if len(found) > len(self.cardinality):
            self.cardinality = np.concatenate(
                [self.cardinality, np.zeros(len(found) - len(self.cardinality), np.int64)])
        self.cardinality[:len(found)] += found
        self.counts.update({
            'files': 1, 'records': summary['records'], 'bad_records': len(summary['bad']),
            'corrupt_files': 1 if summary['corrupt'] else 0,
            'warnings': summary['warning_count'],
            'labelled_records': summary['labelled_records'],
            'ignored_entries': summary['ignored_entries'],
            'unclosed_records': summary.get('unclosed_records', 0),
            'kept_pairs': summary.get('kept_pairs', 0)})
        return {k: v for k, v in summary.items() if k not in ('positives', 'unclosed_pairs')}

    def totals(self):
        """files, records, bad_records, corrupt_files, warnings, labelled_records,
        ignored_entries, positives (per class), never_positive (classes without a
        positive), cardinality (list: positives per image -> records)."""
        out = {k: self.counts[k] for k in ('files', 'records', 'bad_records',
                                           'corrupt_files', 'warnings', 'labelled_records',
                                           'ignored_entries')}
        out.update({'positives': self.positives.tolist(),
                    'never_positive': np.flatnonzero(self.positives == 0).tolist(),
                    'cardinality': self.cardinality.tolist()})
        return out

    def hierarchy_totals(self, worst=10):
        """The closure counts (made with a hierarchy): file, records (with at least one
        unclosed pair), pairs, kept_pairs (those closure cannot fill: the ancestor is
        annotated below mask_thres), classes (with a pair), per_class (pairs by positive
        class) and worst (the `worst` classes with most pairs: class, name, pairs)."""
        pairs = self.pairs
        ranked = [int(c) for c in np.argsort(-pairs, kind='stable')[:worst] if pairs[c]]
        return {'file': self.hierarchy.path, 'records': self.counts['unclosed_records'],
                'pairs': int(pairs.sum()), 'kept_pairs': self.counts['kept_pairs'],
                'classes': int((pairs > 0).sum()),
                'per_class': pairs.tolist(),
                'worst': [{'class': c, 'name': self.hierarchy.names[c],
                           'pairs': int(pairs[c])} for c in ranked]}


def totals(per_file, class_num):
    """Totals.totals over a list of check_file summaries."""
    acc = Totals(class_num)
    for summary in per_file:
        acc.add(summary)
    return acc.totals()
