"""checkpoints.py on small real checkpoints: resolving, the head check, the model a
checkpoint holds, the original's counter names, the warm-start list."""
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import checkpoints
import resnet
import train  # noqa: F401 (graph mode, as train.py runs)
from errors import UsageError

CLASSES = 5


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """A ResNet-18 of 5 classes saved at step 3, and the same with the original's names."""
    root = tmp_path_factory.mktemp('ckpt')
    paths = {}
    for kind, counters in (('ours', ('pos_count', 'neg_count')),
                           ('original', ('Variable', 'Variable_1'))):
        with tf.Graph().as_default():
            resnet.ResNet(18, CLASSES, 'channels_last')(tf.zeros([1, 32, 32, 3]), True)
            step = tf.train.get_or_create_global_step()
            for name in counters:
                tf.Variable(np.zeros(CLASSES, np.float32), name=name, trainable=False)
            with tf.Session() as session:
                session.run(tf.global_variables_initializer())
                session.run(tf.assign(step, 3))
                paths[kind] = tf.train.Saver().save(
                    session, str(root / kind / 'model.ckpt'), global_step=3)
    return paths


def test_resolve_a_directory_a_prefix_or_nothing(saved, tmp_path):
    directory = os.path.dirname(saved['ours'])
    assert checkpoints.resolve_checkpoint(directory, 'pretrain_ckpt') == saved['ours']
    assert checkpoints.resolve_checkpoint(saved['ours'], 'pretrain_ckpt') == saved['ours']
    with pytest.raises(UsageError, match=r'^--pretrain_ckpt=.* holds no checkpoint$'):
        checkpoints.resolve_checkpoint(str(tmp_path), 'pretrain_ckpt')
    with pytest.raises(UsageError, match=r'^--checkpoint=.*nope does not exist$'):
        checkpoints.resolve_checkpoint(str(tmp_path / 'nope'), 'checkpoint')


def test_the_model_a_checkpoint_holds(saved):
    assert checkpoints.checkpoint_model(saved['ours']) == (18, CLASSES)
    checkpoints.check_checkpoint_head(saved['ours'], CLASSES)
    with pytest.raises(UsageError, match='has 5 classes, --class_num is 7'):
        checkpoints.check_checkpoint_head(saved['ours'], 7)
    with pytest.raises(UsageError, match='is a ResNet-18, --resnet_size is 50'):
        checkpoints.checkpoint_model(saved['ours'], resnet_size=50)
    assert checkpoints.estimator_step(os.path.dirname(saved['ours'])) == 3


def test_the_original_programs_counter_names_are_recognised(saved):
    assert checkpoints.has_legacy_counters(os.path.dirname(saved['original']))
    assert not checkpoints.has_legacy_counters(os.path.dirname(saved['ours']))


def test_warm_start_takes_every_model_variable_but_the_head(saved):
    shapes = checkpoints.model_variable_shapes(18, 3, 32, 'channels_last')
    names = checkpoints.warm_start_names(saved['original'], shapes, 18)
    assert names == sorted(n for n in shapes if not n.startswith('logits/'))
    assert any('moving_mean' in n for n in names)  # batch-norm statistics included
    bigger = checkpoints.model_variable_shapes(34, 3, 32, 'channels_last')
    with pytest.raises(UsageError, match=r'lacks \d+ variables of a ResNet-34'):
        checkpoints.warm_start_names(saved['ours'], bigger, 34)
