"""The learning-rate schedule of ML-Images (docs/original.md, Learning rate): a staircase warm-up, then
piecewise-constant decay. Kept apart from the loss because it depends only on the step.
"""
import tensorflow.compat.v1 as tf

DECAY_STAGES = 4


def decay_boundaries(lr_decay_step):
    """[lr_decay_step * k for k in 1..4]; none when lr_decay_step == 0 (no decay)."""
    if lr_decay_step == 0:
        return []
    return [lr_decay_step * k for k in range(1, DECAY_STAGES + 1)]


def decay_values(lr, lr_decay_factor, lr_decay_step):
    """[lr * lr_decay_factor ** k for k in 0..4] (the original's [1, .1, .01, 1e-3, 1e-4] * lr)."""
    stages = DECAY_STAGES if lr_decay_step else 0
    return [lr * lr_decay_factor ** k for k in range(stages + 1)]


def piecewise_learning_rate(global_step, lr, lr_decay_step, lr_decay_factor):
    """values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <=
    boundaries[i], values[-1] after (tf.train.piecewise_constant); constant lr if no decay."""
    boundaries = decay_boundaries(lr_decay_step)
    values = decay_values(lr, lr_decay_factor, lr_decay_step)
    if not boundaries:
        return tf.constant(values[0], tf.float32)
    step = tf.cast(global_step, tf.int64)
    return tf.train.piecewise_constant(step, [tf.constant(b, tf.int64) for b in boundaries],
                                       values)


def warmup_learning_rate(global_step, lr_warmup, lr_warmup_decay_step, lr_warmup_decay_factor):
    """lr_warmup * lr_warmup_decay_factor ** floor(step / lr_warmup_decay_step)."""
    stairs = tf.floor(tf.cast(global_step, tf.float32) / float(lr_warmup_decay_step))
    return lr_warmup * tf.pow(float(lr_warmup_decay_factor), stairs)


def learning_rate(global_step, lr, lr_decay_step=0, lr_decay_factor=0.1, warmup=0,
                  lr_warmup=0.1, lr_warmup_decay_step=0, lr_warmup_decay_factor=1.414):
    """The warm-up rate while global_step < warmup, the piecewise-constant rate after."""
    if lr_decay_step < 0:
        raise ValueError('lr_decay_step must be >= 0, got %d' % lr_decay_step)
    decayed = piecewise_learning_rate(global_step, lr, lr_decay_step, lr_decay_factor)
    if warmup <= 0:
        return decayed
    if lr_warmup_decay_step <= 0:
        raise ValueError('warmup > 0 needs lr_warmup_decay_step > 0, got %d'
                         % lr_warmup_decay_step)
    warm = warmup_learning_rate(global_step, lr_warmup, lr_warmup_decay_step,
                                lr_warmup_decay_factor)
    return tf.where(tf.cast(global_step, tf.int64) < warmup, warm, decayed)
