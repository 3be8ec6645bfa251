"""A checkpoint as the SavedModel every TensorFlow client loads (train.py --mode=export and
--export_dir): TensorFlow Serving, a TF1 session (tf.compat.v1.saved_model.loader.load),
saved_model_cli, TF2's tf.saved_model.load (which sees every weight as a variable, to
fine-tune) and tf2onnx (the float signature; tools/export_onnx.py).

    signatures   serving_default: images, encoded files [N] -> serving.OUTPUT_KEYS +
                   NEW_KEYS (positives, valid: an image that does not decode gets
                   valid false and an empty row; the rest of the request is answered)
                 float_images: images, the network input [N, S, S, 3] (NHWC, RGB, [-1, 1])
                   -> scores, probabilities, features
    graph        serving.build_inference_graph on resource variables, float32, NHWC, then
                 pruned (serving_graph) to what the signatures and the saver need: no
                 summary, no initializer (a variable's value comes from variables/; its
                 initializer is the no-op RESTORED), no custom gradient (resnet's fast
                 stride-1 input gradient is a training trick, registered only in the process
                 that trains: a client's tape takes TensorFlow's own gradient of the
                 convolution, the same values)
    assets.extra preprocessing.txt, signatures.txt (what each input and output is),
                 flags.txt, thresholds.txt (saved_models.py)
"""
import os
import shutil
import tempfile
import time

import tensorflow.compat.v1 as tf
from tensorflow.core.framework import variable_pb2
from tensorflow.core.protobuf import saved_model_pb2

from mlimages.distributed import devices
from mlimages.errors import UsageError
from mlimages.inference import saved_models, serving
from mlimages.inference.inference_io import DEFAULT_THRESHOLD, DEFAULT_TOP_K
from mlimages.run import calibration

# The one initializer of every variable of an export: a no-op (the loaders restore the
# values from variables/; a client that runs the initializers keeps them).
RESTORED = 'restored_by_the_loader'
VARIABLE_COLLECTIONS = (tf.GraphKeys.GLOBAL_VARIABLES, tf.GraphKeys.TRAINABLE_VARIABLES)


def export_saved_model(checkpoint_path, export_dir, model, top_k=DEFAULT_TOP_K,
                       preprocess=serving.DEFAULT_PREPROCESS, version=None, flags_lines=None,
                       threshold=DEFAULT_THRESHOLD, calibrated=None, finetune=None):
    """Writes the inference graph of the model group (flags.Model; finetune:
    serving.model_parts') (module docstring) with the checkpoint's weights as the
    SavedModel export_dir/<version>/ (TensorFlow Serving's layout; earlier versions stay),
    its preprocessing (serving.PREPROCESSING[preprocess]) built in and recorded in
    assets.extra/preprocessing.txt; flags_lines, when given, as assets.extra/flags.txt (the
    settings it was trained with). positives: scores >= threshold for every class, or with
    calibrated (a thresholds.txt, calibration.py) its per-class thresholds, the file kept
    as assets.extra/thresholds.txt. version: by default the time in seconds, or one more
    than the highest existing version. Returns the path.

    It is built under a hidden temporary name in export_dir (which TensorFlow Serving
    ignores) and renamed when complete. The graph is float32 whatever the model's dtype
    (the variables are float32 in every dtype's checkpoint), NHWC (runs on CPUs and GPUs
    alike; the variables do not depend on the layout).
    """
    saved_models.check_export_dir(export_dir)
    export_dir = os.path.abspath(export_dir)
    thresholds = (calibration.read(calibrated, model.class_num)[0] if calibrated
                  else float(threshold))
    target, work = new_version_dir(export_dir, version)
    building = os.path.join(work, 'saved_model')
    # float32 whatever the training dtype: a bf16 graph serves only on CPUs with bf16 kernels
    model = model.replace(dtype='fp32')
    try:
        signatures = save_inference_graph(building, checkpoint_path, model, finetune, top_k,
                                          preprocess, thresholds)
        prune_saved_model(building)
        write_assets(building, signatures, preprocess, model.image_size, flags_lines,
                     'the per-class thresholds of thresholds.txt' if calibrated
                     else '%g' % thresholds)
        if calibrated:
            shutil.copyfile(calibrated, os.path.join(building, saved_models.THRESHOLDS_FILE))
        os.rename(building, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def new_version_dir(export_dir, version):
    """(export_dir/<version>, a hidden temporary directory in export_dir to build it in);
    version None: the time in seconds, or one more than the highest existing version."""
    os.makedirs(export_dir, exist_ok=True)
    if version is None:
        version = max([int(time.time())] + [v + 1 for v in saved_models.versions(export_dir)])
    target = os.path.join(export_dir, str(version))
    if os.path.exists(target):
        raise UsageError('version %s exists already' % target)
    return target, tempfile.mkdtemp(prefix='.tmp-%d-' % version, dir=export_dir)


def save_inference_graph(building, checkpoint_path, model, finetune, top_k, preprocess,
                         thresholds):
    """The SavedModel of build_inference_graph (both signatures, NHWC) with the
    checkpoint's weights, saved at building; returns its signatures."""
    with tf.Graph().as_default():
        signatures = serving.build_inference_graph(
            model, 'channels_last', top_k, preprocess, thresholds, float_signature=True,
            finetune=finetune)
        with tf.Session(config=devices.session_config()) as session:
            serving.restore(session, checkpoint_path)
            builder = tf.saved_model.builder.SavedModelBuilder(building)
            builder.add_meta_graph_and_variables(
                session, serving.SERVING_TAGS, signature_def_map={
                    key: tf.saved_model.signature_def_utils.predict_signature_def(
                        inputs={serving.INPUT_KEY: images}, outputs=outputs)
                    for key, (images, outputs) in signatures.items()},
                strip_default_attrs=True)
            builder.save()
    return signatures


def write_assets(building, signatures, preprocess, image_size, flags_lines, positives):
    """assets.extra/ of the SavedModel at building: preprocessing.txt, signatures.txt and
    (flags_lines given) flags.txt."""
    assets = {saved_models.PREPROCESSING_FILE:
              serving.preprocessing_line(preprocess, image_size),
              saved_models.SIGNATURES_FILE: signatures_text(
                  signatures, preprocess, image_size, positives)}
    if flags_lines is not None:
        assets[saved_models.FLAGS_FILE] = '\n'.join(flags_lines)
    os.makedirs(os.path.join(building, saved_models.ASSETS))
    for name, text in assets.items():
        with open(os.path.join(building, name), 'w') as f:
            f.write(text.rstrip('\n') + '\n')


# What each output of signatures.txt is.
MEANING = {
    'scores': 'sigmoid of the logits',
    'probabilities': 'softmax of the logits',
    'top_k_classes': 'the best classes by score, best first (-1 where not valid)',
    'top_k_scores': 'their scores',
    'features': 'the pooled feature, the input of the logits layer',
    'positives': 'scores >= %s, and valid',
    'valid': 'the image decoded; false: its row is zeros, the rest of the batch is answered',
}


def signatures_text(signatures, preprocess, image_size, positives):
    """assets.extra/signatures.txt: what each signature of build_inference_graph takes and
    gives (types and shapes from the graph; positives: the thresholds, in words)."""
    def shape(tensor):
        return '[%s]' % ', '.join('N' if d is None else str(d)
                                  for d in tensor.shape.as_list())

    images, outputs = signatures[serving.SIGNATURE_KEY]
    float_images, float_outputs = signatures[serving.FLOAT_SIGNATURE_KEY]
    lines = ['signature %s (tag serve): input %s, string %s: encoded image files (JPEG, PNG, '
             'GIF, BMP), each through %s' % (serving.SIGNATURE_KEY, serving.INPUT_KEY,
                                             shape(images),
                                             serving.preprocessing_line(preprocess, image_size))]
    for key, tensor in sorted(outputs.items(), key=lambda item: list(MEANING).index(item[0])):
        lines.append('  %-14s %-8s %-10s %s' % (key, tensor.dtype.name, shape(tensor),
                                                MEANING[key].replace('%s', positives)))
    lines.append('signature %s (tag serve): input %s, float32 %s: the network input after '
                 'the preprocessing above, NHWC, RGB, (pixel / 255 - 0.5) x 2 in [-1, 1]; '
                 'outputs %s as above (no decoding: tf2onnx converts it, tools/export_onnx.py)'
                 % (serving.FLOAT_SIGNATURE_KEY, serving.INPUT_KEY, shape(float_images),
                    ', '.join(sorted(float_outputs))))
    return '\n'.join(lines)


def prune_saved_model(directory):
    """Rewrites directory/saved_model.pb with serving_graph's graph."""
    path = os.path.join(directory, 'saved_model.pb')
    model = saved_model_pb2.SavedModel()
    with open(path, 'rb') as f:
        model.ParseFromString(f.read())
    for meta_graph in model.meta_graphs:
        serving_graph(meta_graph)
    with open(path, 'wb') as f:
        f.write(model.SerializeToString())


def _op(name):
    return name.lstrip('^').split(':')[0]


def serving_graph(meta_graph):
    """Prunes a MetaGraphDef in place to the nodes the signatures, the saver and the
    variables (their handles and read ops) need; the variables' initializer becomes the
    no-op RESTORED and they lose their initial values; no node keeps a custom gradient
    (_gradient_op_type); only the variable collections stay (a summary or an initializer
    is in none of the kept ones)."""
    graph = meta_graph.graph_def
    nodes = {node.name: node for node in graph.node}
    roots = [_op(tensor.name) for signature in meta_graph.signature_def.values()
             for tensor in list(signature.inputs.values()) + list(signature.outputs.values())]
    saver = meta_graph.saver_def
    roots += [_op(saver.filename_tensor_name), _op(saver.save_tensor_name),
              _op(saver.restore_op_name)]
    variables = {}
    for key in VARIABLE_COLLECTIONS:
        variables[key] = []
        for raw in meta_graph.collection_def[key].bytes_list.value:
            variable = variable_pb2.VariableDef()
            variable.ParseFromString(raw)
            variable.initializer_name = RESTORED
            variable.ClearField('initial_value_name')
            variables[key].append(variable.SerializeToString())
            roots += [_op(variable.variable_name), _op(variable.snapshot_name)]
    kept, todo = set(), roots
    while todo:
        name = todo.pop()
        if name not in kept:
            kept.add(name)
            todo.extend(_op(source) for source in nodes[name].input)
    pruned = [node for node in graph.node if node.name in kept]
    del graph.node[:]
    graph.node.extend(pruned)
    for node in graph.node:
        if '_gradient_op_type' in node.attr:
            del node.attr['_gradient_op_type']
    graph.node.add(name=RESTORED, op='NoOp')
    for key in list(meta_graph.collection_def):
        if key not in VARIABLE_COLLECTIONS:
            del meta_graph.collection_def[key]
    for key, values in variables.items():
        meta_graph.collection_def[key].bytes_list.value[:] = values
    return meta_graph


def describe(path):
    """The export log line's description of a SavedModel's signatures and size."""
    size = sum(os.path.getsize(os.path.join(root, name))
               for root, _, files in os.walk(path) for name in files)
    return ('signatures %s: %s -> %s; %s: %s -> %s; %.1f MB' % (
        serving.SIGNATURE_KEY, serving.INPUT_KEY,
        ', '.join(serving.OUTPUT_KEYS + serving.NEW_KEYS), serving.FLOAT_SIGNATURE_KEY,
        serving.INPUT_KEY, ', '.join(serving.FLOAT_OUTPUT_KEYS), size / 1e6))

