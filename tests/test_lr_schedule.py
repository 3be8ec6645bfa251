"""The learning rate at and around every boundary, pre-training and fine-tuning schedules."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from mlimages.model import lr_schedule
import references
from helpers import settings

tf.disable_v2_behavior()


def rates(steps, schedule='piecewise', **kwargs):
    """The schedule of train.py's settings (the defaults) with the given flags."""
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        lr = lr_schedule.learning_rate_of(
            settings(lr_schedule=schedule, **kwargs).schedule, step)
        with tf.Session() as sess:
            return [float(sess.run(lr, {step: s})) for s in steps]


def test_piecewise_decay_at_every_boundary():
    steps = [0, 1, 99, 100, 101, 199, 200, 201, 299, 300, 301, 399, 400, 401, 1000, 10 ** 6]
    got = rates(steps, lr=0.08, lr_decay_step=100)
    want = [references.learning_rate(s, 0.08, 100, 0.1) for s in steps]
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


def test_exponential_decay_at_every_boundary_matches_numpy():
    """Fine-tuning: lr * factor^floor(step / D), no cap; steps k*D - 1, k*D, k*D + 1."""
    lr, decay_step, factor = 0.01, 30, 0.1
    steps = sorted({max(0, k * decay_step + d) for k in range(8) for d in (-1, 0, 1)}
                   | {10 ** 4})
    got = rates(steps, lr=lr, lr_decay_step=decay_step, lr_decay_factor=factor,
                schedule='exponential')
    want = [references.learning_rate(s, lr, decay_step, factor, schedule='exponential')
            for s in steps]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    # the first decay at step D itself (piecewise waits for D + 1), and no cap at 4 decays
    assert got[steps.index(29)] == pytest.approx(0.01)
    assert got[steps.index(30)] == pytest.approx(0.001)
    assert got[steps.index(7 * 30)] == pytest.approx(0.01 * 1e-7)


def test_exponential_is_tensorflows_staircase_exponential_decay_bit_for_bit():
    steps = [0, 99, 100, 101, 250, 1999, 2000, 2001]
    got = rates(steps, lr=0.08, lr_decay_step=100, lr_decay_factor=0.94,
                schedule='exponential')
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        ref = tf.train.exponential_decay(0.08, step, 100, 0.94, staircase=True)
        with tf.Session() as sess:
            want = [float(sess.run(ref, {step: s})) for s in steps]
    assert got == want


def test_exponential_without_decay_step_is_constant_and_default_is_piecewise():
    assert rates([0, 10 ** 7], lr=0.1, lr_decay_step=0,
                 schedule='exponential') == pytest.approx([0.1, 0.1])
    assert rates([100], lr=1.0, lr_decay_step=100) == pytest.approx([1.0])  # piecewise
    with pytest.raises(ValueError, match='schedule'):
        rates([0], lr=0.1, schedule='cosine')
