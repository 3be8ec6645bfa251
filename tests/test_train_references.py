"""train.py's numbers against references computed here in numpy, independently of the
model code: the learning rate of every step in TensorBoard against the schedule formula,
loss - cross_entropy against weight_decay x L2 of the step's weights, --mask_thres and
--neg_select in the loss counters, NCHW against NHWC, bf16 convolutions, and the demo."""
import glob
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import references
import resnet
from helpers import CLASSES, ENV, ROOT, checkpoint_values, run_train, scalar_tags, \
    small_run_flags, write_dataset


@pytest.fixture(scope='module')
def dataset(module_dir):
    return write_dataset(str(module_dir('refs')))


@pytest.mark.slow
def test_learning_rate_and_l2_term_of_every_step(dataset, tmp_path):
    model_dir = str(tmp_path / 'model')
    rule = dict(lr=0.1, lr_decay_step=3, lr_decay_factor=0.5, warmup=4, lr_warmup=0.01,
                lr_warmup_decay_step=2, lr_warmup_decay_factor=3.0)
    steps, weight_decay = 16, 0.01
    result = run_train(*small_run_flags(dataset, model_dir, steps), '--resnet_size=18',
                       '--snapshot=1', '--max_to_keep=%d' % (steps + 1),
                       '--summary_interval=1', '--weight_decay=%g' % weight_decay,
                       *['--%s=%g' % item for item in rule.items()])
    assert result.returncode == 0, result.stderr[-3000:]
    scalars = scalar_tags(model_dir)
    # The summary of step t is computed in the run that takes global step t-1 to t.
    logged = dict(scalars['learning_rate'])
    assert sorted(logged) == list(range(1, steps + 1))
    for t, value in logged.items():
        assert value == pytest.approx(references.learning_rate(t - 1, **rule), rel=1e-6), t
    loss, ce = dict(scalars['loss']), dict(scalars['cross_entropy'])
    for t in range(1, steps + 1):
        want = references.l2_of_checkpoint(os.path.join(model_dir, 'model.ckpt-%d' % (t - 1)),
                                           weight_decay)[0]
        # float32 sums over ~11 M squares: 1e-4 relative.
        assert loss[t] - ce[t] == pytest.approx(want, rel=1e-4, abs=1e-4 * ce[t]), t


@pytest.mark.slow
@pytest.mark.parametrize('mask_thres,neg_select', [(0.9, 0.0), (0.7, 1.0)])
def test_mask_thres_and_neg_select_reach_the_loss_counters(dataset, tmp_path, mask_thres,
                                                           neg_select):
    """Every image is labelled 0:1, one of 1/2 at 0.8, 3 as -1 (ignored), 4 at 1.0 or not.
    After one step: a class is positive iff some label >= mask_thres, so the 0.8 labels
    count at 0.7 and not at 0.9; a class without positive is selected as a negative iff
    u <= neg_select (never at 0, always at 1)."""
    model_dir = str(tmp_path / 'model')
    result = run_train(*small_run_flags(dataset, model_dir, 1), '--resnet_size=18',
                       '--mask_thres=%g' % mask_thres, '--neg_select=%g' % neg_select)
    assert result.returncode == 0, result.stderr[-3000:]
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    pos, neg = reader.get_tensor('pos_count'), reader.get_tensor('neg_count')
    assert pos[0] == 1 and pos[3] == 0
    soft_positive = pos[1] + pos[2]
    if mask_thres > 0.8:
        assert soft_positive == 0
    else:
        assert soft_positive >= 1  # each image carries one of them
    assert np.all(pos + neg <= 1)
    np.testing.assert_array_equal(neg, (pos == 0) * (1 if neg_select >= 1 else 0))


def build_logits(data_format, images):
    with tf.Graph().as_default() as graph:
        tf.set_random_seed(0)
        model = resnet.ResNet(18, CLASSES, data_format, 0.9, 1e-5)
        logits = model(tf.constant(images), False)
        with tf.Session(graph=graph) as session:
            session.run(tf.global_variables_initializer())
            values = {v.op.name: session.run(v) for v in tf.global_variables()}
    return graph, logits, values


def test_nchw_and_nhwc_compute_the_same_logits_from_the_same_weights():
    """Both layouts built with the same weights. On a CPU without NCHW kernels (TensorFlow
    has them only with oneDNN), the NCHW graph is checked by its ops instead."""
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    nhwc_graph, nhwc_logits, weights = build_logits('channels_last', images)
    with tf.Graph().as_default():
        model = resnet.ResNet(18, CLASSES, 'channels_first', 0.9, 1e-5)
        logits = model(tf.constant(images), False)
        graph = tf.get_default_graph()
        convs = [op for op in graph.get_operations() if op.type == 'Conv2D']
        assert convs and all(op.get_attr('data_format') == b'NCHW' for op in convs)
        assign = [v.assign(weights[v.op.name]) for v in tf.global_variables()]
        with tf.Session() as session:
            session.run(assign)
            try:
                got = session.run(logits)
            except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as e:
                pytest.skip('this CPU build runs no NCHW convolution: %s' % str(e)[:120])
    with tf.Session(graph=nhwc_graph) as session:
        session.run([v.assign(weights[v.op.name]) for v in
                     nhwc_graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)])
        want = session.run(nhwc_logits)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))


def test_bf16_runs_every_convolution_and_matmul_in_bfloat16():
    from mlimages.model import precision
    with tf.Graph().as_default() as graph:
        model = resnet.ResNet(18, CLASSES, 'channels_last', 0.9, 1e-5)
        images = tf.zeros([2, 32, 32, 3])
        with precision.model_scope('bf16'):
            logits = precision.float32(model(precision.model_input(images, 'bf16'), True))
        ops = graph.get_operations()
        heavy = [op for op in ops if op.type in ('Conv2D', 'MatMul')]
        # ResNet-18: the stem, 8 blocks of two, a projection shortcut in each of 4 stages
        assert len([op for op in heavy if op.type == 'Conv2D']) == 21
        assert all(op.get_attr('T') == tf.bfloat16 for op in heavy), \
            [(op.name, op.get_attr('T')) for op in heavy if op.get_attr('T') != tf.bfloat16]
        assert logits.dtype == tf.float32
        assert all(v.dtype.base_dtype == tf.float32 for v in tf.global_variables())


@pytest.mark.slow
def test_demo_command_reports_repeats_itself_and_writes_its_files(tmp_path):
    """The README's headline command at a few steps and small images: its report, the same
    model and figures from a second run of the same command (the dataset reused), no
    noise."""
    demo_dir = str(tmp_path / 'demo')
    args = [sys.executable, os.path.join(ROOT, 'train.py'), '--demo', '--demo_dir=' + demo_dir,
            '--max_iter=3', '--image_size=32', '--batch_size=4', '--log_interval=1']

    def run(*extra):
        result = subprocess.run(args + list(extra), cwd=ROOT, env=ENV, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    first = run()
    figures = [line for line in first.stdout.splitlines()
               if line.startswith('demo: ') and 'TensorBoard' not in line]
    assert re.fullmatch(r'demo: validation mAP [0-9.]+, label-frequency baseline [0-9.]+: '
                        r'[-+][0-9.]+ \(needs >= \+0\.30\); precision@1 [0-9.]+ \(baseline '
                        r'[0-9.]+\)', figures[-3]), first.stdout
    assert re.fullmatch(r'demo: weighted cross_entropy over 3 steps, last quarter / first '
                        r'quarter: [0-9.]+ \(needs <= 0\.75\)', figures[-2]), first.stdout
    # Three steps learn nothing: the mAP stays near the baseline (+0.035 here), far below
    # the verdict's +0.30.
    assert figures[-1] == 'demo: NOT learned'
    for noise in ('event_accumulator', 'No path found', 'Warning', 'devices: CUDA_VISIBLE'):
        assert noise not in first.stderr, noise
    for pattern in ('images/train_00000.jpg', 'train_list.txt', 'val_list.txt',
                    'dictionary.txt', 'data/train/*.tfrecords', 'data/val/*.tfrecords',
                    'model/checkpoint', 'model/model.ckpt-3.index',
                    'model/events.out.tfevents.*', 'log/train.log'):
        assert glob.glob(os.path.join(demo_dir, pattern)), pattern
    assert len(glob.glob(os.path.join(demo_dir, 'images', '*.jpg'))) == 2800
    assert '.lock' not in os.listdir(os.path.join(demo_dir, 'model'))
    # The same command again, into a new model directory: the same weights, bit for bit,
    # and the same figures.
    again = run('--model_dir=' + os.path.join(demo_dir, 'again'))
    assert 'demo: using the existing dataset' in again.stdout
    assert [line for line in again.stdout.splitlines()
            if line.startswith('demo: ') and 'TensorBoard' not in line][-3:] == figures[-3:]
    want = checkpoint_values(os.path.join(demo_dir, 'model'))
    got = checkpoint_values(os.path.join(demo_dir, 'again'))
    assert sorted(got) == sorted(want)
    assert [name for name in want if not np.array_equal(got[name], want[name])] == []
    # (Resuming is train.py's, tested in test_train.py: the suite's time goes to this.)


def test_the_demo_verdict_needs_both_margins():
    from mlimages import demo
    assert demo.loss_trend([6.0, 5.0, 4.0, 3.0, 3.0, 2.0, 2.0, 1.0]) == 1.5 / 5.5
    assert demo.verdict(0.686, 0.479) == 'learned'
    assert demo.verdict(demo.MAP_MARGIN, demo.LOSS_TREND) == 'learned'
    assert demo.verdict(0.035, 0.479) == 'NOT learned'  # the loss fell, the mAP did not rise
    assert demo.verdict(0.686, 0.80) == 'NOT learned'
