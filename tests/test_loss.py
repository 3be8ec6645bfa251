"""The docs/original.md, Loss loss against an independent numpy implementation, step by step."""
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from mlimages.model import loss as loss_lib
import resnet
from references import NumpyLoss, original_l2

tf.disable_v2_behavior()


def label_batches(rng, steps, batch, classes):
    """Labels whose counters go through streaks, resets, -1 masks and soft values.

    class 0: positive every step (pos_count climbs past 10 -> floor 0.01);
    class 1: never positive (neg_count grows with the selections -> floor 0.001);
    class 2: positive on even steps only (streak resets);
    class 3: only soft labels below mask_thres (0.5) -> never a batch positive;
    others: random, with -1 (ignored) and soft confidences.
    """
    for t in range(steps):
        y = rng.choice([0.0, 0.0, 0.0, 1.0, 0.9, -1.0], size=(batch, classes))
        y[:, 0] = 0.0
        y[rng.integers(batch), 0] = 1.0
        y[:, 1] = rng.choice([0.0, -1.0, 0.3], size=batch)
        y[:, 2] = 0.0
        if t % 2 == 0:
            y[0, 2] = 0.8
        y[:, 3] = 0.5
        yield y.astype(np.float32)


def test_loss_matches_numpy_over_consecutive_steps():
    classes, batch, steps = 7, 5, 14
    rng = np.random.default_rng(3)
    graph = tf.Graph()
    with graph.as_default():
        labels = tf.placeholder(tf.float32, [batch, classes])
        logits = tf.placeholder(tf.float32, [batch, classes])
        ce, tensors = loss_lib.multilabel_cross_entropy(labels, logits, mask_thres=0.7,
                                                        neg_select=0.5, seed=1234)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            reference = NumpyLoss(classes, 0.7)
            seen_pos_floor = seen_neg_floor = False
            for y in label_batches(rng, steps, batch, classes):
                x = rng.normal(scale=3.0, size=(batch, classes)).astype(np.float32)
                got, t = sess.run([ce, tensors], {labels: y, logits: x})
                expected, coef = reference.step(y.astype(np.float64), x.astype(np.float64),
                                                t['neg_select'].astype(np.float64))
                np.testing.assert_allclose(got, expected, rtol=1e-5)
                np.testing.assert_allclose(t['pos_count'], reference.pos_count, rtol=0)
                np.testing.assert_allclose(t['neg_count'], reference.neg_count, rtol=0)
                np.testing.assert_allclose(t['loss_coef'], coef, rtol=1e-5)
                seen_pos_floor |= bool(np.isclose(coef[0], 0.01))
                seen_neg_floor |= bool(np.any(np.isclose(coef, 0.001)))
            assert seen_pos_floor and seen_neg_floor
            # The counters are variables: they keep their values between steps.
            counters = {v.op.name: sess.run(v) for v in tf.global_variables()}
            np.testing.assert_array_equal(counters['pos_count'], reference.pos_count)
            assert counters['pos_count'][0] == steps
            assert counters['pos_count'][3] == 0
            assert tf.trainable_variables() == []


def test_negative_selection_rate_and_seed():
    graph = tf.Graph()
    with graph.as_default():
        sel = loss_lib.select_negatives(20000, 0.3, seed=1234)
        with tf.Session() as sess:
            a, b = sess.run(sel), sess.run(sel)
    assert abs(a.mean() - 0.3) < 0.02
    assert not np.array_equal(a, b)  # drawn fresh every step


def test_eval_mode_leaves_counters_alone():
    graph = tf.Graph()
    with graph.as_default():
        y = tf.constant([[1.0, 0.0]])
        ce, t = loss_lib.multilabel_cross_entropy(y, tf.zeros([1, 2]), 0.7, 0.3, 1,
                                                  update=False)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(ce)
            assert sess.run(t['pos_count']).tolist() == [0.0, 0.0]


def test_evaluation_cross_entropy_is_per_image_and_matches_numpy():
    """After training steps have moved the counters, evaluation's per-image values match
    the reference, leave the counters alone, and their mean is the same however the images
    are batched."""
    classes, batch = 7, 5
    rng = np.random.default_rng(5)
    batches = list(label_batches(rng, 6, batch, classes))
    with tf.Graph().as_default(), tf.Session() as sess:
        labels = tf.placeholder(tf.float32, [None, classes])
        logits = tf.placeholder(tf.float32, [None, classes])
        ce, tensors = loss_lib.multilabel_cross_entropy(labels, logits, 0.7, 0.5, seed=1)
        with tf.variable_scope(tf.get_variable_scope(), reuse=True):
            per_image = loss_lib.per_image_cross_entropy(labels, logits, 0.7, 0.5)
        sess.run(tf.global_variables_initializer())
        reference = NumpyLoss(classes, 0.7)
        for y in batches[:-1]:
            x = rng.normal(scale=3.0, size=y.shape).astype(np.float32)
            sel = sess.run(tensors, {labels: y, logits: x})['neg_select']
            reference.step(y.astype(np.float64), x.astype(np.float64), sel)
        y = np.concatenate(batches[-2:])
        x = rng.normal(scale=3.0, size=y.shape).astype(np.float32)
        got = sess.run(per_image, {labels: y, logits: x})
        np.testing.assert_allclose(got, reference.per_image(y, x, 0.5), rtol=1e-5)
        counters = [sess.run(v) for v in tf.global_variables()]
        assert sess.run(per_image, {labels: y, logits: x}).tolist() == got.tolist()
        assert [sess.run(v).tolist() for v in tf.global_variables()] == \
            [c.tolist() for c in counters]
        assert 0 < reference.pos_count.max() and 0 < reference.neg_count.max()
        # Batched by 3, 7 or all at once: one mean over the images.
        for size in (3, 7):
            parts = [sess.run(per_image, {labels: y[i:i + size], logits: x[i:i + size]})
                     for i in range(0, len(y), size)]
            np.testing.assert_allclose(np.concatenate(parts).mean(), got.mean(), rtol=1e-6)


@pytest.mark.parametrize('value,floor,expected', [
    (0.5, 0.01, 0.5), (0.0100001, 0.001, 0.0100001), (0.01, 0.001, 0.001),
    (-0.3, 0.01, 0.01), (0.005, 0.001, 0.001)])
def test_loss_weight_threshold_and_floors(value, floor, expected):
    with tf.Graph().as_default(), tf.Session() as sess:
        got = sess.run(loss_lib.loss_weight(tf.constant([value]), floor))
    np.testing.assert_allclose(got, [expected], rtol=1e-6)


def test_the_original_l2_line_skips_batch_norm():
    rng = np.random.default_rng(0)
    a, b, bn = rng.normal(size=(3, 4)), rng.normal(size=5), rng.normal(size=6)
    with tf.Graph().as_default():
        va = tf.Variable(a, dtype=tf.float32, name='conv/kernel')
        vb = tf.Variable(b, dtype=tf.float32, name='dense/bias')
        vbn = tf.Variable(bn, dtype=tf.float32, name='x_bn/batch_normalization/gamma')
        l2 = original_l2([va, vb, vbn], 1e-4)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got = sess.run(l2)
    np.testing.assert_allclose(got, 1e-4 * ((a ** 2).sum() + (b ** 2).sum()) / 2, rtol=1e-5)


def test_softmax_cross_entropy_matches_numpy():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 3, (6, 5)).astype(np.float32)
    labels = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 6)]
    with tf.Graph().as_default(), tf.Session() as sess:
        got = sess.run(loss_lib.softmax_cross_entropy(tf.constant(labels),
                                                      tf.constant(logits)))
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected = -(labels * log_softmax).sum(axis=1).mean()
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_fine_tuning_weight_decay_on_a_resnet_matches_numpy():
    """wd * sum l2 (no 'bn' in the name) + bn_wd * wd * sum l2 (batch-norm gamma/beta), on a
    ResNet-18's trainable variables set to random values; bn_wd = 0 is the original's
    pre-training line."""
    weight_decay = 1e-4
    with tf.Graph().as_default():
        resnet.ResNet(18, 5)(tf.zeros([1, 32, 32, 3]), training=True)
        variables = tf.trainable_variables()
        tf.set_random_seed(7)
        # gamma/beta large enough that their tenth-rate term is a visible share of the sum
        randomize = [v.assign(tf.random.normal(tf.shape(v), stddev=10.0 if 'bn' in v.name
                                               else 0.3)) for v in variables]
        terms = {f: loss_lib.weight_decay_loss(variables, weight_decay, f) for f in (0.0, 0.1)}
        pretraining = original_l2(variables, weight_decay)
        with tf.Session() as sess:
            sess.run(randomize)
            values, got, want_pretraining = sess.run([
                {v.op.name: v for v in variables}, terms, pretraining])
    bn = {n for n in values if n.split('/')[-1] in ('gamma', 'beta')}
    assert bn == {n for n in values if 'bn' in n} and len(bn) == 2 * (1 + 5 * 4)
    l2 = {n: (v.astype(np.float64) ** 2).sum() / 2 for n, v in values.items()}
    other = sum(l2[n] for n in values if n not in bn)
    batch_norm = sum(l2[n] for n in bn)
    np.testing.assert_allclose(got[0.0], weight_decay * other, rtol=1e-5)
    np.testing.assert_allclose(got[0.1], weight_decay * other + 0.1 * weight_decay * batch_norm,
                               rtol=1e-5)
    assert got[0.1] - got[0.0] > 0.05 * got[0.0]
    assert got[0.0] == want_pretraining  # bit for bit
