"""Inference: the one graph that runs a trained model on encoded images, as a SavedModel
or in a session, shared by train.py --mode predict/export (and --export_dir), tools/predict.py
and tools/extract_features.py, so that their numbers cannot drift apart:

    encoded image bytes [N] -> preprocessing (PREPROCESSING, chosen at build/export):
                                 original: image_preprocess.decode_uint8_like_opencv
                                   -> original_inference_image (the original's
                                   extract_feature.py / image_classification.py: shorter
                                   side 256 x S / 224 with OpenCV's bilinear, centre S x S)
                                 eval: decode_image -> eval_network_input
                                   (train.py's evaluation: central 80 %, squashed to S x S)
                            -> model_fn.make_model_fn(opts, Run(data_format))(..., PREDICT)
                            -> scores (sigmoid), probabilities (softmax),
                               top_k_classes / top_k_scores (by sigmoid score), features

`export_saved_model` writes it as a SavedModel (signature 'serving_default', input
'images': a batch of JPEG/PNG/GIF/BMP file contents); `Predictor` runs it in a tf.Session,
restored from a checkpoint or loaded from such a SavedModel. `predict_images` runs batches
and reports and skips images that cannot be read or decoded; run_predict /
run_extract_features write the results (inference_io). Errors in the input are
errors.UsageError / file_db.DataError: one line, exit status 2 in the callers.
"""
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import tensorflow.compat.v1 as tf

from mlimages.run import checkpoints
from mlimages.distributed import devices
import image_preprocess
from mlimages.inference import inference_io
from mlimages.run import model_fn
import resnet
from mlimages.errors import UsageError, op_error_text
from mlimages.inference.inference_io import DEFAULT_THRESHOLD, DEFAULT_TOP_K

INPUT_KEY = 'images'
SIGNATURE_KEY = tf.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY
SERVING_TAGS = [tf.saved_model.tag_constants.SERVING]
OUTPUT_KEYS = ('scores', 'probabilities', 'top_k_classes', 'top_k_scores', 'features')


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
PREPROCESSING_FILE = os.path.join('assets.extra', 'preprocessing.txt')
FLAGS_FILE = os.path.join('assets.extra', 'flags.txt')  # the training run's settings


def check_preprocess(preprocess, flag='--preprocess'):
    if preprocess not in PREPROCESSING:
        raise UsageError('%s must be original or eval, got %r' % (flag, preprocess))


def preprocess_batch(encoded, image_size, preprocess=DEFAULT_PREPROCESS):
    """Encoded images [N] (tf.string) -> network input [N, S, S, 3]: each image through
    PREPROCESSING[preprocess]."""
    check_preprocess(preprocess)

    def one(data):
        if preprocess == 'original':
            return image_preprocess.original_inference_image(
                image_preprocess.decode_uint8_like_opencv(data), image_size)
        image = image_preprocess.decode_image(data)
        return image_preprocess.eval_network_input(image, image_size)
    return tf.map_fn(one, encoded, back_prop=False,
                     fn_output_signature=tf.TensorSpec([image_size, image_size, 3],
                                                       tf.float32))


def serving_outputs(predictions, top_k):
    """resnet_model_fn's predictions -> the serving outputs (OUTPUT_KEYS)."""
    class_num = tf.compat.dimension_value(predictions['scores'].shape[-1])
    top_scores, top_classes = tf.nn.top_k(predictions['scores'], k=min(top_k, class_num))
    return {'scores': predictions['scores'], 'probabilities': predictions['probabilities'],
            'top_k_classes': tf.cast(top_classes, tf.int64), 'top_k_scores': top_scores,
            'features': predictions['features']}


def build_inference_graph(opts, data_format, top_k=DEFAULT_TOP_K,
                          preprocess=DEFAULT_PREPROCESS):
    """In the default graph: the string placeholder of encoded images and the outputs of
    the model of opts (flags.Options: resnet_size, class_num, image_size, the batch-norm
    settings, dtype) in data_format."""
    encoded = tf.placeholder(tf.string, [None], name='encoded_images')
    images = preprocess_batch(encoded, opts.image_size, preprocess)
    model = model_fn.make_model_fn(opts, model_fn.Run(data_format=data_format))
    spec = model(images, None, tf.estimator.ModeKeys.PREDICT)
    return encoded, serving_outputs(spec.predictions, top_k)


# ---------------------------------------------------------------------------- checkpoints

def restore(session, checkpoint_path):
    """Restores the model variables of the default graph from checkpoint_path."""
    try:
        tf.train.Saver(tf.global_variables()).restore(session, checkpoint_path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        raise UsageError('%s does not fit the model: %s'
                         % (checkpoint_path, op_error_text(e)))


# ---------------------------------------------------------------------------- export

def versions(base):
    """{version: path} of the SavedModels in base/<integer version>/ (TensorFlow Serving's
    layout)."""
    if not os.path.isdir(base):
        return {}
    return {int(name): os.path.join(base, name) for name in os.listdir(base)
            if name.isdigit() and is_saved_model(os.path.join(base, name))}


def check_export_dir(export_dir):
    """export_dir may be new, empty or hold earlier versions (base/<integer>/), which an
    export keeps."""
    if not os.path.exists(export_dir):
        return
    if not os.path.isdir(export_dir):
        raise UsageError('export directory %s exists and is not a directory' % export_dir)
    if is_saved_model(export_dir):
        raise UsageError('export directory %s is itself a SavedModel (an unversioned export); '
                         'exports go to <dir>/<version>/ -- give a new directory, or move it '
                         'to %s' % (export_dir, os.path.join(export_dir, '1')))
    kept = versions(export_dir)
    others = sorted(name for name in os.listdir(export_dir) if not name.startswith('.')
                    and not (name.isdigit() and int(name) in kept))
    if others:
        raise UsageError('export directory %s holds something other than SavedModel versions '
                         '(%s); give a new directory' % (export_dir, ', '.join(others)))


def resolve_saved_model(path):
    """A SavedModel directory, or a base of versions (its highest); raises UsageError."""
    if os.path.isdir(path) and is_saved_model(path):
        return path
    found = versions(path)
    if not found:
        raise UsageError('%s is not a SavedModel directory (no saved_model.pb) nor a base '
                         'directory of versions (<dir>/<integer>/saved_model.pb)' % path)
    return found[max(found)]


def preprocessing_line(preprocess, image_size):
    return 'preprocess=%s: %s (S = %d)' % (preprocess, PREPROCESSING[preprocess], image_size)


def saved_model_preprocessing(export_dir):
    """The preprocessing line recorded in a SavedModel, or None (exported before it was)."""
    path = os.path.join(export_dir, PREPROCESSING_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return f.read().strip()


def is_saved_model(directory):
    return any(os.path.isfile(os.path.join(directory, name))
               for name in ('saved_model.pb', 'saved_model.pbtxt'))


def export_saved_model(checkpoint_path, export_dir, opts, top_k=DEFAULT_TOP_K,
                       preprocess=DEFAULT_PREPROCESS, version=None, flags_lines=None):
    """Writes the inference graph of opts (build_inference_graph; NHWC, which runs on CPUs
    and GPUs alike -- the variables do not depend on the layout) with the checkpoint's
    weights as the SavedModel
    export_dir/<version>/ (TensorFlow Serving's layout; earlier versions stay), its
    preprocessing (PREPROCESSING[preprocess]) built in and recorded in the SavedModel's
    assets.extra/preprocessing.txt (`preprocess=NAME: description`); flags_lines, when
    given, as assets.extra/flags.txt (the settings it was trained with). version: by default
    the time in seconds, or one more than the highest existing version. Returns the path.

    It is built under a hidden temporary name in export_dir (which TensorFlow Serving
    ignores) and renamed when complete. The graph is float32 whatever opts' dtype (the
    variables are float32 in every dtype's checkpoint).
    """
    check_export_dir(export_dir)
    export_dir = os.path.abspath(export_dir)
    os.makedirs(export_dir, exist_ok=True)
    if version is None:
        version = max([int(time.time())] + [v + 1 for v in versions(export_dir)])
    target = os.path.join(export_dir, str(version))
    if os.path.exists(target):
        raise UsageError('version %s exists already' % target)
    work = tempfile.mkdtemp(prefix='.tmp-%d-' % version, dir=export_dir)
    building = os.path.join(work, 'saved_model')
    # float32 whatever the training dtype: a bf16 graph serves only on CPUs with bf16 kernels
    opts = opts._replace(dtype='fp32')
    try:
        with tf.Graph().as_default():
            encoded, outputs = build_inference_graph(opts, 'channels_last', top_k, preprocess)
            with tf.Session(config=devices.session_config()) as session:
                restore(session, checkpoint_path)
                signature = tf.saved_model.signature_def_utils.predict_signature_def(
                    inputs={INPUT_KEY: encoded}, outputs=outputs)
                builder = tf.saved_model.builder.SavedModelBuilder(building)
                builder.add_meta_graph_and_variables(
                    session, SERVING_TAGS, signature_def_map={SIGNATURE_KEY: signature},
                    strip_default_attrs=True)
                builder.save()
        os.makedirs(os.path.join(building, os.path.dirname(PREPROCESSING_FILE)))
        with open(os.path.join(building, PREPROCESSING_FILE), 'w') as f:
            f.write(preprocessing_line(preprocess, opts.image_size) + '\n')
        if flags_lines is not None:
            with open(os.path.join(building, FLAGS_FILE), 'w') as f:
                f.write('\n'.join(flags_lines) + '\n')
        os.rename(building, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


# ---------------------------------------------------------------------------- prediction

class Predictor(object):
    """The inference graph in a session; `run(encoded_images)` -> {output: array [N, ...]}.

    Build it with `from_checkpoint` or `from_saved_model`; both give OUTPUT_KEYS.
    """

    def __init__(self, session, encoded, outputs, source, preprocessing=None):
        self.session = session
        self.source = source
        # preprocessing_line(...) of the model's preprocessing; None for a SavedModel
        # exported before it was recorded.
        self.preprocessing = preprocessing
        self._encoded = encoded
        self._outputs = outputs
        self.class_num = tf.compat.dimension_value(outputs['scores'].shape[-1])
        self.feature_dim = tf.compat.dimension_value(outputs['features'].shape[-1])
        with session.graph.as_default():
            # Decoding alone, to tell which image of a failed batch is undecodable.
            self._one = tf.placeholder(tf.string, [])
            self._decoded_shape = tf.shape(image_preprocess.decode_image(self._one))

    @classmethod
    def from_checkpoint(cls, checkpoint_path, opts, data_format, top_k=DEFAULT_TOP_K,
                        preprocess=DEFAULT_PREPROCESS):
        graph = tf.Graph()
        with graph.as_default():
            encoded, outputs = build_inference_graph(opts, data_format, top_k, preprocess)
            session = tf.Session(graph=graph, config=devices.session_config())
            try:
                restore(session, checkpoint_path)
            except UsageError:
                session.close()
                raise
        return cls(session, encoded, outputs, checkpoint_path,
                   preprocessing_line(preprocess, opts.image_size))

    @classmethod
    def from_saved_model(cls, export_dir):
        export_dir = resolve_saved_model(export_dir)
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
                           for key in OUTPUT_KEYS}
        except UsageError:
            session.close()
            raise
        return cls(session, encoded, outputs, export_dir, saved_model_preprocessing(export_dir))

    def run(self, encoded_images, keys=OUTPUT_KEYS):
        fetches = {key: self._outputs[key] for key in keys}
        return self.session.run(fetches, {self._encoded: list(encoded_images)})

    def decode_error(self, encoded_image):
        """Why encoded_image cannot be decoded, or None when it can."""
        try:
            self.session.run(self._decoded_shape, {self._one: encoded_image})
        except tf.errors.OpError as e:
            return op_error_text(e)
        return None

    def close(self):
        self.session.close()


def load_predictor(checkpoint=None, saved_model=None, opts=None, resnet_size=None,
                   class_num=None, top_k=DEFAULT_TOP_K, checkpoint_flag='checkpoint',
                   preprocess=DEFAULT_PREPROCESS):
    """A Predictor from a checkpoint (a model directory or a checkpoint path; errors name it
    as --<checkpoint_flag>) or a SavedModel.

    With a checkpoint: the model of opts (flags.Options; its --data_format resolved for the
    GPUs this process sees), with the architecture and class count read from the
    checkpoint's variables (resnet_size / class_num, when given, are checked against
    them). With a SavedModel everything is fixed at export (its preprocessing too);
    class_num is checked. preprocess: PREPROCESSING's key for a checkpoint.
    """
    if saved_model:
        predictor = Predictor.from_saved_model(saved_model)
        if class_num and class_num != predictor.class_num:
            predictor.close()
            raise UsageError('%s has %d classes, --class_num is %d'
                             % (saved_model, predictor.class_num, class_num))
        return predictor
    if not checkpoint:
        raise UsageError('no checkpoint given')
    path = checkpoints.resolve_checkpoint(checkpoint, checkpoint_flag)
    resnet_size, class_num = checkpoints.checkpoint_model(path, resnet_size, class_num)
    opts = opts._replace(resnet_size=resnet_size, class_num=class_num)
    data_format = resnet.resolve_data_format(opts.data_format, devices.gpu_count() > 0)
    check_preprocess(preprocess)
    return Predictor.from_checkpoint(path, opts, data_format, top_k, preprocess)


# ---------------------------------------------------------------------------- prediction

def predict_images(predictor, images, batch_size, on_skip, keys=OUTPUT_KEYS):
    """Yields (name, {key: row}) for every image of `images` ((name, path) pairs) that could
    be read and decoded, in order, running batch_size images at a time. For each other one
    calls on_skip(name, reason) and goes on."""
    batch = []
    for name, path in images:
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
    for item in _run_batch(predictor, batch, on_skip, keys):
        yield item


def _run_batch(predictor, batch, on_skip, keys):
    """Runs one batch; when it fails, drops the undecodable images and runs the rest (one by
    one if that still fails), reporting each image that fails."""
    if not batch:
        return []
    rows = _try_rows(predictor, batch, keys)
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
    rows = _try_rows(predictor, good, keys)
    if rows is not None:
        return rows
    rows = []
    for name, data in good:
        try:
            rows += _rows([(name, data)], predictor.run([data], keys), keys)
        except tf.errors.OpError as e:
            on_skip(name, op_error_text(e))
    return rows


def _try_rows(predictor, batch, keys):
    """The rows of (name, data) `batch` run as one batch; None when the run fails."""
    try:
        return _rows(batch, predictor.run([data for _, data in batch], keys), keys)
    except tf.errors.OpError:
        return None


def _rows(batch, outputs, keys):
    return [(name, {key: outputs[key][i] for key in keys}) for i, (name, _) in enumerate(batch)]


# ---------------------------------------------------------------------------- programs

def run_predict(predictor, images, output=None, fmt='tsv', batch_size=32,
                top_k=DEFAULT_TOP_K, threshold=DEFAULT_THRESHOLD, class_names=None,
                program='predict.py', hierarchy=None, consistent=False):
    """Predicts every image and writes the result (stdout when output is None or '-').
    fmt: 'tsv', 'jsonl' (inference_io.PredictionWriter) or 'original'
    (inference_io.OriginalClassificationWriter: image_classification.py's text, softmax,
    one image at a time as the original so that `open pic PATH failed` lines keep their
    place; threshold is not used). hierarchy, consistent: PredictionWriter's. Returns (images processed, images skipped); a file
    output is left out when none was processed."""
    skipped = []
    on_skip = inference_io.skip_reporter(program, skipped)
    try:
        with inference_io.atomic_output(output) as out:
            if fmt == 'original':
                writer = inference_io.OriginalClassificationWriter(out, top_k, class_names)
                report = on_skip

                def on_skip(name, reason):
                    report(name, reason)
                    writer.skip(name)
                batch_size = 1
            else:
                writer = inference_io.PredictionWriter(out, fmt, top_k, threshold,
                                                       class_names, hierarchy, consistent)
            for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                                keys=(writer.score_key,)):
                writer.write(name, outputs)
            if not writer.count:
                out.discard()
    except BrokenPipeError:
        if output not in (None, '-'):
            raise
        # The reader of stdout has gone (`| head`): stop quietly, as command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return writer.count, len(skipped)


def run_extract_features_text(predictor, images, output, batch_size=32,
                              program='extract_features.py'):
    """extract_feature.py's output: one line per image that can be processed,
    `path \t second field of its list line \t f1 ... fD` (inference_io.original_feature_line;
    the second field from inference_io.original_list_entries' names, else empty), written
    to `output` under a temporary name and renamed when complete. Returns (processed,
    skipped)."""
    skipped = []
    on_skip = inference_io.skip_reporter(program, skipped)
    count = 0
    with inference_io.atomic_output(output) as out:
        for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                            keys=('features',)):
            out.write(inference_io.original_feature_line(name, outputs['features']))
            count += 1
        if not count:
            out.discard()
    return count, len(skipped)


def run_extract_features(predictor, images, output, names_output=None, batch_size=32,
                         program='extract_features.py'):
    """The pooled feature of every image that can be processed: `output` (.npy, float32,
    N x feature_dim) and `names_output` (one image name per line, in row order; default:
    output with .txt for .npy). Rows are streamed through a temporary file, so memory does
    not grow with N; both files appear only when complete. Returns (processed, skipped)."""
    names_output = names_output or (output[:-4] if output.endswith('.npy') else output) + '.txt'
    skipped = []
    on_skip = inference_io.skip_reporter(program, skipped)
    names = []
    with tempfile.TemporaryFile() as rows, \
            inference_io.atomic_output(names_output) as names_file, \
            inference_io.atomic_output(output, binary=True) as npy:
        for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                            keys=('features',)):
            rows.write(np.asarray(outputs['features'], '<f4').tobytes())
            names_file.write(name + '\n')
            names.append(name)
        if not names:
            names_file.discard()
            npy.discard()
            return 0, len(skipped)
        shape = (len(names), predictor.feature_dim)
        np.lib.format.write_array_header_1_0(npy.stream, {
            'descr': '<f4', 'fortran_order': False, 'shape': shape})
        rows.seek(0)
        shutil.copyfileobj(rows, npy.stream)
    return len(names), len(skipped)
