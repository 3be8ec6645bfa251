"""Fine-tuning (the original's finetune.py, folded into train.py): --pretrain_ckpt warm start
with batch-norm statistics and a new head, --FixBlock2 with training- and inference-mode
batch norm in the frozen stages, --label_type=single, the fine-tuning rules (exponential
schedule, L2 on batch norm at 0.1 x weight_decay, sgd) against numpy references read back
from TensorBoard and the checkpoints, finetune.sh's flag names, bad input."""
import io
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import references
from helpers import run_train, scalar_tags, small_run_flags, write_dataset

pytestmark = pytest.mark.slow

# The judged case: an ML-Images head (11,166 classes) fine-tuned to 10 single-label classes.
PRETRAINED_CLASSES = 11166
SINGLE_CLASSES = 10


def write_single_label_shard(path, count, class_num, seed=0, first_label=None):
    """Records in the original's ImageNet layout: an int64 class index in `label`."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(count):
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (40, 44, 3)).astype(np.uint8)).save(
                buffer, 'JPEG', quality=90)
            label = first_label if (i == 0 and first_label is not None) else i % class_num
            feature = {
                'image': tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[buffer.getvalue()])),
                'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                'name': tf.train.Feature(bytes_list=tf.train.BytesList(value=[b'im%d' % i])),
                'width': tf.train.Feature(int64_list=tf.train.Int64List(value=[44])),
                'height': tf.train.Feature(int64_list=tf.train.Int64List(value=[40])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())


def tune_flags(data, model_dir, pretrained, *extra):
    flags = small_run_flags(data, model_dir, 2)
    flags = [f for f in flags if not f.startswith(('--class_num', '--resnet_size'))]
    return flags + ['--resnet_size=18', '--class_num=%d' % SINGLE_CLASSES,
                    '--label_type=single', '--pretrain_ckpt=' + pretrained] + list(extra)


def values(model_dir, checkpoint=None):
    """{name: value} of the latest checkpoint in model_dir (or of model_dir/checkpoint)."""
    reader = tf.train.load_checkpoint(os.path.join(model_dir, checkpoint) if checkpoint
                                      else tf.train.latest_checkpoint(model_dir))
    return {name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope='module')
def setup(module_dir):
    """A multi-label ResNet-18 with 11,166 classes trained 2 steps, single-label records."""
    root = str(module_dir('finetune'))
    multi = write_dataset(root, class_num=PRETRAINED_CLASSES)
    pretrained = os.path.join(root, 'pretrained')
    flags = [f for f in small_run_flags(multi, pretrained, 2)
             if not f.startswith(('--resnet_size', '--class_num'))]
    flags += ['--resnet_size=18', '--class_num=%d' % PRETRAINED_CLASSES]
    result = run_train(*flags)
    assert result.returncode == 0, result.stderr[-3000:]
    single = os.path.join(root, 'single')
    write_single_label_shard(os.path.join(single, 'train', '0.tfrecords'), 12, SINGLE_CLASSES)
    write_single_label_shard(os.path.join(single, 'val', '0.tfrecords'), 6, SINGLE_CLASSES, 1)
    return root, pretrained, single


def body(names):
    return [n for n in names if not n.startswith(('logits', 'global_step'))
            and 'Momentum' not in n and n not in ('pos_count', 'neg_count')]


def test_warm_start_restores_every_body_variable_and_batch_norm_statistics(setup, tmp_path):
    root, pretrained, single = setup
    model_dir = str(tmp_path / 'tuned')
    # The checkpoint the session saves when it starts (step 0, before any step) holds the
    # warm-started variables: every body variable must be the pretrained one.
    result = run_train(*tune_flags(single, model_dir, pretrained))
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = values(pretrained), values(model_dir)
    start = values(model_dir, 'model.ckpt-0')
    names = body(before)
    moving = [n for n in names if 'moving_' in n]
    assert len(moving) > 20
    for name in names:
        np.testing.assert_array_equal(start[name], before[name], err_msg=name)
    assert after['logits/dense/kernel'].shape == (512, SINGLE_CLASSES)
    assert before['logits/dense/kernel'].shape == (512, PRETRAINED_CLASSES)
    assert after['global_step'] == 2
    # single-label training has no loss counters of the original's loss
    assert 'pos_count' not in after and 'neg_count' not in after
    assert ('fine-tuning from %s: %d variables restored (%d batch-norm moving statistics); '
            'new head of %d classes (the checkpoint\'s has %d)' % (
                tf.train.latest_checkpoint(pretrained), len(names), len(moving),
                SINGLE_CLASSES, PRETRAINED_CLASSES)) in result.stderr


def test_fixblock2_freezes_init_and_stages_0_1_only_and_a_restart_resumes(setup, tmp_path):
    root, pretrained, single = setup
    model_dir = str(tmp_path / 'fixed')
    result = run_train(*tune_flags(single, model_dir, pretrained, '--FixBlock2', '--lr=0.05',
                                   '--frozen_bn=inference'))
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'FixBlock2: init and stages 0-1 are frozen (not trained, batch norm in ' \
        'inference mode)' in result.stderr
    before, after = values(pretrained), values(model_dir)
    frozen = [n for n in body(before) if n.startswith(('init/', 'stages_0_', 'stages_1_'))]
    trained = [n for n in body(before) if n.startswith(('stages_2_', 'stages_3_'))]
    assert any('moving_mean' in n for n in frozen) and len(frozen) > 20
    for name in frozen:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    # no optimizer slots for what is not trained
    assert not any(n.startswith(('init/', 'stages_0_', 'stages_1_')) and 'Momentum' in n
                   for n in after)
    changed = [n for n in trained if not np.array_equal(after[n], before[n])]
    assert any('conv2d/kernel' in n for n in changed)
    assert any('moving_mean' in n for n in changed)

    # A restart with the same command line resumes from model_dir, not the pretrained one.
    flags = [f for f in tune_flags(single, model_dir, pretrained, '--FixBlock2',
                                   '--frozen_bn=inference') if '--max_iter' not in f]
    result = run_train(*flags, '--max_iter=3')
    assert result.returncode == 0, result.stderr[-3000:]
    assert '--pretrain_ckpt is not used: %s already holds a checkpoint' % model_dir \
        in result.stderr
    resumed = values(model_dir)
    assert resumed['global_step'] == 3
    for name in frozen:
        np.testing.assert_array_equal(resumed[name], after[name], err_msg=name)


@pytest.mark.parametrize('extra, message', [
    (['--pretrain_ckpt=/nonexistent/model.ckpt-1'],
     '--pretrain_ckpt=/nonexistent/model.ckpt-1 does not exist'),
    (['--resnet_size=50'], 'variables of a ResNet-50 (e.g. '),
    (['--label_type=softmax'], '--label_type must be one of multi, single'),
])
def test_bad_fine_tuning_input_is_one_line(setup, tmp_path, extra, message):
    root, pretrained, single = setup
    result = run_train(*tune_flags(single, str(tmp_path / 'm'), pretrained), *extra)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith('train.py: error: ') and message in lines[-1], lines[-1]
    assert not os.path.exists(str(tmp_path / 'm'))


def test_empty_directory_and_restore_without_checkpoint(setup, tmp_path):
    root, pretrained, single = setup
    empty = str(tmp_path / 'empty')
    os.makedirs(empty)
    result = run_train(*tune_flags(single, str(tmp_path / 'm'), empty))
    assert result.returncode == 2
    assert 'the directory holds no checkpoint' in result.stderr.strip().splitlines()[-1]
    flags = [f for f in tune_flags(single, str(tmp_path / 'm'), pretrained)
             if not f.startswith('--pretrain_ckpt')]
    result = run_train(*flags, '--restore')
    assert result.returncode == 2
    assert '--restore needs --pretrain_ckpt' in result.stderr


def test_label_layout_mismatches_are_named(setup, tmp_path):
    root, pretrained, single = setup
    # single-label records read as multi-label
    flags = [f for f in tune_flags(single, str(tmp_path / 'm'), pretrained)
             if not f.startswith('--label_type')]
    result = run_train(*flags)
    assert result.returncode == 2
    assert 'use --label_type=single' in result.stderr.strip().splitlines()[-1]
    # a class index outside [0, class_num)
    bad = str(tmp_path / 'bad')
    write_single_label_shard(os.path.join(bad, 'train', '0.tfrecords'), 4, SINGLE_CLASSES,
                             first_label=17)
    result = run_train(*tune_flags(bad, str(tmp_path / 'm2'), pretrained))
    assert result.returncode == 2
    assert 'first record has class index 17, expected one in [0, --class_num=10)' in \
        result.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------ finetune.py's rules

def frozen_names(names):
    return [n for n in body(names) if n.startswith(('init/', 'stages_0_', 'stages_1_'))]


def test_finetune_sh_rules_every_step_against_numpy(setup, tmp_path):
    """finetune.sh's rules with its own flag names (--weight_decay_rate,
    --batch_norm_elipson, --FixBlock2=True, --restore=True, --optimizer=mom) and the three
    rule flags: every step's learning_rate is the exponential staircase (boundaries 2 and 4,
    each +-1), every step's loss - cross_entropy is the L2 term with the 0.1 factor on
    batch norm over the weights the step started from; the frozen stages keep kernels,
    gamma and beta bit for bit and get no Momentum slot, while their batch norm runs in
    training mode: the moving statistics change at every step."""
    root, pretrained, single = setup
    model_dir = str(tmp_path / 'tuned')
    steps, lr, decay_step, factor, weight_decay = 6, 0.05, 2, 0.5, 0.01
    result = run_train(*[f for f in tune_flags(single, model_dir, pretrained)
                         if not f.startswith('--max_iter')],
                       '--max_iter=%d' % steps, '--snapshot=1', '--summary_interval=1',
                       '--max_to_keep=%d' % (steps + 1), '--lr=%g' % lr,
                       '--lr_decay_step=%d' % decay_step, '--lr_decay_factor=%g' % factor,
                       '--weight_decay_rate=%g' % weight_decay, '--batch_norm_elipson=1e-5',
                       '--optimizer=mom', '--FixBlock2=True', '--restore=True',
                       '--lr_schedule=exponential', '--bn_weight_decay=0.1')
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'batch norm in train mode' in result.stderr
    scalars = scalar_tags(model_dir)
    logged = dict(scalars['learning_rate'])
    assert sorted(logged) == list(range(1, steps + 1))
    for t, value in logged.items():  # the summary of step t: global step t - 1
        assert value == pytest.approx(references.learning_rate(t - 1, lr, decay_step, factor,
                                                       schedule='exponential'),
                                      rel=1e-6), t
    loss, ce = dict(scalars['loss']), dict(scalars['cross_entropy'])
    checkpoint = lambda t: os.path.join(model_dir, 'model.ckpt-%d' % t)  # noqa: E731
    for t in range(1, steps + 1):
        want, bn_part = references.l2_of_checkpoint(checkpoint(t - 1), weight_decay, 0.1)
        # float32 sums of ~11 M squares: 1e-4 relative, far below the batch-norm part
        tolerance = 1e-4 * want
        assert bn_part > 50 * tolerance
        assert loss[t] - ce[t] == pytest.approx(want, rel=1e-4, abs=1e-4 * ce[t]), t

    before = values(pretrained)
    frozen = frozen_names(before)
    moving = [n for n in frozen if 'moving_' in n]
    weights = [n for n in frozen if n not in moving]
    assert any(n.endswith('gamma') for n in weights) and any(
        n.endswith('beta') for n in weights) and any(n.endswith('kernel') for n in weights)
    previous = before
    for t in range(1, steps + 1):
        reader = tf.train.load_checkpoint(checkpoint(t))
        names = reader.get_variable_to_shape_map()
        for name in weights:
            np.testing.assert_array_equal(reader.get_tensor(name), before[name],
                                          err_msg=name)
        for name in moving:
            assert not np.array_equal(reader.get_tensor(name), previous[name]), (t, name)
        assert not any(n.startswith(('init/', 'stages_0_', 'stages_1_')) and 'Momentum' in n
                       for n in names)
        assert 'stages_2_block_0/conv1_b1/conv2d/kernel/Momentum' in names
        assert 'stages_2_block_0/conv1_b1_bn/batch_normalization/gamma/Momentum' in names
        previous = {name: reader.get_tensor(name) for name in moving}


def test_fixblock2_inference_batch_norm_with_sgd(setup, tmp_path):
    """--frozen_bn=inference: the frozen stages' moving statistics stay the restored ones;
    --optimizer=sgd: plain gradient descent, no slot variable at all, and the trained
    part moves."""
    root, pretrained, single = setup
    model_dir = str(tmp_path / 'sgd')
    result = run_train(*tune_flags(single, model_dir, pretrained, '--FixBlock2',
                                   '--frozen_bn=inference', '--optimizer=sgd', '--lr=0.05',
                                   '--lr_schedule=exponential', '--lr_decay_step=1'))
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = values(pretrained), values(model_dir)
    for name in frozen_names(before):
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert not any('Momentum' in n for n in after)
    trained = [n for n in body(before) if n.startswith(('stages_2_', 'stages_3_'))]
    assert any(not np.array_equal(after[n], before[n]) for n in trained if 'kernel' in n)


@pytest.mark.parametrize('extra, message', [
    (['--lr_schedule=cosine'], '--lr_schedule must be piecewise or exponential'),
    (['--bn_weight_decay=-0.1'], '--bn_weight_decay must be >= 0'),
    (['--frozen_bn=eval'], '--frozen_bn must be train or inference'),
    (['--optimizer=adam'], '--optimizer=adam is not implemented; use mom'),
])
def test_bad_fine_tuning_rule_flags_are_one_line(setup, tmp_path, extra, message):
    root, pretrained, single = setup
    result = run_train(*tune_flags(single, str(tmp_path / 'm'), pretrained), *extra)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith('train.py: error: ' + message)
