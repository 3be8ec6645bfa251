"""--engine openvino: the float network of a checkpoint, a SavedModel or its ONNX compiled
by OpenVINO for the CPU, in fp32 or bf16 (OpenVINO's INFERENCE_PRECISION_HINT), behind
serving.Predictor's interface (run, decode_error, close), so that serving.predict_images and
batch_outputs treat both engines alike.

    encoded images [N] -> serving.decoded_batch in a TensorFlow session: the same
                          preprocessing, the same images dropped as undecodable
                       -> OpenVINO: network inputs [M, S, S, 3] -> scores, probabilities,
                          features
                       -> serving.request_outputs' rows, in numpy: zeros and valid false
                          where an image did not decode; top-k by score, ties to the lower
                          class as tf.nn.top_k

The network: the checkpoint's float network (serving.build_float_network, NHWC) or a
SavedModel's float signature, its variables frozen into constants in memory and converted
by openvino.convert_model (OpenVINO's TensorFlow front end, seconds); or, with a
SavedModel, the ONNX that tools/export_onnx.py wrote from it, read as it is. fp32 is
asked for explicitly: OpenVINO's default on a CPU with bf16 instructions is bf16.
openvino comes from requirements-openvino.txt; without it, a UsageError names the command.
"""
import re

import numpy as np
import tensorflow.compat.v1 as tf

from mlimages.config import interpreter
from mlimages.distributed import devices
from mlimages.errors import UsageError
from mlimages.inference import onnx_export, saved_models, serving
from mlimages.inference.inference_io import DEFAULT_TOP_K

# --dtype -> OpenVINO's INFERENCE_PRECISION_HINT
PRECISION_HINTS = {'fp32': 'f32', 'bf16': 'bf16'}
OUTPUT_PREFIX = 'output_'  # the frozen graph's output nodes: output_scores, ...


def install():
    """The command that installs openvino into this Python."""
    return '%s install -r requirements-openvino.txt' % interpreter.pip_command()


def openvino():
    """The openvino module; UsageError naming install() when it is missing."""
    try:
        import openvino as ov
    except ImportError:
        raise UsageError('--engine openvino: the openvino package is not installed; '
                         'install it: %s' % install())
    return ov


def frozen_network(session, images, outputs):
    """The GraphDef of `outputs` ({key: tensor} of FLOAT_OUTPUT_KEYS, fed by `images`) in
    session's graph with the variables' values as constants; each output also as the node
    OUTPUT_PREFIX + key (a features tensor that feeds the logits is no graph output)."""
    with session.graph.as_default():
        names = [tf.identity(outputs[key], name=OUTPUT_PREFIX + key).op.name
                 for key in serving.FLOAT_OUTPUT_KEYS]
    graph_def = tf.graph_util.convert_variables_to_constants(
        session, session.graph.as_graph_def(), names)
    return tf.graph_util.extract_sub_graph(graph_def, names)


def frozen_outputs():
    """{key: its tensor's name in OpenVINO's model of a frozen_network}."""
    return {key: OUTPUT_PREFIX + key + ':0' for key in serving.FLOAT_OUTPUT_KEYS}


def checkpoint_network(checkpoint_path, model, finetune=None):
    """frozen_network of the model group's float network (fp32, NHWC) restored from
    checkpoint_path (raises UsageError when it does not fit)."""
    with tf.Graph().as_default() as graph:
        images, outputs = serving.build_float_network(model.replace(dtype='fp32'),
                                                      'channels_last', finetune)
        with tf.Session(graph=graph, config=devices.session_config()) as session:
            serving.restore(session, checkpoint_path)
            return frozen_network(session, images, outputs)


def saved_model_network(export_dir):
    """frozen_network of a SavedModel's float signature (UsageError without one)."""
    info, outputs = onnx_export.float_signature(export_dir)
    with tf.Graph().as_default() as graph:
        with tf.Session(graph=graph, config=devices.session_config()) as session:
            tf.saved_model.loader.load(session, serving.SERVING_TAGS, export_dir)
            return frozen_network(session, graph.get_tensor_by_name(info.name), {
                key: graph.get_tensor_by_name(outputs[key].name)
                for key in serving.FLOAT_OUTPUT_KEYS})


def saved_model_preprocess(export_dir):
    """(PREPROCESSING key, S) recorded in a SavedModel's assets.extra/preprocessing.txt;
    UsageError for one exported before it was recorded."""
    line = saved_models.saved_model_preprocessing(export_dir) or ''
    found = re.match(r'preprocess=(\w+):.*\(S = (\d+)\)$', line)
    if not found or found.group(1) not in serving.PREPROCESSING:
        raise UsageError('%s does not record its preprocessing (exported before it was): '
                         'export the checkpoint again with train.py --mode=export to run it '
                         'with --engine openvino' % export_dir)
    return found.group(1), int(found.group(2))


class OpenVinoPredictor(serving.DecodeCheck):
    """serving.Predictor's interface on an OpenVINO model of the float network. Build it
    with from_checkpoint or from_saved_model; dtype fp32 or bf16 (PRECISION_HINTS)."""

    def __init__(self, ov_model, output_names, image_size, preprocess, dtype, source,
                 top_k=DEFAULT_TOP_K, thresholds_file=None, checkpoint=None):
        ov = openvino()
        self.source = source
        self.checkpoint = checkpoint
        self.thresholds_file = thresholds_file
        self.preprocessing = serving.preprocessing_line(preprocess, image_size)
        self.dtype = dtype
        ov_model.reshape({ov_model.inputs[0]: ov.PartialShape([-1, image_size, image_size, 3])})
        # One stream of all cores for each batch; threads not pinned to cores: on a CPU
        # shared with other jobs pinning lost a fifth of the speed (ResNet-50, 2 cores).
        self._compiled = ov.Core().compile_model(ov_model, 'CPU', {
            'INFERENCE_PRECISION_HINT': PRECISION_HINTS[dtype], 'PERFORMANCE_HINT': 'LATENCY',
            'ENABLE_CPU_PINNING': False})
        self._request = self._compiled.create_infer_request()
        self._outputs = {key: self._compiled.output(name) for key, name in output_names.items()}
        self.class_num = self._outputs['scores'].get_partial_shape()[1].get_length()
        self.feature_dim = self._outputs['features'].get_partial_shape()[1].get_length()
        self.top_k = min(top_k, self.class_num)
        graph = tf.Graph()
        with graph.as_default():
            self._encoded = tf.placeholder(tf.string, [None])
            self._decoded = serving.decoded_batch(self._encoded, image_size, preprocess)
            # Decoding alone, to tell why an image was dropped.
            self._add_decode_check()
        self.session = tf.Session(graph=graph, config=devices.session_config())

    @classmethod
    def from_checkpoint(cls, checkpoint_path, model, preprocess=serving.DEFAULT_PREPROCESS,
                        dtype='fp32', top_k=DEFAULT_TOP_K, finetune=None):
        ov = openvino()
        network = ov.convert_model(checkpoint_network(checkpoint_path, model, finetune))
        return cls(network, frozen_outputs(),
                   model.image_size, preprocess, dtype, checkpoint_path, top_k,
                   checkpoint=checkpoint_path)

    @classmethod
    def from_saved_model(cls, export_dir, dtype='fp32', top_k=DEFAULT_TOP_K, onnx=None):
        """The SavedModel's float signature, or with onnx the ONNX model exported from it
        (its input size and outputs checked against the SavedModel's)."""
        ov = openvino()
        export_dir = saved_models.resolve_saved_model(export_dir)
        preprocess, size = saved_model_preprocess(export_dir)
        if onnx:
            network = read_onnx(ov, onnx, size)
            names = {key: key for key in serving.FLOAT_OUTPUT_KEYS}
        else:
            network = ov.convert_model(saved_model_network(export_dir))
            names = frozen_outputs()
        return cls(network, names, size, preprocess, dtype, onnx or export_dir, top_k,
                   saved_models.asset(export_dir, saved_models.THRESHOLDS_FILE))

    def run(self, encoded_images, keys=serving.OUTPUT_KEYS):
        """{key: [N, ...]} of keys and 'valid', as serving.Predictor.run."""
        batch, index = self.session.run(self._decoded, {self._encoded: list(encoded_images)})
        count = len(encoded_images)
        computed = self.network(batch) if len(index) else {
            key: np.zeros([0, self.feature_dim if key == 'features' else self.class_num],
                          np.float32) for key in serving.FLOAT_OUTPUT_KEYS}
        result = {'valid': np.zeros(count, bool)}
        result['valid'][index] = True
        for key, values in computed.items():
            result[key] = np.zeros((count,) + values.shape[1:], np.float32)
            result[key][index] = values
        order = np.argsort(-result['scores'], axis=1, kind='stable')[:, :self.top_k]
        result['top_k_scores'] = np.take_along_axis(result['scores'], order, 1)
        result['top_k_classes'] = np.where(result['valid'][:, None], order, -1).astype(np.int64)
        return {key: result[key] for key in list(keys) + ['valid']}

    def network(self, images):
        """{FLOAT_OUTPUT_KEYS: array} of network inputs [M, S, S, 3] (float32)."""
        done = self._request.infer({0: np.ascontiguousarray(images, np.float32)})
        return {key: np.array(done[port], np.float32) for key, port in self._outputs.items()}


def read_onnx(ov, path, image_size):
    """The ONNX model of tools/export_onnx.py at path, checked: input [N, S, S, 3] of the
    SavedModel's S, outputs FLOAT_OUTPUT_KEYS; UsageError otherwise."""
    try:
        network = ov.Core().read_model(path)
    except RuntimeError as e:
        raise UsageError('--onnx %s: OpenVINO cannot read it: %s'
                         % (path, str(e).strip().splitlines()[0]))
    shape = network.inputs[0].get_partial_shape()
    names = {name for output in network.outputs for name in output.get_names()}
    sizes = [d.get_length() if d.is_static else None for d in shape] \
        if shape.rank.is_static else []
    if sizes[1:] != [image_size, image_size, 3] or \
            not set(serving.FLOAT_OUTPUT_KEYS) <= names:
        raise UsageError('--onnx %s does not fit the --saved_model: input %s, outputs %s; '
                         'expected input [N,%d,%d,3] and outputs %s (tools/export_onnx.py '
                         'writes it)' % (path, shape, ', '.join(sorted(names)), image_size,
                                         image_size, ', '.join(serving.FLOAT_OUTPUT_KEYS)))
    return network


def load_predictor(checkpoint=None, saved_model=None, model=None, resnet_size=None,
                   class_num=None, top_k=DEFAULT_TOP_K, checkpoint_flag='checkpoint',
                   preprocess=serving.DEFAULT_PREPROCESS, finetune=None, dtype='fp32',
                   onnx=None):
    """serving.load_predictor's model, run by OpenVINO (same arguments; onnx: the ONNX of
    saved_model)."""
    openvino()
    if saved_model:
        predictor = OpenVinoPredictor.from_saved_model(saved_model, dtype, top_k, onnx)
        if class_num and class_num != predictor.class_num:
            predictor.close()
            raise UsageError('%s has %d classes, --class_num is %d'
                             % (saved_model, predictor.class_num, class_num))
        return predictor
    path, model = serving.checkpoint_model(checkpoint, checkpoint_flag, model, resnet_size,
                                           class_num, preprocess)
    return OpenVinoPredictor.from_checkpoint(path, model, preprocess, dtype, top_k, finetune)
