"""The streaming metrics of metrics.py against independent numpy implementations, fed in
batches of unequal size."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
import tensorflow.compat.v1 as tf

from mlimages.model import metrics
from helpers import NO_POSITIVE, THRES, make_split
from references import average_precision, f1_optimal_thresholds, multilabel_metrics

tf.disable_v2_behavior()

CLASSES, IMAGES = 40, 300  # make_split's
BATCH_EDGES = (0, 17, 81, 82, 200, 263, 300)  # batches of 17, 64, 1, 118, 63, 37 images
MAP_TOLERANCE = 1e-3
KEYS = ['mAP', 'precision@1', 'precision@5', 'micro_f1', 'macro_f1', 'accuracy']


def batches(y, s, edges=BATCH_EDGES):
    return [(y[a:b], s[a:b]) for a, b in zip(edges[:-1], edges[1:])]


# ---------------------------------------------------------------- streaming harness

class Streaming(object):
    """multilabel_metrics on [None, classes] placeholders, in its own graph and session."""

    def __init__(self, classes=CLASSES, **kwargs):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.labels = tf.placeholder(tf.float32, [None, classes])
            self.scores = tf.placeholder(tf.float32, [None, classes])
            self.ops = metrics.multilabel_metrics(self.labels, self.scores, **kwargs)
            self.reset_op = tf.local_variables_initializer()
        self.sess = tf.Session(graph=self.graph)

    def reset(self):
        self.sess.run(self.reset_op)

    def update(self, parts):
        for y, s in parts:
            self.sess.run([op for _, op in self.ops.values()], {self.labels: y, self.scores: s})

    def values(self):
        return self.sess.run({k: value for k, (value, _) in self.ops.items()})

    def evaluate(self, parts):
        self.reset()
        self.update(parts)
        return self.values()

    def variable(self, scope, name):
        with self.graph.as_default():
            var, = [v for v in tf.local_variables() if v.op.name == scope + '/' + name]
        return self.sess.run(var)


@pytest.fixture(scope='module')
def streaming():
    stream = Streaming()
    yield stream
    stream.sess.close()


def assert_metrics_close(got, expected):
    assert list(got) == KEYS
    for key in KEYS:
        tolerance = MAP_TOLERANCE if key == 'mAP' else 1e-6
        assert abs(got[key] - expected[key]) <= tolerance, (key, got[key], expected[key])


# ---------------------------------------------------------------- tests

def test_metrics_match_numpy_over_unequal_batches(streaming):
    errors = {}
    for scores in ('uniform', 'correlated', 'sigmoid'):
        for seed in range(6):
            y, s = make_split(seed, scores)
            got = streaming.evaluate(batches(y, s))
            expected = multilabel_metrics(y, s)
            assert_metrics_close(got, expected)
            errors[scores, seed] = abs(got['mAP'] - expected['mAP'])
    worst = max(errors, key=errors.get)
    print('\nmax |mAP - exact mAP| at %d bins: %.2e (%s scores, seed %d)'
          % (metrics.NUM_BINS, errors[worst], worst[0], worst[1]))


def test_streamed_equals_single_batch_and_batch_order_is_irrelevant(streaming):
    y, s = make_split(7, 'correlated')
    streamed = streaming.evaluate(batches(y, s))
    whole = streaming.evaluate([(y, s)])
    parts = batches(y, s)
    reordered = streaming.evaluate(parts[::-1])
    for key in KEYS:
        assert streamed[key] == pytest.approx(whole[key], abs=1e-12)
        assert streamed[key] == pytest.approx(reordered[key], abs=1e-12)


def test_map_excludes_classes_without_positives(streaming):
    y, s = make_split(3, 'correlated')
    valid = y != -1
    assert not (valid[:, list(NO_POSITIVE)] & (y[:, list(NO_POSITIVE)] >= THRES)).any()
    got = streaming.evaluate(batches(y, s))['mAP']
    aps = [average_precision(y[valid[:, c], c] >= THRES, s[valid[:, c], c])
           for c in range(CLASSES) if c not in NO_POSITIVE]
    assert got == pytest.approx(np.mean(aps), abs=MAP_TOLERANCE)
    # Counting them as AP 0 would give a clearly lower value.
    assert got - np.sum(aps) / CLASSES > 10 * MAP_TOLERANCE
    # Their scores do not matter.
    s2 = s.copy()
    s2[:, list(NO_POSITIVE)] = np.random.default_rng(0).random((IMAGES, len(NO_POSITIVE)))
    assert streaming.evaluate(batches(y, s2))['mAP'] == got


def test_ignored_entries_change_nothing(streaming):
    y, s = make_split(5, 'uniform')
    ignored = y == -1
    assert ignored.sum() > 500
    reference = streaming.evaluate(batches(y, s))
    rng = np.random.default_rng(1)
    for replacement in (1.0, 0.0, 0.5, rng.random(s.shape)):
        s2 = np.where(ignored, replacement, s).astype(np.float32)
        assert streaming.evaluate(batches(y, s2)) == reference
    # The same scores on entries that are not ignored do change the metrics.
    s3 = np.where(rng.random(s.shape) < 0.1, 1.0, s).astype(np.float32)
    changed = streaming.evaluate(batches(y, s3))
    assert all(changed[key] != reference[key] for key in KEYS)


def test_reset_restarts_the_accumulation(streaming):
    y1, s1 = make_split(11, 'correlated')
    y2, s2 = make_split(12, 'uniform', images=150)
    streaming.reset()
    streaming.update(batches(y1, s1))
    # Without a reset the second split adds to the first...
    streaming.update([(y2[:70], s2[:70]), (y2[70:], s2[70:])])
    assert_metrics_close(streaming.values(),
                         multilabel_metrics(np.concatenate([y1, y2]), np.concatenate([s1, s2])))
    # ...after one, only the second split counts.
    streaming.reset()
    assert streaming.values() == {key: 0.0 for key in KEYS}
    streaming.update([(y2[:70], s2[:70]), (y2[70:], s2[70:])])
    assert_metrics_close(streaming.values(), multilabel_metrics(y2, s2))


def test_variables_are_local_metric_variables(streaming):
    with streaming.graph.as_default():
        local = tf.local_variables()
        assert local and set(local) == set(tf.get_collection(tf.GraphKeys.METRIC_VARIABLES))
        assert not tf.global_variables() and not tf.trainable_variables()
        histograms = [v for v in local if 'histogram' in v.op.name]
        assert [v.shape.as_list() for v in histograms] == [[CLASSES * metrics.NUM_BINS]] * 2
        assert all(v.dtype.base_dtype == tf.float64 for v in histograms)


def test_single_class():
    stream = Streaming(classes=1)
    rng = np.random.default_rng(2)
    y = rng.choice([0.0, 1.0, 0.8, 0.3, -1.0], size=(90, 1)).astype(np.float32)
    s = rng.random((90, 1)).astype(np.float32)
    got = stream.evaluate(batches(y, s, edges=(0, 30, 31, 90)))
    expected = multilabel_metrics(y, s)
    assert_metrics_close(got, expected)
    assert got['precision@5'] == got['precision@1']  # k is capped at the class count
    assert got['accuracy'] == 1.0
    stream.sess.close()


def test_scores_zero_and_one_land_in_valid_bins(streaming):
    edges = np.array([0.0, 1e-45, 1e-30, 1e-7, 1e-3, 0.5, 0.999, 1 - 6e-8, 1.0], np.float32)
    graph = tf.Graph()
    with graph.as_default(), tf.Session() as sess:
        bins = sess.run(metrics.score_bins(tf.constant(edges), metrics.NUM_BINS))
        # No bin is wider than 2 / NUM_BINS: a grid a bit coarser than that has no two
        # points in one bin.
        grid = np.arange(0.0, 1.0, 2.01 / metrics.NUM_BINS)
        grid_bins = sess.run(metrics.score_bins(tf.constant(grid), metrics.NUM_BINS))
        near_ends = np.array([1e-4, 1.1e-4, 1 - 1.1e-4, 1 - 1e-4], np.float32)
        bins_near_ends = sess.run(metrics.score_bins(tf.constant(near_ends), metrics.NUM_BINS))
    assert bins[0] == 0 and bins[-1] == metrics.NUM_BINS - 1
    assert np.all(np.diff(bins) >= 0)
    assert np.all(np.diff(grid_bins) > 0)
    # Near 0 and 1 bins are a few % of s (or 1 - s) wide: 1e-4 and 1.1e-4 are told apart.
    assert bins_near_ends[0] < bins_near_ends[1] < bins_near_ends[2] < bins_near_ends[3]
    # Whole splits of exact 0 and 1 scores: every valid entry is counted, in an end bin.
    y, _ = make_split(4)
    s = np.random.default_rng(4).choice([0.0, 1.0], size=y.shape).astype(np.float32)
    got = streaming.evaluate(batches(y, s))
    valid = streaming.variable('mean_average_precision', 'valid_histogram')
    positive = streaming.variable('mean_average_precision', 'positive_histogram')
    valid, positive = (h.reshape(CLASSES, metrics.NUM_BINS) for h in (valid, positive))
    assert valid.sum() == (y != -1).sum() and positive.sum() == (y >= THRES).sum()
    assert valid[:, 1:-1].sum() == 0
    assert np.array_equal(valid[:, -1], ((y != -1) & (s == 1)).sum(axis=0))
    assert 0.0 < got['mAP'] < 1.0


def test_histogram_ap_is_exact_when_no_bin_mixes_labels(streaming):
    """With bins holding only positives or only negatives, nothing is approximated."""
    rng = np.random.default_rng(9)
    s = rng.random((IMAGES, CLASSES)).astype(np.float32)
    with tf.Graph().as_default(), tf.Session() as sess:
        bins = sess.run(metrics.score_bins(tf.constant(s), metrics.NUM_BINS))
    bin_is_positive = rng.random((CLASSES, metrics.NUM_BINS)) < 0.3
    y = bin_is_positive[np.arange(CLASSES), bins].astype(np.float32)
    y[rng.random(y.shape) < 0.05] = -1.0
    got = streaming.evaluate(batches(y, s))['mAP']
    assert got == pytest.approx(multilabel_metrics(y, s)['mAP'], abs=1e-12)


@pytest.fixture(scope='module')
def precision_sum_graph():
    graph = tf.Graph()
    with graph.as_default():
        inputs = tf.placeholder(tf.float64, [4])
        total = metrics.expected_precision_sum(*tf.unstack(inputs))
        sess = tf.Session()
    yield lambda *values: sess.run(total, {inputs: values})
    sess.close()


@settings(max_examples=60, deadline=None)
@given(above=st.integers(0, 30), above_pos=st.integers(0, 30), pos=st.integers(0, 5),
       neg=st.integers(0, 5))
def test_expected_precision_sum_is_the_mean_over_orders(precision_sum_graph, above, above_pos,
                                                        pos, neg):
    """The closed form against every placement of the bin's positives among its images."""
    above_pos = min(above_pos, above)
    m = pos + neg
    totals = []
    for places in itertools.combinations(range(1, m + 1), pos):
        totals.append(sum((above_pos + i + 1) / (above + j) for i, j in enumerate(places)))
    assert precision_sum_graph(above_pos, above, pos, neg) == pytest.approx(np.mean(totals),
                                                                            abs=1e-12)


def test_works_as_estimator_eval_metric_ops(tmp_path):
    """Estimator.evaluate zeroes the metric variables per evaluation, with a partial last
    batch."""
    y, s = make_split(21, 'correlated')

    def input_fn():
        return tf.data.Dataset.from_tensor_slices((s, y)).batch(64)

    def model_fn(features, labels, mode):
        step = tf.train.get_or_create_global_step()
        loss = tf.reduce_sum(features) * 0.0 + tf.cast(step, tf.float32) * 0.0
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, train_op=tf.assign_add(step, 1),
            eval_metric_ops=metrics.multilabel_metrics(labels, features))

    estimator = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path))
    estimator.train(input_fn, steps=1)
    first = estimator.evaluate(input_fn)
    second = estimator.evaluate(input_fn)
    expected = multilabel_metrics(y, s)
    for key in KEYS:
        assert first[key] == second[key]
    assert_metrics_close({key: first[key] for key in KEYS}, expected)


def test_map_over_class_masks_matches_numpy_restricted_to_them():
    """mAP_leaf / mAP_inner (model_fn.hierarchy_masks) against the exact AP averaged over
    the classes of each mask that have a positive; mAP itself is unchanged. 2,000 images:
    a mean over fewer classes averages the histogram error less."""
    rng = np.random.default_rng(5)
    leaf = rng.random(CLASSES) < 0.6
    leaf[list(NO_POSITIVE)] = [True, False, True]  # classes without a positive in both
    from mlimages.run import model_fn
    stream = Streaming(class_masks=model_fn.hierarchy_masks(leaf.tolist()))
    try:
        for seed, scores in ((11, 'correlated'), (12, 'sigmoid')):
            y, s = make_split(seed, scores, images=2000)
            got = stream.evaluate(batches(y, s, (0, 700, 1500, 2000)))
            valid = y != -1
            pos = valid & (y >= THRES)
            ap = {c: average_precision(pos[valid[:, c], c], s[valid[:, c], c].astype(
                np.float64)) for c in range(CLASSES) if pos[:, c].any()}
            for key, mask in (('mAP_leaf', leaf), ('mAP_inner', ~leaf)):
                expected = np.mean([a for c, a in ap.items() if mask[c]])
                assert abs(got[key] - expected) <= MAP_TOLERANCE, (key, got[key], expected)
            assert list(got)[:3] == ['mAP', 'mAP_leaf', 'mAP_inner']
            assert got['mAP'] == pytest.approx(multilabel_metrics(y, s)['mAP'], abs=MAP_TOLERANCE)
        # A mask without a class that has a positive gives 0, as mAP does.
        none = np.zeros(CLASSES, bool)
        none[list(NO_POSITIVE)] = True
        empty = Streaming(class_masks={'none': none.tolist()})
        assert empty.evaluate([(y, s)])['mAP_none'] == 0.0
        empty.sess.close()
    finally:
        stream.sess.close()


# ---------------------------------------------------------------- per-class thresholds

@pytest.mark.parametrize('scores', ['uniform', 'correlated', 'sigmoid'])
def test_f1_optimal_thresholds_match_trying_every_score(scores):
    """metrics.f1_optimal_thresholds against references.f1_optimal_thresholds (every
    distinct score tried), with soft labels, -1 entries, classes without positives, tied
    scores, and the classes sorted in blocks smaller than the class count."""
    y, s = make_split(11, scores, images=120)
    s[::7, 5] = s[3, 5]  # a tie that spans positives and negatives
    s = np.round(s, 3) if scores == 'uniform' else s  # more ties
    got = metrics.f1_optimal_thresholds(y, s, THRES, default=0.5, classes_at_once=16)
    want = f1_optimal_thresholds(y, s, THRES, default=0.5)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got[2], want[2])
    assert np.all(got[0][list(NO_POSITIVE)] == 0.5) and np.all(got[2][list(NO_POSITIVE)] == 0)


def test_f1_at_per_class_thresholds_matches_numpy():
    """micro_f1 / macro_f1 with one threshold per class (the calibrated ones, [C]): numpy's
    multilabel_metrics at the same thresholds, streamed over unequal batches; at its own
    thresholds every class's F1 is its best, so macro F1 is at least the global one's."""
    y, s = make_split(5, 'sigmoid')
    thresholds, best, _ = metrics.f1_optimal_thresholds(y, s, THRES)
    stream = Streaming(threshold=thresholds)
    try:
        got = stream.evaluate(batches(y, s))
    finally:
        stream.sess.close()
    expected = multilabel_metrics(y, s, THRES, thresholds)
    for key in ('micro_f1', 'macro_f1'):
        assert abs(got[key] - expected[key]) <= 1e-9, key
    assert got['macro_f1'] >= multilabel_metrics(y, s, THRES)['macro_f1']


def test_the_ap_is_computed_once_after_the_last_update_and_again_after_a_new_one():
    """metrics_and_classes' AP is kept from its first read after an update (the per-class
    report's, then the Estimator's) and forgotten by the next update."""
    y, s = make_split(4, 'correlated')
    with tf.Graph().as_default():
        labels = tf.placeholder(tf.float32, [None, y.shape[1]])
        scores = tf.placeholder(tf.float32, [None, y.shape[1]])
        ops, per_class = metrics.metrics_and_classes(labels, scores)
        value, update = ops['mAP']
        with tf.Session() as session:
            session.run(tf.local_variables_initializer())
            session.run(update, {labels: y[:150], scores: s[:150]})
            first = session.run([per_class.ap, value])
            assert session.run(value) == first[1]
            session.run(update, {labels: y[150:], scores: s[150:]})
            ap, has, whole = session.run([per_class.ap, per_class.has_positive, value])
    assert whole != first[1]
    np.testing.assert_allclose(whole, multilabel_metrics(y, s)['mAP'], atol=5.4e-4)
    assert np.mean(ap[has > 0]) == pytest.approx(whole, abs=1e-12)
