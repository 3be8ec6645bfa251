"""The per-class report of an evaluation: the TSV read back with pandas, its AP against the
reported mAP and independent references, the PR curves and AP histogram read with
TensorBoard's own reader, where the class names come from."""
import glob
import logging
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tensorflow.compat.v1 as tf

from helpers import (CLASSES, NO_POSITIVE, THRES, make_split, tensorboard_server, train_model,
                     write_dataset, write_lines)
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


# ------------------------------------------------------- a real run, served by TensorBoard

@pytest.fixture(scope='module')
def run(module_dir):
    """train_and_eval of ResNet-18 (2 steps, one evaluation of the 6 val images) with
    make_image_list.py's classes.txt beside the records, 3 PR curves and a profile of
    step 2."""
    data = write_dataset(module_dir('ds'))
    write_lines(Path(data) / 'classes.txt', ['%d\tclass %d' % (c, c) for c in range(CLASSES)])
    _, model_dir, result = train_model(
        module_dir('run'), 2, '--mode=train_and_eval', '--test_interval=2',
        '--batch_norm_decay=0', '--lr=1e-4', '--pr_curves=3', '--profile_steps=2,2',
        data=data)
    return data, model_dir, result.stderr


def model_scores(data, model_dir):
    """(labels, sigmoid scores) of the val split by the checkpoint at step 2, through the
    evaluation's own input_fn."""
    from helpers import laid_out, settings
    from mlimages.run import estimator as estimator_lib
    from mlimages.run import evaluation
    values = laid_out(settings(resnet_size=18, class_num=CLASSES, image_size=32,
                               batch_norm_decay=0.0, data_dir=data, model_dir=model_dir,
                               batch_size=12, data_format='NHWC'))
    files = evaluation.evaluation_files(values.data, values.model.class_num)
    estimator = estimator_lib.make_estimator(values, estimator_lib.derived_values(values))
    scores = np.stack([row['scores'] for row in estimator.predict(
        estimator_lib.eval_input_fn(values.data, values.model, files),
        checkpoint_path=os.path.join(model_dir, 'model.ckpt-2'))])
    with tf.Graph().as_default(), tf.Session() as session:
        dataset = estimator_lib.eval_input_fn(values.data, values.model, files)()
        _, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        return session.run(labels), scores


@pytest.mark.slow
def test_the_report_of_a_run_holds_its_map_and_the_model_scores_ap(run):
    """The evaluation's table: named from classes.txt, its mean AP the mAP of the log and
    of the event file, each AP the binned reference of the model's own scores, and the exact
    AP wherever no bin holds both a positive and a negative of the class."""
    data, model_dir, log = run
    path = os.path.join(model_dir, 'eval', 'per_class-2.tsv')
    table = pd.read_csv(path, sep='\t')
    assert table['name'].tolist() == ['class %d' % c for c in range(CLASSES)]
    assert 'class names of the per-class report: %s' % os.path.join(data, 'classes.txt') in log
    assert 'per-class report of global step 2: %s (5 classes, ' % path in log
    logged = float(re.search(r'global step 2\) on all val batches: .*mAP = ([0-9.]+)',
                             log).group(1))
    assert table['AP'].mean() == pytest.approx(logged, abs=5e-5)  # the log's 4 decimals
    reader = event_reader(os.path.join(model_dir, 'eval'))
    from tensorboard.backend.event_processing import event_accumulator
    scalars = event_accumulator.EventAccumulator(os.path.join(model_dir, 'eval'))
    scalars.Reload()
    assert table['AP'].mean() == pytest.approx(scalars.Scalars('mAP')[-1].value, abs=1e-6)
    assert len([t for t in reader.Tags()['tensors'] if t.startswith('pr_curve/')]) == 3

    labels, scores = model_scores(data, model_dir)
    for c in range(CLASSES):
        valid = labels[:, c] != -1
        positive = labels[valid, c] >= THRES
        assert table['positives'][c] == positive.sum()
        if not positive.any():
            assert np.isnan(table['AP'][c])
            continue
        assert table['AP'][c] == pytest.approx(
            binned_average_precision(positive, scores[valid, c]), abs=1e-6)
        bins = histogram_bin(scores[valid, c])
        if not set(bins[positive]) & set(bins[~positive]):
            assert table['AP'][c] == pytest.approx(
                average_precision(positive, scores[valid, c].astype(np.float64)), abs=1e-6)


@pytest.mark.slow
def test_tensorboard_serves_the_pr_curves_and_the_profile(run):
    """A real TensorBoard on 127.0.0.1 over the model directory: the PR Curves tab lists
    the 3 most frequent classes by name, the Profile tab the trace of step 2, whose trace
    viewer holds the ResNet's ops."""
    data, model_dir, log = run
    traces = glob.glob(os.path.join(model_dir, 'plugins', 'profile', '*', '*.xplane.pb'))
    assert len(traces) == 1
    trace_run = os.path.basename(os.path.dirname(traces[0]))
    assert ('profile of global steps 2-2 in %s: open it with tensorboard --logdir %s, '
            'Profile tab' % (os.path.dirname(traces[0]), model_dir)) in log
    with tensorboard_server(model_dir) as get:
        tags = get('/data/plugin/pr_curves/tags')['eval']
        # class 0 is positive in all 6 val images, 4 in 4, then 1 before 2 (3 each).
        assert {tag: value['displayName'] for tag, value in tags.items()} == {
            'pr_curve/0/pr_curves': '0 class 0', 'pr_curve/4/pr_curves': '4 class 4',
            'pr_curve/1/pr_curves': '1 class 1'}
        curve, = get('/data/plugin/pr_curves/pr_curves?run=eval&tag=pr_curve/4/pr_curves')[
            'eval']
        # The plugin leaves out the thresholds above the highest score (nothing predicted).
        assert curve['step'] == 2 and len(curve['precision']) == len(curve['recall'])
        assert curve['recall'][0] == 1.0 and curve['precision'][0] == pytest.approx(4 / 6)
        assert trace_run in get('/data/plugin/profile/runs')
        host = os.path.basename(traces[0])[:-len('.xplane.pb')]
        assert get('/data/plugin/profile/hosts?run=%s&tag=trace_viewer%%40%%5E' % trace_run) \
            == [host]
        trace = get('/data/plugin/profile/data?run=%s&tag=trace_viewer%%40%%5E&host=%s'
                    % (trace_run, host))
        names = ' '.join(frame['name'] for frame in trace['stackFrames'].values())
        assert 'stages_1_block_1' in names and 'logits' in names


@pytest.mark.slow
def test_eval_with_calibrated_thresholds_reports_at_them(run, tmp_path):
    """--mode=eval --threshold=calibrated: the table's thresholds are thresholds.txt's,
    its precision and recall the model's scores at them."""
    from helpers import settings
    from mlimages.run import calibration, evaluation
    data, model_dir, _ = run
    evaluation.evaluate(settings(
        resnet_size=18, class_num=CLASSES, image_size=32, batch_norm_decay=0.0, data_dir=data,
        model_dir=model_dir, batch_size=12, data_format='NHWC', mode='eval',
        threshold='calibrated', log_dir=str(tmp_path)))
    table = pd.read_csv(os.path.join(model_dir, 'eval', 'per_class-2.tsv'), sep='\t')
    thresholds, _ = calibration.read(os.path.join(model_dir, calibration.FILE_NAME), CLASSES)
    np.testing.assert_allclose(table['threshold'], thresholds, rtol=1e-5)
    labels, scores = model_scores(data, model_dir)
    valid = labels != -1
    positive = valid & (labels >= THRES)
    predicted = valid & (scores >= thresholds)
    tp = (positive & predicted).sum(0)
    with np.errstate(invalid='ignore', divide='ignore'):
        np.testing.assert_allclose(table['precision'], tp / predicted.sum(0), atol=1e-6)
        np.testing.assert_allclose(table['recall'], tp / positive.sum(0), atol=1e-6)
