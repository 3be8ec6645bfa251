"""The one record format: a serialized tf.train.Example per image (the original's
tools/tfrecord.py writes it and its train.py reads it; see docs/original.md).

    image         bytes   the encoded image (JPEG in the original)
    label         bytes   class_num little-endian float32 confidences (1 positive, 0
                          negative, -1 ignore)
    width/height  int64   the image size (optional, default 0)
    name          bytes   the image's name (optional, default '')

This program also reads a compact label layout in place of `label`: label/index (int64
list, the classes with a non-zero confidence) and label/value (float list, their
confidences); an image without labels stores one explicit 0 entry. Single-label records
(--label_type=single, e.g. ImageNet's) hold `label` as one int64 class index.

Here: the feature spec, parsing a record into (image, label) for the input pipeline, the
label in every layout (TensorFlow and numpy), reading a shard's first label, and building
an Example.
"""
import collections

import numpy as np
import tensorflow.compat.v1 as tf

import file_db
from mlimages import errors

# Feature name -> (proto kind, value training falls back to, or None when required).
FEATURES = collections.OrderedDict([
    ('image', ('bytes_list', None)),
    ('label', ('bytes_list', None)),
    ('width', ('int64_list', 0)),
    ('height', ('int64_list', 0)),
    ('name', ('bytes_list', '')),
])
LABEL_INDEX, LABEL_VALUE = 'label/index', 'label/value'
LABEL_LAYOUTS = ('dense', 'sparse')

_DTYPES = {'bytes_list': tf.string, 'int64_list': tf.int64}
RECORD_FEATURES = {
    name: tf.FixedLenFeature([], _DTYPES[kind]) if default is None else
    tf.FixedLenFeature([], _DTYPES[kind], default_value=default)
    for name, (kind, default) in FEATURES.items()}
# The compact label layout, read side by side with the dense `label` bytes.
SPARSE_LABEL_FEATURES = {
    LABEL_INDEX: tf.VarLenFeature(tf.int64),
    LABEL_VALUE: tf.VarLenFeature(tf.float32),
}
# What parse_example parses: either layout (dense `label` wins when both are present).
PARSE_FEATURES = dict(RECORD_FEATURES, label=tf.FixedLenFeature([], tf.string,
                                                                   default_value=''),
                      **SPARSE_LABEL_FEATURES)


# ---------------------------------------------------------------------------- parsing

def record_label(parsed, class_num):
    """The [class_num] label of a record parsed with PARSE_FEATURES, in either layout: the
    dense `label` bytes when present, else label/index + label/value (n > 0 entries, the
    same number of each, every index in [0, class_num)); anything else is an error.

    Both layouts are computed (the absent one is empty) instead of a tf.cond, which costs
    more CPU a record in a tf.data function (see docs/performance.md).
    """
    dense = tf.io.decode_raw(parsed['label'], tf.float32, little_endian=True)
    index, value = parsed[LABEL_INDEX].values, parsed[LABEL_VALUE].values
    dense_size, sparse_size = tf.size(dense), tf.size(index)
    is_dense = dense_size > 0
    checks = [
        tf.debugging.Assert(
            tf.logical_or(tf.logical_not(is_dense), tf.equal(dense_size, class_num)),
            ['record label length differs from --class_num=%d' % class_num]),
        tf.debugging.Assert(
            tf.logical_or(is_dense, sparse_size > 0),
            ['record has no label (neither "label" nor "%s"/"%s")'
             % (LABEL_INDEX, LABEL_VALUE)]),
        tf.debugging.Assert(
            tf.logical_or(is_dense, tf.equal(sparse_size, tf.size(value))),
            ['record %s and %s differ in length' % (LABEL_INDEX, LABEL_VALUE)]),
        tf.debugging.Assert(
            tf.logical_or(is_dense, tf.reduce_all(
                tf.logical_and(index >= 0, index < class_num))),
            ['record %s outside [0, --class_num=%d)' % (LABEL_INDEX, class_num)]),
    ]
    with tf.control_dependencies(checks):
        sparse = tf.tensor_scatter_nd_update(tf.zeros([class_num], tf.float32),
                                             index[:, tf.newaxis], value)
        sparse *= 1.0 - tf.cast(is_dense, tf.float32)  # both present: the dense one wins
        label = tf.pad(dense, [[0, class_num - dense_size]]) + sparse
    label.set_shape([class_num])
    return label


def class_index_label(index, class_num):
    """An int64 class index (single-label records, e.g. ImageNet's) -> one-hot [class_num]."""
    check = tf.debugging.assert_less(
        tf.cast(index, tf.int64), tf.constant(class_num, tf.int64),
        message='record label index is >= --class_num=%d' % class_num)
    check_low = tf.debugging.assert_non_negative(index, message='negative record label')
    with tf.control_dependencies([check, check_low]):
        return tf.one_hot(index, class_num, dtype=tf.float32)


def parse_fields(value, names):
    """{name: tensor} of the named fields of the dense schema (RECORD_FEATURES) of one
    serialized record, for code that needs only those (the benchmark's pipelines)."""
    return tf.parse_single_example(value, {name: RECORD_FEATURES[name] for name in names})


def parse_example(value, class_num, label_type):
    """A serialized tf.train.Example -> (the encoded image, label [class_num]).

    label_type 'multi': the label is class_num float32 in either layout; 'single': `label`
    is an int64 class index, returned one-hot so that both kinds have shape [class_num].
    """
    if label_type == 'single':
        features = dict(RECORD_FEATURES, label=tf.FixedLenFeature([], tf.int64))
    else:
        features = PARSE_FEATURES
    parsed = tf.parse_single_example(value, features)
    if label_type == 'single':
        return parsed['image'], class_index_label(parsed['label'], class_num)
    return parsed['image'], record_label(parsed, class_num)


# ---------------------------------------------------------------------------- numpy side

def sparse_entries(feature_map):
    """(label/index values, label/value values) of an Example's feature map, or None when
    the record does not use the compact layout (it has `label`, or no label/index)."""
    if 'label' in feature_map or LABEL_INDEX not in feature_map:
        return None
    index = feature_map[LABEL_INDEX].int64_list.value
    value = feature_map[LABEL_VALUE].float_list.value if LABEL_VALUE in feature_map else []
    return index, value


def dense_label(index, value, class_num):
    """label/index + label/value -> class_num float32 ('<f4'); the entries must be valid."""
    dense = np.zeros(class_num, '<f4')
    dense[np.asarray(index, np.int64)] = np.asarray(value, np.float32)
    return dense


def first_label_length(path, label_type='multi'):
    """Number of float32 labels in the first record of a shard (label_type 'single': its
    int64 class index + 1, the fewest classes it fits); None for an empty shard."""
    try:
        for record in tf.io.tf_record_iterator(path):
            example = tf.train.Example.FromString(record)
            feature = example.features.feature
            if label_type == 'single':
                if 'label' not in feature or len(feature['label'].int64_list.value) != 1:
                    raise errors.DataError('%s: first record has no int64 feature "label" '
                                            '(--label_type=single)' % path)
                return feature['label'].int64_list.value[0] + 1
            if sparse_entries(feature) is not None:
                return None  # sparse layout: each index is checked in training
            if 'label' not in feature or not feature['label'].bytes_list.value:
                raise errors.DataError('%s: first record has no bytes feature "label"%s' % (
                    path, ' (an int64 class index: use --label_type=single)'
                    if 'label' in feature and feature['label'].int64_list.value else ''))
            return len(feature['label'].bytes_list.value[0]) / 4.0
    except tf.errors.DataLossError as e:
        raise errors.DataError('%s: corrupt TFRecord file (%s)' % (path, e.message))
    except Exception as e:  # a record that is not an Example
        if isinstance(e, errors.DataError):
            raise
        raise errors.DataError('%s: first record is not a tf.train.Example (%s)' % (path, e))
    return None


def check_label_length(files, class_num, label_type='multi'):
    """Every shard's first record must carry class_num labels (a class index < class_num)."""
    for path in files:
        found = first_label_length(path, label_type)
        if label_type == 'single':
            if found is not None and not 0 < found <= class_num:
                raise errors.DataError('%s: first record has class index %d, expected one in '
                                        '[0, --class_num=%d)' % (path, found - 1, class_num))
            continue
        if found is not None and found != class_num:
            raise errors.DataError(
                '%s: label has %s classes, expected --class_num=%d'
                % (path, int(found) if found == int(found) else found, class_num))


def check_not_empty(files, split_dir):
    """A split none of whose shard files holds a record is a DataError naming it (counted by
    records.txt when it lists them all, else by reading up to one record of each)."""
    total = file_db.record_count(files)
    if total is None:
        total = sum(1 for path in files if _has_a_record(path))
    if not total:
        raise errors.DataError('the split %s holds no record (%d shard file%s, all empty): '
                                'build it again with tools/make_tfrecords.py' % (
                                    split_dir, len(files), '' if len(files) == 1 else 's'))


def _has_a_record(path):
    try:
        return next(iter(tf.io.tf_record_iterator(path)), None) is not None
    except tf.errors.OpError:
        return True  # unreadable, not empty: training names it


# ---------------------------------------------------------------------------- writing

def make_example(jpeg_bytes, label, width, height, name, label_layout='dense'):
    """The tf.train.Example of one image (features image, label, width, height, name).

    `label` is anything numpy turns into a 1-D float array; it is stored as
    little-endian float32 bytes (label_layout 'dense') or as label/index + label/value
    (label_layout 'sparse'). `name` may be str (stored as UTF-8) or bytes.
    """
    label = np.asarray(label, dtype='<f4')
    if label.ndim != 1:
        raise ValueError('label must be 1-D, got shape %s' % (label.shape,))
    if label_layout == 'sparse':
        index = np.flatnonzero(label)
        return make_sparse_example(jpeg_bytes, index, label[index], width, height, name)
    if label_layout != 'dense':
        raise ValueError('label_layout must be one of %s, got %r'
                         % ('/'.join(LABEL_LAYOUTS), label_layout))
    return _example(jpeg_bytes, width, height, name, label=label.tobytes())


def make_sparse_example(jpeg_bytes, index, value, width, height, name):
    """make_example with the label as label/index (int64) + label/value (float), the
    classes with a non-zero confidence; no entry at all is stored as 0 -> 0.0."""
    index = np.asarray(index, dtype=np.int64).reshape(-1)
    value = np.asarray(value, dtype=np.float32).reshape(-1)
    if index.shape != value.shape:
        raise ValueError('label index and value differ in length: %d and %d'
                         % (index.size, value.size))
    if not index.size:
        index, value = np.zeros(1, np.int64), np.zeros(1, np.float32)
    order = np.argsort(index, kind='stable')
    return _example(jpeg_bytes, width, height, name, index=index[order],
                    value=value[order])


def make_class_index_example(jpeg_bytes, class_index, width, height, name):
    """The single-label record (--label_type=single, ImageNet's): `label` is one int64
    class index; image, width, height and name as make_example."""
    return _example(jpeg_bytes, width, height, name, class_index=class_index)


def _example(jpeg_bytes, width, height, name, label=None, index=None, value=None,
             class_index=None):
    if isinstance(name, str):
        name = name.encode('utf-8')

    def _bytes(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(value)]))

    def _int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))

    feature = {
        'image': _bytes(jpeg_bytes),
        'width': _int64(width),
        'height': _int64(height),
        'name': _bytes(name),
    }
    if class_index is not None:
        feature['label'] = _int64(class_index)
    elif label is not None:
        feature['label'] = _bytes(label)
    else:
        feature[LABEL_INDEX] = tf.train.Feature(
            int64_list=tf.train.Int64List(value=[int(i) for i in index]))
        feature[LABEL_VALUE] = tf.train.Feature(
            float_list=tf.train.FloatList(value=[float(v) for v in value]))
    return tf.train.Example(features=tf.train.Features(feature=feature))
