"""docs/original.md, Learning rate: the learning rate at and around every boundary."""
import math

import pytest
import tensorflow.compat.v1 as tf

import lr_schedule

tf.disable_v2_behavior()


def rates(steps, **kwargs):
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        lr = lr_schedule.learning_rate(step, **kwargs)
        with tf.Session() as sess:
            return [float(sess.run(lr, {step: s})) for s in steps]


def expected_decay(step, lr, decay_step, factor=0.1):
    # values[k] while (k * decay_step) < step <= (k + 1) * decay_step
    k = 0 if step <= decay_step else min(4, math.ceil(step / decay_step) - 1)
    return lr * factor ** k


def test_piecewise_decay_at_every_boundary():
    steps = [0, 1, 99, 100, 101, 199, 200, 201, 299, 300, 301, 399, 400, 401, 1000, 10 ** 6]
    got = rates(steps, lr=0.08, lr_decay_step=100)
    want = [expected_decay(s, 0.08, 100) for s in steps]
    assert got == pytest.approx(want, rel=1e-6)
    # spot checks written out by hand
    assert got[steps.index(100)] == pytest.approx(0.08)
    assert got[steps.index(101)] == pytest.approx(0.008)
    assert got[steps.index(401)] == pytest.approx(0.08 * 1e-4)


def test_decay_factor_is_used():
    got = rates([50, 150, 250], lr=1.0, lr_decay_step=100, lr_decay_factor=0.5)
    assert got == pytest.approx([1.0, 0.5, 0.25])


def test_lr_decay_step_zero_means_no_decay():
    assert rates([0, 1, 10 ** 7], lr=0.1, lr_decay_step=0) == pytest.approx([0.1] * 3)


def test_warmup_staircase_of_the_published_run():
    kwargs = dict(lr=0.08, lr_decay_step=110000, warmup=35200, lr_warmup=0.01,
                  lr_warmup_decay_step=4400, lr_warmup_decay_factor=1.297)
    steps = [0, 1, 4399, 4400, 4401, 8800, 35199, 35200, 35201, 110000, 110001]
    got = rates(steps, **kwargs)
    want = [0.01, 0.01, 0.01, 0.01297, 0.01297, 0.01 * 1.297 ** 2, 0.01 * 1.297 ** 7,
            0.08, 0.08, 0.08, 0.008]
    assert got == pytest.approx(want, rel=1e-5)


def test_warmup_without_stair_length_is_rejected():
    with pytest.raises(ValueError, match='lr_warmup_decay_step'):
        rates([0], lr=0.1, warmup=10, lr_warmup_decay_step=0)
