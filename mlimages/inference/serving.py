"""Inference: the one graph that runs a trained model on images, as a SavedModel or in a
session, shared by train.py --mode predict/export (and --export_dir), tools/predict.py and
tools/extract_features.py, so that their numbers cannot drift apart:

    encoded image bytes [N] -> preprocessing (PREPROCESSING, chosen at build/export) in a
                               tf.data pipeline that drops an image that fails to decode
                               (decoded_batch: the M that decode and their places):
                                 original: image_preprocess.decode_uint8_like_opencv
                                   -> original_inference_image (the original's
                                   extract_feature.py / image_classification.py: shorter
                                   side 256 x S / 224 with OpenCV's bilinear, centre S x S)
                                 eval: decode_image -> eval_network_input
                                   (train.py's evaluation: central 80 %, squashed to S x S)
                            -> model_fn.make_model_fn(model_parts(...), Derived())(..., PREDICT)
                            -> scores (sigmoid), probabilities (softmax), features, back in
                               the request's N rows (zeros where an image failed), valid
                               [N], top_k_classes / top_k_scores (by sigmoid score; -1 and 0
                               where not valid), positives (scores >= each class's
                               threshold, and valid)

An export also has the float signature: network input [N, S, S, 3] (NHWC, RGB, [-1, 1])
-> scores, probabilities, features, the same network on the same (resource) variables.
export.py writes both as a SavedModel; `Predictor` runs the encoded one in a tf.Session,
restored from a checkpoint or loaded from a SavedModel (saved_models.py: its directory).
`predict_images` runs batches and reports and skips images that cannot be read or decoded;
batch_outputs.py writes the results. Errors in the input are errors.UsageError /
errors.DataError: one line, exit status 2 in the callers.
"""
import numpy as np
import tensorflow.compat.v1 as tf

import flags
from mlimages.run import checkpoints
from mlimages.distributed import devices
import image_preprocess
from mlimages.inference import inference_io
from mlimages.inference import saved_models
from mlimages.run import model_fn
import resnet
from mlimages.errors import UsageError, op_error_text
from mlimages.inference.inference_io import DEFAULT_THRESHOLD, DEFAULT_TOP_K

INPUT_KEY = 'images'
SIGNATURE_KEY = tf.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY
FLOAT_SIGNATURE_KEY = 'float_images'
SERVING_TAGS = [tf.saved_model.tag_constants.SERVING]
# serving_default's outputs: OUTPUT_KEYS (every export of this program has them) + NEW_KEYS.
OUTPUT_KEYS = ('scores', 'probabilities', 'top_k_classes', 'top_k_scores', 'features')
NEW_KEYS = ('positives', 'valid')
FLOAT_OUTPUT_KEYS = ('scores', 'probabilities', 'features')


# ---------------------------------------------------------------------------- the graph

# --preprocess of the inference programs: name -> what it does (the export log line and
# the SavedModel's assets.extra/preprocessing.txt say which one a model has).
PREPROCESSING = {
    'original': 'the original\'s inference preprocessing (extract_feature.py, '
                'image_classification.py): shorter side resized to 256 x S / 224 with '
                'OpenCV\'s bilinear, the centre S x S, [-1, 1]',
    'eval': 'train.py\'s evaluation crop: the central 80 % resized to S x S, [-1, 1]',
}
DEFAULT_PREPROCESS = 'original'


def check_preprocess(preprocess, flag='--preprocess'):
    if preprocess not in PREPROCESSING:
        raise UsageError('%s must be original or eval, got %r' % (flag, preprocess))


def preprocessing_line(preprocess, image_size):
    return 'preprocess=%s: %s (S = %d)' % (preprocess, PREPROCESSING[preprocess], image_size)


@tf.autograph.experimental.do_not_convert  # graph code: tf.data need not convert it
def network_input(encoded, image_size, preprocess=DEFAULT_PREPROCESS):
    """One encoded image (tf.string) -> its network input [S, S, 3] through
    PREPROCESSING[preprocess]."""
    check_preprocess(preprocess)
    if preprocess == 'original':
        return image_preprocess.original_inference_image(
            image_preprocess.decode_uint8_like_opencv(encoded), image_size)
    image = image_preprocess.decode_image(encoded)
    return image_preprocess.eval_network_input(image, image_size)


def decoded_batch(encoded, image_size, preprocess=DEFAULT_PREPROCESS):
    """Encoded images [N] -> (network input [M, S, S, 3] of the M that decode, their
    indices in the batch [M] int32, in order). A tf.data pipeline whose ignore_errors drops
    an image that fails (not an image, truncated): the request goes on without it."""
    count = tf.size(encoded)
    images = tf.data.Dataset.from_tensor_slices((tf.range(count), encoded))
    images = images.map(lambda i, data: (i, network_input(data, image_size, preprocess)),
                        num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    # All of them as one element (none when no image decodes); reduce gives the empty
    # batch then, where get_single_element would fail.
    images = images.batch(tf.cast(tf.maximum(count, 1), tf.int64))
    empty = (tf.zeros([0], tf.int32), tf.zeros([0, image_size, image_size, 3]))
    index, batch = images.reduce(empty, lambda got, new: (
        tf.concat([got[0], new[0]], 0), tf.concat([got[1], new[1]], 0)))
    batch.set_shape([None, image_size, image_size, 3])
    return batch, index


def request_outputs(predictions, index, count, top_k, thresholds):
    """The network's predictions of the M images that decoded (at `index` of the count
    images of the request) -> OUTPUT_KEYS + NEW_KEYS, one row per image of the request:
    valid false, zeros, top_k_classes -1 and no positive for an image that did not decode."""
    def rows(values):
        return tf.scatter_nd(index[:, None], values,
                             tf.concat([[count], tf.shape(values)[1:]], 0))
    valid = rows(tf.ones_like(index)) > 0
    scores = rows(predictions['scores'])
    class_num = tf.compat.dimension_value(predictions['scores'].shape[-1])
    top_scores, top_classes = tf.nn.top_k(scores, k=min(top_k, class_num))
    top_classes = tf.cast(top_classes, tf.int64)
    return {'scores': scores, 'probabilities': rows(predictions['probabilities']),
            'top_k_classes': tf.where(valid, top_classes, -tf.ones_like(top_classes)),
            'top_k_scores': top_scores, 'features': rows(predictions['features']),
            'positives': tf.logical_and(
                scores >= tf.constant(thresholds, tf.float32, name='class_thresholds'),
                valid[:, None]),
            'valid': valid}


def model_parts(model, data_format, finetune=None):
    """model_fn's Parts for the model group in data_format (and the fine-tuning group,
    whose FixBlock2 puts a stop-gradient into the graph; default: the flags' defaults):
    every other group at its defaults, none of which an inference graph reads."""
    defaults = flags.default_settings()
    return model_fn.parts(defaults.replace(model=model,
                                           finetune=finetune or defaults.finetune),
                          data_format)


def build_inference_graph(model, data_format, top_k=DEFAULT_TOP_K,
                          preprocess=DEFAULT_PREPROCESS, thresholds=None,
                          float_signature=False, finetune=None):
    """In the default graph, the network of the model group (flags.Model: resnet_size,
    class_num, image_size, the batch-norm settings, dtype; finetune: model_parts') in
    data_format, on resource variables (a TF2 client's tf.saved_model.load exposes them; a
    checkpoint restores them by name as any variable). Returns {signature key: (input
    placeholder, {output: tensor})}: SIGNATURE_KEY, the encoded images [N] ->
    request_outputs (thresholds [C] or one for every class, default DEFAULT_THRESHOLD);
    with float_signature also FLOAT_SIGNATURE_KEY, network inputs [N, S, S, 3] ->
    FLOAT_OUTPUT_KEYS, a second copy of the network on the same variables."""
    network = model_fn.make_model_fn(model_parts(model, data_format, finetune),
                                     model_fn.Derived())
    size = model.image_size
    thresholds = np.broadcast_to(
        np.float32(DEFAULT_THRESHOLD if thresholds is None else thresholds), [model.class_num])
    signatures = {}
    with tf.variable_scope(tf.get_variable_scope(), use_resource=True):
        if float_signature:
            signatures[FLOAT_SIGNATURE_KEY] = float_network(network, size)
        with tf.variable_scope(tf.get_variable_scope(), reuse=True if float_signature else None):
            encoded = tf.placeholder(tf.string, [None], name='encoded_images')
            images, index = decoded_batch(encoded, size, preprocess)
            decoded = tf.size(index)
            # The network on one blank image when none decoded: a convolution of an empty
            # batch fails on some CPU kernels.
            images = tf.pad(images, [[0, tf.maximum(1 - decoded, 0)], [0, 0], [0, 0], [0, 0]])
            predictions = network(images, None, tf.estimator.ModeKeys.PREDICT).predictions
            predictions = {key: value[:decoded] for key, value in predictions.items()}
            signatures[SIGNATURE_KEY] = (encoded, request_outputs(
                predictions, index, tf.size(encoded), top_k, thresholds))
    return signatures


def float_network(network, image_size):
    """(network inputs [N, S, S, 3] float32, {FLOAT_OUTPUT_KEYS: tensor}) of `network`
    (model_fn.make_model_fn's) in the default graph and variable scope."""
    images = tf.placeholder(tf.float32, [None, image_size, image_size, 3],
                            name='float_images')
    predictions = network(images, None, tf.estimator.ModeKeys.PREDICT).predictions
    return images, {key: predictions[key] for key in FLOAT_OUTPUT_KEYS}


def build_float_network(model, data_format, finetune=None):
    """float_network of the model group on resource variables, alone in the default graph
    (the OpenVINO engine's network: nothing to decode)."""
    network = model_fn.make_model_fn(model_parts(model, data_format, finetune),
                                     model_fn.Derived())
    with tf.variable_scope(tf.get_variable_scope(), use_resource=True):
        return float_network(network, model.image_size)


# ---------------------------------------------------------------------------- checkpoints

def restore(session, checkpoint_path):
    """Restores the model variables of the default graph from checkpoint_path."""
    try:
        tf.train.Saver(tf.global_variables()).restore(session, checkpoint_path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        raise UsageError('%s does not fit the model: %s'
                         % (checkpoint_path, op_error_text(e)))


# ---------------------------------------------------------------------------- prediction

class DecodeCheck(object):
    """Why one image does not decode, for a predictor whose `session` runs its decoding
    (serving's Predictor, the OpenVINO engine's); and closing that session."""

    def _add_decode_check(self):
        """Adds the decoding alone to the default graph: call inside the session's."""
        self._one = tf.placeholder(tf.string, [])
        self._decoded_shape = tf.shape(image_preprocess.decode_image(self._one))

    def decode_error(self, encoded_image):
        """Why encoded_image cannot be decoded, or None when it can."""
        try:
            self.session.run(self._decoded_shape, {self._one: encoded_image})
        except tf.errors.OpError as e:
            return op_error_text(e)
        return None

    def close(self):
        self.session.close()


class Predictor(DecodeCheck):
    """The inference graph in a session; `run(encoded_images)` -> {output: array [N, ...]}.

    Build it with `from_checkpoint` or `from_saved_model`; both give OUTPUT_KEYS, and
    NEW_KEYS unless the SavedModel was exported before them (then a batch with an image
    that does not decode fails as a whole, and predict_images runs the others again).
    """

    def __init__(self, session, encoded, outputs, source, preprocessing=None,
                 thresholds_file=None, checkpoint=None):
        self.session = session
        self.source = source
        self.checkpoint = checkpoint  # the checkpoint path, when restored from one
        # A SavedModel's assets.extra/thresholds.txt (exported with calibrated thresholds).
        self.thresholds_file = thresholds_file
        # preprocessing_line(...) of the model's preprocessing; None for a SavedModel
        # exported before it was recorded.
        self.preprocessing = preprocessing
        self._encoded = encoded
        self._outputs = outputs
        self.class_num = tf.compat.dimension_value(outputs['scores'].shape[-1])
        self.feature_dim = tf.compat.dimension_value(outputs['features'].shape[-1])
        with session.graph.as_default():
            # Decoding alone, to tell which image of a failed batch is undecodable.
            self._add_decode_check()

    @classmethod
    def from_checkpoint(cls, checkpoint_path, model, data_format, top_k=DEFAULT_TOP_K,
                        preprocess=DEFAULT_PREPROCESS, finetune=None):
        """The network of the model group (build_inference_graph) restored from
        checkpoint_path."""
        graph = tf.Graph()
        with graph.as_default():
            encoded, outputs = build_inference_graph(model, data_format, top_k, preprocess,
                                                     finetune=finetune)[SIGNATURE_KEY]
            session = tf.Session(graph=graph, config=devices.session_config())
            try:
                restore(session, checkpoint_path)
            except UsageError:
                session.close()
                raise
        return cls(session, encoded, outputs, checkpoint_path,
                   preprocessing_line(preprocess, model.image_size), checkpoint=checkpoint_path)

    @classmethod
    def from_saved_model(cls, export_dir):
        export_dir = saved_models.resolve_saved_model(export_dir)
        graph = tf.Graph()
        session = tf.Session(graph=graph, config=devices.session_config())
        try:
            with graph.as_default():
                try:
                    meta = tf.saved_model.loader.load(session, SERVING_TAGS, export_dir)
                except (RuntimeError, IOError, tf.errors.OpError) as e:
                    raise UsageError('cannot load the SavedModel %s: %s'
                                     % (export_dir, op_error_text(e)))
                signature = meta.signature_def.get(SIGNATURE_KEY)
                if (signature is None or INPUT_KEY not in signature.inputs
                        or not set(OUTPUT_KEYS) <= set(signature.outputs)):
                    raise UsageError('%s is not a SavedModel of this program (no %r signature '
                                     'with input %r and outputs %s)' % (
                                         export_dir, SIGNATURE_KEY, INPUT_KEY,
                                         ', '.join(OUTPUT_KEYS)))
                encoded = graph.get_tensor_by_name(signature.inputs[INPUT_KEY].name)
                outputs = {key: graph.get_tensor_by_name(signature.outputs[key].name)
                           for key in OUTPUT_KEYS + NEW_KEYS if key in signature.outputs}
        except UsageError:
            session.close()
            raise
        return cls(session, encoded, outputs, export_dir,
                   saved_models.saved_model_preprocessing(export_dir),
                   saved_models.asset(export_dir, saved_models.THRESHOLDS_FILE))

    def run(self, encoded_images, keys=OUTPUT_KEYS):
        """{key: [N, ...]} of keys, and 'valid' when the graph has it."""
        fetches = {key: self._outputs[key] for key in keys}
        if 'valid' in self._outputs:
            fetches['valid'] = self._outputs['valid']
        return self.session.run(fetches, {self._encoded: list(encoded_images)})



def load_predictor(checkpoint=None, saved_model=None, model=None, resnet_size=None,
                   class_num=None, top_k=DEFAULT_TOP_K, checkpoint_flag='checkpoint',
                   preprocess=DEFAULT_PREPROCESS, finetune=None, dtype='fp32'):
    """A Predictor from a checkpoint (a model directory or a checkpoint path; errors name it
    as --<checkpoint_flag>) or a SavedModel.

    With a checkpoint: the network of the model group (flags.Model; its --data_format
    resolved for the GPUs this process sees; finetune: model_parts'), with the
    architecture and class count read from the checkpoint's variables (resnet_size /
    class_num, when given, are checked against them). With a SavedModel everything is
    fixed at export (its preprocessing too); class_num is checked. preprocess:
    PREPROCESSING's key for a checkpoint. dtype: what the checkpoint's network computes in
    (precision.py's fp32 or bf16; a SavedModel is float32).
    """
    if saved_model and dtype != 'fp32':
        raise UsageError('--dtype=%s with --saved_model: a SavedModel computes in float32 in '
                         'TensorFlow; give the --checkpoint it was exported from, or run it '
                         'with --engine openvino' % dtype)
    if saved_model:
        predictor = Predictor.from_saved_model(saved_model)
        if class_num and class_num != predictor.class_num:
            predictor.close()
            raise UsageError('%s has %d classes, --class_num is %d'
                             % (saved_model, predictor.class_num, class_num))
        return predictor
    path, model = checkpoint_model(checkpoint, checkpoint_flag, model, resnet_size,
                                   class_num, preprocess)
    data_format = resnet.resolve_data_format(model.data_format, devices.gpu_count() > 0)
    return Predictor.from_checkpoint(path, model.replace(dtype=dtype), data_format, top_k,
                                     preprocess, finetune)


def checkpoint_model(checkpoint, checkpoint_flag, model, resnet_size, class_num, preprocess):
    """(the checkpoint path of `checkpoint`, the model group with the depth and class count
    read from its variables); UsageError for no checkpoint, one that does not fit
    resnet_size / class_num, or an unknown preprocess."""
    if not checkpoint:
        raise UsageError('no checkpoint given')
    path = checkpoints.resolve_checkpoint(checkpoint, checkpoint_flag)
    resnet_size, class_num = checkpoints.checkpoint_model(path, resnet_size, class_num)
    check_preprocess(preprocess)
    return path, model.replace(resnet_size=resnet_size, class_num=class_num)


# ---------------------------------------------------------------------------- prediction

def predict_images(predictor, images, batch_size, on_skip, keys=OUTPUT_KEYS, progress=None):
    """Yields (name, {key: row}) for every image of `images` ((name, path) pairs, read as
    they are needed: an iterator streams) that could be read and decoded, in order, running
    batch_size images at a time. For each other one calls on_skip(name, reason) and goes
    on. predictor: a Predictor or any engine's with its run and decode_error. progress:
    called after each batch with the number of images taken from `images` so far."""
    batch, taken = [], 0
    for name, path in images:
        taken += 1
        try:
            data = inference_io.read_image_file(path)
        except (OSError, tf.errors.OpError) as e:
            on_skip(name, 'cannot read: %s' % op_error_text(e))
            continue
        batch.append((name, data))
        if len(batch) >= batch_size:
            for item in _run_batch(predictor, batch, on_skip, keys):
                yield item
            batch = []
            if progress:
                progress(taken)
    for item in _run_batch(predictor, batch, on_skip, keys):
        yield item
    if progress:
        progress(taken)


def _run_batch(predictor, batch, on_skip, keys):
    """Runs one batch, reporting each image the graph did not decode (valid false). A graph
    without `valid` fails the whole batch: then this drops the undecodable images and runs
    the rest (one by one if that still fails), reporting each image that fails."""
    if not batch:
        return []
    rows = _try_rows(predictor, batch, keys, on_skip)
    if rows is not None:
        return rows
    good = []
    for name, data in batch:
        error = predictor.decode_error(data)
        if error:
            on_skip(name, 'cannot decode: %s' % error)
        else:
            good.append((name, data))
    if not good:
        return []
    rows = _try_rows(predictor, good, keys, on_skip)
    if rows is not None:
        return rows
    rows = []
    for name, data in good:
        try:
            rows += _rows(predictor, [(name, data)], predictor.run([data], keys), keys,
                          on_skip)
        except tf.errors.OpError as e:
            on_skip(name, op_error_text(e))
    return rows


def _try_rows(predictor, batch, keys, on_skip):
    """The rows of (name, data) `batch` run as one batch; None when the run fails."""
    try:
        outputs = predictor.run([data for _, data in batch], keys)
    except tf.errors.OpError:
        return None
    return _rows(predictor, batch, outputs, keys, on_skip)


def _rows(predictor, batch, outputs, keys, on_skip):
    rows = []
    for i, (name, data) in enumerate(batch):
        if 'valid' in outputs and not outputs['valid'][i]:
            on_skip(name, 'cannot decode: %s' % (predictor.decode_error(data) or
                                                 'the model\'s decoder failed'))
        else:
            rows.append((name, {key: outputs[key][i] for key in keys}))
    return rows
