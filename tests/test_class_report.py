"""The per-class report of an evaluation: the TSV read back with pandas, its AP against the
reported mAP and independent references, the PR curves and AP histogram read with
TensorBoard's own reader, where the class names come from."""
import logging
import os

import numpy as np
import pandas as pd
import pytest
import tensorflow.compat.v1 as tf

from helpers import NO_POSITIVE, THRES, make_split, write_lines
from mlimages.errors import UsageError
from mlimages.model import metrics
from mlimages.run import class_report
from references import average_precision, binned_average_precision, histogram_bin


def run_report(y, s, eval_dir, step=7, threshold=0.5, batch=64, **options):
    """The report's hook over metrics_and_classes fed (y, s) in batches: ((mAP, macro F1),
    the ClassReport after its end())."""
    report = class_report.ClassReport(str(eval_dir), threshold=threshold, **options)
    with tf.Graph().as_default():
        labels = tf.placeholder(tf.float32, [None, y.shape[1]])
        scores = tf.placeholder(tf.float32, [None, y.shape[1]])
        ops, per_class = metrics.metrics_and_classes(labels, scores, THRES,
                                                     threshold=threshold)
        global_step = tf.train.get_or_create_global_step()
        hook = report.hook(per_class)
        hook.begin()
        with tf.Session() as session:
            session.run([tf.local_variables_initializer(), tf.assign(global_step, step)])
            for start in range(0, len(y), batch):
                session.run([ops['mAP'][1], ops['macro_f1'][1]],
                            {labels: y[start:start + batch], scores: s[start:start + batch]})
            found = session.run((ops['mAP'][0], ops['macro_f1'][0]))
            hook.end(session)
    return found, report


@pytest.fixture(scope='module')
def reported(tmp_path_factory):
    """A split of 300 images x 40 classes with sigmoid scores, named classes."""
    y, s = make_split(5, 'sigmoid')
    eval_dir = tmp_path_factory.mktemp('report') / 'eval'
    names = ['class "%d", a name' % c for c in range(y.shape[1])]
    (mean_ap, macro_f1), report = run_report(y, s, eval_dir, names=names, pr_curves=4)
    table = pd.read_csv(report.path, sep='\t')
    return y, s, mean_ap, macro_f1, report, table, names


def test_the_table_reads_back_with_pandas_by_class_index(reported):
    y, _, _, _, report, table, names = reported
    assert report.path.endswith(os.path.join('eval', 'per_class-7.tsv'))
    assert list(table.columns) == list(class_report.COLUMNS)
    assert table['index'].tolist() == list(range(y.shape[1]))
    assert table['name'].tolist() == names  # quotes, commas and spaces kept
    valid = y != -1
    positive = valid & (y >= THRES)
    assert table['positives'].tolist() == positive.sum(0).tolist()
    assert table['negatives'].tolist() == (valid & ~positive).sum(0).tolist()
    assert table['AP'].isna().tolist() == [c in NO_POSITIVE for c in range(y.shape[1])]


def test_the_mean_ap_of_the_table_is_the_reported_map(reported):
    _, _, mean_ap, _, _, table, _ = reported
    # The mean skips the empty AP of the classes without a positive; 6 decimals a value.
    assert table['AP'].mean() == pytest.approx(mean_ap, abs=1e-6)


def test_each_ap_is_the_binned_reference_and_near_the_exact_ap(reported):
    """AP against the same binned formula written as a sum over a bin's positions (1e-6:
    the table's 6 decimals), and against scikit-learn's exact AP: on this split (300
    images, sigmoid scores crowding near 0) the binning moves no class's AP by more than
    0.02 and the mean by less than 1e-3 (metrics.mean_average_precision's measured bound
    is 5.4e-4)."""
    y, s, mean_ap, _, _, table, _ = reported
    binned, exact = [], []
    for c in range(y.shape[1]):
        valid = y[:, c] != -1
        positive = y[valid, c] >= THRES
        if positive.any():
            binned.append(binned_average_precision(positive, s[valid, c]))
            exact.append(average_precision(positive, s[valid, c].astype(np.float64)))
    ap = table['AP'].dropna().to_numpy()
    np.testing.assert_allclose(ap, binned, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ap, exact, rtol=0, atol=0.02)
    assert abs(mean_ap - np.mean(exact)) < 1e-3


def test_precision_recall_f1_at_the_threshold_in_use(reported):
    y, s, _, macro_f1, _, table, _ = reported
    valid = y != -1
    positive = valid & (y >= THRES)
    predicted = valid & (s >= 0.5)
    tp = (positive & predicted).sum(0)
    fp, fn = (predicted & ~positive).sum(0), (positive & ~predicted).sum(0)
    with np.errstate(invalid='ignore', divide='ignore'):
        np.testing.assert_allclose(table['precision'], tp / (tp + fp), atol=1e-6)
        np.testing.assert_allclose(table['recall'], tp / (tp + fn), atol=1e-6)
        np.testing.assert_allclose(table['F1'], 2 * tp / (2 * tp + fp + fn), atol=1e-6)
    assert (table['threshold'] == 0.5).all()
    # macro F1 is the mean of the table's F1 over the classes it is defined for.
    assert table['F1'].mean() == pytest.approx(macro_f1, abs=1e-6)


def event_reader(eval_dir):
    from tensorboard.backend.event_processing import event_accumulator
    reader = event_accumulator.EventAccumulator(str(eval_dir), size_guidance={
        event_accumulator.TENSORS: 0, event_accumulator.HISTOGRAMS: 0})
    reader.Reload()
    return reader


def test_pr_curves_of_the_most_frequent_classes_and_the_ap_histogram(reported):
    """TensorBoard's reader finds a pr_curves plugin curve for each of the 4 classes with
    the most positives; TP and FP at each threshold t are the images whose score falls in
    t's bin or above (the reference's bins)."""
    y, s, _, _, report, table, _ = reported
    reader = event_reader(report.eval_dir)
    frequent = table.sort_values(['positives', 'index'], ascending=[False, True])['index'][:4]
    tags = sorted('pr_curve/%d/pr_curves' % c for c in frequent)
    assert sorted(t for t in reader.Tags()['tensors'] if t.startswith('pr_curve/')) == tags
    thresholds = np.linspace(0.0, 1.0, class_report.PR_THRESHOLDS)
    for c in frequent:
        event, = reader.Tensors('pr_curve/%d/pr_curves' % c)
        assert event.step == 7
        data = tf.make_ndarray(event.tensor_proto)  # TP, FP, TN, FN, precision, recall rows
        valid = y[:, c] != -1
        positive, bins = y[valid, c] >= THRES, histogram_bin(s[valid, c])
        taken = bins[None, :] >= histogram_bin(thresholds)[:, None]
        np.testing.assert_array_equal(data[0], (taken & positive).sum(1))
        np.testing.assert_array_equal(data[1], (taken & ~positive).sum(1))
        np.testing.assert_array_equal(data[0] + data[3], positive.sum())
        metadata = reader.SummaryMetadata('pr_curve/%d/pr_curves' % c)
        assert metadata.plugin_data.plugin_name == 'pr_curves'
        assert metadata.display_name == '%d class "%d", a name' % (c, c)
    histogram, = reader.Histograms('per_class_AP')
    assert histogram.histogram_value.num == table['AP'].notna().sum()
    assert histogram.histogram_value.sum == pytest.approx(table['AP'].sum(), abs=1e-4)


def test_named_pr_classes_and_the_log_summary(tmp_path, caplog):
    y, s = make_split(6, 'correlated')
    with caplog.at_level(logging.INFO, logger='tensorflow'):
        _, report = run_report(y, s, tmp_path / 'eval', step=3, pr_classes=(0, 5), listed=2,
                               names=['c%d' % c for c in range(y.shape[1])])
    reader = event_reader(report.eval_dir)
    # Class 0 has no positive and gets an all-zero curve; 5 its own.
    assert sorted(reader.Tags()['tensors']) == ['pr_curve/0/pr_curves', 'pr_curve/5/pr_curves']
    table = pd.read_csv(report.path, sep='\t')
    ap = table.set_index('index')['AP'].dropna().sort_values(kind='stable')
    text = caplog.text
    assert '37 with a positive: mean AP %.4f = mAP; 3 without a positive' % ap.mean() in text
    lowest = ap.index[0]
    assert 'lowest AP: %d c%d (AP %.3f, %d positives); ' % (
        lowest, lowest, ap.iloc[0], table['positives'][lowest]) in text
    assert 'highest AP: %d c%d (AP ' % (ap.index[-1], ap.index[-1]) in text


def test_calibrated_thresholds_and_the_hierarchy_column(tmp_path):
    y, s = make_split(8, 'uniform', images=50, classes=4)
    leaf = (True, False, True, True)
    report = class_report.ClassReport(str(tmp_path), leaf_mask=leaf)
    report.take({'ap': np.array([0.5, 0.0, 0.25, 1.0]),
                 'has_positive': np.array([1.0, 0.0, 1.0, 1.0]),
                 'positives': np.array([2.0, 0.0, 4.0, 1.0]),
                 'negatives': np.array([8.0, 10.0, 6.0, 9.0])}, 12)
    thresholds = np.array([0.25, 0.5, 0.75, 0.125], np.float32)
    path = report.write(thresholds, (np.array([1, 0, 0, 1]), np.array([1, 2, 0, 0]),
                                     np.array([1, 0, 4, 0])))
    table = pd.read_csv(path, sep='\t')
    assert table['kind'].tolist() == ['leaf', 'inner', 'leaf', 'leaf']
    assert table['threshold'].tolist() == [0.25, 0.5, 0.75, 0.125]
    assert table['precision'].tolist()[:2] == [0.5, 0.0]
    assert np.isnan(table['precision'][2]) and table['recall'][2] == 0.0
    assert np.isnan(table['recall'][1]) and table['F1'][1] == 0.0
    assert table['F1'][3] == 1.0
    assert np.isnan(table['AP'][1]) and table['name'].isna().all()


def test_class_names_from_the_flag_the_hierarchy_or_beside_the_data(tmp_path):
    data = tmp_path / 'my_data'
    data.mkdir()
    assert class_report.class_dictionary('', '', str(data), 2) == (None, None, None)
    write_lines(tmp_path / 'classes.txt', ['0\tcat', '1\tdog'])  # the parent of --data_dir
    names, source, warning = class_report.class_dictionary('', '', str(data), 2)
    assert names == ['cat', 'dog'] and source == str(tmp_path / 'classes.txt') and not warning
    write_lines(data / 'classes.txt', ['0\tcat', '1\tdog', '2\tbird'])  # 3 classes
    names, source, warning = class_report.class_dictionary('', '', str(data), 2)
    assert names == ['cat', 'dog']
    assert 'passed over %s (class dictionary %s has 3 classes, the model has 2)' % (
        data / 'classes.txt', data / 'classes.txt') in warning
    hierarchy = tmp_path / 'tree.txt'
    write_lines(hierarchy, ['0\tn1\t-1\tthing', '1\tn2\t0\tsub thing'])
    assert class_report.class_dictionary('', str(hierarchy), str(data), 2)[0] == [
        'thing', 'sub thing']
    given = tmp_path / 'names.txt'
    write_lines(given, ['red', 'blue'])
    assert class_report.class_dictionary(str(given), str(hierarchy), str(data), 2)[:2] == (
        ['red', 'blue'], str(given))
    with pytest.raises(UsageError, match='has 2 classes, the model has 3'):
        class_report.class_dictionary(str(given), '', str(data), 3)
