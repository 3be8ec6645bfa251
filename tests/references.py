"""The independent references the tests hold the product against: one per formula, written
out in numpy (or, for the original's own L2 line, in the original's TensorFlow form), each
straight from the original's definition (docs/original.md), none calling product code.

    learning_rate        the warm-up staircase, then piecewise (pre-training) or exponential
                         (finetune.py) decay
    NumpyLoss            the count-weighted sigmoid cross-entropy with its class counters,
                         and evaluation's per-image form of it
    l2_of_checkpoint     weight_decay x sum(v^2)/2 over names without 'bn'
                         + bn_fraction x weight_decay x sum(v^2)/2 over names with 'bn'
    original_l2          the original pre-training L2 line, in TensorFlow
    average_precision    scikit-learn's average_precision_score
    binned_average_precision  the AP of scores put in the metric's histogram bins, the
                         order inside a bin averaged over (a sum over its positions)
    multilabel_metrics   mAP, precision@1/@5, micro/macro F1 (at one threshold or one per
                         class) and top-1 accuracy
    f1_optimal_thresholds  each class's threshold of the highest F1, by trying every score
    pca                  numpy's SVD of the centred features
"""
import math

import numpy as np
import tensorflow.compat.v1 as tf


# ---------------------------------------------------------------- learning rate

def learning_rate(step, lr, lr_decay_step, lr_decay_factor, warmup=0, lr_warmup=0.0,
                  lr_warmup_decay_step=1, lr_warmup_decay_factor=1.0, schedule='piecewise'):
    """While step < warmup: lr_warmup x lr_warmup_decay_factor^floor(step / stair). After:
    piecewise, lr x factor^k with k = how many of lr_decay_step x 1..4 the step is past;
    exponential, lr x factor^floor(step / lr_decay_step), no cap. lr_decay_step 0: no
    decay."""
    if step < warmup:
        return lr_warmup * lr_warmup_decay_factor ** math.floor(step / lr_warmup_decay_step)
    if not lr_decay_step:
        return lr
    if schedule == 'exponential':
        return lr * lr_decay_factor ** math.floor(step / lr_decay_step)
    return lr * lr_decay_factor ** sum(step > lr_decay_step * k for k in range(1, 5))


# ---------------------------------------------------------------- the loss

class NumpyLoss(object):
    """docs/original.md, Loss written out in numpy, with its own counters."""

    def __init__(self, class_num, mask_thres):
        self.pos_count = np.zeros(class_num)
        self.neg_count = np.zeros(class_num)
        self.mask_thres = mask_thres

    @staticmethod
    def w(v, floor):
        return np.where(v > 0.01, v, floor)

    def step(self, y, x, sel):
        pos = (y >= self.mask_thres).any(axis=0).astype(np.float64)
        self.pos_count = np.where(pos == 1, self.pos_count + 1, 0)
        self.neg_count = np.where(pos == 1, 0, self.neg_count + sel)
        pos_coef = pos * self.w(-np.log10((0.01 + self.pos_count) / 10), 0.01)
        neg_coef = (1 - pos) * sel * self.w(-np.log10((8 + self.neg_count) / 10), 0.001)
        coef = pos_coef + neg_coef
        mask = (y != -1).astype(np.float64)
        # -log(sigmoid(x)) = log(1 + e^-x); -log(1 - sigmoid(x)) = log(1 + e^x)
        ce = 12 * y * np.logaddexp(0, -x) + (1 - y) * np.logaddexp(0, x)
        return (ce * mask).mean(axis=0).dot(coef), coef

    def per_image(self, y, x, neg_select):
        """Evaluation's value of each image: a step on that image alone with the counters
        as they are (not advanced) and every negative selected at rate neg_select."""
        values = []
        for image, logits in zip(y, x):
            pos = (image >= self.mask_thres).astype(np.float64)
            coef = (pos * self.w(-np.log10((0.01 + self.pos_count) / 10), 0.01)
                    + (1 - pos) * neg_select
                    * self.w(-np.log10((8 + self.neg_count) / 10), 0.001))
            ce = 12 * image * np.logaddexp(0, -logits) + (1 - image) * np.logaddexp(0, logits)
            values.append(np.sum(ce * (image != -1) * coef))
        return np.array(values)


# ---------------------------------------------------------------- L2

def l2_of_checkpoint(path, weight_decay=1.0, bn_fraction=0.0):
    """The L2 term in numpy over a checkpoint's trainable variables (kernels, bias, gamma,
    beta; frozen ones included; no slot, counter or moving statistic): weight_decay x
    sum(v^2)/2 over names without 'bn' + bn_fraction x weight_decay x sum(v^2)/2 over names
    with 'bn'. Returns (term, its batch-norm part)."""
    reader = tf.train.load_checkpoint(path)
    plain = bn = 0.0
    for name in reader.get_variable_to_shape_map():
        if not name.endswith(('kernel', 'bias', 'gamma', 'beta')):
            continue
        half_square = np.sum(reader.get_tensor(name).astype(np.float64) ** 2) / 2
        if 'bn' in name:
            bn += half_square
        else:
            plain += half_square
    return weight_decay * plain + bn_fraction * weight_decay * bn, bn_fraction * weight_decay * bn


def original_l2(variables, weight_decay):
    """The original pre-training line: weight_decay * sum(l2_loss(v)) over the variables
    not under batch_normalization."""
    return weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in variables
                                    if 'batch_normalization' not in v.name])


# ---------------------------------------------------------------- metrics

def average_precision(positive, score):
    """sklearn's average_precision_score: sum over distinct thresholds, highest first, of
    (recall step) * precision; with distinct scores the mean over positives of the precision
    at their rank."""
    order = np.argsort(-score, kind='stable')
    positive, score = positive[order], score[order]
    tp = np.cumsum(positive)
    seen = np.arange(1, len(score) + 1)
    last_of_tie = np.r_[score[1:] != score[:-1], True]
    tp, seen = tp[last_of_tie], seen[last_of_tie]
    return np.sum(np.diff(np.r_[0, tp]) * tp / seen) / tp[-1]


def histogram_bin(score, num_bins=2048):
    """The bin of a score: u(s) = (s + (clip(logit s, -16, 16) + 16) / 32) / 2 cut into
    num_bins equal parts (the top one closed)."""
    s = np.clip(np.asarray(score, np.float64), 0.0, 1.0)
    with np.errstate(divide='ignore'):
        logit = np.clip(np.log(s / (1.0 - s)), -16.0, 16.0)
    u = (s + (logit + 16.0) / 32.0) / 2.0
    return np.minimum((u * num_bins).astype(np.int64), num_bins - 1)


def binned_average_precision(positive, score, num_bins=2048):
    """AP with the images ranked by bin, highest first, and each bin's images in uniformly
    random order: the mean over positives of E[precision at their rank]. Position j of a
    bin of m images (p positives) under `above` images (`above_pos` positives) is a
    positive with probability p / m, and then holds 1 + (j - 1)(p - 1)/(m - 1) of the
    bin's positives on average up to it."""
    bins = histogram_bin(score, num_bins)
    total, above, above_pos = 0.0, 0, 0
    for b in sorted(set(bins.tolist()), reverse=True):
        inside = bins == b
        m, p = int(inside.sum()), int(positive[inside].sum())
        for j in range(1, m + 1):
            mean_pos = 1.0 + (j - 1) * ((p - 1) / (m - 1) if m > 1 else 0.0)
            total += p / m * (above_pos + mean_pos) / (above + j)
        above, above_pos = above + m, above_pos + p
    return total / positive.sum()


def multilabel_metrics(y, s, mask_thres=0.7, threshold=0.5):
    """The evaluation metrics of labels y (-1 = ignored) and scores s [images, classes]."""
    valid = y != -1
    # In float32, as the labels are stored: a label of 0.7 reaches mask_thres 0.7.
    pos = valid & (y >= np.float32(mask_thres))
    y, s = y.astype(np.float64), s.astype(np.float64)
    aps = [average_precision(pos[valid[:, c], c], s[valid[:, c], c])
           for c in range(y.shape[1]) if pos[:, c].any()]
    masked = np.where(valid, s, -np.inf)
    order = np.argsort(-masked, axis=1, kind='stable')  # equal scores: lower class first

    def precision_at(k):
        k = min(k, y.shape[1])
        return np.take_along_axis(pos, order[:, :k], axis=1).sum() / (k * len(y))

    pred = valid & (s >= threshold)
    tp = (pos & pred).sum(axis=0)
    fp = (~pos & pred).sum(axis=0)
    fn = (pos & ~pred).sum(axis=0)
    counted = tp + fp + fn > 0
    return {
        'mAP': np.mean(aps) if aps else 0.0,
        'precision@1': precision_at(1),
        'precision@5': precision_at(5),
        'micro_f1': 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()),
        'macro_f1': np.mean(2 * tp[counted] / (2 * tp + fp + fn)[counted]),
        'accuracy': np.mean(np.argmax(y, axis=1) == np.argmax(masked, axis=1)),
    }


def f1_optimal_thresholds(y, s, mask_thres=0.7, default=0.5):
    """Per class, by trying every threshold: each distinct valid score t of the class gives
    F1(t) = 2 TP / (2 TP + FP + FN) with pred = valid & s >= t; the best, the highest t
    among equal F1; `default` (F1 0) for a class without a positive. Returns (thresholds,
    their F1, positives per class)."""
    thresholds, best, positives = [], [], []
    for c in range(y.shape[1]):
        valid = y[:, c] != -1
        pos = valid & (y[:, c] >= np.float32(mask_thres))
        positives.append(int(pos.sum()))
        if not pos.any():
            thresholds.append(default)
            best.append(0.0)
            continue
        found = []
        for t in sorted(set(s[valid, c].tolist()), reverse=True):
            pred = valid & (s[:, c] >= t)
            tp, fp, fn = np.sum(pos & pred), np.sum(~pos & pred), np.sum(pos & ~pred)
            found.append((2 * tp / (2 * tp + fp + fn), t))
        f1 = max(f for f, _ in found)
        thresholds.append(max(t for f, t in found if f == f1))
        best.append(f1)
    return np.array(thresholds, np.float32), np.array(best), np.array(positives)


def pca(x, k):
    """numpy's SVD of the centred rows: (mean, the k right singular vectors [k, D], their
    variances s^2 / (N - 1))."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    _, singular, vt = np.linalg.svd(x - mean, full_matrices=False)
    return mean, vt[:k], singular[:k] ** 2 / (len(x) - 1)
