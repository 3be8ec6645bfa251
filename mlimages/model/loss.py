"""The multi-label loss of ML-Images (docs/original.md, Loss), one formula per function.

Per class c and step, with labels y [B, C] and logits x [B, C]:
  pos_c   = 1 if some image of the batch has y[b, c] >= mask_thres          (batch_positives)
  sel_c   = 1 if u_c <= neg_select, u ~ U[0, 1) drawn every step             (select_negatives)
  pos_count_c <- pos_c ? pos_count_c + 1 : 0
  neg_count_c <- pos_c ? 0 : neg_count_c + sel_c                             (update_counters)
  coef_c  = pos_c * w(-log10((0.01 + pos_count_c) / 10), 0.01)
          + (1 - pos_c) * sel_c * w(-log10((8 + neg_count_c) / 10), 0.001)  (class_coefficients)
  cross_entropy = sum_c mean_b(ce[b, c] * mask[b, c]) * coef_c
where ce is sigmoid cross-entropy with positive weight 12 and mask drops labels equal to -1.

Evaluation, one value an image, so that its mean over the val split does not depend on the
batches it is read in (per_image_cross_entropy): the step's formula for a batch of that
image alone, the counters as saved and the selection at its expected rate:
  ce_image[b] = sum_c ce[b, c] * mask[b, c] * coef[b, c],  with pos[b, c] = y[b, c] >= mask_thres
  and sel_c = neg_select in coef (single labels: the softmax cross-entropy of each image).

L2 terms, l2_loss(v) = sum(v^2) / 2:
  weight_decay * sum l2_loss(v), 'bn' not in v's name
  + bn_weight_decay * weight_decay * sum l2_loss(v), 'bn' in v's name       (weight_decay_loss)
  (pre-training: bn_weight_decay 0, no L2 on batch norm; the original's finetune.py: 0.1)
A run's loss from its settings groups (flags.Training): cross_entropy_of and weight_decay_of.
The counters are non-trainable variables `pos_count` and `neg_count` (the original left them
unnamed: `Variable`, `Variable_1`), saved in every checkpoint so a resumed run continues
the same streaks.
"""
import tensorflow.compat.v1 as tf

from mlimages.distributed import distribute

POS_WEIGHT = 12.0
WEIGHT_THRESHOLD = 0.01
POS_FLOOR = 0.01
NEG_FLOOR = 0.001


def loss_weight(value, floor):
    """w(v, floor) = v if v > 0.01 else floor (the threshold is 0.01 for both floors)."""
    return tf.where(value > WEIGHT_THRESHOLD, value, tf.fill(tf.shape(value), floor))


def log10(x):
    return tf.math.log(x) / tf.math.log(10.0)


def positive_coefficient(pos_count):
    """w(-log10((0.01 + pos_count) / 10), floor=0.01): 1 after one positive batch, falling."""
    return loss_weight(-log10((0.01 + pos_count) / 10.0), POS_FLOOR)


def negative_coefficient(neg_count):
    """w(-log10((8 + neg_count) / 10), floor=0.001): 0.097 at first, 0.001 from count 2 on."""
    return loss_weight(-log10((8.0 + neg_count) / 10.0), NEG_FLOOR)


def batch_positives(labels, mask_thres):
    """pos_c = 1.0 where any image of the batch has labels[b, c] >= mask_thres, else 0.0.

    Under a synchronous strategy (several replicas) the batch is the global one: the
    per-replica indicators are all-reduced, so every replica gets the same pos_c.
    """
    local = tf.cast(tf.reduce_any(labels >= mask_thres, axis=0), tf.float32)
    return distribute.all_reduce_max(local)


def select_negatives(class_num, neg_select, seed):
    """sel_c = 1.0 where u_c <= neg_select for a fresh u ~ U[0, 1) per class and step.

    Under a synchronous strategy every replica uses the first replica's draw.
    """
    u = tf.random.uniform([class_num], minval=0.0, maxval=1.0, seed=seed)
    return distribute.from_first_replica(tf.cast(u <= neg_select, tf.float32))


def counter_variables(class_num):
    """The per-class streak counters, zero at the start, checkpointed, never trained.

    Under a synchronous strategy there is one copy per device, all updated with the first
    replica's (identical) values, and the checkpoint holds one.
    """
    def counter(name):
        return tf.get_variable(name, shape=[class_num], dtype=tf.float32,
                               initializer=tf.zeros_initializer(), trainable=False,
                               **distribute.synchronized_variable_args())
    return counter('pos_count'), counter('neg_count')


def update_counters(pos_count, neg_count, pos, sel):
    """pos_count <- pos ? pos_count + 1 : 0;  neg_count <- pos ? 0 : neg_count + sel.

    Returns the updated values; the update happens before they are used, as in the original.
    """
    new_pos = pos * (pos_count + 1.0)
    new_neg = (1.0 - pos) * (neg_count + sel)
    return tf.assign(pos_count, new_pos), tf.assign(neg_count, new_neg)


def class_coefficients(pos, sel, pos_count, neg_count):
    """coef_c = pos_c * positive_coefficient + (1 - pos_c) * sel_c * negative_coefficient."""
    pos_coef = pos * positive_coefficient(pos_count)
    neg_coef = (1.0 - pos) * sel * negative_coefficient(neg_count)
    return pos_coef, neg_coef, pos_coef + neg_coef


def ignore_mask(labels):
    """mask[b, c] = 0 where labels[b, c] == -1 (class ignored for that image), else 1."""
    return tf.cast(tf.not_equal(labels, -1.0), tf.float32)


def weighted_sigmoid_cross_entropy(labels, logits):
    """ce = 12 y (-log sigmoid(x)) + (1 - y) (-log(1 - sigmoid(x))), computed stably."""
    return tf.nn.weighted_cross_entropy_with_logits(labels=labels, logits=logits,
                                                    pos_weight=POS_WEIGHT)


def weighted_cross_entropy(ce, mask, coef):
    """cross_entropy = sum_c( mean_b(ce[b, c] * mask[b, c]) * coef_c )."""
    return tf.reduce_sum(tf.reduce_mean(ce * mask, axis=0) * coef)


def weight_decay_loss(variables, weight_decay, bn_weight_decay):
    """weight_decay * sum(l2_loss(v)) over v whose name lacks 'bn'
    + bn_weight_decay * weight_decay * sum(l2_loss(v)) over v whose name has 'bn'.

    Names are matched on 'bn' as the original fine-tuning did; in this model those are
    exactly the batch-norm gamma/beta, so bn_weight_decay=0 is pre-training's term (L2 on
    every variable but batch norm's).
    """
    loss = weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in variables if 'bn' not in v.name])
    if bn_weight_decay:
        # One Python product, as the original's 0.1 * FLAGS.weight_decay.
        loss += (bn_weight_decay * weight_decay) * tf.add_n(
            [tf.nn.l2_loss(v) for v in variables if 'bn' in v.name])
    return loss


def multilabel_cross_entropy(labels, logits, mask_thres, neg_select, seed, update=True):
    """The docs/original.md, Loss cross-entropy of one step.

    With update=True (training) the counters advance first; otherwise the current counters
    are used as they are. Returns (cross_entropy, tensors) where tensors holds the
    intermediate values by their original names, for summaries and tests.
    """
    labels = tf.cast(labels, tf.float32)
    logits = tf.cast(logits, tf.float32)
    class_num = labels.shape[-1]
    pos = batch_positives(labels, mask_thres)
    sel = select_negatives(class_num, neg_select, seed)
    pos_count, neg_count = counter_variables(class_num)
    if update:
        pos_count, neg_count = update_counters(pos_count, neg_count, pos, sel)
    pos_coef, neg_coef, coef = class_coefficients(pos, sel, pos_count, neg_count)
    mask = ignore_mask(labels)
    ce = weighted_sigmoid_cross_entropy(labels, logits)
    cross_entropy = weighted_cross_entropy(ce, mask, coef)
    tensors = {
        'pos_curr_count': pos, 'neg_curr_count': 1.0 - pos, 'neg_select': sel,
        'pos_count': tf.convert_to_tensor(pos_count), 'neg_count': tf.convert_to_tensor(neg_count),
        'pos_loss_coef': pos_coef, 'neg_loss_coef': neg_coef, 'loss_coef': coef,
        'non_neg': mask, 'sigmod_ce': ce,
    }
    return cross_entropy, tensors


def per_image_cross_entropy(labels, logits, mask_thres, neg_select):
    """Evaluation's cross-entropy of each image [B] (the module docstring): the step's
    formula for that image alone, the counters as saved, sel_c = neg_select."""
    labels = tf.cast(labels, tf.float32)
    pos = tf.cast(labels >= mask_thres, tf.float32)
    pos_count, neg_count = counter_variables(labels.shape[-1])
    coef = class_coefficients(pos, neg_select, pos_count, neg_count)[2]
    ce = weighted_sigmoid_cross_entropy(labels, tf.cast(logits, tf.float32))
    return tf.reduce_sum(ce * ignore_mask(labels) * coef, axis=1)


def softmax_cross_entropy(labels, logits):
    """Single-label fine-tuning loss: mean_b( -sum_c y[b, c] * log(softmax(x[b])_c) ).

    labels are one-hot (records.class_index_label), as the original fine-tuning script's
    softmax cross-entropy on ImageNet class indices.
    """
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(
        labels=tf.stop_gradient(tf.cast(labels, tf.float32)),
        logits=tf.cast(logits, tf.float32)))


def cross_entropy_of(label_type, training, labels, logits, update):
    """The run's cross-entropy (training: the flags.Training group): softmax_cross_entropy
    for --label_type=single, else multilabel_cross_entropy with --mask_thres, --neg_select
    and --random_seed. Returns (cross_entropy, the loss counters' tensors by name, or {})."""
    if label_type == 'single':
        return softmax_cross_entropy(labels, logits), {}
    return multilabel_cross_entropy(labels, logits, training.mask_thres, training.neg_select,
                                    training.random_seed, update=update)


def per_image_cross_entropy_of(label_type, training, labels, logits):
    """Evaluation's cross-entropy of each image [B] for the run (training: flags.Training)."""
    if label_type == 'single':
        return tf.nn.softmax_cross_entropy_with_logits_v2(
            labels=tf.cast(labels, tf.float32), logits=tf.cast(logits, tf.float32))
    return per_image_cross_entropy(labels, logits, training.mask_thres, training.neg_select)


def weight_decay_of(training, variables):
    """The run's L2 term: weight_decay_loss with --weight_decay and --bn_weight_decay
    (training: the flags.Training group)."""
    return weight_decay_loss(variables, training.weight_decay, training.bn_weight_decay)
