"""Streaming multi-label evaluation metrics, one formula per function.

Every metric is a tf.metrics-style pair (value, update_op) on LOCAL metric variables
(collections LOCAL_VARIABLES and METRIC_VARIABLES), so a dict of them is an Estimator's
`eval_metric_ops`: evaluate() zeroes them, runs update_op once per batch of the split and
reads value at the end. Per batch, with labels y [B, C] and sigmoid scores s [B, C]:
  valid[b, c] = y[b, c] != -1         (an ignored entry is no positive, negative or prediction)
  pos[b, c]   = valid and y[b, c] >= mask_thres
  neg[b, c]   = valid and not pos
  pred[b, c]  = valid and s[b, c] >= threshold (0.5)

  mAP          mean over classes with a positive in the split of their average precision,
               from per-class score histograms (mean_average_precision)
  precision@k  sum of pos over each image's k best valid classes / (k * images)
  micro_f1     2 TP / (2 TP + FP + FN), TP, FP, FN summed over all entries
  macro_f1     mean over classes with a positive or a prediction of 2 TP_c / (2 TP_c + FP_c + FN_c)
  accuracy     share of images with argmax(y) == argmax over valid classes of s

Counts are float64: they are exact integers up to 2^53, whereas float32 stops at
2^24 = 16.8 M. 50,000 val images x 11,166 classes make 5.6e8 entries for the micro-F1 sums,
and the 17.6 M training images pass 2^24 even in a single histogram bin.
"""
import collections
import math

import tensorflow.compat.v1 as tf

MASK_THRES = 0.7
F1_THRESHOLD = 0.5
# 1000 bins keep |mAP - exact mAP| below 1e-3 (see mean_average_precision) at 179 MB for
# 11,166 classes.
NUM_BINS = 1000
# Logits are clipped to [-16, 16]: float32 sigmoid outputs 1.0 above a logit of ~16.6.
LOGIT_RANGE = 16.0


def metric_variable(shape, name):
    """A float64 zero-initialised local variable, registered as tf.metrics registers its own."""
    return tf.Variable(lambda: tf.zeros(shape, tf.float64), name=name, trainable=False,
                       collections=[tf.GraphKeys.LOCAL_VARIABLES,
                                    tf.GraphKeys.METRIC_VARIABLES],
                       synchronization=tf.VariableSynchronization.ON_READ,
                       aggregation=tf.VariableAggregation.SUM)


def class_count(labels):
    """C, the static last dimension of labels; the metric variables need it."""
    count = tf.compat.dimension_value(labels.shape[-1])
    if count is None:
        raise ValueError('labels need a static number of classes, got shape %s' % labels.shape)
    return int(count)


def valid_entries(labels):
    """valid[b, c] = labels[b, c] != -1."""
    return tf.not_equal(labels, -1.0)


def positive_entries(labels, mask_thres):
    """pos[b, c] = valid[b, c] and labels[b, c] >= mask_thres."""
    return tf.logical_and(valid_entries(labels), labels >= mask_thres)


def safe_divide(numerator, denominator):
    """numerator / denominator, 0 where the denominator is 0 (nothing counted yet)."""
    return tf.math.divide_no_nan(numerator, denominator)


def score_bins(scores, num_bins):
    """bin = min(floor(u(s) * num_bins), num_bins - 1) with
    u(s) = (s + (clip(logit(s), -16, 16) + 16) / 32) / 2,  logit(s) = log(s) - log(1 - s).

    u is increasing, 0 at s = 0 and 1 at s = 1. Its linear half caps a bin's width at
    2 / num_bins; its logit half makes bins near 0 and 1, where sigmoid scores crowd, about
    64 / num_bins of s (or of 1 - s) wide. Uniform bins in s put most scores of a rare class
    into bin 0, and cost 3x the mAP error measured here.
    """
    # float64 keeps log(1 - s) monotone near 1; a NaN score fails the scatter (index < 0).
    s = tf.clip_by_value(tf.cast(scores, tf.float64), 0.0, 1.0)
    logit = tf.clip_by_value(tf.math.log(s) - tf.math.log1p(-s), -LOGIT_RANGE, LOGIT_RANGE)
    u = 0.5 * (s + (logit + LOGIT_RANGE) / (2.0 * LOGIT_RANGE))
    return tf.minimum(tf.cast(tf.floor(u * num_bins), tf.int64), num_bins - 1)


def expected_precision_sum(above_pos, above_all, pos, neg):
    """E[sum of the precisions at the pos positives of one bin], images inside the bin taken
    in uniformly random order (so ties are broken at random), with above_pos positives among
    the above_all images of higher bins. With m = pos + neg, position j of the bin is a
    positive with probability pos / m and then holds on average 1 + (j - 1) beta positives
    of the bin, beta = (pos - 1) / (m - 1) (0 if m = 1), so with alpha = above_pos + 1 - beta:
      E = pos / m * sum_{j=1..m} (alpha + beta j) / (above_all + j)
        = pos / m * (m beta + (alpha - beta above_all) (psi(above_all + m + 1) - psi(above_all + 1)))
    (psi = digamma). Exact when a bin holds only positives, only negatives or one image.
    """
    m = pos + neg
    beta = safe_divide(pos - 1.0, m - 1.0)
    alpha = above_pos + 1.0 - beta
    harmonic = tf.math.digamma(above_all + m + 1.0) - tf.math.digamma(above_all + 1.0)
    return safe_divide(pos, m) * (m * beta + (alpha - beta * above_all) * harmonic)


def histogram_average_precision(pos_hist, neg_hist):
    """AP_c = sum over bins, highest first, of expected_precision_sum / P_c  ([C, bins] -> [C]).

    P_c = sum of pos_hist[c]; AP_c is 0 where P_c = 0. This is sklearn's
    average_precision_score (the mean over positives of the precision at their rank) with the
    order inside each bin averaged over.
    """
    above_pos = tf.cumsum(pos_hist, axis=1, exclusive=True, reverse=True)
    above_all = tf.cumsum(pos_hist + neg_hist, axis=1, exclusive=True, reverse=True)
    precision_sum = expected_precision_sum(above_pos, above_all, pos_hist, neg_hist)
    return safe_divide(tf.reduce_sum(precision_sum, axis=1), tf.reduce_sum(pos_hist, axis=1))


def mean_average_precision(labels, scores, mask_thres=MASK_THRES, num_bins=NUM_BINS, name=None):
    """mAP = mean of AP_c over classes with at least one positive in the split.

    Keeps two [C, num_bins] float64 histograms, positives and negatives per score_bins bin,
    instead of the scores: C * num_bins * 2 * 8 bytes, 179 MB for 11,166 classes at the
    default 1000 bins. An update scatter-adds the B * C entries of the batch (about 25 ms for
    64 x 11,166 on one CPU core); the value (histogram_average_precision over C * num_bins
    cells) takes about 1 s and is meant to be read once, at the end of an evaluation.

    Error against the exact AP: the AP inside a bin is the expectation over the orders of its
    images. Measured max |mAP - exact mAP| at 1000 bins over 40-class splits of 300 to 50,000
    images, scores uniform, correlated with the labels, or sigmoids of Gaussian logits (many
    near 0): 4e-4 (tests/test_metrics.py: 300 x 40 splits). A single class with a handful of
    positives can be off by 1e-2 when a positive shares a top bin with a negative.
    Exactly tied scores count as ordered at random (sklearn counts them as all at the lowest rank).

    Returns (mAP, update_op); update_op is an Operation, as computing the value each batch
    would cost more than the whole update.
    """
    with tf.variable_scope(name, 'mean_average_precision', [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        class_num = class_count(labels)
        pos_hist = metric_variable([class_num * num_bins], 'positive_histogram')
        neg_hist = metric_variable([class_num * num_bins], 'negative_histogram')
        pos = positive_entries(labels, mask_thres)
        neg = tf.logical_and(valid_entries(labels), tf.logical_not(pos))
        # Flat index class * num_bins + bin; ignored entries add 0 to both histograms.
        index = score_bins(scores, num_bins) + tf.range(class_num, dtype=tf.int64) * num_bins
        index = tf.reshape(index, [-1])
        update_op = tf.group(
            tf.scatter_add(pos_hist, index, tf.reshape(tf.cast(pos, tf.float64), [-1])),
            tf.scatter_add(neg_hist, index, tf.reshape(tf.cast(neg, tf.float64), [-1])))
        pos_counts = tf.reshape(pos_hist, [class_num, num_bins])
        ap = histogram_average_precision(pos_counts, tf.reshape(neg_hist, [class_num, num_bins]))
        has_positive = tf.cast(tf.reduce_sum(pos_counts, axis=1) > 0, tf.float64)
        value = safe_divide(tf.reduce_sum(ap * has_positive), tf.reduce_sum(has_positive))
        return value, update_op


def top_k_hits(pos, scores, valid, k):
    """hits = sum over images of pos at the k highest-scoring valid classes of the image.

    Ignored classes score -inf, so they are picked only when an image has fewer than k valid
    classes, and then count as misses. Equal scores go to the lower class index.
    """
    masked = tf.where(valid, scores, tf.fill(tf.shape(scores), -math.inf))
    _, top = tf.nn.top_k(masked, k=k)
    return tf.reduce_sum(tf.cast(tf.gather(pos, top, batch_dims=1), tf.float64))


def precision_at_k(labels, scores, k, mask_thres=MASK_THRES, name=None):
    """precision@k = total hits / (k * images), hits from top_k_hits.

    k is capped at C, so precision@5 of a 3-class problem is precision@3.
    """
    with tf.variable_scope(name, 'precision_at_%d' % k, [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        scores = tf.cast(scores, tf.float32)
        k = min(k, class_count(labels))
        hits = metric_variable([], 'hits')
        images = metric_variable([], 'images')
        batch_hits = top_k_hits(positive_entries(labels, mask_thres), scores,
                                valid_entries(labels), k)
        update_hits = tf.assign_add(hits, batch_hits)
        update_images = tf.assign_add(images, tf.cast(tf.shape(labels)[0], tf.float64))
        value = safe_divide(hits, k * images)
        return value, safe_divide(update_hits, k * update_images)


def f1_counts(labels, scores, mask_thres, threshold):
    """Per class: TP = sum_b pos * pred, FP = sum_b (1 - pos) * pred, FN = sum_b pos * (1 - pred),
    over valid entries only ([B, C] -> three [C] float64)."""
    valid = valid_entries(labels)
    pos = tf.cast(positive_entries(labels, mask_thres), tf.float64)
    pred = tf.cast(tf.logical_and(valid, scores >= threshold), tf.float64)
    tp = tf.reduce_sum(pos * pred, axis=0)
    return tp, tf.reduce_sum(pred, axis=0) - tp, tf.reduce_sum(pos, axis=0) - tp


def f1_score(tp, fp, fn):
    """F1 = 2 TP / (2 TP + FP + FN), 0 where nothing is positive or predicted."""
    return safe_divide(2.0 * tp, 2.0 * tp + fp + fn)


def micro_f1(labels, scores, mask_thres=MASK_THRES, threshold=F1_THRESHOLD, name=None):
    """micro F1 = f1_score of TP, FP, FN summed over all classes and images."""
    with tf.variable_scope(name, 'micro_f1', [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        scores = tf.cast(scores, tf.float32)
        counts = [metric_variable([], n) for n in ('true_positives', 'false_positives',
                                                    'false_negatives')]
        batch = f1_counts(labels, scores, mask_thres, threshold)
        updates = [tf.assign_add(v, tf.reduce_sum(b)) for v, b in zip(counts, batch)]
        return f1_score(*counts), f1_score(*updates)


def macro_average_f1(tp, fp, fn):
    """macro F1 = mean of f1_score per class over classes with TP + FP + FN > 0, i.e. with a
    positive or a prediction in the split (a class predicted but never positive scores 0);
    0 when there is none."""
    counted = tf.cast(tp + fp + fn > 0, tf.float64)
    return safe_divide(tf.reduce_sum(f1_score(tp, fp, fn) * counted), tf.reduce_sum(counted))


def macro_f1(labels, scores, mask_thres=MASK_THRES, threshold=F1_THRESHOLD, name=None):
    """macro F1 = macro_average_f1 of the per-class TP, FP, FN summed over the split."""
    with tf.variable_scope(name, 'macro_f1', [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        scores = tf.cast(scores, tf.float32)
        class_num = class_count(labels)
        counts = [metric_variable([class_num], n) for n in ('true_positives', 'false_positives',
                                                             'false_negatives')]
        batch = f1_counts(labels, scores, mask_thres, threshold)
        updates = [tf.assign_add(v, b) for v, b in zip(counts, batch)]
        return macro_average_f1(*counts), macro_average_f1(*updates)


def top1_accuracy(labels, scores, name=None):
    """accuracy = share of images with argmax_c labels == argmax over valid c of scores.

    The original program's top-1 metric (tf.metrics.accuracy on the two argmaxes), except that
    an ignored class cannot be the predicted one; both agree on images without -1 labels.
    """
    with tf.variable_scope(name, 'top1_accuracy', [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        scores = tf.cast(scores, tf.float32)
        masked = tf.where(valid_entries(labels), scores, tf.fill(tf.shape(scores), -math.inf))
        return tf.metrics.accuracy(tf.argmax(labels, axis=1), tf.argmax(masked, axis=1))


def multilabel_metrics(labels, scores, mask_thres=MASK_THRES, num_bins=NUM_BINS,
                       threshold=F1_THRESHOLD):
    """All metrics as an eval_metric_ops OrderedDict: mAP, precision@1, precision@5, micro_f1,
    macro_f1, accuracy."""
    return collections.OrderedDict([
        ('mAP', mean_average_precision(labels, scores, mask_thres, num_bins)),
        ('precision@1', precision_at_k(labels, scores, 1, mask_thres)),
        ('precision@5', precision_at_k(labels, scores, 5, mask_thres)),
        ('micro_f1', micro_f1(labels, scores, mask_thres, threshold)),
        ('macro_f1', macro_f1(labels, scores, mask_thres, threshold)),
        ('accuracy', top1_accuracy(labels, scores)),
    ])
