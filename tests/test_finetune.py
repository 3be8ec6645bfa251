"""Fine-tuning (the original's finetune.py, folded into train.py): --pretrain_ckpt warm start
with batch-norm statistics and a new head, --FixBlock2, --label_type=single, bad input."""
import io
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

from helpers import run_train, small_run_flags, write_dataset

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


def values(model_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    return {name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    """A multi-label ResNet-18 with 11,166 classes trained 2 steps, single-label records."""
    root = str(tmp_path_factory.mktemp('finetune'))
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
    # lr 0 and batch-norm decay 1: training changes no variable, so every body variable
    # of the fine-tuned checkpoint must be the pretrained one.
    result = run_train(*tune_flags(single, model_dir, pretrained, '--lr=0',
                                   '--batch_norm_decay=1'))
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = values(pretrained), values(model_dir)
    names = body(before)
    moving = [n for n in names if 'moving_' in n]
    assert len(moving) > 20
    for name in names:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
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
    result = run_train(*tune_flags(single, model_dir, pretrained, '--FixBlock2', '--lr=0.05'))
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'FixBlock2: init and stages 0-1 are frozen' in result.stderr
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
    flags = [f for f in tune_flags(single, model_dir, pretrained, '--FixBlock2')
             if '--max_iter' not in f]
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
