"""Tests of input_pipeline.py: input_fn in both augmentation modes, bad-record skipping,
synthetic data (conftest's `shards`: 7 classes)."""
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import image_preprocess as ip
from mlimages.data import input_pipeline
from mlimages.data import records
from helpers import encode_pixels as encode, settings, smooth_pixels

tf.disable_v2_behavior()

CLASSES = 7


@pytest.mark.parametrize('augment_on', ['cpu', 'device'])
def test_training_input_fn_in_both_modes(shards, augment_on):
    with tf.Graph().as_default():
        given = settings(batch_size=4, class_num=CLASSES, image_size=24, shuffle_buffer=8,
                         private_threads=2, augment_on=augment_on)
        dataset = input_pipeline.input_fn(given.data, given.model, True, shards)
        images, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        assert images.shape.as_list() == [4, 24, 24, 3]
        assert images.dtype == (tf.uint8 if augment_on == 'device' else tf.float32)
        finished = ip.network_input(images, training=True)
        with tf.Session() as sess:
            batches = [sess.run([finished, labels]) for _ in range(6)]  # > one epoch
    for image, label in batches:
        assert -1.0 <= image.min() and image.max() <= 1.0
        assert label.shape == (4, CLASSES)


def test_cpu_pipeline_augments_every_training_batch(tmp_path):
    """input_fn with augment_on='cpu' augments every training image in the pipeline: with a
    crop that must be the whole image, an image comes out as it is (no flip, thread_id 2),
    flipped only, or otherwise changed (rotation, colour) -- all three within 64 draws."""
    pixels = smooth_pixels(32, 32, seed=3)
    path = str(tmp_path / 'one.tfrecords')
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(records.make_example(encode(pixels, 'PNG'), np.eye(CLASSES)[1],
                                                 32, 32, 'one.png').SerializeToString())
    with tf.Graph().as_default():
        given = settings(batch_size=8, class_num=CLASSES, image_size=32, shuffle_buffer=1,
                         object_cover=1.0, area_cover=1.0, augment_on='cpu')
        dataset = input_pipeline.input_fn(given.data, given.model, True, [path])
        images, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        assert images.dtype == tf.float32 and images.shape.as_list() == [8, 32, 32, 3]
        with tf.Session() as sess:
            batches = [sess.run([images, labels]) for _ in range(8)]
    base = pixels / 255.0 * 2.0 - 1.0
    kinds = []
    for batch, label in batches:
        assert np.all(label == np.eye(CLASSES)[1])
        for image in batch:
            assert -1.0 <= image.min() and image.max() <= 1.0
            kinds.append('same' if np.allclose(image, base, atol=1e-5) else
                         'flipped' if np.allclose(image, base[:, ::-1], atol=1e-5) else
                         'changed')
    assert {'same', 'flipped', 'changed'} == set(kinds), kinds


def test_skip_bad_records_in_device_mode(shards, tmp_path):
    bad = str(tmp_path / 'bad.tfrecords')
    with tf.io.TFRecordWriter(bad) as writer:
        writer.write(records.make_example(b'\xff\xd8\xff\xe0 no jpeg', np.ones(CLASSES),
                                                 1, 1, 'bad').SerializeToString())
    with tf.Graph().as_default():
        given = settings(batch_size=4, class_num=CLASSES, image_size=24, shuffle_buffer=16,
                         skip_bad_records=True, augment_on='device')
        dataset = input_pipeline.input_fn(given.data, given.model, True, shards + [bad])
        features, _ = tf.data.make_one_shot_iterator(dataset).get_next()
        assert features['image'].dtype == tf.uint8
        with tf.Session() as sess:
            skipped = [sess.run(features['skipped_records']).max() for _ in range(8)]
    assert max(skipped) >= 1


def test_synthetic_data_reads_no_file_and_the_model_draws_a_new_batch_each_step():
    with tf.Graph().as_default():
        given = settings(batch_size=3, class_num=CLASSES, image_size=16,
                         use_synthetic_data=True, augment_on='device')
        dataset = input_pipeline.input_fn(given.data, given.model, True, [])
        features, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        # only the shape crosses from the pipeline: no pixel, no label
        assert features[input_pipeline.SYNTHETIC].shape.as_list() == [3, 16, 16, 0]
        assert labels.shape.as_list() == [3, 0]
        images, labels = input_pipeline.synthetic_batch(features[input_pipeline.SYNTHETIC], CLASSES)
        assert images.shape.as_list() == [3, 16, 16, 3]
        with tf.Session() as sess:
            first, second = [sess.run([images, labels]) for _ in range(2)]
    assert first[0].shape == (3, 16, 16, 3) and first[1].shape == (3, CLASSES)
    assert -1.0 <= first[0].min() and first[0].max() <= 1.0
    assert set(np.unique(first[1])) <= {0.0, 1.0}
    assert not np.array_equal(first[0], second[0])


def test_augment_on_auto_follows_the_gpu():
    assert input_pipeline.resolve_augment_on('auto', True) == 'device'
    assert input_pipeline.resolve_augment_on('auto', False) == 'cpu'
    assert input_pipeline.resolve_augment_on('cpu', True) == 'cpu'
