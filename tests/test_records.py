"""Tests of records.py: the feature spec, both label layouts and their errors."""
import numpy as np
import tensorflow.compat.v1 as tf

from mlimages.data import input_pipeline
from mlimages.data import records as records_lib
from helpers import encode_pixels as encode, settings, smooth_pixels

tf.disable_v2_behavior()

CLASSES = 7


def test_features_mirror_train_record_features():
    kinds = {tf.string: 'bytes_list', tf.int64: 'int64_list'}
    assert list(records_lib.FEATURES) == list(records_lib.RECORD_FEATURES)
    for key, spec in records_lib.RECORD_FEATURES.items():
        kind, default = records_lib.FEATURES[key]
        assert kind == kinds[spec.dtype] and spec.shape == []
        assert default == spec.default_value


def sparse_and_dense_records(label):
    data = encode(smooth_pixels(30, 40))
    return (records_lib.make_example(data, label, 40, 30, 'a.jpg').SerializeToString(),
            records_lib.make_example(data, label, 40, 30, 'a.jpg',
                                        label_layout='sparse').SerializeToString())


def parse_labels(records, class_num=CLASSES):
    with tf.Graph().as_default():
        value = tf.placeholder(tf.string, [])
        crop = settings().data  # an evaluation crop: the training crop's settings are not used
        _, label = input_pipeline.parse_record(value, False, 16, class_num, crop.object_cover,
                                            crop.area_cover, 'multi', 'cpu')
        with tf.Session() as sess:
            out = []
            for record in records:
                try:
                    out.append(sess.run(label, {value: record}))
                except tf.errors.InvalidArgumentError as e:
                    out.append(e.message)
            return out


def test_sparse_and_dense_layouts_give_the_same_label():
    label = np.array([0, 1, 0, 0.7, -1, 0, 0.25], np.float32)
    dense, sparse = sparse_and_dense_records(label)
    example = tf.train.Example.FromString(sparse).features.feature
    assert 'label' not in example
    assert list(example['label/index'].int64_list.value) == [1, 3, 4, 6]
    assert len(sparse) < len(dense) + 40
    got_dense, got_sparse = parse_labels([dense, sparse])
    np.testing.assert_array_equal(got_dense, label)
    np.testing.assert_array_equal(got_sparse, label)


def test_sparse_label_errors_and_the_unlabelled_image():
    data = encode(smooth_pixels(30, 40))
    unlabelled = records_lib.make_sparse_example(data, [], [], 40, 30, 'u').SerializeToString()
    out_of_range = records_lib.make_sparse_example(data, [CLASSES], [1.0], 40, 30, 'x')
    no_label = tf.train.Example.FromString(unlabelled)
    del no_label.features.feature['label/index']
    del no_label.features.feature['label/value']
    short = records_lib.make_example(data, np.ones(CLASSES - 1), 40, 30, 's')
    both = tf.train.Example.FromString(
        records_lib.make_example(data, np.eye(CLASSES)[1], 40, 30, 'b').SerializeToString())
    both.MergeFrom(records_lib.make_sparse_example(data, [2], [1.0], 40, 30, 'b'))
    got = parse_labels([unlabelled, out_of_range.SerializeToString(),
                        no_label.SerializeToString(), short.SerializeToString(),
                        both.SerializeToString()])
    np.testing.assert_array_equal(got[0], np.zeros(CLASSES))
    assert 'outside [0, --class_num=%d)' % CLASSES in got[1]
    assert 'has no label' in got[2]
    assert 'label length differs from --class_num=%d' % CLASSES in got[3]
    np.testing.assert_array_equal(got[4], np.eye(CLASSES)[1])  # the dense layout wins
