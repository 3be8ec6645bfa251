"""Trains a ResNet for multi-label image classification (Tencent ML-Images) with tf.estimator.

Data flow: flags -> file_db (this worker's shard files) -> input_fn (records, parsed by
record_parser_fn) -> image_preprocess -> resnet -> loss / lr_schedule -> Estimator.

    python train.py --data_dir=/data/ml-images --class_num=11166 --resnet_size=101 ...
    python train.py --demo        # builds a small dataset and trains on it on the CPU
    python train.py --help        # every flag, grouped
"""
import logging
import os
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

import file_db
import flags as flags_lib
import image_preprocess
import loss as loss_lib
import lr_schedule
import metrics
import resnet

tf.disable_v2_behavior()

FLAGS = flags_lib.FLAGS
PROGRAM = 'train.py'


NON_FINITE_LOSS = 'non-finite training loss'


class TrainingError(RuntimeError):
    """Training started and then stopped on an error: reported as one line, exit 1."""


MODES = ('train', 'eval', 'train_and_eval')


class UsageError(ValueError):
    """A bad flag value or input: reported as one line before any graph is built."""


# ---------------------------------------------------------------------------- input

RECORD_FEATURES = {
    'image': tf.FixedLenFeature([], tf.string),
    'label': tf.FixedLenFeature([], tf.string),
    'width': tf.FixedLenFeature([], tf.int64, default_value=0),
    'height': tf.FixedLenFeature([], tf.int64, default_value=0),
    'name': tf.FixedLenFeature([], tf.string, default_value=''),
}


def decode_label(label_bytes, class_num):
    """Raw little-endian float32 bytes -> [class_num] float32; a wrong length is an error."""
    label = tf.io.decode_raw(label_bytes, tf.float32, little_endian=True)
    check = tf.debugging.assert_equal(
        tf.size(label), class_num,
        message='record label length differs from --class_num=%d' % class_num)
    with tf.control_dependencies([check]):
        return tf.reshape(label, [class_num])


def record_parser_fn(value, is_training, image_size, class_num, object_cover=0.7,
                     area_cover=0.7):
    """A serialized tf.train.Example (SPEC section 1) -> (image [S, S, 3] in [-1, 1], label)."""
    parsed = tf.parse_single_example(value, RECORD_FEATURES)
    image = image_preprocess.decode_image(parsed['image'])
    image = image_preprocess.preprocess_image(image, image_size, is_training,
                                              object_cover, area_cover)
    return image, decode_label(parsed['label'], class_num)


def input_fn(is_training, data_dir, batch_size, class_num, image_size,
             file_pattern='*tfrecords', worker_num=1, worker_id=0, file_shuffle_buffer=1500,
             shuffle_buffer=2048, num_parallel_calls=4, files=None, skip_bad_records=False,
             object_cover=0.7, area_cover=0.7):
    """Batches of (images, labels) from `<data_dir>/train` (is_training) or `<data_dir>/val`.

    Training reads this worker's share of the files (file_db) in shuffled order, interleaves
    them, shuffles the records and repeats forever; evaluation reads every file once, in
    order. `files` overrides the listing (tools that read given shards). object_cover and
    area_cover are the training crop's (SPEC section 3).
    With skip_bad_records, records that fail to parse or decode are dropped and the features
    become {'image': images, 'skipped_records': bad records seen so far}.
    """
    if files is None:
        files = file_db.list_shards(data_dir, 'train' if is_training else 'val', file_pattern)
        if is_training:
            files = file_db.worker_share(files, worker_num, worker_id)
    parallel = num_parallel_calls if num_parallel_calls > 0 else tf.data.experimental.AUTOTUNE
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if is_training:
        # This worker's share is fixed above; shuffling only reorders it.
        dataset = dataset.shuffle(max(1, min(file_shuffle_buffer, len(files))))
        dataset = dataset.interleave(tf.data.TFRecordDataset,
                                     cycle_length=min(len(files), 8), block_length=1,
                                     num_parallel_calls=tf.data.experimental.AUTOTUNE,
                                     deterministic=False)
    else:
        dataset = dataset.flat_map(tf.data.TFRecordDataset)
    parse = lambda value: record_parser_fn(value, is_training, image_size, class_num,
                                           object_cover, area_cover)
    if skip_bad_records:
        dataset = drop_bad_records(dataset, parse, image_size, class_num, parallel)
    else:
        dataset = dataset.map(parse, num_parallel_calls=parallel)
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer).repeat()
    # Full batches in training keep shapes static; evaluation keeps the last partial one.
    dataset = dataset.batch(batch_size, drop_remainder=is_training)
    return dataset.prefetch(tf.data.experimental.AUTOTUNE)


def drop_bad_records(records, parse, image_size, class_num, parallel):
    """Parses serialized records, dropping the ones `parse` fails on, and counts the drops.

    tf.data's ignore_errors drops silently; to count, every record becomes a one-element
    dataset that yields its parsed form or, when parsing failed, a placeholder flagged bad.
    A scan keeps the running count, then the placeholders are filtered out.
    """
    placeholder = (tf.zeros([image_size, image_size, 3]), tf.zeros([class_num]),
                   tf.constant(False))

    def parse_or_placeholder(value):
        parsed = tf.data.Dataset.from_tensors(value).map(
            lambda v: parse(v) + (tf.constant(True),)).apply(
                tf.data.experimental.ignore_errors())
        return parsed.concatenate(tf.data.Dataset.from_tensors(placeholder)).take(1)

    def count(skipped, element):
        image, label, ok = element
        skipped += tf.cast(tf.logical_not(ok), tf.int64)
        return skipped, (image, label, ok, skipped)

    dataset = records.interleave(parse_or_placeholder, cycle_length=max(2, parallel),
                                 num_parallel_calls=parallel, deterministic=False)
    dataset = dataset.apply(tf.data.experimental.scan(tf.constant(0, tf.int64), count))
    dataset = dataset.filter(lambda image, label, ok, skipped: ok)
    return dataset.map(lambda image, label, ok, skipped:
                       ({'image': image, 'skipped_records': skipped}, label))


# ---------------------------------------------------------------------------- model

class TrainingLogHook(tf.train.SessionRunHook):
    """Every `every_n` steps logs the named tensors, the step, images/s and the ETA.

    images/s is images / wall time over the interval, not a mean of per-step rates.
    """

    def __init__(self, tensors, batch_size, every_n, max_steps=None):
        self._tensors = tensors
        self._batch_size = batch_size
        self._every_n = max(1, every_n)
        self._max_steps = max_steps

    def begin(self):
        self._global_step = tf.train.get_global_step()
        self._iter = 0

    def after_create_session(self, session, coord):
        self._last_time = time.time()
        self._last_iter = 0

    def before_run(self, run_context):
        # The scalars are computed by the training step anyway; fetching them every step
        # lets end() log the last step without running the graph (which would draw a
        # batch and advance the loss counters).
        self._iter += 1
        return tf.train.SessionRunArgs(self._tensors)

    def after_run(self, run_context, run_values):
        self._values = run_values.results
        if self._iter % self._every_n == 0:
            self._log(run_context.session)

    def end(self, session):
        if self._iter != self._last_iter:
            self._log(session)

    def _log(self, session):
        now = time.time()
        steps = self._iter - self._last_iter
        elapsed = max(now - self._last_time, 1e-9)
        step = session.run(self._global_step)
        text = ', '.join('%s = %.6g' % (k, v) for k, v in sorted(self._values.items()))
        rate = steps / elapsed
        line = 'step %d: %s (%.1f images/s, %.3f s/step' % (
            step, text, rate * self._batch_size, elapsed / steps)
        if self._max_steps:
            eta = int(max(0, self._max_steps - step) / rate)
            line += ', ETA %d:%02d:%02d' % (eta // 3600, eta // 60 % 60, eta % 60)
        tf.logging.info(line + ')')
        self._last_time, self._last_iter = now, self._iter


def resnet_model_fn(features, labels, mode, params):
    """The Estimator model_fn: ResNet, SPEC section 5 loss, section 6 schedule, Momentum.

    params: resnet_size, class_num, data_format, batch_norm_decay, batch_norm_epsilon,
    mask_thres, neg_select, random_seed, weight_decay, lr, lr_decay_step, lr_decay_factor,
    warmup, lr_warmup, lr_warmup_decay_step, lr_warmup_decay_factor, opt_momentum,
    batch_size, log_interval, max_steps.
    """
    training = mode == tf.estimator.ModeKeys.TRAIN
    skipped = None
    if isinstance(features, dict):
        skipped = features.get('skipped_records')
        features = features['image']
    tf.summary.image('images', (features + 1.0) / 2.0, max_outputs=6)
    model = resnet.ResNet(params['resnet_size'], params['class_num'], params['data_format'],
                          params['batch_norm_decay'], params['batch_norm_epsilon'])
    logits = model(features, training)
    predictions = {
        'classes': tf.argmax(logits, axis=1),
        'probabilities': tf.nn.softmax(logits),
        'scores': tf.sigmoid(logits),
        'features': model.features,
    }
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions)

    cross_entropy, stats = loss_lib.multilabel_cross_entropy(
        labels, logits, params['mask_thres'], params['neg_select'], params['random_seed'],
        update=training)
    for name, tensor in sorted(stats.items()):
        tf.summary.histogram(name, tensor)
    tf.summary.scalar('cross_entropy', cross_entropy)
    loss = cross_entropy + loss_lib.l2_regularization(tf.trainable_variables(),
                                                      params['weight_decay'])
    accuracy = tf.metrics.accuracy(tf.argmax(labels, axis=1), predictions['classes'])
    tf.summary.scalar('train_accuracy', accuracy[1])

    train_op, hooks = None, []
    if training:
        global_step = tf.train.get_or_create_global_step()
        lr = lr_schedule.learning_rate(
            global_step, params['lr'], params['lr_decay_step'], params['lr_decay_factor'],
            params['warmup'], params['lr_warmup'], params['lr_warmup_decay_step'],
            params['lr_warmup_decay_factor'])
        tf.summary.scalar('learning_rate', lr)
        optimizer = tf.train.MomentumOptimizer(lr, momentum=params['opt_momentum'])
        # A NaN/Inf loss fails the step before any variable changes, so no checkpoint
        # (not even the one saved at the end) can hold the broken weights.
        finite = tf.debugging.check_numerics(loss, NON_FINITE_LOSS)
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS) + [finite]):
            train_op = optimizer.minimize(loss, global_step)
        logged = {'learning_rate': lr, 'cross_entropy': cross_entropy,
                  'train_accuracy': accuracy[1]}
        if skipped is not None:
            logged['skipped_records'] = tf.reduce_max(skipped)
            tf.summary.scalar('skipped_records', logged['skipped_records'])
        hooks.append(TrainingLogHook(logged, params['batch_size'], params['log_interval'],
                                     params.get('max_steps')))
    eval_metrics = None
    if mode == tf.estimator.ModeKeys.EVAL:
        # The histograms of mAP cannot place a NaN: say what it means instead.
        scores = tf.debugging.check_numerics(
            predictions['scores'], 'the model outputs NaN or Inf in inference mode (a '
            'diverged model, or one trained too briefly for its batch-norm moving averages)')
        eval_metrics = metrics.multilabel_metrics(labels, scores, params['mask_thres'])
        eval_metrics['cross_entropy'] = tf.metrics.mean(cross_entropy)
    scaffold = None
    if params.get('legacy_counters'):
        # Built last: the saver must see every variable, the Momentum slots included.
        scaffold = tf.train.Scaffold(saver=legacy_saver(params.get('max_to_keep', 5)))
    return tf.estimator.EstimatorSpec(
        mode=mode, predictions=predictions, loss=loss, train_op=train_op,
        eval_metric_ops=eval_metrics, training_hooks=hooks, scaffold=scaffold)


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


# ---------------------------------------------------------------------------- checks

def gpu_visible():
    return bool(tf.config.experimental.list_physical_devices('GPU'))


def resolve_data_format(data_format, has_gpu):
    """'auto' -> NCHW with a GPU, NHWC without; NCHW without a GPU is an error."""
    if data_format.lower() == 'auto':
        return 'channels_first' if has_gpu else 'channels_last'
    try:
        resolved = resnet.normalize_data_format(data_format)
    except ValueError as e:
        raise UsageError('--data_format: %s' % e)
    if resolved == 'channels_first' and not has_gpu:
        raise UsageError('--data_format=%s needs a GPU: TensorFlow\'s CPU convolutions '
                         'support only NHWC (use --data_format=NHWC or auto)' % data_format)
    return resolved


def first_label_length(path):
    """Number of float32 labels in the first record of a shard; None for an empty shard."""
    try:
        for record in tf.io.tf_record_iterator(path):
            example = tf.train.Example.FromString(record)
            feature = example.features.feature
            if 'label' not in feature or not feature['label'].bytes_list.value:
                raise file_db.DataError('%s: first record has no bytes feature "label"' % path)
            return len(feature['label'].bytes_list.value[0]) / 4.0
    except tf.errors.DataLossError as e:
        raise file_db.DataError('%s: corrupt TFRecord file (%s)' % (path, e.message))
    except Exception as e:  # a record that is not an Example
        if isinstance(e, file_db.DataError):
            raise
        raise file_db.DataError('%s: first record is not a tf.train.Example (%s)' % (path, e))
    return None


def check_label_length(files, class_num):
    """Every shard's first record must carry class_num labels."""
    for path in files:
        found = first_label_length(path)
        if found is not None and found != class_num:
            raise file_db.DataError(
                '%s: label has %s classes, expected --class_num=%d'
                % (path, int(found) if found == int(found) else found, class_num))


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


def validate_flags(f):
    """Checks everything that can be checked before a graph exists; raises UsageError."""
    if f.mode not in MODES:
        raise UsageError('--mode=%s is not implemented; use one of %s'
                         % (f.mode, ', '.join(MODES)))
    if f.mode == 'train_and_eval' and f.test_interval <= 0:
        raise UsageError('--mode=train_and_eval needs --test_interval > 0, got %d'
                         % f.test_interval)
    if f.test_iter < 0:
        raise UsageError('--test_iter must be >= 0 (0 = the whole val split), got %d'
                         % f.test_iter)
    for name in ('batch_size', 'image_size', 'class_num', 'log_interval', 'snapshot',
                 'max_to_keep'):
        if f[name].value <= 0:
            raise UsageError('--%s must be positive, got %d' % (name, f[name].value))
    if f.image_channels != 3:
        raise UsageError('--image_channels must be 3 (the model takes RGB), got %d'
                         % f.image_channels)
    if f.resnet_size not in resnet.SUPPORTED_SIZES:
        raise UsageError('--resnet_size=%d is not supported; use one of %s' % (
            f.resnet_size, ', '.join(map(str, resnet.SUPPORTED_SIZES))))
    if f.lr_decay_step < 0:
        raise UsageError('--lr_decay_step must be >= 0 (0 = no decay), got %d'
                         % f.lr_decay_step)
    if f.warmup > 0 and f.lr_warmup_decay_step <= 0:
        raise UsageError('--warmup=%d needs --lr_warmup_decay_step > 0 (got %d)'
                         % (f.warmup, f.lr_warmup_decay_step))
    if f.max_iter < -1 or f.max_iter == 0:
        raise UsageError('--max_iter must be positive or -1 (forever), got %d' % f.max_iter)
    if f.worker_num < 1 or not 0 <= f.worker_id < f.worker_num:
        raise UsageError('--worker_id=%d must be in [0, --worker_num=%d)'
                         % (f.worker_id, f.worker_num))
    for name in ('object_cover', 'area_cover'):
        if not 0.0 <= f[name].value <= 1.0:
            raise UsageError('--%s must be in [0, 1], got %g' % (name, f[name].value))
    if f.area_cover <= 0.0:
        raise UsageError('--area_cover must be > 0 (the crop needs some area), got %g'
                         % f.area_cover)
    if not 0.0 <= f.neg_select <= 1.0:
        raise UsageError('--neg_select must be in [0, 1], got %g' % f.neg_select)
    if f.num_gpus != 1:
        raise UsageError('--num_gpus=%d: only one GPU is implemented' % f.num_gpus)
    if f.optimizer != 'mom':
        raise UsageError('--optimizer=%s: only "mom" (momentum) exists' % f.optimizer)
    if f.pretrain_ckpt or f.restore or f.FixBlock2:
        raise UsageError('--pretrain_ckpt/--restore/--FixBlock2: fine-tuning is not '
                         'implemented yet')


def training_files(f):
    """This worker's shard files, checked; raises file_db.DataError / UsageError."""
    files = file_db.list_shards(f.data_dir, 'train', f.file_pattern)
    share = file_db.worker_share(files, f.worker_num, f.worker_id)
    if not share:
        raise UsageError('worker %d of %d has no files: only %d shard files in %s'
                         % (f.worker_id, f.worker_num, len(files),
                            os.path.join(f.data_dir, 'train')))
    check_label_length(share, f.class_num)
    return share


# ---------------------------------------------------------------------------- main

def model_params(f, data_format):
    return {
        'resnet_size': f.resnet_size, 'class_num': f.class_num, 'data_format': data_format,
        'batch_norm_decay': f.batch_norm_decay, 'batch_norm_epsilon': f.batch_norm_epsilon,
        'mask_thres': f.mask_thres, 'neg_select': f.neg_select,
        'random_seed': f.random_seed, 'weight_decay': f.weight_decay, 'lr': f.lr,
        'lr_decay_step': f.lr_decay_step, 'lr_decay_factor': f.lr_decay_factor,
        'warmup': f.warmup, 'lr_warmup': f.lr_warmup,
        'lr_warmup_decay_step': f.lr_warmup_decay_step,
        'lr_warmup_decay_factor': f.lr_warmup_decay_factor,
        'opt_momentum': f.opt_momentum, 'batch_size': f.batch_size,
        'log_interval': f.log_interval,
        'max_steps': f.max_iter if f.max_iter > 0 else None,
        'max_to_keep': f.max_to_keep, 'legacy_counters': has_legacy_counters(f.model_dir),
    }


def make_estimator(f, data_format):
    session_config = tf.ConfigProto()
    session_config.gpu_options.allow_growth = True
    if f.visiable_gpu >= 0:
        session_config.gpu_options.visible_device_list = str(f.visiable_gpu)
    run_config = tf.estimator.RunConfig(
        save_checkpoints_steps=f.snapshot, keep_checkpoint_max=f.max_to_keep,
        save_summary_steps=f.log_interval, log_step_count_steps=f.log_interval,
        session_config=session_config)
    return tf.estimator.Estimator(model_fn=resnet_model_fn, model_dir=f.model_dir,
                                  config=run_config, params=model_params(f, data_format))


class StepTracker(tf.train.SessionRunHook):
    """Remembers the global step after the last completed step; a failure is at the next."""

    def __init__(self):
        self.last_step = None

    def begin(self):
        self._global_step = tf.train.get_global_step()

    def after_create_session(self, session, coord):
        self.last_step = session.run(self._global_step)

    def after_run(self, run_context, run_values):
        # A separate read: a fetch in the step itself may see the value before or after
        # the increment.
        self.last_step = run_context.session.run(self._global_step)

    @property
    def failed_step(self):
        return None if self.last_step is None else self.last_step + 1


def op_error_text(error):
    """The cause in a graph-mode OpError message, without TF 2.15's 'Graph execution
    error:' header, node names and stack traces."""
    boilerplate = ('Graph execution error:', 'Detected at node', 'File "', 'Node:', '[[')
    lines = [line.strip() for line in str(getattr(error, 'message', error)).splitlines()]
    return ' '.join(l for l in lines if l and not l.startswith(boilerplate)) or \
        type(error).__name__


def describe_failure(error, f, step):
    """One line for an error that stopped training, with what to do about it."""
    first_line = op_error_text(error)
    last = tf.train.latest_checkpoint(f.model_dir)
    kept = ('the last checkpoint %s is kept' % os.path.basename(last) if last
            else 'no checkpoint was written')
    at = ' at step %d' % step if step is not None else ''
    if NON_FINITE_LOSS in error.message:
        return 'the training loss became NaN or Inf%s; training stopped, %s' % (at, kept)
    if isinstance(error, tf.errors.DataLossError):
        return ('a shard is truncated or corrupt (%s)%s; find it with: python '
                'tools/check_tfrecords.py --class_num=%d %s' % (
                    first_line, at, f.class_num, os.path.join(f.data_dir, 'train')))
    if isinstance(error, tf.errors.InvalidArgumentError):
        return ('bad record%s: %s; find it with tools/check_tfrecords.py, or train on with '
                '--skip_bad_records; %s' % (at, first_line, kept))
    return '%s%s; %s' % (first_line, at, kept)


def log_to_file(log_dir):
    """Copies TensorFlow's log (ours and the Estimator's) to <log_dir>/train.log."""
    os.makedirs(log_dir, exist_ok=True)
    handler = logging.FileHandler(os.path.join(log_dir, 'train.log'))
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s'))
    logging.getLogger('tensorflow').addHandler(handler)


def eval_input_fn(f, files):
    return lambda: input_fn(False, f.data_dir, f.batch_size, f.class_num, f.image_size,
                            num_parallel_calls=f.num_preprocess_threads, files=files)


def evaluation_files(f):
    """All val shard files, checked like the training ones."""
    files = file_db.list_shards(f.data_dir, 'val', f.file_pattern)
    check_label_length(files, f.class_num)
    return files


def format_metrics(results):
    return ', '.join('%s = %.4f' % (k, v) for k, v in sorted(results.items())
                     if k != 'global_step')


def evaluate(f, estimator=None, checkpoint_path=None, files=None):
    """Evaluates a checkpoint on --test_iter batches of val (0 = all); returns the metrics."""
    if estimator is None:
        validate_flags(f)
        data_format = resolve_data_format(f.data_format, gpu_visible())
        files = evaluation_files(f)
        checkpoint_path = f.checkpoint_path or tf.train.latest_checkpoint(f.model_dir)
        if not checkpoint_path:
            raise UsageError('no checkpoint to evaluate in --model_dir=%s (give '
                             '--checkpoint_path)' % f.model_dir)
        if not tf.train.checkpoint_exists(checkpoint_path):
            raise UsageError('--checkpoint_path=%s does not exist' % checkpoint_path)
        log_to_file(f.log_dir)
        estimator = make_estimator(f, data_format)
    checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(f.model_dir)
    check_checkpoint_head(checkpoint_path, f.class_num)
    try:
        results = estimator.evaluate(eval_input_fn(f, files),
                                     steps=f.test_iter if f.test_iter > 0 else None,
                                     checkpoint_path=checkpoint_path)
    except tf.errors.OpError as e:
        raise TrainingError('evaluating %s: %s' % (checkpoint_path, op_error_text(e)))
    tf.logging.info('evaluated %s (global step %d) on %s val batches: %s', checkpoint_path,
                    results['global_step'], f.test_iter or 'all', format_metrics(results))
    return results


def train(f):
    """Validates, then trains to global step --max_iter (evaluating every --test_interval
    steps in train_and_eval mode). Returns the Estimator."""
    validate_flags(f)
    data_format = resolve_data_format(f.data_format, gpu_visible())
    files = training_files(f)
    val_files = evaluation_files(f) if f.mode == 'train_and_eval' else None
    log_to_file(f.log_dir)
    tf.logging.info('worker %d/%d reads %d shard files: %s', f.worker_id, f.worker_num,
                    len(files), ', '.join(os.path.basename(p) for p in files[:20])
                    + (' ...' if len(files) > 20 else ''))
    tf.logging.info('data_format %s, ResNet-%d, %d classes, batch %d, image %d',
                    data_format, f.resnet_size, f.class_num, f.batch_size, f.image_size)
    if f.lr_decay_step == 0:
        tf.logging.info('lr_decay_step = 0: no learning-rate decay (lr stays %g after '
                        'warm-up)', f.lr)
    check_checkpoint_head(latest_checkpoint(f.model_dir), f.class_num)
    estimator = make_estimator(f, data_format)
    tracker = StepTracker()
    if estimator.params['legacy_counters']:
        tf.logging.info('%s holds a checkpoint of the original program: its loss counters '
                        'are read and written as %s', f.model_dir,
                        ' and '.join(sorted(LEGACY_COUNTER_NAMES.values())))
    tf.logging.info('training to global step %s; checkpoints and TensorBoard events in %s',
                    f.max_iter if f.max_iter > 0 else 'infinity', f.model_dir)
    try:
        if f.mode == 'train_and_eval':
            step = estimator_step(f.model_dir)
            last = f.max_iter if f.max_iter > 0 else float('inf')
            while step < last:
                step = min(last, (step // f.test_interval + 1) * f.test_interval)
                train_on(estimator, f, files, tracker, step)
                evaluate(f, estimator, files=val_files)
        else:
            train_on(estimator, f, files, tracker, f.max_iter if f.max_iter > 0 else None)
    except tf.errors.OpError as e:
        raise TrainingError(describe_failure(e, f, tracker.failed_step))
    except UnicodeDecodeError:
        # TF quotes the raw bytes of an unparseable record in its error, which then fails
        # to decode as text: all that is left to say is which kind of problem it was.
        raise TrainingError(
            'a record is not a tf.train.Example%s; find it with tools/check_tfrecords.py, '
            'or train on with --skip_bad_records' % (
                ' (step %d)' % tracker.failed_step if tracker.failed_step else ''))
    tf.logging.info('done; TensorBoard: tensorboard --logdir %s', f.model_dir)
    return estimator


def estimator_step(model_dir):
    """The global step of the latest checkpoint in model_dir, 0 without one."""
    path = latest_checkpoint(model_dir)
    return int(tf.train.load_checkpoint(path).get_tensor('global_step')) if path else 0


def train_on(estimator, f, files, tracker, max_steps):
    estimator.train(
        input_fn=lambda: input_fn(
            True, f.data_dir, f.batch_size, f.class_num, f.image_size,
            file_pattern=f.file_pattern, file_shuffle_buffer=f.file_shuffle_buffer,
            shuffle_buffer=f.shuffle_buffer, num_parallel_calls=f.num_preprocess_threads,
            files=files, skip_bad_records=f.skip_bad_records,
            object_cover=f.object_cover, area_cover=f.area_cover),
        max_steps=max_steps, hooks=[tracker])


def main(argv):
    del argv
    try:
        if FLAGS.demo:
            import demo
            demo.run(FLAGS)
        elif FLAGS.mode == 'eval':
            evaluate(FLAGS)
        else:
            train(FLAGS)
    except (UsageError, file_db.DataError) as e:
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(2)
    except TrainingError as e:
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(1)


def run():
    if any(arg in ('-h', '--help', '-help', '--helpshort') for arg in sys.argv[1:]):
        sys.stdout.write(flags_lib.grouped_help(PROGRAM))
        sys.exit(0)
    from absl import app
    tf.logging.set_verbosity(tf.logging.INFO)
    # absl's handler prints every line once; TensorFlow's own would print it a second time.
    tf.get_logger().handlers.clear()
    app.run(main)


if __name__ == '__main__':
    run()
