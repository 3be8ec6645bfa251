"""The per-class report of an evaluation: what each class scored, the TensorBoard PR
curves of a few classes and the distribution of the per-class AP.

At the end of every evaluation (--mode=eval, train_and_eval's, an evaluator task's) a
session hook reads the metrics' per-class values (metrics.PerClass) and writes, into the
Estimator's evaluation directory <model_dir>/eval:

    per_class-<global step>.tsv   a header line, then one line a class, by class index:
        index      the class index
        name       from the class dictionary (class_dictionary), empty without one
        positives  valid entries with label >= mask_thres
        negatives  the other valid entries (-1 labels are neither)
        AP         metrics.histogram_average_precision; empty without a positive, so the
                   mean of the column over the classes that have one is the run's mAP
        threshold  the threshold in use (--threshold, or the calibrated one of the class)
        precision  TP / (TP + FP), empty when nothing is predicted
        recall     TP / (TP + FN), empty without a positive
        F1         2 TP / (2 TP + FP + FN), empty when both are empty
        kind       with --hierarchy: leaf or inner
    events        pr_curve/<index> (TensorBoard's pr_curves plugin) for --pr_curves classes
                  (the most frequent) or those of --pr_curve_classes, at PR_THRESHOLDS
                  thresholds i / (PR_THRESHOLDS - 1) of the score, counted from the
                  histograms: a threshold inside a bin counts the whole bin (bins of
                  metrics.score_bins, at most 2 / 2048 of the score wide); and
                  per_class_AP, the AP of the classes with a positive as a histogram
                  (Histograms and Distributions tabs). Their size does not grow with the classes: about
                  5 KB a curve and 1 KB for the histogram, per evaluation.

and logs where the file is, the classes with and without a positive, and the `listed`
classes of lowest and of highest AP with their names and positives.

Cost, measured at 11,166 classes with the histograms of a 50,000-image split (2 shared
cores of an AMD EPYC; tools/benchmark.py --report_cost): the hook's end takes 11-12 s and
1.2 GB of temporaries, nearly all of it the per-class AP, which the Estimator's read of
the mAPs then takes as it is (metrics.read_once: 0.6 s instead of another 12 s). So an
evaluation ends about as fast as without the report. The table is 0.60 MB, the events
50 KB an evaluation with 10 PR curves.
"""
import csv
import io
import os

import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow.core.framework import summary_pb2

from mlimages import files
from mlimages.data import class_names
from mlimages.data import hierarchy
from mlimages.errors import DataError, HierarchyError, UsageError
from mlimages.model import metrics

PR_THRESHOLDS = 201
AP_BUCKETS = 50
# Where a class dictionary is looked for beside the data (--data_dir, then its parent)
# when --class_dict is not given: make_image_list.py's, ML-Images' published name, the
# demo's.
DICTIONARY_NAMES = ('classes.txt', 'dictionary_and_semantic_hierarchy.txt', 'dictionary.txt')
COLUMNS = ('index', 'name', 'positives', 'negatives', 'AP', 'threshold', 'precision',
           'recall', 'F1')


def class_dictionary(class_dict, hierarchy_path, data_dir, class_num):
    """(class names or None, where they come from, a warning line or None): --class_dict
    (its errors are UsageErrors), else the --hierarchy file, else a DICTIONARY_NAMES file in
    --data_dir or its parent; a found file of another class count is passed over, said in
    the warning."""
    if class_dict:
        return class_names.load_class_names(class_dict, class_num), class_dict, None
    if hierarchy_path:
        try:
            return hierarchy.load(hierarchy_path).names, hierarchy_path, None
        except HierarchyError as e:
            raise UsageError('--hierarchy: %s' % e)
    data_dir = os.path.abspath(data_dir)
    skipped = []
    for directory in (data_dir, os.path.dirname(data_dir)):
        for name in DICTIONARY_NAMES:
            path = os.path.join(directory, name)
            if not os.path.isfile(path):
                continue
            try:
                names = class_names.load_class_names(path, class_num)
            except (UsageError, DataError) as e:  # a file that merely sits there
                skipped.append('%s (%s)' % (path, e))
                continue
            return names, path, passed_over(skipped)
    return None, None, passed_over(skipped)


def passed_over(skipped):
    """The warning of the dictionaries found beside the data but not used, or None."""
    return ('per-class report: passed over %s (give --class_dict)' % '; '.join(skipped)
            if skipped else None)


def score_bins(scores, num_bins):
    """metrics.score_bins in numpy (the bin of a score in the histograms)."""
    s = np.clip(np.asarray(scores, np.float64), 0.0, 1.0)
    with np.errstate(divide='ignore'):
        logit = np.clip(np.log(s) - np.log1p(-s), -metrics.LOGIT_RANGE, metrics.LOGIT_RANGE)
    u = 0.5 * (s + (logit + metrics.LOGIT_RANGE) / (2.0 * metrics.LOGIT_RANGE))
    return np.minimum(np.floor(u * num_bins).astype(np.int64), num_bins - 1)


def pr_curve_counts(positives, negatives, thresholds=PR_THRESHOLDS):
    """(TP, FP, TN, FN, precision, recall) [thresholds] of one class's histograms
    (positives, negatives [bins]) at the scores i / (thresholds - 1): every bin from the
    threshold's own up counts as predicted."""
    num_bins = len(positives)
    first = score_bins(np.linspace(0.0, 1.0, thresholds), num_bins)
    tp = np.cumsum(positives[::-1])[::-1][first]
    fp = np.cumsum(negatives[::-1])[::-1][first]
    fn, tn = positives.sum() - tp, negatives.sum() - fp
    precision = tp / np.maximum(tp + fp, 1e-7)
    recall = tp / np.maximum(tp + fn, 1e-7)
    return tp, fp, tn, fn, precision, recall


def ap_histogram(ap):
    """A TensorBoard HistogramProto of the values ap in AP_BUCKETS buckets over [0, 1]."""
    counts, edges = np.histogram(ap, bins=AP_BUCKETS, range=(0.0, 1.0))
    return summary_pb2.HistogramProto(
        min=float(ap.min()) if len(ap) else 0.0, max=float(ap.max()) if len(ap) else 0.0,
        num=float(len(ap)), sum=float(ap.sum()), sum_squares=float(np.square(ap).sum()),
        bucket_limit=[float(x) for x in edges[1:]], bucket=[float(x) for x in counts])


def ratio(numerator, denominator):
    """numerator / denominator, NaN where the denominator is 0."""
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.where(denominator > 0, numerator / np.maximum(denominator, 1e-300), np.nan)


class ClassReport(object):
    """The report of the evaluations of a run (module docstring). eval_dir: the Estimator's
    evaluation directory; names: the class names or None; leaf_mask: --hierarchy's or
    None; threshold: the global one; pr_curves / pr_classes: --pr_curves and the indices
    of --pr_curve_classes; listed: the classes of lowest and highest AP logged. With
    `deferred` the hook leaves the table to the caller (write, with the calibrated
    thresholds)."""

    def __init__(self, eval_dir, names=None, leaf_mask=None, threshold=metrics.F1_THRESHOLD,
                 pr_curves=10, pr_classes=(), listed=10):
        self.eval_dir, self.names, self.leaf_mask = eval_dir, names, leaf_mask
        self.threshold, self.pr_curves, self.pr_classes = threshold, pr_curves, pr_classes
        self.listed = listed
        self.deferred = False
        self.values, self.step, self.path = None, None, None

    def hook(self, per_class):
        """The SessionRunHook that reads the metrics.PerClass tensors at the end."""
        return _ReportHook(self, per_class)

    def curve_classes(self, positives):
        """The classes given PR curves: --pr_curve_classes, else the pr_curves ones of most
        positives (ties: the lower index), those without a positive left out."""
        if self.pr_classes:
            return np.array(self.pr_classes, np.int64)
        order = np.lexsort((np.arange(len(positives)), -positives))
        return np.sort(order[:self.pr_curves][positives[order[:self.pr_curves]] > 0])

    def name(self, index):
        return self.names[index] if self.names is not None else ''

    def write_summaries(self, values, chosen, rows, step):
        """The PR curves of the chosen classes and the AP histogram, into the evaluation's
        event file at the global step."""
        from tensorboard.plugins.pr_curve import summary as pr_summary
        summary = summary_pb2.Summary()
        for index, positives, negatives in zip(chosen, *rows):
            label = ('%d %s' % (index, self.name(index))).strip()
            summary.value.extend(pr_summary.raw_data_pb(
                'pr_curve/%d' % index, *pr_curve_counts(positives, negatives),
                num_thresholds=PR_THRESHOLDS, display_name=label,
                description='class %s: %d positives, %d negatives' % (
                    label, positives.sum(), negatives.sum())).value)
        has = values['has_positive'] > 0
        summary.value.add(tag='per_class_AP', histo=ap_histogram(values['ap'][has]))
        writer = tf.summary.FileWriterCache.get(self.eval_dir)
        writer.add_summary(summary, step)
        writer.flush()

    def take(self, values, step):
        self.values, self.step = values, step

    def write(self, thresholds=None, counts=None):
        """Writes the table of the last evaluation and logs its summary; thresholds [C]
        and counts (TP, FP, FN [C]) replace the global threshold's (--threshold=calibrated).
        Returns the file's path."""
        values = self.values
        if thresholds is None:
            thresholds = np.full(len(values['ap']), self.threshold)
            counts = values['tp'], values['fp'], values['fn']
        tp, fp, fn = (np.asarray(c, np.float64) for c in counts)
        os.makedirs(self.eval_dir, exist_ok=True)
        self.path = os.path.join(self.eval_dir, 'per_class-%d.tsv' % self.step)
        with files.atomic_output(self.path) as out:
            out.write(self.table(thresholds, tp, fp, fn))
        for line in self.summary_lines():
            tf.logging.info('%s', line)
        return self.path

    def table(self, thresholds, tp, fp, fn):
        """The TSV text (module docstring)."""
        values = self.values
        has = values['has_positive'] > 0
        ap = np.where(has, values['ap'], np.nan)
        precision, recall = ratio(tp, tp + fp), ratio(tp, tp + fn)
        f1 = ratio(2.0 * tp, 2.0 * tp + fp + fn)
        text = io.StringIO()
        writer = csv.writer(text, delimiter='\t', lineterminator='\n')
        writer.writerow(COLUMNS + (('kind',) if self.leaf_mask is not None else ()))
        number = lambda x: '' if np.isnan(x) else '%.6f' % x  # noqa: E731
        for c in range(len(ap)):
            row = [c, self.name(c), '%d' % values['positives'][c],
                   '%d' % values['negatives'][c], number(ap[c]), '%.6g' % thresholds[c],
                   number(precision[c]), number(recall[c]), number(f1[c])]
            if self.leaf_mask is not None:
                row.append('leaf' if self.leaf_mask[c] else 'inner')
            writer.writerow(row)
        return text.getvalue()

    def summary_lines(self):
        """The log lines: the file, the classes with a positive and their mean AP, the
        lowest and highest AP."""
        values = self.values
        has = values['has_positive'] > 0
        ap, positives = values['ap'], values['positives']
        found = np.flatnonzero(has)
        lines = ['per-class report of global step %d: %s (%d classes, %d with a positive: '
                 'mean AP %.4f = mAP; %d without a positive, no AP)' % (
                     self.step, self.path, len(ap), len(found),
                     ap[found].mean() if len(found) else 0.0, len(ap) - len(found))]
        order = found[np.lexsort((found, ap[found]))]
        describe = lambda c: ('%d %s' % (c, self.name(c))).strip() + \
            ' (AP %.3f, %d positives)' % (ap[c], positives[c])  # noqa: E731
        # With fewer than 2 x listed classes the two lists split them, lowest first.
        low = min(self.listed, (len(order) + 1) // 2)
        high = min(self.listed, len(order) - low)
        if low:
            lines.append('lowest AP: ' + '; '.join(describe(c) for c in order[:low]))
        if high:
            lines.append('highest AP: ' + '; '.join(describe(c) for c in order[::-1][:high]))
        return lines


class _ReportHook(tf.train.SessionRunHook):
    """Reads the per-class values once, at the end of the evaluation, then the
    histograms of the PR curves' classes only (a feed of their indices)."""

    def __init__(self, report, per_class):
        self._report = report
        self._fetches = {
            'ap': per_class.ap, 'has_positive': per_class.has_positive,
            'positives': tf.reduce_sum(per_class.positive_histogram, axis=1),
            'negatives': tf.reduce_sum(per_class.negative_histogram, axis=1),
            'tp': per_class.true_positives, 'fp': per_class.false_positives,
            'fn': per_class.false_negatives}
        self._chosen = tf.placeholder(tf.int64, [None])
        self._rows = (tf.gather(per_class.positive_histogram, self._chosen),
                      tf.gather(per_class.negative_histogram, self._chosen))

    def begin(self):
        self._step = tf.train.get_global_step()

    def end(self, session):
        values, step = session.run((self._fetches, self._step))
        report = self._report
        chosen = report.curve_classes(values['positives'])
        rows = session.run(self._rows, {self._chosen: chosen})
        report.take(values, int(step))
        report.write_summaries(values, chosen, rows, int(step))
        if not report.deferred:
            report.write()
