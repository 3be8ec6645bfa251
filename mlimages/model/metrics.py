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
  mAP_<name>   the same mean over the classes of a constant mask M_c (class_masks: with
               train.py --hierarchy, M = leaf classes for mAP_leaf, inner classes for
               mAP_inner): sum_c M_c [P_c > 0] AP_c / sum_c M_c [P_c > 0], 0 when no class
               of M has a positive; from the same histograms as mAP
  precision@k  sum of pos over each image's k best valid classes / (k * images)
  micro_f1     2 TP / (2 TP + FP + FN), TP, FP, FN summed over all entries
  macro_f1     mean over classes with a positive or a prediction of 2 TP_c / (2 TP_c + FP_c + FN_c)
  accuracy     share of images with argmax(y) == argmax over valid classes of s

metrics_and_classes also gives the per-class values behind these means (PerClass: AP_c,
the histograms, TP_c, FP_c, FN_c), which the evaluation's per-class report reads.

threshold may also be per class, t [C] (pred[b, c] = valid and s[b, c] >= t_c), e.g. the
calibrated thresholds of f1_optimal_thresholds, which work on the whole split at once (numpy):
  t_c          the t among the valid scores of class c that maximizes
               F1_c(t) = 2 TP_c(t) / (P_c + PRED_c(t)),  TP_c(t) = #{b: pos, s_bc >= t},
               PRED_c(t) = #{b: valid, s_bc >= t},  P_c = #{b: pos}; of equal F1 the highest t;
               the global threshold where P_c = 0

Counts are float64: they are exact integers up to 2^53, whereas float32 stops at
2^24 = 16.8 M. 50,000 val images x 11,166 classes make 5.6e8 entries for the micro-F1 sums,
and the 17.6 M training images pass 2^24 even in a single histogram bin.
"""
import collections
import math

import numpy as np
import tensorflow.compat.v1 as tf

MASK_THRES = 0.7
F1_THRESHOLD = 0.5
# Measured max |mAP - exact mAP|: 9e-4 at 1000 bins, 5e-4 at 2048, 4e-4 at 4096 (see
# mean_average_precision); 2048 bins hold 366 MB for 11,166 classes.
NUM_BINS = 2048
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
    2 / num_bins; its logit half makes a bin near 0, where the sigmoid scores of rare classes
    crowd, about 64 / num_bins of s wide (3 % of s at 2048 bins; likewise of 1 - s near 1).
    Bins uniform in s measured up to 5x the mAP error, on such scores and on small splits.
    """
    # float64 keeps log(1 - s) monotone near 1; a NaN score fails the scatter (index < 0).
    s = tf.clip_by_value(tf.cast(scores, tf.float64), 0.0, 1.0)
    logit = tf.clip_by_value(tf.math.log(s) - tf.math.log1p(-s), -LOGIT_RANGE, LOGIT_RANGE)
    u = 0.5 * (s + (logit + LOGIT_RANGE) / (2.0 * LOGIT_RANGE))
    return tf.minimum(tf.cast(tf.floor(u * num_bins), tf.int64), num_bins - 1)


def expected_precision_sum(above_pos, above_all, pos, neg):
    """E[sum of the precisions at the pos positives of one bin], images inside the bin taken
    in uniformly random order (so ties are broken at random), with above_pos positives among
    the above_all images of higher bins. With m = pos + neg, position j of the bin holds a
    positive with probability pos / m, and then positions 1..j hold on average 1 + (j - 1) beta
    of the bin's positives, beta = (pos - 1) / (m - 1) (0 if m = 1); with
    alpha = above_pos + 1 - beta:
      E = pos / m * sum_{j=1..m} (alpha + beta j) / (above_all + j)
        = pos / m * (m beta + (alpha - beta above_all) H),
      H = sum_{j=1..m} 1 / (above_all + j) = psi(above_all + m + 1) - psi(above_all + 1)
    (psi = digamma). Exact when a bin holds only positives, only negatives or one image.
    """
    m = pos + neg
    beta = safe_divide(pos - 1.0, m - 1.0)
    alpha = above_pos + 1.0 - beta
    h = tf.math.digamma(above_all + m + 1.0) - tf.math.digamma(above_all + 1.0)
    return safe_divide(pos, m) * (m * beta + (alpha - beta * above_all) * h)


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

    Instead of the scores it keeps two [C * num_bins] float64 histograms, valid entries and
    positives per (class, score_bins bin): C * num_bins * 2 * 8 bytes, 366 MB for 11,166
    classes at the default 2048 bins (179 MB at 1000). An update scatter-adds the B * C
    entries of the batch, whatever num_bins: about 0.1 s for 64 x 11,166 on one shared CPU
    core. The value (histogram_average_precision over the C * num_bins cells) takes about 5 s
    and 1.2 GB of temporaries for 11,166 classes and is meant to be read once, at the end.

    Error against the exact AP, which the order inside a bin decides (averaged over here):
    measured max |mAP - exact mAP| over 300 splits of 300 images x 40 classes, scores
    uniform, correlated with the labels or sigmoids of Gaussian logits (mostly near 0):
    8.9e-4 at 1000 bins, 5.4e-4 at 2048, 3.9e-4 at 4096; with 5,000 or 50,000 images it is
    below 6e-5. The error comes from the top of the ranking: the AP of a class with 3
    positives is off by 0.08 when its best positive shares the top bin with one negative.
    Exactly tied scores count as ordered at random (sklearn gives every positive of a tie the
    precision at the end of the tie).

    Returns (mAP, update_op); update_op is an Operation, as computing the value each batch
    would cost more than the whole update.
    """
    ap, has_positive, update_op = average_precisions(labels, scores, mask_thres, num_bins,
                                                     name)
    return masked_mean(ap, has_positive), update_op


def masked_mean(ap, has_positive, mask=None):
    """mAP over a constant class mask M (None: every class):
    sum_c M_c has_positive_c AP_c / sum_c M_c has_positive_c, 0 when the sum is 0."""
    weight = has_positive if mask is None else has_positive * tf.constant(mask, tf.float64)
    return safe_divide(tf.reduce_sum(ap * weight), tf.reduce_sum(weight))


def average_precisions(labels, scores, mask_thres=MASK_THRES, num_bins=NUM_BINS, name=None):
    """(AP [C], has_positive [C] as 0/1, update_op) over the split: the histograms and
    values of mean_average_precision, for means over several class masks at the cost of
    one pair of histograms."""
    pos_counts, neg_counts, update_op = score_histograms(labels, scores, mask_thres, num_bins,
                                                         name)
    return (histogram_average_precision(pos_counts, neg_counts), has_positives(pos_counts),
            update_op)


def has_positives(pos_counts):
    """1.0 for the classes with a positive in the split, else 0.0 ([C, bins] -> [C])."""
    return tf.cast(tf.reduce_sum(pos_counts, axis=1) > 0, tf.float64)


def score_histograms(labels, scores, mask_thres=MASK_THRES, num_bins=NUM_BINS, name=None):
    """(positives [C, num_bins], valid negatives [C, num_bins], update_op): the streamed
    per-class score histograms of mean_average_precision (score_bins' bins)."""
    with tf.variable_scope(name, 'mean_average_precision', [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        class_num = class_count(labels)
        valid_hist = metric_variable([class_num * num_bins], 'valid_histogram')
        pos_hist = metric_variable([class_num * num_bins], 'positive_histogram')
        # Flat index class * num_bins + bin. All entries go to valid_hist (an ignored one adds
        # 0); positives are rare, so scattering only them halves the cost of an update.
        index = score_bins(scores, num_bins) + tf.range(class_num, dtype=tf.int64) * num_bins
        index = tf.reshape(index, [-1])
        positive = tf.reshape(positive_entries(labels, mask_thres), [-1])
        pos_index = tf.boolean_mask(index, positive)
        update_op = tf.group(
            tf.scatter_add(valid_hist, index,
                           tf.reshape(tf.cast(valid_entries(labels), tf.float64), [-1])),
            tf.scatter_add(pos_hist, pos_index, tf.ones_like(pos_index, tf.float64)))
        pos_counts = tf.reshape(pos_hist, [class_num, num_bins])
        neg_counts = tf.reshape(valid_hist, [class_num, num_bins]) - pos_counts
        return pos_counts, neg_counts, update_op


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
    """Per class, over valid entries only ([B, C] -> three [C] float64):
    TP = sum_b pos * pred,  FP = sum_b (1 - pos) * pred,  FN = sum_b pos * (1 - pred);
    threshold: one for every class, or one per class ([C])."""
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
    value, update, _ = macro_f1_and_counts(labels, scores, mask_thres, threshold, name)
    return value, update


def macro_f1_and_counts(labels, scores, mask_thres=MASK_THRES, threshold=F1_THRESHOLD,
                        name=None):
    """(macro F1, its update, the [C] TP, FP, FN variables it is computed from)."""
    with tf.variable_scope(name, 'macro_f1', [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        scores = tf.cast(scores, tf.float32)
        class_num = class_count(labels)
        counts = [metric_variable([class_num], n) for n in ('true_positives', 'false_positives',
                                                             'false_negatives')]
        batch = f1_counts(labels, scores, mask_thres, threshold)
        updates = [tf.assign_add(v, b) for v, b in zip(counts, batch)]
        return macro_average_f1(*counts), macro_average_f1(*updates), counts


def top1_hits(labels, scores):
    """hits = number of images with argmax_c labels == argmax over valid c of scores."""
    masked = tf.where(valid_entries(labels), scores, tf.fill(tf.shape(scores), -math.inf))
    same = tf.equal(tf.argmax(labels, axis=1), tf.argmax(masked, axis=1))
    return tf.reduce_sum(tf.cast(same, tf.float64))


def top1_accuracy(labels, scores, name=None):
    """accuracy = total top1_hits / images.

    The original program's top-1 metric (tf.metrics.accuracy on the two argmaxes, whose float32
    counts this replaces), except that an ignored class cannot be the predicted one; both agree
    on images without -1 labels.
    """
    with tf.variable_scope(name, 'top1_accuracy', [labels, scores]):
        labels = tf.cast(labels, tf.float32)
        scores = tf.cast(scores, tf.float32)
        hits = metric_variable([], 'hits')
        images = metric_variable([], 'images')
        update_hits = tf.assign_add(hits, top1_hits(labels, scores))
        update_images = tf.assign_add(images, tf.cast(tf.shape(labels)[0], tf.float64))
        return safe_divide(hits, images), safe_divide(update_hits, update_images)


def multilabel_metrics(labels, scores, mask_thres=MASK_THRES, num_bins=NUM_BINS,
                       threshold=F1_THRESHOLD, class_masks=None):
    """All metrics as an eval_metric_ops OrderedDict: mAP, mAP_<name> for each (name, bool
    [C] mask) of class_masks (a dict; they share mAP's histograms and update), precision@1,
    precision@5, micro_f1, macro_f1, accuracy."""
    return metrics_and_classes(labels, scores, mask_thres, num_bins, threshold,
                               class_masks)[0]


# The per-class values behind multilabel_metrics' means, [C] each (histograms [C, bins]):
# what the evaluation's per-class report reads at the end of the split.
PerClass = collections.namedtuple('PerClass', 'ap has_positive positive_histogram '
                                  'negative_histogram true_positives false_positives '
                                  'false_negatives')


def metrics_and_classes(labels, scores, mask_thres=MASK_THRES, num_bins=NUM_BINS,
                        threshold=F1_THRESHOLD, class_masks=None):
    """(multilabel_metrics' OrderedDict, the PerClass tensors its values come from): mAP
    is masked_mean of PerClass.ap, macro_f1 macro_average_f1 of its TP, FP, FN."""
    pos_counts, neg_counts, update_op = score_histograms(labels, scores, mask_thres, num_bins)
    ap, update_op = read_once(lambda: histogram_average_precision(pos_counts, neg_counts),
                              [class_count(labels)], update_op, 'average_precision')
    has_positive = has_positives(pos_counts)
    macro, macro_update, counts = macro_f1_and_counts(labels, scores, mask_thres, threshold)
    ops = collections.OrderedDict([('mAP', (masked_mean(ap, has_positive), update_op))] + [
        ('mAP_' + key, (masked_mean(ap, has_positive, mask), update_op))
        for key, mask in (class_masks or {}).items()] + [
        ('precision@1', precision_at_k(labels, scores, 1, mask_thres)),
        ('precision@5', precision_at_k(labels, scores, 5, mask_thres)),
        ('micro_f1', micro_f1(labels, scores, mask_thres, threshold)),
        ('macro_f1', (macro, macro_update)),
        ('accuracy', top1_accuracy(labels, scores)),
    ])
    return ops, PerClass(ap, has_positive, pos_counts, neg_counts, *counts)


def read_once(compute, shape, update_op, name):
    """(compute()'s float64 value of `shape` as at its first read after the last update,
    update_op that also forgets it): the per-class report's read of the AP and the
    Estimator's final read of the mAPs then share one computation (5-15 s and ~1 GB of
    temporaries at 11,166 classes). compute builds its ops inside the cond's branch, so a
    kept value costs none of them. The kept copy is a plain local variable: never summed
    over replicas."""
    def local(shape, suffix):
        return tf.Variable(lambda: tf.zeros(shape, tf.float64), name=name + suffix,
                           trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES,
                                                         tf.GraphKeys.METRIC_VARIABLES])
    kept, fresh = local(shape, '_kept'), local([], '_fresh')

    def first_read():
        value = compute()
        with tf.control_dependencies([tf.assign(kept, value), tf.assign(fresh, 1.0)]):
            return tf.identity(value)
    with tf.control_dependencies([update_op]):
        forget = tf.assign(fresh, 0.0)
    return tf.cond(fresh > 0, lambda: tf.identity(kept), first_read), tf.group(update_op, forget)


def f1_optimal_thresholds(labels, scores, mask_thres=MASK_THRES, default=F1_THRESHOLD,
                          classes_at_once=256):
    """t_c (module docstring) for labels y and scores s, numpy [N, C] of the whole split:
    returns (t [C] float32, F1_c(t_c) [C] float64, P_c [C] int64); t_c = default and F1 0
    where P_c = 0. t_c is one of the class's scores, so s >= t_c takes exactly the images
    it was chosen on, in float32 as the graphs compare. classes_at_once bounds the sort's
    memory (N x classes_at_once x 8 bytes)."""
    labels = np.asarray(labels, np.float32)
    scores = np.asarray(scores, np.float32)
    count = labels.shape[1]
    thresholds = np.full(count, default, np.float32)
    best = np.zeros(count)
    positives = np.zeros(count, np.int64)
    for start in range(0, count, classes_at_once):
        block = slice(start, start + classes_at_once)
        y, s = labels[:, block], scores[:, block]
        valid = y != -1.0
        pos = valid & (y >= np.float32(mask_thres))
        # Invalid entries sort last as -inf and are never taken.
        s = np.where(valid, s, -np.inf)
        order = np.argsort(-s, axis=0, kind='stable')
        s = np.take_along_axis(s, order, axis=0)
        tp = np.cumsum(np.take_along_axis(pos, order, axis=0), axis=0)
        taken = np.cumsum(np.take_along_axis(valid, order, axis=0), axis=0)
        total = pos.sum(axis=0)
        # t = s[k] takes every entry down to the last one equal to s[k]: only the last of
        # each run of equal scores is a cut.
        cut = np.vstack([s[1:] != s[:-1], np.ones((1, s.shape[1]), bool)]) & (s > -np.inf)
        f1 = np.where(cut, 2.0 * tp / np.maximum(total + taken, 1), -1.0)
        k = np.argmax(f1, axis=0)  # the first maximum: the highest threshold
        columns = np.arange(s.shape[1])
        has = total > 0
        thresholds[block] = np.where(has, s[k, columns], default)
        best[block] = np.where(has, f1[k, columns], 0.0)
        positives[block] = total
    return thresholds, best, positives
