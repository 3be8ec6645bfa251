"""Checkpoints: finding them, reading what model they hold, the original's counter names,
and which variables fine-tuning takes over (warm start).

The original left its two loss counters unnamed, so its checkpoints hold them as
`Variable` (pos_count) and `Variable_1` (neg_count); a model_dir whose latest checkpoint
has them is continued with a saver that keeps those names (legacy_saver).
"""
import re

import tensorflow.compat.v1 as tf

import resnet
from errors import UsageError, op_error_text

# The original left its loss counters unnamed; its checkpoints hold them as these.
LEGACY_COUNTER_NAMES = {'pos_count': 'Variable', 'neg_count': 'Variable_1'}


def latest_checkpoint(model_dir):
    """The newest checkpoint in model_dir; None without one (or without the directory)."""
    return tf.train.latest_checkpoint(model_dir) if tf.io.gfile.isdir(model_dir) else None


def has_legacy_counters(model_dir):
    """True when the latest checkpoint in model_dir was written by the original program."""
    path = latest_checkpoint(model_dir)
    if not path:
        return False
    names = {name for name, _ in tf.train.list_variables(path)}
    return 'pos_count' not in names and set(LEGACY_COUNTER_NAMES.values()) <= names


def legacy_saver(max_to_keep):
    """A saver that reads and writes the counters under the original's names, so a run of
    the original continues here and its checkpoints stay loadable by the original."""
    var_list = {LEGACY_COUNTER_NAMES.get(v.op.name, v.op.name): v
                for v in tf.global_variables()}
    return tf.train.Saver(var_list=var_list, sharded=True, max_to_keep=max_to_keep,
                          save_relative_paths=True)



def check_checkpoint_head(path, class_num):
    """A checkpoint to restore must be a model of this program with class_num outputs."""
    if not path:
        return
    shapes = dict(tf.train.list_variables(path))
    if 'logits/dense/bias' not in shapes:
        raise UsageError('%s holds no model variables of this program (no logits/dense/bias)'
                         % path)
    found = shapes['logits/dense/bias'][0]
    if found != class_num:
        raise UsageError('%s has %d classes, --class_num is %d' % (path, found, class_num))


def resolve_checkpoint(path, flag):
    """A checkpoint prefix, or a directory -> its latest checkpoint; UsageError if none."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if not latest:
            raise UsageError('--%s=%s: the directory holds no checkpoint' % (flag, path))
        return latest
    if not tf.train.checkpoint_exists(path):
        raise UsageError('--%s=%s does not exist' % (flag, path))
    return path


# Variables of a model's checkpoint that fine-tuning never takes over: the head, the step,
# the optimizer's slots and the loss counters (under this program's or the original's names).
NOT_WARM_STARTED = ('logits/', 'global_step', 'Momentum', 'pos_count', 'neg_count',
                    'Variable')


def model_variable_shapes(resnet_size, class_num, image_size, data_format):
    """{name: shape} of the model variables of a ResNet (no training ops)."""
    with tf.Graph().as_default():
        model = resnet.ResNet(resnet_size, class_num, data_format)
        model(tf.zeros([1, image_size, image_size, 3]), True)
        return {v.op.name: v.shape.as_list() for v in tf.global_variables()}


def warm_start_names(checkpoint, model_shapes, resnet_size):
    """Names of the model variables to initialise from `checkpoint` when fine-tuning.

    Every model variable but the head (logits/*), batch-norm moving statistics included,
    must be in the checkpoint with the same shape; otherwise UsageError names them.
    """
    found = dict(tf.train.list_variables(checkpoint))
    if not any(name.endswith('/conv2d/kernel') for name in found):
        raise UsageError('--pretrain_ckpt=%s holds no model variables of this program'
                         % checkpoint)
    names = sorted(n for n in model_shapes if not n.startswith(NOT_WARM_STARTED))
    missing = [n for n in names if n not in found]
    if missing:
        raise UsageError('--pretrain_ckpt=%s lacks %d variables of a ResNet-%d (e.g. %s): is '
                         '--resnet_size right?' % (checkpoint, len(missing), resnet_size,
                                                   missing[0]))
    wrong = [n for n in names if list(found[n]) != model_shapes[n]]
    if wrong:
        raise UsageError('--pretrain_ckpt=%s: %s has shape %s, this model needs %s' % (
            checkpoint, wrong[0], found[wrong[0]], model_shapes[wrong[0]]))
    return names


def estimator_step(model_dir):
    """The global step of the latest checkpoint in model_dir, 0 without one."""
    path = latest_checkpoint(model_dir)
    return int(tf.train.load_checkpoint(path).get_tensor('global_step')) if path else 0


def checkpoint_model(path, resnet_size=None, class_num=None):
    """(resnet_size, class_num) of the model in a checkpoint, read from its variables.

    resnet_size / class_num, when given, must match; a checkpoint without this program's
    model variables is an error too (check_checkpoint_head).
    """
    try:
        shapes = dict(tf.train.list_variables(path))
    except (tf.errors.OpError, ValueError) as e:
        raise UsageError('%s is not a readable checkpoint: %s' % (path, op_error_text(e)))
    found_classes = shapes.get('logits/dense/bias', [None])[0]
    check_checkpoint_head(path, class_num or found_classes)
    blocks = {}
    for name in shapes:
        match = re.match(r'stages_(\d+)_block_(\d+)/', name)
        if match:
            stage, block = int(match.group(1)), int(match.group(2))
            blocks[stage] = max(blocks.get(stage, 0), block + 1)
    stages = [blocks.get(i, 0) for i in range(max(blocks) + 1)] if blocks else []
    block_type = 'bottleneck' if any('/conv3_b2/' in n for n in shapes) else 'basic'
    sizes = [size for size in resnet.SUPPORTED_SIZES
             if resnet.ResNet(size, 1).stages == stages
             and resnet.ResNet(size, 1).block_type == block_type]
    if not sizes:
        raise UsageError('%s holds no ResNet this program builds (%s blocks per stage %s)'
                         % (path, block_type, stages))
    if resnet_size and resnet_size != sizes[0]:
        raise UsageError('%s is a ResNet-%d, --resnet_size is %d'
                         % (path, sizes[0], resnet_size))
    return sizes[0], found_classes
