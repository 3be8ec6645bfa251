"""The learning-rate schedules of ML-Images. Kept apart from the loss because they depend
only on the step.

Pre-training (the original's train.py), with D = lr_decay_step and f = lr_decay_factor:
  piecewise:   lr * f^k  for  k*D < step <= (k+1)*D, k capped at 4 (k = 0 up to step D)
  warm-up:     lr_warmup * lr_warmup_decay_factor^floor(step / lr_warmup_decay_step)
               while step < warmup
Fine-tuning (the original's finetune.py, TF's exponential_decay with staircase=True):
  exponential: lr * f^floor(step / D)   -- no cap, the first decay at step == D, no warm-up
D = 0 means no decay for both schedules.
"""
import tensorflow.compat.v1 as tf

from mlimages.config import choices

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


def exponential_learning_rate(global_step, lr, lr_decay_step, lr_decay_factor):
    """lr * lr_decay_factor ** floor(global_step / lr_decay_step); constant lr if no decay.

    tf.train.exponential_decay(staircase=True) itself, so the float32 arithmetic is the
    original fine-tuning's.
    """
    if not lr_decay_step:
        return tf.constant(lr, tf.float32)
    return tf.train.exponential_decay(lr, global_step, lr_decay_step, lr_decay_factor,
                                      staircase=True)


SCHEDULES = {'piecewise': piecewise_learning_rate, 'exponential': exponential_learning_rate}
assert tuple(SCHEDULES) == choices.SCHEDULES


def warmup_learning_rate(global_step, lr_warmup, lr_warmup_decay_step, lr_warmup_decay_factor):
    """lr_warmup * lr_warmup_decay_factor ** floor(step / lr_warmup_decay_step)."""
    stairs = tf.floor(tf.cast(global_step, tf.float32) / float(lr_warmup_decay_step))
    return lr_warmup * tf.pow(float(lr_warmup_decay_factor), stairs)


def learning_rate(global_step, lr, lr_decay_step, lr_decay_factor, warmup, lr_warmup,
                  lr_warmup_decay_step, lr_warmup_decay_factor, schedule):
    """The warm-up rate while global_step < warmup, the `schedule` rate after
    ('piecewise': pre-training's, 'exponential': fine-tuning's)."""
    if lr_decay_step < 0:
        raise ValueError('lr_decay_step must be >= 0, got %d' % lr_decay_step)
    if schedule not in SCHEDULES:
        raise ValueError('schedule must be one of %s, got %r'
                         % (', '.join(sorted(SCHEDULES)), schedule))
    decayed = SCHEDULES[schedule](global_step, lr, lr_decay_step, lr_decay_factor)
    if warmup <= 0:
        return decayed
    if lr_warmup_decay_step <= 0:
        raise ValueError('warmup > 0 needs lr_warmup_decay_step > 0, got %d'
                         % lr_warmup_decay_step)
    warm = warmup_learning_rate(global_step, lr_warmup, lr_warmup_decay_step,
                                lr_warmup_decay_factor)
    return tf.where(tf.cast(global_step, tf.int64) < warmup, warm, decayed)


def learning_rate_of(schedule, global_step):
    """The run's learning rate (schedule: the flags.Schedule group): learning_rate with
    --lr, --lr_decay_step, --lr_decay_factor, the warm-up flags and --lr_schedule."""
    return learning_rate(global_step, schedule.lr, schedule.lr_decay_step,
                         schedule.lr_decay_factor, schedule.warmup, schedule.lr_warmup,
                         schedule.lr_warmup_decay_step, schedule.lr_warmup_decay_factor,
                         schedule.lr_schedule)
