"""Checkpoints: finding them, checking them, reading what model they hold, the original's
counter names, and which variables fine-tuning takes over (warm start).

Finding: the state file `checkpoint` names the latest; when it is missing, empty, garbled
or names a missing checkpoint, the newest `model.ckpt-N.index` is the latest instead (so a
broken state file never makes a run start over). Checking (damage): a checkpoint is good
when its index reads and every tensor of its data files reads whole (TensorFlow checks each
one's length and checksum). recover, at the start of training: the newest good checkpoint
becomes the latest; the damaged newer ones move to <model_dir>/damaged/ (never deleted).

The original left its two loss counters unnamed, so its checkpoints hold them as
`Variable` (pos_count) and `Variable_1` (neg_count); a model_dir whose latest checkpoint
has them is continued with a saver that keeps those names (saver). A checkpoint of another
--dtype continues in fp16 with the loss-scale state started afresh (FreshLossScaleSaver).
"""
import os
import re

import tensorflow.compat.v1 as tf
from google.protobuf import text_format
from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

import resnet
from mlimages.errors import UsageError, op_error_text

# The original left its loss counters unnamed; its checkpoints hold them as these.
LEGACY_COUNTER_NAMES = {'pos_count': 'Variable', 'neg_count': 'Variable_1'}
# fp16's dynamic loss scaling (precision.wrap_optimizer): TensorFlow's names of its state,
# which a checkpoint written with another --dtype lacks.
LOSS_SCALE_STATE = frozenset(['current_loss_scale', 'good_steps'])


STATE_FILE = 'checkpoint'
DAMAGED_DIR = 'damaged'
CHECKPOINT_FILE = re.compile(r'^(model\.ckpt-(\d+))\.(index|meta|data-\d+-of-\d+)$')


def listed_checkpoints(model_dir):
    """{global step: prefix} of every model.ckpt-N that has a file in model_dir."""
    found = {}
    for name in os.listdir(model_dir):
        match = CHECKPOINT_FILE.match(name)
        if match:
            found[int(match.group(2))] = os.path.join(model_dir, match.group(1))
    return found


def state_checkpoint(model_dir):
    """(prefix, problem) of the state file: the checkpoint it names (joined to model_dir when
    relative) and None, or None and what is wrong (missing, garbled, names a missing one)."""
    path = os.path.join(model_dir, STATE_FILE)
    try:
        with open(path, 'rb') as f:
            state = text_format.Parse(f.read().decode('utf-8'), CheckpointState())
    except FileNotFoundError:
        return None, 'missing'
    except (OSError, UnicodeDecodeError, text_format.ParseError):
        return None, 'garbled'
    if not state.model_checkpoint_path:
        return None, 'empty'
    prefix = os.path.join(model_dir, state.model_checkpoint_path)
    if not os.path.isfile(prefix + '.index'):
        return None, 'names %s, which has no .index file' % state.model_checkpoint_path
    return prefix, None


def latest_checkpoint(model_dir):
    """The latest checkpoint in model_dir: the state file's, else the newest with an
    index file; None without one (or without the directory)."""
    if '://' in model_dir:  # a remote file system: TensorFlow's own reading
        return tf.train.latest_checkpoint(model_dir) if tf.io.gfile.isdir(model_dir) else None
    if not os.path.isdir(model_dir):
        return None
    prefix, _ = state_checkpoint(model_dir)
    if prefix:
        return prefix
    indexed = [step for step, p in listed_checkpoints(model_dir).items()
               if os.path.isfile(p + '.index')]
    return listed_checkpoints(model_dir)[max(indexed)] if indexed else None


def damage(prefix):
    """What is wrong with the checkpoint `prefix`, None when its index and every tensor
    read whole (a missing or short data file, a checksum that does not match...)."""
    if not os.path.isfile(prefix + '.index'):
        return 'its .index file is missing'
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as e:  # pylint: disable=broad-except -- the reader raises IndexError,
        # ValueError, OpError... for what is only "this checkpoint does not read"
        return (op_error_text(e) or type(e).__name__).split('\n')[0]
    return None


def move_aside(prefix):
    """Moves every file of the checkpoint `prefix` to <its directory>/damaged/ (a name
    taken there gets a suffix .1, .2 ...); returns that directory."""
    model_dir, base = os.path.split(prefix)
    target = os.path.join(model_dir, DAMAGED_DIR)
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(model_dir)):
        if name.startswith(base + '.'):
            dest, n = os.path.join(target, name), 0
            while os.path.exists(dest):
                n += 1
                dest = os.path.join(target, '%s.%d' % (name, n))
            os.replace(os.path.join(model_dir, name), dest)
    return target


def recover(model_dir):
    """Makes the newest good checkpoint of model_dir the one training resumes from (the
    state file's when it names a good one): damaged newer ones are moved aside, the state
    file is rewritten, one warning says which was used. Returns it (None: no checkpoint);
    UsageError when there are checkpoints and none is good."""
    listed = listed_checkpoints(model_dir) if '://' not in model_dir else {}
    if not listed:
        return None
    named, problem = state_checkpoint(model_dir)
    if named and damage(named) is None:
        return named
    damaged, good = [], None
    for step in sorted(listed, reverse=True):
        why = damage(listed[step])
        if why is None:
            good = listed[step]
            break
        damaged.append((listed[step], why))
    if good is None:
        raise UsageError(
            'no checkpoint in --model_dir=%s restores (%s: %s): training would start over; '
            'move them away to start afresh, or give another --model_dir' % (
                model_dir, os.path.basename(damaged[0][0]), damaged[0][1]))
    for prefix, _ in damaged:
        move_aside(prefix)
    rest = [os.path.basename(p) for step, p in sorted(listed.items())
            if p not in dict(damaged) and os.path.isfile(p + '.index')]
    tf.train.update_checkpoint_state(model_dir, os.path.basename(good), rest)
    if damaged:
        tf.logging.warning('checkpoint %s is damaged (%s): moved to %s; resuming from %s, the '
                           'newest checkpoint that restores', damaged[0][0], damaged[0][1],
                           os.path.join(model_dir, DAMAGED_DIR), good)
    else:
        tf.logging.warning('the checkpoint state file %s is %s: resuming from %s, the newest '
                           'checkpoint that restores (the state file is rewritten)',
                           os.path.join(model_dir, STATE_FILE), problem, good)
    return good


def has_legacy_counters(model_dir):
    """True when the latest checkpoint in model_dir was written by the original program."""
    path = latest_checkpoint(model_dir)
    if not path:
        return False
    try:
        names = {name for name, _ in tf.train.list_variables(path)}
    except (tf.errors.OpError, ValueError):
        return False  # a damaged checkpoint: recover (or the restore) reports it
    return 'pos_count' not in names and set(LEGACY_COUNTER_NAMES.values()) <= names


def saver(max_to_keep, legacy_counters=False):
    """The saver of training: with legacy_counters it reads and writes the counters under
    the original's names, so a run of the original continues here and its checkpoints stay
    loadable by the original; with fp16's loss-scale state in the graph, a
    FreshLossScaleSaver. One a graph: a strategy builds the model once a replica, and the
    replicas after the first get the first one's."""
    built = tf.get_collection(tf.GraphKeys.SAVERS)
    if built:
        return built[0]
    var_list = {(LEGACY_COUNTER_NAMES.get(v.op.name, v.op.name) if legacy_counters
                 else v.op.name): v for v in tf.global_variables()}
    kind = FreshLossScaleSaver if LOSS_SCALE_STATE & set(var_list) else tf.train.Saver
    made = kind(var_list=var_list, sharded=True, max_to_keep=max_to_keep,
                save_relative_paths=True)
    tf.add_to_collection(tf.GraphKeys.SAVERS, made)
    return made


class FreshLossScaleSaver(tf.train.Saver):
    """Saves every variable. Restores a checkpoint that lacks fp16's loss-scale state (one
    written with another --dtype) as the rest of it, the state at its initial value (loss
    scale 2^15: the first steps may overflow and be skipped while it drops), in one log
    line. The partial restore's ops are built with it, before the graph is finalized."""

    def __init__(self, var_list, **kwargs):
        super().__init__(var_list=var_list, **kwargs)
        self._rest = tf.train.Saver(
            var_list={n: v for n, v in var_list.items() if n not in LOSS_SCALE_STATE},
            sharded=True)
        self._fresh = tf.variables_initializer(
            [v for n, v in sorted(var_list.items()) if n in LOSS_SCALE_STATE])

    def restore(self, sess, save_path):
        names = {name for name, _ in tf.train.list_variables(save_path)}
        if LOSS_SCALE_STATE <= names:
            return super().restore(sess, save_path)
        tf.logging.info('%s holds no loss-scale state (it was written with another --dtype '
                        'than fp16): the loss scaling of --dtype=fp16 starts afresh, the '
                        'rest continues', save_path)
        self._rest.restore(sess, save_path)
        sess.run(self._fresh)
        return None


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
    """A checkpoint prefix, or a directory -> its latest checkpoint; UsageError if none or
    if it is damaged (naming the file)."""
    if tf.io.gfile.isdir(path):
        latest = latest_checkpoint(path)
        if not latest:
            raise UsageError('--%s=%s: the directory holds no checkpoint' % (flag, path))
        path = latest
    elif not tf.train.checkpoint_exists(path):
        raise UsageError('--%s=%s does not exist' % (flag, path))
    why = damage(path) if '://' not in path else None
    if why:
        raise UsageError('checkpoint %s is damaged (%s): give %s' % (
            path, why, 'another --%s' % flag if flag == 'pretrain_ckpt'
            else '--checkpoint_path of a good one'))
    return path


# Variables of a model's checkpoint that fine-tuning never takes over: the head, the step,
# the optimizer's slots and the loss counters (under this program's or the original's names).
NOT_WARM_STARTED = ('logits/', 'global_step', 'Momentum', 'pos_count', 'neg_count',
                    'Variable')


def model_variable_shapes(resnet_size, class_num, image_size, data_format):
    """{name: shape} of the model variables of a ResNet (no training ops)."""
    with tf.Graph().as_default():
        network = resnet.ResNet(resnet_size, class_num, data_format)
        network(tf.zeros([1, image_size, image_size, 3]), True)
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
