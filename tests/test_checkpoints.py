"""checkpoints.py on small real checkpoints: resolving, the head check, the model a
checkpoint holds, the original's counter names, the warm-start list."""
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from mlimages.run import checkpoints
import resnet
import train  # noqa: F401 (graph mode, as train.py runs)
from mlimages.errors import UsageError

CLASSES = 5


@pytest.fixture(scope='module')
def saved(module_dir):
    """A ResNet-18 of 5 classes saved at step 3, and the same with the original's names."""
    root = module_dir('ckpt')
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


def small_checkpoints(model_dir, steps):
    """Tiny real checkpoints model.ckpt-<step> (a variable and the step) in model_dir,
    written by a Saver as the Estimator's (sharded, relative paths)."""
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        tf.Variable(np.arange(1000, dtype=np.float32), name='w')
        saver = tf.train.Saver(sharded=True, save_relative_paths=True, max_to_keep=None)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            for n in steps:
                session.run(step.assign(n))
                saver.save(session, os.path.join(str(model_dir), 'model.ckpt'), n)


@pytest.mark.parametrize('content', [None, b'', b'garbled {{{', bytes(range(256)),
                                     b'model_checkpoint_path: "model.ckpt-99"\n'])
def test_recover_from_a_broken_state_file(tmp_path, content):
    small_checkpoints(tmp_path, [0, 5, 10])
    os.remove(str(tmp_path / 'checkpoint'))
    if content is not None:
        (tmp_path / 'checkpoint').write_bytes(content)
    newest = str(tmp_path / 'model.ckpt-10')
    assert checkpoints.latest_checkpoint(str(tmp_path)) == newest
    assert checkpoints.recover(str(tmp_path)) == newest
    assert tf.train.latest_checkpoint(str(tmp_path)) == newest  # the state file rewritten
    assert checkpoints.recover(str(tmp_path)) == newest         # and now left alone


def test_recover_moves_damaged_checkpoints_aside(tmp_path):
    small_checkpoints(tmp_path, [0, 5, 10])
    data = tmp_path / 'model.ckpt-10.data-00000-of-00001'
    data.write_bytes(data.read_bytes()[:100])
    os.remove(str(tmp_path / 'model.ckpt-5.index'))
    assert 'Read less bytes' in checkpoints.damage(str(tmp_path / 'model.ckpt-10'))
    assert checkpoints.recover(str(tmp_path)) == str(tmp_path / 'model.ckpt-0')
    assert sorted(os.listdir(str(tmp_path / 'damaged'))) == [
        'model.ckpt-10.data-00000-of-00001', 'model.ckpt-10.index',
        'model.ckpt-10.meta', 'model.ckpt-5.data-00000-of-00001', 'model.ckpt-5.meta']
    with pytest.raises(UsageError, match='is damaged'):
        checkpoints.resolve_checkpoint(str(tmp_path / 'damaged' / 'model.ckpt-10'),
                                       'checkpoint_path')


def test_no_good_checkpoint_is_an_error_not_a_fresh_start(tmp_path):
    small_checkpoints(tmp_path, [0])
    data = tmp_path / 'model.ckpt-0.data-00000-of-00001'
    data.write_bytes(data.read_bytes()[:10])
    with pytest.raises(UsageError, match='no checkpoint in --model_dir=.* restores'):
        checkpoints.recover(str(tmp_path))
    assert data.exists()  # left where it is
