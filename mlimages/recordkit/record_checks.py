"""Checks of one serialized record, the way train.py would consume it (docs/original.md,
Records); check_tfrecords.py runs them over whole shards (see shard_checks.py).

* the record must be a serialized tf.train.Example. Feature names must be valid UTF-8
  (as the proto says); TensorFlow's own parser is laxer there, so this check is stricter
  than training in that one respect.
* features: `image` and `label` (or label/index + label/value) must be present; `width`,
  `height` and `name` have defaults in training, so their absence is a warning. Any of
  the five present with the wrong type or with other than exactly one value makes
  training's parse fail: bad.
* image: decoded with TensorFlow's decode_image(channels=3, expand_animations=False) --
  the decoder training uses -- so an image that decodes here decodes in training.
  Width/height features that disagree with the decoded size are a warning.
* label: little-endian float32 bytes, exactly class_num of them; every value finite and
  in [-1, 1]. Values in (-1, 0) are a warning (only -1 has a meaning: "ignore"). With
  label_type 'single' (ImageNet's records, --label_type=single) one int64 class index in
  [0, class_num) instead.
"""
import collections

import numpy as np

from mlimages.errors import op_error_text
from mlimages.cli import lazy_tensorflow

MAX_LISTED_VALUES = 5       # offending label entries quoted in one reason

# Reason prefixes, stable for scripts that grep the report.
NOT_EXAMPLE = 'not an Example'
MISSING_FEATURE = 'missing feature'
BAD_FEATURE = 'bad feature'
BAD_IMAGE = 'undecodable image'
LABEL_LENGTH = 'label length'
LABEL_VALUES = 'label values'
CORRUPT_FILE = 'corrupt file'
UNREADABLE_FILE = 'unreadable file'
CHECKER_CRASH = 'checker crashed'
# Warning prefixes.
EMPTY_SHARD = 'empty shard'
MISSING_OPTIONAL = 'missing optional feature'
SIZE_MISMATCH = 'size mismatch'
LABEL_NEGATIVE = 'label values in (-1, 0)'

CheckResult = collections.namedtuple('CheckResult',
                                     'ok reasons warnings label name positives')
CheckResult.__doc__ = """One record's verdict.

ok: no reasons. reasons: what makes the record bad (strings "<kind>: <detail>").
warnings: what is odd but trains (same form). label: the float32 label vector when it is
valid (right length, finite, in [-1, 1]), else None. name: the `name` feature as text
(undecodable bytes escaped), or None. positives: how many label values are >= mask_thres
(None without a valid label).
"""


# --------------------------------------------------------------------------- decoder

class _TFDecoder(object):
    """bytes -> uint8 [H, W, 3] through TensorFlow's decode_image in a private graph."""

    def __init__(self):
        tf = lazy_tensorflow.tensorflow()
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._encoded = tf.placeholder(tf.string, [], name='encoded')
            image = tf.image.decode_image(self._encoded, channels=3,
                                          expand_animations=False)
        # Workers are processes already; more threads per session would only compete.
        config = tf.ConfigProto(intra_op_parallelism_threads=1,
                                inter_op_parallelism_threads=1, device_count={'GPU': 0})
        self._session = tf.Session(graph=self._graph, config=config)
        self._decode = self._session.make_callable(image, [self._encoded])

    def __call__(self, encoded):
        """Decoded uint8 array; raises tf.errors.OpError when TensorFlow cannot decode."""
        return self._decode(encoded)

    def close(self):
        self._session.close()


def make_tf_decoder():
    """A callable bytes -> uint8 [H, W, 3] array backed by one graph and one Session.

    It runs tf.image.decode_image(channels=3, expand_animations=False), the decoder
    training uses, and raises tf.errors.OpError for bytes it cannot decode. Build one per
    process and reuse it: building a graph and session per image is slow.
    """
    return _TFDecoder()


_default_decoder = None


def process_decoder():
    global _default_decoder
    if _default_decoder is None:
        _default_decoder = make_tf_decoder()
    return _default_decoder


# ---------------------------------------------------------------------------- record

def _describe_values(values, indices):
    shown = ', '.join('class %d = %r' % (i, float(values[i]))
                      for i in indices[:MAX_LISTED_VALUES])
    more = len(indices) - MAX_LISTED_VALUES
    return shown + (' and %d more' % more if more > 0 else '')


def _check_label(raw, class_num, reasons, warnings):
    """The label vector, or None after appending to reasons."""
    expected = class_num * 4
    if len(raw) % 4:
        reasons.append('%s: %d bytes, not a multiple of 4 (float32); expected %d bytes '
                       '(class_num %d)' % (LABEL_LENGTH, len(raw), expected, class_num))
        return None
    if len(raw) != expected:
        reasons.append('%s: %d values, expected class_num=%d'
                       % (LABEL_LENGTH, len(raw) // 4, class_num))
        return None
    label = np.frombuffer(raw, dtype='<f4').astype(np.float32)
    with np.errstate(invalid='ignore'):
        finite = np.isfinite(label)
        outside = finite & ((label < -1.0) | (label > 1.0))
        negative = finite & (label > -1.0) & (label < 0.0)
    bad = False
    if not finite.all():
        reasons.append('%s: NaN/Inf at %s' % (LABEL_VALUES,
                                             _describe_values(label, np.flatnonzero(~finite))))
        bad = True
    if outside.any():
        reasons.append('%s: outside [-1, 1] at %s'
                       % (LABEL_VALUES, _describe_values(label, np.flatnonzero(outside))))
        bad = True
    if bad:
        return None
    if negative.any():
        warnings.append('%s: %s (only -1 means "ignore")'
                        % (LABEL_NEGATIVE, _describe_values(label, np.flatnonzero(negative))))
    return label


def _sparse_label_bytes(sparse, class_num, reasons):
    """label/index + label/value (records.sparse_entries) as the dense label's bytes, or
    None after a reason."""
    index, value = sparse
    if not len(index) or len(index) != len(value):
        reasons.append('%s: label/index has %d values, label/value %d (equal and > 0 '
                       'expected)' % (BAD_FEATURE, len(index), len(value)))
        return None
    index = np.asarray(index, np.int64)
    outside = index[(index < 0) | (index >= class_num)]
    if outside.size:
        reasons.append('%s: label/index %d outside [0, class_num=%d)'
                       % (LABEL_LENGTH, outside[0], class_num))
        return None
    lazy_tensorflow.tensorflow()
    from mlimages.data import records
    return records.dense_label(index, value, class_num).tobytes()


def check_record(serialized, class_num, decoder=None, mask_thres=0.7, label_type='multi'):
    """Check one serialized record; never raises for bad data.

    serialized: the record's bytes. class_num: the expected label length.
    decoder: a callable bytes -> decoded uint8 [H, W, 3] array that raises for bytes it
      cannot decode (see make_tf_decoder); None uses this process's TensorFlow decoder,
      built on first use.
    mask_thres: what counts as a positive in CheckResult.positives; the verdict does
      not depend on it.
    label_type: 'multi' (class_num float32 labels, either layout) or 'single' (`label`
      one int64 class index in [0, class_num), --label_type=single; CheckResult.label is
      then its one-hot vector).

    Returns a CheckResult(ok, reasons, warnings, label, name, positives); see its
    docstring.
    """
    tf = lazy_tensorflow.tensorflow()
    from mlimages.data import records
    reasons, warnings = [], []
    example = tf.train.Example()
    try:
        example.ParseFromString(bytes(serialized))
    except Exception as exc:  # DecodeError, or anything else the parser throws
        reason = '%s: cannot parse as tf.train.Example (%s)' % (
            NOT_EXAMPLE, str(exc) or type(exc).__name__)
        return CheckResult(False, [reason], [], None, None, None)

    feature_map = example.features.feature
    # The compact layout (make_tfrecords.py --label_layout sparse) instead of `label`.
    sparse = records.sparse_entries(feature_map) if label_type == 'multi' else None
    values = _feature_values(feature_map, records.FEATURES, label_type, sparse is not None,
                             reasons, warnings)
    name = None
    if 'name' in values:
        name = values['name'].decode('utf-8', 'backslashreplace')
    if sparse is not None:
        raw = _sparse_label_bytes(sparse, class_num, reasons)
        if raw is not None:
            values['label'] = raw
    label = _record_label(values, class_num, label_type, reasons, warnings)
    positives = None
    if label is not None:
        # float32 against float32, as training compares: a label of 0.7 is positive
        positives = int((label >= np.float32(mask_thres)).sum())
    if 'image' in values:
        _check_image(values, decoder if decoder is not None else process_decoder(),
                     reasons, warnings)
    return CheckResult(not reasons, reasons, warnings, label, name, positives)


def _feature_values(feature_map, features, label_type, sparse, reasons, warnings):
    """{key: its one value} of the features training reads (records.FEATURES: key ->
    (kind, default)); a missing, empty, mistyped or multi-valued one is a reason (a
    warning when it has a default) instead. sparse: the label is label/index +
    label/value, not `label`."""
    values = {}
    for key, (kind, default) in features.items():
        if key == 'label' and label_type == 'single':
            kind = 'int64_list'  # input_pipeline.parse_record(label_type='single')
        if key == 'label' and sparse:
            continue
        if key not in feature_map:
            if default is None:
                reasons.append('%s: %r' % (MISSING_FEATURE, key))
            else:
                warnings.append('%s: %r (training uses %r)' % (MISSING_OPTIONAL, key, default))
            continue
        feature = feature_map[key]
        found_kind = feature.WhichOneof('kind')
        if found_kind is None:
            # TensorFlow's parser treats a Feature with no list at all as absent.
            if default is None:
                reasons.append('%s: %r has no value list' % (MISSING_FEATURE, key))
            else:
                warnings.append('%s: %r has no value list (training uses %r)'
                                % (MISSING_OPTIONAL, key, default))
            continue
        if found_kind != kind:
            reasons.append('%s: %r is a %s, training reads a %s%s'
                           % (BAD_FEATURE, key, found_kind, kind,
                              _label_kind_hint(key, found_kind, kind)))
            continue
        items = getattr(feature, found_kind).value
        if len(items) != 1:
            reasons.append('%s: %r has %d values, training reads exactly 1'
                           % (BAD_FEATURE, key, len(items)))
            continue
        values[key] = items[0]
    return values


def _label_kind_hint(key, found_kind, kind):
    """' (... check with --label_type ...)' when `label` is of the other label type's kind."""
    if key == 'label' and found_kind == 'int64_list':
        return ' (a class index: check with --label_type single)'
    if key == 'label' and kind == 'int64_list':
        return ' (float labels: check with --label_type multi)'
    return ''


def _record_label(values, class_num, label_type, reasons, warnings):
    """The record's label as a float32 [class_num] vector (a class index one-hot), or None
    when it is missing or bad (the reason added)."""
    if 'label' not in values:
        return None
    if label_type != 'single':
        return _check_label(values['label'], class_num, reasons, warnings)
    index = values['label']
    if not 0 <= index < class_num:
        reasons.append('%s: class index %d outside [0, class_num=%d)'
                       % (LABEL_VALUES, index, class_num))
        return None
    label = np.zeros(class_num, np.float32)
    label[index] = 1.0
    return label


def _check_image(values, decoder, reasons, warnings):
    """Decode values['image'] with decoder: undecodable or not [H>0, W>0, 3] is a reason, a
    size other than the record's width x height a warning."""
    tf = lazy_tensorflow.tensorflow()
    try:
        image = np.asarray(decoder(values['image']))
    except tf.errors.OpError as exc:
        reasons.append('%s: %s' % (BAD_IMAGE, op_error_text(exc)))
        return
    except Exception as exc:  # a decoder must not turn bad data into a crash
        reasons.append('%s: %s: %s' % (BAD_IMAGE, type(exc).__name__, exc))
        return
    if image.ndim != 3 or image.shape[-1] != 3 or 0 in image.shape:
        reasons.append('%s: decoded to shape %s, expected [H>0, W>0, 3]'
                       % (BAD_IMAGE, list(image.shape)))
    elif 'width' in values and 'height' in values:
        height, width = image.shape[:2]
        if (values['width'], values['height']) != (width, height):
            warnings.append('%s: width x height %d x %d in the record, the image '
                            'decodes to %d x %d' % (SIZE_MISMATCH, values['width'],
                                                    values['height'], width, height))
