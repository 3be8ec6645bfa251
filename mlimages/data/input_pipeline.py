"""Batches of (images, labels) for the Estimator: input_fn over given shard files, with
bad-record handling, and synthetic batches made on the device.

Training: the files are shuffled, interleaved (8 at a time), the serialized records
shuffled, repeated forever, parsed (parse_record) and batched with full batches
only. Evaluation: every file once, in order, the last batch partial.
"""
import tensorflow.compat.v1 as tf

import image_preprocess
from mlimages.config.choices import AUGMENT_ON
from mlimages.data import records

SYNTHETIC = 'synthetic'


def resolve_augment_on(augment_on, has_gpu):
    """--augment_on: 'auto' -> 'device' with a GPU, 'cpu' without."""
    if augment_on == 'auto':
        return 'device' if has_gpu else 'cpu'
    return augment_on


# tf.data runs AutoGraph over a map's function unless told not to: converting this one
# and the 15 functions it calls took 1-1.5 s of every training process's start. They are
# graph code already (tf.cond; Python branches only on Python values).
@tf.autograph.experimental.do_not_convert
def parse_record(value, is_training, image_size, class_num, object_cover, area_cover,
                 label_type, augment_on, crop_seed=None):
    """A serialized tf.train.Example -> (image [S, S, 3] in [-1, 1], label [class_num]):
    records.parse_example, then image_preprocess.preprocess_encoded. augment_on 'cpu': the
    whole training augmentation here; 'device': the crop, resized and rounded to uint8
    [S, S, 3] -- flip, rotation, colour and the [-1, 1] map then run batched in the model
    (image_preprocess.network_input). crop_seed: the training crop's op seed (its op takes
    none from the graph)."""
    encoded, label = records.parse_example(value, class_num, label_type)
    image = image_preprocess.preprocess_encoded(
        encoded, image_size, is_training, object_cover, area_cover,
        on_device=augment_on == 'device', crop_seed=crop_seed)
    return image, label


def input_fn(data, model, is_training, files, crop_seed=None, record_shard=None):
    """Batches of (images, labels) of --batch_size (one replica's) from the shard `files`.

    data: the data group (flags.Data: batch_size, label_type, the shuffle buffers,
    num_preprocess_threads, the training crop's object_cover and area_cover,
    skip_bad_records, use_synthetic_data, private_threads, augment_on resolved to cpu or
    device); model: the model group (image_size, class_num). crop_seed: the training
    crop's op seed (--deterministic: --random_seed; TensorFlow's op determinism then
    orders everything), else None.
    Training reads the files in shuffled order, interleaves them, shuffles the records and
    repeats forever; evaluation reads every file once, in order.
    With skip_bad_records, records that fail to parse or decode are dropped and the features
    become {'image': images, 'skipped_records': bad records seen so far}.
    augment_on 'device' (train.py's choice with a GPU): uint8 images, cropped and resized
    only -- the flip, rotation, colour and the [-1, 1] map of the training augmentation run
    batched in the model, on the training device (image_preprocess.network_input, which
    model_fn.resnet_model_fn applies to every batch). 'cpu' (train.py's choice without a
    GPU): float32 images in [-1, 1], the whole augmentation here, per image.
    use_synthetic_data: no file is read; the model draws random batches on its device
    (synthetic_dataset).
    private_threads > 0: the pipeline's own thread pool of that size.
    record_shard (n, k), training: every file is read and this worker takes records k,
    k + n, ... of a deterministic interleave (file_db.data_share, fewer files than
    workers); the shuffles come after the split.
    """
    if data.augment_on not in AUGMENT_ON:
        raise ValueError('augment_on must be one of %s, got %r' % (AUGMENT_ON, data.augment_on))
    if data.use_synthetic_data:
        return synthetic_dataset(data.batch_size, model.image_size)
    parallel = (data.num_preprocess_threads if data.num_preprocess_threads > 0
                else tf.data.experimental.AUTOTUNE)
    dataset = serialized_records(files, is_training, data.file_shuffle_buffer,
                                 data.shuffle_buffer, record_shard)
    dataset = parsed_records(dataset, data, model, is_training, parallel, crop_seed)
    # Full batches in training keep shapes static; evaluation keeps the last partial one.
    dataset = dataset.batch(data.batch_size, drop_remainder=is_training)
    dataset = dataset.prefetch(tf.data.experimental.AUTOTUNE)
    if data.private_threads > 0:
        options = tf.data.Options()
        options.experimental_threading.private_threadpool_size = data.private_threads
        dataset = dataset.with_options(options)
    return dataset


def serialized_records(files, is_training, file_shuffle_buffer, shuffle_buffer,
                       record_shard=None):
    """The serialized records of `files`: training's shuffled, interleaved, shared out by
    record_shard, shuffled again and repeated; evaluation's every file once, in order."""
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if not is_training:
        return dataset.flat_map(tf.data.TFRecordDataset)
    # This worker's share is fixed (file_db.data_share); shuffling only reorders it. A
    # record-level share needs the same record order on every worker before the split.
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
    return dataset.shuffle(shuffle_buffer).repeat()


def parsed_records(serialized, data, model, is_training, parallel, crop_seed):
    """(image, label) of each serialized record (parse_record), the bad ones dropped and
    counted with --skip_bad_records (drop_bad_records)."""
    parse = lambda value: parse_record(
        value, is_training, model.image_size, model.class_num, data.object_cover,
        data.area_cover, data.label_type, data.augment_on, crop_seed)
    if data.skip_bad_records:
        return drop_bad_records(serialized, parse, model.image_size, model.class_num, parallel,
                                tf.uint8 if data.augment_on == 'device' else tf.float32)
    return serialized.map(parse, num_parallel_calls=parallel, deterministic=not is_training)


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


def drop_bad_records(serialized, parse, image_size, class_num, parallel,
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

    dataset = serialized.interleave(parse_or_placeholder, cycle_length=max(2, parallel),
                                    num_parallel_calls=parallel, deterministic=False)
    dataset = dataset.apply(tf.data.experimental.scan(tf.constant(0, tf.int64), count))
    dataset = dataset.filter(lambda image, label, ok, skipped: ok)
    return dataset.map(lambda image, label, ok, skipped:
                       ({'image': image, 'skipped_records': skipped}, label))
