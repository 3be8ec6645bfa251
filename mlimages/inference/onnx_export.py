"""The float signature of an export as an ONNX model (tools/export_onnx.py), with
tf2onnx's own route -- its command line on the SavedModel, `python -m tf2onnx.convert
--saved-model DIR --signature_def float_images --tag serve` -- then checked: onnxruntime and
TensorFlow (the same signature in a TF1 session) on the same random network inputs.

The model: input `images` float32 [N, S, S, 3] (NHWC, RGB, [-1, 1]: serving.py's network
input after the preprocessing), outputs scores, probabilities, features. The extras
(tf2onnx, onnx, onnxruntime) are requirements-onnx.txt's: pins that import beside
TensorFlow 2.15.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import tensorflow.compat.v1 as tf

from mlimages.config import interpreter
from mlimages.distributed import devices
from mlimages.errors import ExportError, UsageError
from mlimages.inference import saved_models, serving

EXTRAS = ('tf2onnx', 'onnx', 'onnxruntime')


def missing_extras():
    """The modules of EXTRAS that are not installed."""
    return [name for name in EXTRAS if importlib.util.find_spec(name) is None]


def install():
    """The command that installs EXTRAS into this Python."""
    return '%s install -r requirements-onnx.txt' % interpreter.pip_command()


def float_signature(export_dir):
    """(input TensorInfo, {output: TensorInfo}) of the export's float signature, read from
    saved_model.pb; UsageError for a SavedModel without one (exported before it was
    added: export it again)."""
    from tensorflow.core.protobuf import saved_model_pb2
    model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, 'saved_model.pb'), 'rb') as f:
        model.ParseFromString(f.read())
    signature = model.meta_graphs[0].signature_def.get(serving.FLOAT_SIGNATURE_KEY)
    if signature is None:
        raise UsageError('%s has no %s signature (exported before this program had one): '
                         'export the checkpoint again with train.py --mode=export'
                         % (export_dir, serving.FLOAT_SIGNATURE_KEY))
    return signature.inputs[serving.INPUT_KEY], dict(signature.outputs)


def convert(export_dir, output, opset):
    """tf2onnx's command line on the float signature, writing `output`; ExportError with
    the converter's last error line when it fails."""
    command = [sys.executable, '-m', 'tf2onnx.convert', '--saved-model', export_dir,
               '--signature_def', serving.FLOAT_SIGNATURE_KEY, '--tag', 'serve',
               '--opset', str(opset), '--output', output]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode or not os.path.isfile(output):
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        cause = next((line for line in reversed(lines) if 'Error' in line),
                     lines[-1] if lines else 'exit status %d' % done.returncode)
        raise ExportError('tf2onnx could not convert %s: %s' % (export_dir, cause.strip()))


def check(export_dir, onnx_path, images, seed=0):
    """{output: (max |onnxruntime - TensorFlow|, max |TensorFlow|)} of the float signature
    on `images` random network inputs (uniform in [-1, 1], seeded)."""
    import onnxruntime
    info, outputs = float_signature(export_dir)
    size = [d.size for d in info.tensor_shape.dim]
    inputs = np.random.default_rng(seed).uniform(-1, 1, [images] + size[1:]).astype(np.float32)
    session = onnxruntime.InferenceSession(onnx_path, providers=['CPUExecutionProvider'])
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {session.get_inputs()[0].name: inputs})))
    with tf.Graph().as_default() as graph, \
            tf.Session(graph=graph, config=devices.session_config()) as tf_session:
        tf.saved_model.loader.load(tf_session, serving.SERVING_TAGS, export_dir)
        want = tf_session.run({key: out.name for key, out in outputs.items()},
                              {info.name: inputs})
    missing = sorted(set(want) - set(got))
    if missing:
        raise ExportError('the ONNX model %s lacks the outputs %s' % (onnx_path,
                                                                     ', '.join(missing)))
    return {key: (float(np.max(np.abs(got[key] - want[key]))), float(np.max(np.abs(want[key]))))
            for key in sorted(want)}


def export_onnx(saved_model, output, opset, tolerance, images):
    """Converts the float signature of saved_model (a version, or a base of versions: its
    highest) to `output`, written under a temporary name and renamed once check() found
    every output within tolerance x max(1, max |TensorFlow|). Returns (the version
    directory, check()'s result)."""
    export_dir = saved_models.resolve_saved_model(saved_model)
    float_signature(export_dir)
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise UsageError('output directory %s does not exist' % directory)
    temp = os.path.join(directory, '.%s.%d.tmp' % (os.path.basename(output), os.getpid()))
    try:
        convert(export_dir, temp, opset)
        found = check(export_dir, temp, images)
        worst = {key: diff / max(1.0, scale) for key, (diff, scale) in found.items()}
        bad = [key for key, value in sorted(worst.items()) if value > tolerance]
        if bad:
            raise ExportError('onnxruntime differs from TensorFlow in %s by up to %s (relative '
                              'to max(1, |value|)), above --tolerance %g; nothing written' % (
                                  ', '.join(bad), ', '.join('%.3g' % worst[k] for k in bad),
                                  tolerance))
        os.replace(temp, output)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return export_dir, found
