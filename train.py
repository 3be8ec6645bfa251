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

import distribute
import file_db
import flags as flags_lib
import image_preprocess
import loss as loss_lib
import lr_schedule
import metrics
import precision
import resnet

tf.disable_v2_behavior()

FLAGS = flags_lib.FLAGS
PROGRAM = 'train.py'


NON_FINITE_LOSS = 'non-finite training loss'
# TensorFlow's own message when a histogram summary meets NaN/Inf ("Nan in summary
# histogram for: ..."): non-finite values of the model, never a record's fault.
NON_FINITE_SUMMARY = 'in summary histogram for'


class TrainingError(RuntimeError):
    """Training started and then stopped on an error: reported as one line, exit 1."""


MODES = ('train', 'eval', 'train_and_eval', 'predict', 'export')


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

# The compact label layout, read side by side with the dense `label` bytes: the classes
# with a non-zero confidence and their confidences (an image without labels stores one
# explicit 0 entry, so that a record without any label stays an error).
SPARSE_LABEL_FEATURES = {
    'label/index': tf.VarLenFeature(tf.int64),
    'label/value': tf.VarLenFeature(tf.float32),
}
# What record_parser_fn parses: either layout (dense `label` wins when both are present).
PARSE_FEATURES = dict(RECORD_FEATURES, label=tf.FixedLenFeature([], tf.string,
                                                                   default_value=''),
                      **SPARSE_LABEL_FEATURES)
AUGMENT_ON = ('cpu', 'device')


def decode_label(label_bytes, class_num):
    """Raw little-endian float32 bytes -> [class_num] float32; a wrong length is an error."""
    label = tf.io.decode_raw(label_bytes, tf.float32, little_endian=True)
    check = tf.debugging.assert_equal(
        tf.size(label), class_num,
        message='record label length differs from --class_num=%d' % class_num)
    with tf.control_dependencies([check]):
        return tf.reshape(label, [class_num])


def record_label(parsed, class_num):
    """The [class_num] label of a record parsed with PARSE_FEATURES, in either layout: the
    dense `label` bytes when present, else label/index + label/value (n > 0 entries, the
    same number of each, every index in [0, class_num)); anything else is an error.

    Both layouts are computed (the absent one is empty) instead of a tf.cond: in a tf.data
    function a cond costs about 0.5 ms of CPU a record, a fifth of a JPEG decode.
    """
    dense = tf.io.decode_raw(parsed['label'], tf.float32, little_endian=True)
    index, value = parsed['label/index'].values, parsed['label/value'].values
    dense_size, sparse_size = tf.size(dense), tf.size(index)
    is_dense = dense_size > 0
    checks = [
        tf.debugging.Assert(
            tf.logical_or(tf.logical_not(is_dense), tf.equal(dense_size, class_num)),
            ['record label length differs from --class_num=%d' % class_num]),
        tf.debugging.Assert(
            tf.logical_or(is_dense, sparse_size > 0),
            ['record has no label (neither "label" nor "label/index"/"label/value")']),
        tf.debugging.Assert(
            tf.logical_or(is_dense, tf.equal(sparse_size, tf.size(value))),
            ['record label/index and label/value differ in length']),
        tf.debugging.Assert(
            tf.logical_or(is_dense, tf.reduce_all(
                tf.logical_and(index >= 0, index < class_num))),
            ['record label/index outside [0, --class_num=%d)' % class_num]),
    ]
    with tf.control_dependencies(checks):
        sparse = tf.tensor_scatter_nd_update(tf.zeros([class_num], tf.float32),
                                             index[:, tf.newaxis], value)
        sparse *= 1.0 - tf.cast(is_dense, tf.float32)  # both present: the dense one wins
        label = tf.pad(dense, [[0, class_num - dense_size]]) + sparse
    label.set_shape([class_num])
    return label


def decode_class_index(index, class_num):
    """An int64 class index (single-label records, e.g. ImageNet's) -> one-hot [class_num]."""
    check = tf.debugging.assert_less(
        tf.cast(index, tf.int64), tf.constant(class_num, tf.int64),
        message='record label index is >= --class_num=%d' % class_num)
    check_low = tf.debugging.assert_non_negative(index, message='negative record label')
    with tf.control_dependencies([check, check_low]):
        return tf.one_hot(index, class_num, dtype=tf.float32)


LABEL_TYPES = ('multi', 'single')


def record_parser_fn(value, is_training, image_size, class_num, object_cover=0.7,
                     area_cover=0.7, label_type='multi', augment_on='cpu'):
    """A serialized tf.train.Example (SPEC section 1) -> (image [S, S, 3] in [-1, 1], label).

    label_type 'multi': the label is class_num float32 in either layout, the dense `label`
    bytes (SPEC section 1) or label/index + label/value; 'single': `label` is an int64
    class index, returned one-hot so that both kinds have shape [class_num].
    The image: image_preprocess.preprocess_encoded.
    augment_on 'cpu': SPEC section 3 in full here; 'device': the crop, resized and rounded
    to uint8 [S, S, 3] -- flip, rotation, colour and the [-1, 1] map then run batched in
    the model (image_preprocess.network_input).
    """
    if label_type == 'single':
        features = dict(RECORD_FEATURES, label=tf.FixedLenFeature([], tf.int64))
    else:
        features = PARSE_FEATURES
    parsed = tf.parse_single_example(value, features)
    image = image_preprocess.preprocess_encoded(
        parsed['image'], image_size, is_training, object_cover, area_cover,
        on_device=augment_on == 'device')
    if label_type == 'single':
        return image, decode_class_index(parsed['label'], class_num)
    return image, record_label(parsed, class_num)


def input_fn(is_training, data_dir, batch_size, class_num, image_size,
             file_pattern='*tfrecords', worker_num=1, worker_id=0, file_shuffle_buffer=1500,
             shuffle_buffer=2048, num_parallel_calls=4, files=None, skip_bad_records=False,
             object_cover=0.7, area_cover=0.7, label_type='multi', augment_on='device',
             use_synthetic_data=False, private_threads=0, record_shard=None):
    """Batches of (images, labels) from `<data_dir>/train` (is_training) or `<data_dir>/val`.

    Training reads this worker's share of the files (file_db) in shuffled order, interleaves
    them, shuffles the records and repeats forever; evaluation reads every file once, in
    order. `files` overrides the listing (tools that read given shards). object_cover and
    area_cover are the training crop's (SPEC section 3).
    With skip_bad_records, records that fail to parse or decode are dropped and the features
    become {'image': images, 'skipped_records': bad records seen so far}.
    augment_on 'device' (the default; train.py's choice with a GPU): uint8 images, cropped
    and resized only -- the flip, rotation, colour and the [-1, 1] map (SPEC section 3) run
    batched in the model, on the training device (image_preprocess.network_input, which
    resnet_model_fn applies to every batch). 'cpu' (train.py's choice without a GPU):
    float32 images in [-1, 1], SPEC section 3 in full here, per image.
    use_synthetic_data: no file is read; the model draws random batches on its device
    (synthetic_dataset).
    private_threads > 0: the pipeline's own thread pool of that size.
    record_shard (n, k), training: every file is read and this worker takes records k,
    k + n, ... of a deterministic interleave (distribute.data_share, fewer files than
    workers); the shuffles come after the split.
    """
    if augment_on not in AUGMENT_ON:
        raise ValueError('augment_on must be one of %s, got %r' % (AUGMENT_ON, augment_on))
    if use_synthetic_data:
        return synthetic_dataset(batch_size, image_size)
    if files is None:
        files = file_db.list_shards(data_dir, 'train' if is_training else 'val', file_pattern)
        if is_training:
            files = file_db.worker_share(files, worker_num, worker_id)
    parallel = num_parallel_calls if num_parallel_calls > 0 else tf.data.experimental.AUTOTUNE
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if is_training:
        # This worker's share is fixed above; shuffling only reorders it. A record-level
        # share needs the same record order on every worker before the split.
        if record_shard is None:
            dataset = dataset.shuffle(max(1, min(file_shuffle_buffer, len(files))))
        dataset = dataset.interleave(tf.data.TFRecordDataset,
                                     cycle_length=min(len(files), 8), block_length=1,
                                     num_parallel_calls=tf.data.experimental.AUTOTUNE,
                                     deterministic=record_shard is not None)
        if record_shard is not None:
            dataset = dataset.shard(*record_shard)
        # The records are shuffled before they are decoded: the same shuffle, with a buffer
        # of serialized records instead of decoded float images (4x smaller at 224 px, and
        # no thousands of images to decode before the first batch).
        dataset = dataset.shuffle(shuffle_buffer).repeat()
    else:
        dataset = dataset.flat_map(tf.data.TFRecordDataset)
    parse = lambda value: record_parser_fn(value, is_training, image_size, class_num,
                                           object_cover, area_cover, label_type,
                                           augment_on)
    if skip_bad_records:
        dataset = drop_bad_records(dataset, parse, image_size, class_num, parallel,
                                   tf.uint8 if augment_on == 'device' else tf.float32)
    else:
        dataset = dataset.map(parse, num_parallel_calls=parallel,
                              deterministic=not is_training)
    # Full batches in training keep shapes static; evaluation keeps the last partial one.
    dataset = dataset.batch(batch_size, drop_remainder=is_training)
    dataset = dataset.prefetch(tf.data.experimental.AUTOTUNE)
    if private_threads > 0:
        options = tf.data.Options()
        options.experimental_threading.private_threadpool_size = private_threads
        dataset = dataset.with_options(options)
    return dataset


SYNTHETIC = 'synthetic'


def synthetic_dataset(batch_size, image_size):
    """The shape of a batch and nothing else, forever: features {'synthetic': uint8
    [B, S, S, 0]}, labels float32 [B, 0]. No file is read, no pixel crosses to the device:
    the model makes the batch there (synthetic_batch), a new one every step. With several
    replicas each gets its share of B."""
    features = {SYNTHETIC: tf.zeros([batch_size, image_size, image_size, 0], tf.uint8)}
    return tf.data.Dataset.from_tensors((features, tf.zeros([batch_size, 0]))).repeat()


def synthetic_batch(shape_only, class_num):
    """Random network inputs for a [B, S, S, 0] shape_only tensor: images uniform in
    [-1, 1] [B, S, S, 3] and 0/1 labels [B, class_num] with about 8 positives an image,
    drawn where the model runs."""
    batch, height, width = shape_only.shape.as_list()[:3]
    if batch is None:
        batch = tf.shape(shape_only)[0]
    images = tf.random.uniform([batch, height, width, 3], -1.0, 1.0)
    images.set_shape(shape_only.shape[:3].concatenate([3]))
    positive = tf.random.uniform([batch, class_num]) < min(0.5, 8.0 / class_num)
    return images, tf.cast(positive, tf.float32)


def resolve_augment_on(augment_on, has_gpu):
    """--augment_on: 'auto' -> 'device' with a GPU, 'cpu' without."""
    if augment_on == 'auto':
        return 'device' if has_gpu else 'cpu'
    return augment_on


def performance_args(f, has_gpu=None):
    """input_fn's keyword arguments from the Performance flags."""
    has_gpu = gpu_visible() if has_gpu is None else has_gpu
    return {'augment_on': resolve_augment_on(f.augment_on, has_gpu),
            'use_synthetic_data': f.use_synthetic_data,
            'private_threads': f.private_threads}


def check_performance_flags(f):
    """The Performance group's values; raises UsageError."""
    if f.augment_on not in ('auto',) + AUGMENT_ON:
        raise UsageError('--augment_on must be auto, cpu or device, got %r' % f.augment_on)
    if f.dtype not in precision.DTYPES:
        raise UsageError('--dtype must be one of %s, got %r'
                         % (', '.join(precision.DTYPES), f.dtype))
    if f.private_threads < 0:
        raise UsageError('--private_threads must be >= 0, got %d' % f.private_threads)


def drop_bad_records(records, parse, image_size, class_num, parallel,
                     image_dtype=tf.float32):
    """Parses serialized records, dropping the ones `parse` fails on, and counts the drops.

    tf.data's ignore_errors drops silently; to count, every record becomes a one-element
    dataset that yields its parsed form or, when parsing failed, a placeholder flagged bad.
    A scan keeps the running count, then the placeholders are filtered out.
    """
    placeholder = (tf.zeros([image_size, image_size, 3], image_dtype), tf.zeros([class_num]),
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
    batch_size, log_interval, max_steps; optional: label_type ('multi': SPEC section 5
    loss; 'single': softmax cross-entropy), frozen_stages (FixBlock2: 2), pretrain_ckpt and
    warm_start (checkpoint variable names to initialise from it, see warm_start_names).
    """
    training = mode == tf.estimator.ModeKeys.TRAIN
    skipped = None
    if isinstance(features, dict) and SYNTHETIC in features:
        features, labels = synthetic_batch(features[SYNTHETIC], params['class_num'])
    elif isinstance(features, dict):
        skipped = features.get('skipped_records')
        features = features['image']
    # uint8 batches (--augment_on=device) are augmented here, on the training device.
    features = image_preprocess.network_input(features, training)
    tf.summary.image('images', (features + 1.0) / 2.0, max_outputs=6)
    model = resnet.ResNet(params['resnet_size'], params['class_num'], params['data_format'],
                          params['batch_norm_decay'], params['batch_norm_epsilon'],
                          params.get('frozen_stages', 0))
    dtype = params.get('dtype', 'fp32')
    with precision.model_scope(dtype):
        logits = precision.float32(model(precision.model_input(features, dtype), training))
    model.features = precision.float32(model.features)
    if training and params.get('warm_start'):
        # Changes only the initializers: a checkpoint in model_dir still wins on restart.
        tf.train.init_from_checkpoint(params['pretrain_ckpt'],
                                      {name: name for name in params['warm_start']})
    predictions = {
        'classes': tf.argmax(logits, axis=1),
        'probabilities': tf.nn.softmax(logits),
        'scores': tf.sigmoid(logits),
        'features': model.features,
    }
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions)

    stats = {}
    if params.get('label_type', 'multi') == 'single':
        cross_entropy = loss_lib.softmax_cross_entropy(labels, logits)
    else:
        cross_entropy, stats = loss_lib.multilabel_cross_entropy(
            labels, logits, params['mask_thres'], params['neg_select'],
            params['random_seed'], update=training)
    # With several replicas the step's cross_entropy is the mean over their batches (the
    # loss of the global batch); the gradient comes from each replica's own.
    reported_cross_entropy = distribute.all_reduce_mean(cross_entropy)
    tf.summary.scalar('cross_entropy', reported_cross_entropy)
    frozen = resnet.frozen_variables(tf.trainable_variables(), model.frozen_scopes())
    trained = [v for v in tf.trainable_variables() if v not in frozen]
    # Frozen weights do not change, so their L2 term would only be a constant.
    loss = cross_entropy + loss_lib.l2_regularization(trained, params['weight_decay'])
    # A NaN/Inf loss fails the step before any variable changes, so no checkpoint (not
    # even the one saved at the end) can hold the broken weights. The histograms, which
    # reject NaN themselves, wait for this check: the same failure always gets its name.
    finite = tf.debugging.check_numerics(loss, NON_FINITE_LOSS) if training else None
    with tf.control_dependencies([finite] if training else []):
        for name, tensor in sorted(stats.items()):
            tf.summary.histogram(name, tf.identity(tensor))
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
        optimizer = precision.wrap_optimizer(optimizer, dtype)
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS) + [finite]):
            train_op = optimizer.minimize(loss, global_step, var_list=trained)
        logged = {'learning_rate': lr, 'cross_entropy': reported_cross_entropy,
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


def first_label_length(path, label_type='multi'):
    """Number of float32 labels in the first record of a shard (label_type 'single': its
    int64 class index + 1, the fewest classes it fits); None for an empty shard."""
    try:
        for record in tf.io.tf_record_iterator(path):
            example = tf.train.Example.FromString(record)
            feature = example.features.feature
            if label_type == 'single':
                if 'label' not in feature or len(feature['label'].int64_list.value) != 1:
                    raise file_db.DataError('%s: first record has no int64 feature "label" '
                                            '(--label_type=single)' % path)
                return feature['label'].int64_list.value[0] + 1
            if 'label' not in feature and 'label/index' in feature:
                return None  # sparse layout: each index is checked in training
            if 'label' not in feature or not feature['label'].bytes_list.value:
                raise file_db.DataError('%s: first record has no bytes feature "label"%s' % (
                    path, ' (an int64 class index: use --label_type=single)'
                    if 'label' in feature and feature['label'].int64_list.value else ''))
            return len(feature['label'].bytes_list.value[0]) / 4.0
    except tf.errors.DataLossError as e:
        raise file_db.DataError('%s: corrupt TFRecord file (%s)' % (path, e.message))
    except Exception as e:  # a record that is not an Example
        if isinstance(e, file_db.DataError):
            raise
        raise file_db.DataError('%s: first record is not a tf.train.Example (%s)' % (path, e))
    return None


def check_label_length(files, class_num, label_type='multi'):
    """Every shard's first record must carry class_num labels (a class index < class_num)."""
    for path in files:
        found = first_label_length(path, label_type)
        if label_type == 'single':
            if found is not None and not 0 < found <= class_num:
                raise file_db.DataError('%s: first record has class index %d, expected one in '
                                        '[0, --class_num=%d)' % (path, found - 1, class_num))
            continue
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


def model_variable_shapes(f, data_format):
    """{name: shape} of the model variables this run's flags build (no training ops)."""
    with tf.Graph().as_default():
        model = resnet.ResNet(f.resnet_size, f.class_num, data_format)
        model(tf.zeros([1, f.image_size, f.image_size, 3]), True)
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


def validate_flags(f):
    """Checks everything that can be checked before a graph exists; raises UsageError."""
    if f.mode not in MODES:
        raise UsageError('--mode=%s is not implemented; use one of %s'
                         % (f.mode, ', '.join(MODES)))
    if f.mode == 'train_and_eval' and f.test_interval <= 0:
        raise UsageError('--mode=train_and_eval needs --test_interval > 0, got %d'
                         % f.test_interval)
    check_inference_flags(f)
    if f.test_iter < 0:
        raise UsageError('--test_iter must be >= 0 (0 = the whole val split), got %d'
                         % f.test_iter)
    if f.eval_throttle_secs < 0:
        raise UsageError('--eval_throttle_secs must be >= 0, got %d' % f.eval_throttle_secs)
    if f.summary_interval < 0:
        raise UsageError('--summary_interval must be >= 0 (0 = --log_interval), got %d'
                         % f.summary_interval)
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
    check_performance_flags(f)
    if not 0.0 <= f.neg_select <= 1.0:
        raise UsageError('--neg_select must be in [0, 1], got %g' % f.neg_select)
    if f.num_gpus < 1:
        raise UsageError('--num_gpus must be >= 1, got %d' % f.num_gpus)
    if f.optimizer != 'mom':
        raise UsageError('--optimizer=%s: only "mom" (momentum) exists' % f.optimizer)
    if f.restore and not f.pretrain_ckpt:
        raise UsageError('--restore needs --pretrain_ckpt (the checkpoint to restore)')
    if f.label_type not in LABEL_TYPES:
        raise UsageError('--label_type must be one of %s, got %r'
                         % (', '.join(LABEL_TYPES), f.label_type))


def training_files(f, plan):
    """This worker's shard files, checked, and the record-level split (None, or
    (workers, index) when there are fewer files than workers); raises
    file_db.DataError / UsageError."""
    files = file_db.list_shards(f.data_dir, 'train', f.file_pattern)
    share, record_shard = distribute.data_share(files, plan.worker_num, plan.worker_id)
    check_label_length(share, f.class_num, f.label_type)
    return share, record_shard


def cluster_plan(f):
    """distribute.plan from the flags and TF_CONFIG; raises UsageError."""
    if f.mode == 'train_and_eval' and distribute.current_task() is not None:
        raise UsageError('--mode=train_and_eval in a TF_CONFIG cluster is not implemented: '
                         'train with --mode=train and evaluate the checkpoints with '
                         '--mode=eval')
    try:
        # --visiable_gpu=k makes GPUs k, k + 1, ... visible (-1: all of them).
        gpus = len(tf.config.list_physical_devices('GPU')) - max(0, f.visiable_gpu)
        plan = distribute.plan(f.distribution, f.num_gpus, f.worker_num, f.worker_id,
                               f.batch_size, gpus)
    except distribute.ConfigError as e:
        raise UsageError(str(e))
    if (plan.replicas > 1 or plan.distribution != 'none') and \
            has_legacy_counters(f.model_dir):
        raise UsageError('%s holds a checkpoint of the original program (counters Variable, '
                         'Variable_1): it continues on one device only, not with %s' % (
                             f.model_dir, '--num_gpus=%d' % f.num_gpus if plan.replicas > 1
                             else '--distribution=%s' % plan.distribution))
    return plan


# ---------------------------------------------------------------------------- main

def training_steps(f):
    """--max_iter as the Estimator's max_steps: None (no end) for 0."""
    return f.max_iter if f.max_iter > 0 else None


def evaluation_batches(f):
    """--test_iter as the Estimator's evaluation steps: None (the whole val split) for 0."""
    return f.test_iter if f.test_iter > 0 else None


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
        'max_steps': training_steps(f),
        'max_to_keep': f.max_to_keep, 'legacy_counters': has_legacy_counters(f.model_dir),
        'label_type': f.label_type, 'frozen_stages': 2 if f.FixBlock2 else 0,
        'dtype': f.dtype,
    }


def make_estimator(f, data_format, warm_start=None, plan=None):
    """The Estimator of this run; warm_start = (checkpoint, variable names) to fine-tune;
    plan: distribute.Plan of a training run (its strategy, cluster role, images a step)."""
    session_config = tf.ConfigProto()
    session_config.gpu_options.allow_growth = True
    if f.visiable_gpu >= 0:
        session_config.gpu_options.visible_device_list = ','.join(
            str(f.visiable_gpu + i) for i in range(max(1, f.num_gpus)))
    # An evaluator is not a member of the cluster: a local session, no strategy.
    cluster_member = plan is not None and not plan.evaluates
    if cluster_member and plan.distribution == 'ps':
        # What RunConfig does when it makes the session config: a task sees only the ps
        # tasks and itself, so it neither waits for nor depends on the other workers.
        session_config.device_filters.extend(
            ['/job:ps', '/job:%s/task:%d' % (plan.task.type, plan.task.index)])
    if f.xla:
        session_config.graph_options.optimizer_options.global_jit_level = (
            tf.OptimizerOptions.ON_1)
    run_config = tf.estimator.RunConfig(
        save_checkpoints_steps=f.snapshot, keep_checkpoint_max=f.max_to_keep,
        save_summary_steps=f.summary_interval or f.log_interval,
        log_step_count_steps=f.log_interval,
        session_config=session_config,
        train_distribute=distribute.train_distribute(
            plan.distribution, f.num_gpus) if cluster_member else None)
    params = model_params(f, data_format)
    if plan is not None:
        params['batch_size'] = plan.images_per_step  # images a step of this process
    if warm_start:
        params['pretrain_ckpt'], params['warm_start'] = warm_start
    return tf.estimator.Estimator(model_fn=resnet_model_fn, model_dir=f.model_dir,
                                  config=run_config, params=params)


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


class TestGateHook(tf.train.SessionRunHook):
    """For the process tests only: with TRAIN_TEST_GATE=N:PATH in the environment, the
    process holds before its own N-th step until PATH exists. A test that kills or
    interrupts a run at step k < N thereby knows that work is left, whatever the machine's
    speed; it creates PATH to let the run finish."""

    ENV = 'TRAIN_TEST_GATE'

    @classmethod
    def from_environment(cls):
        value = os.environ.get(cls.ENV)
        if not value:
            return None
        step, path = value.split(':', 1)
        return cls(int(step), path)

    def __init__(self, step, path):
        self._step, self._path, self._steps = step, path, 0

    def before_run(self, run_context):
        self._steps += 1
        if self._steps == self._step:
            tf.logging.info('test gate: holding before local step %d until %s exists',
                            self._step, self._path)
            while not os.path.exists(self._path):
                time.sleep(0.05)


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
    if NON_FINITE_LOSS in error.message or NON_FINITE_SUMMARY in error.message:
        return 'the training loss became NaN or Inf%s; training stopped, %s' % (at, kept)
    if isinstance(error, tf.errors.DataLossError):
        return ('a shard is truncated or corrupt (%s)%s; find it with: python '
                'tools/check_tfrecords.py --class_num=%d %s' % (
                    first_line, at, f.class_num, os.path.join(f.data_dir, 'train')))
    if isinstance(error, tf.errors.InvalidArgumentError):
        return ('bad record%s: %s; find it with tools/check_tfrecords.py, or train on with '
                '--skip_bad_records; %s' % (at, first_line, kept))
    return '%s%s; %s' % (first_line, at, kept)


def log_to_file(log_dir, name='train.log'):
    """Copies TensorFlow's log (ours and the Estimator's) to <log_dir>/<name>."""
    os.makedirs(log_dir, exist_ok=True)
    handler = logging.FileHandler(os.path.join(log_dir, name))
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s'))
    logging.getLogger('tensorflow').addHandler(handler)


def eval_input_fn(f, files):
    return lambda: input_fn(False, f.data_dir, f.batch_size, f.class_num, f.image_size,
                            num_parallel_calls=f.num_preprocess_threads, files=files,
                            label_type=f.label_type,
                            augment_on=performance_args(f)['augment_on'])


def evaluation_files(f):
    """All val shard files, checked like the training ones."""
    files = file_db.list_shards(f.data_dir, 'val', f.file_pattern)
    check_label_length(files, f.class_num, f.label_type)
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
                                     steps=evaluation_batches(f),
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
    plan = cluster_plan(f)
    data_format = resolve_data_format(f.data_format, gpu_visible())
    files, record_shard = ([], None) if f.use_synthetic_data or not plan.trains else \
        training_files(f, plan)
    val_files = evaluation_files(f) if f.mode == 'train_and_eval' or plan.evaluates else None
    warm_start = pretrained_variables(f, data_format)
    log_to_file(f.log_dir, plan.log_name)
    tf.logging.info('%s; %s', plan.role, distribute.describe_devices(plan, f.batch_size))
    if plan.trains and record_shard:
        tf.logging.info('fewer shard files (%d) than workers (%d): split by record -- '
                        'worker %d reads every file and takes records %d, %d + %d, ... of '
                        'their interleave', len(files), plan.worker_num, plan.worker_id,
                        plan.worker_id, plan.worker_id, plan.worker_num)
    if plan.trains:
        # Every name: the log shows which files each worker read.
        tf.logging.info('worker %d/%d reads %d shard files: %s', plan.worker_id,
                        plan.worker_num, len(files),
                        ', '.join(os.path.basename(p) for p in files))
    if plan.evaluates:
        tf.logging.info('evaluator: every new checkpoint of %s (at most one each %d s) on %s '
                        'of the %d val shard files, until global step %s', f.model_dir,
                        f.eval_throttle_secs, '%d batches' % f.test_iter if f.test_iter
                        else 'all', len(val_files), f.max_iter if f.max_iter > 0 else
                        'infinity (never stops)')
    tf.logging.info('data_format %s, ResNet-%d, %d classes, batch %d, image %d',
                    data_format, f.resnet_size, f.class_num, f.batch_size, f.image_size)
    tf.logging.info('augmentation on %s, dtype %s, XLA %s%s',
                    performance_args(f)['augment_on'], f.dtype, 'on' if f.xla else 'off',
                    ', synthetic data (no file is read)' if f.use_synthetic_data else '')
    if f.lr_decay_step == 0:
        tf.logging.info('lr_decay_step = 0: no learning-rate decay (lr stays %g after '
                        'warm-up)', f.lr)
    check_checkpoint_head(latest_checkpoint(f.model_dir), f.class_num)
    warm_start = log_fine_tuning(f, warm_start)
    estimator = make_estimator(f, data_format, warm_start, plan)
    tracker = StepTracker()
    hooks = [tracker, distribute.ThroughputHook(plan, f.log_interval)]
    gate = TestGateHook.from_environment()
    if gate:
        hooks.append(gate)
    if plan.distribution == 'ps' and f.max_iter > 0:
        hooks.append(distribute.StopAtGlobalStepHook(f.max_iter))
    if estimator.params['legacy_counters']:
        tf.logging.info('%s holds a checkpoint of the original program: its loss counters '
                        'are read and written as %s', f.model_dir,
                        ' and '.join(sorted(LEGACY_COUNTER_NAMES.values())))
    tf.logging.info('training to global step %s; checkpoints and TensorBoard events in %s',
                    f.max_iter if f.max_iter > 0 else 'infinity', f.model_dir)
    try:
        if plan.distribution in ('ps', 'collective'):
            # Runs a ps task's server until the launcher stops it; trains on the others.
            tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(
                training_input_fn(f, files, record_shard),
                max_steps=training_steps(f), hooks=hooks),
                cluster_eval_spec(f, val_files))
        elif f.mode == 'train_and_eval':
            step = estimator_step(f.model_dir)
            last = f.max_iter if f.max_iter > 0 else float('inf')
            while step < last:
                step = min(last, (step // f.test_interval + 1) * f.test_interval)
                train_on(estimator, f, files, hooks, step, record_shard)
                evaluate(f, estimator, files=val_files)
        else:
            train_on(estimator, f, files, hooks, training_steps(f), record_shard)
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


def pretrained_variables(f, data_format):
    """Checks --pretrain_ckpt against the model; (checkpoint, names to warm-start) or None."""
    if not f.pretrain_ckpt:
        return None
    checkpoint = resolve_checkpoint(f.pretrain_ckpt, 'pretrain_ckpt')
    return checkpoint, warm_start_names(checkpoint, model_variable_shapes(f, data_format),
                                        f.resnet_size)


def log_fine_tuning(f, warm_start):
    """Says what --pretrain_ckpt / --FixBlock2 do in this run; returns warm_start or None
    when model_dir's own checkpoint takes precedence (a restart)."""
    if f.FixBlock2:
        tf.logging.info('FixBlock2: init and stages 0-1 are frozen (not trained, batch norm '
                        'in inference mode)%s', '' if f.pretrain_ckpt else
                        ' -- without --pretrain_ckpt they keep their random initialisation')
    if not warm_start:
        return None
    if latest_checkpoint(f.model_dir):
        tf.logging.info('--pretrain_ckpt is not used: %s already holds a checkpoint, training '
                        'resumes from it', f.model_dir)
        return None
    checkpoint, names = warm_start
    head = dict(tf.train.list_variables(checkpoint)).get('logits/dense/bias')
    tf.logging.info('fine-tuning from %s: %d variables restored (%d batch-norm moving '
                    'statistics); new head of %d classes%s', checkpoint, len(names),
                    sum('moving_' in n for n in names), f.class_num,
                    ' (the checkpoint\'s has %d)' % head[0] if head else '')
    return warm_start


def estimator_step(model_dir):
    """The global step of the latest checkpoint in model_dir, 0 without one."""
    path = latest_checkpoint(model_dir)
    return int(tf.train.load_checkpoint(path).get_tensor('global_step')) if path else 0


def cluster_eval_spec(f, val_files):
    """The EvalSpec an evaluator task follows: every new checkpoint of --model_dir, at most
    one each --eval_throttle_secs, on --test_iter batches of val (0 = all); it stops after
    the checkpoint of global step --max_iter."""
    return tf.estimator.EvalSpec(eval_input_fn(f, val_files),
                                 steps=evaluation_batches(f),
                                 start_delay_secs=0, throttle_secs=f.eval_throttle_secs)


def training_input_fn(f, files, record_shard=None):
    """The training input_fn; under a strategy it is called once per worker and every
    replica takes its own batch of --batch_size from it."""
    return lambda: input_fn(
        True, f.data_dir, f.batch_size, f.class_num, f.image_size,
        file_pattern=f.file_pattern, file_shuffle_buffer=f.file_shuffle_buffer,
        shuffle_buffer=f.shuffle_buffer, num_parallel_calls=f.num_preprocess_threads,
        files=files, skip_bad_records=f.skip_bad_records,
        object_cover=f.object_cover, area_cover=f.area_cover, label_type=f.label_type,
        record_shard=record_shard, **performance_args(f))


def train_on(estimator, f, files, hooks, max_steps, record_shard=None):
    estimator.train(input_fn=training_input_fn(f, files, record_shard),
                    max_steps=max_steps, hooks=hooks)


# ---------------------------------------------------------------------------- predict and export

# Run as a script, this file is the module __main__, while serving.py (and demo.py) import it
# as `train`; without this alias they would load a second copy, whose UsageError main()
# would not catch.
if __name__ == '__main__':
    sys.modules.setdefault('train', sys.modules[__name__])


def check_inference_flags(f):
    """The flags of --mode=predict and --mode=export, and --export_dir; raises UsageError."""
    if f.mode == 'predict' and not f.piclist:
        raise UsageError('--mode=predict needs --piclist (an image list file or a directory)')
    if f.mode == 'export' and not f.export_dir:
        raise UsageError('--mode=export needs --export_dir')
    if f.export_dir and f.mode not in ('train', 'train_and_eval', 'export'):
        raise UsageError('--export_dir goes with --mode=export, train or train_and_eval, not '
                         '--mode=%s' % f.mode)
    if f.top_k <= 0:
        raise UsageError('--top_k must be positive, got %d' % f.top_k)
    if not 0.0 <= f.threshold <= 1.0:
        raise UsageError('--threshold must be in [0, 1], got %g' % f.threshold)
    if f.export_dir:
        import serving
        serving.check_export_dir(f.export_dir)


def inference_checkpoint(f):
    """--checkpoint_path, else the latest checkpoint in --model_dir."""
    if f.checkpoint_path:
        return resolve_checkpoint(f.checkpoint_path, 'checkpoint_path')
    return resolve_checkpoint(f.model_dir, 'model_dir')


def predict(f):
    """--mode=predict: tools/predict.py's TSV for the images of --piclist, on stdout."""
    import serving
    validate_flags(f)
    data_format = resolve_data_format(f.data_format, gpu_visible())
    images = serving.collect_images(list_file=f.piclist)
    predictor = serving.load_predictor(
        checkpoint=inference_checkpoint(f), image_size=f.image_size,
        resnet_size=f.resnet_size, class_num=f.class_num, top_k=f.top_k,
        params=model_params(f, data_format))
    try:
        names = (serving.load_class_names(f.class_dict, predictor.class_num)
                 if f.class_dict else None)
        processed, skipped = serving.run_predict(
            predictor, images, None, 'tsv', f.batch_size, f.top_k, f.threshold, names,
            PROGRAM)
    finally:
        predictor.close()
    if not processed:
        raise TrainingError('no image of --piclist=%s could be processed (%d skipped)'
                            % (f.piclist, skipped))
    tf.logging.info('%d images classified with %s, %d skipped', processed, predictor.source,
                    skipped)


def export(f, checkpoint_path=None):
    """--mode=export, or --export_dir after training: serving.py's SavedModel of the
    checkpoint (default: --checkpoint_path, else the latest in --model_dir)."""
    import serving
    validate_flags(f)
    checkpoint_path = checkpoint_path or inference_checkpoint(f)
    serving.checkpoint_model(checkpoint_path, f.resnet_size, f.class_num)
    # NHWC runs on CPUs and GPUs alike; the variables do not depend on the layout.
    params = model_params(f, 'channels_last')
    path = serving.export_saved_model(checkpoint_path, f.export_dir, params, f.image_size,
                                      f.top_k)
    tf.logging.info('exported %s as the SavedModel %s (signature %s: %s -> %s)',
                    checkpoint_path, path, serving.SIGNATURE_KEY, serving.INPUT_KEY,
                    ', '.join(serving.OUTPUT_KEYS))
    return path


def main(argv):
    del argv
    try:
        if FLAGS.demo:
            import demo
            demo.run(FLAGS)
            if FLAGS.export_dir:
                export(FLAGS, latest_checkpoint(FLAGS.model_dir))
        elif FLAGS.mode == 'eval':
            evaluate(FLAGS)
        elif FLAGS.mode == 'predict':
            predict(FLAGS)
        elif FLAGS.mode == 'export':
            export(FLAGS)
        else:
            train(FLAGS)
            if FLAGS.export_dir:
                export(FLAGS, latest_checkpoint(FLAGS.model_dir))
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
