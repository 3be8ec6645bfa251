"""export.py's SavedModel in the clients that load it, on a really trained model: train.py
trains a ResNet-18 two steps on the whole 12-image split a step (batch-norm statistics of 12
images: features stay below 10, so ONNX and TensorFlow differ by float rounding only) and
exports it (--export_dir). A TF1 session, saved_model_cli, TF2's tf.saved_model.load with a
fine-tune, tools/export_onnx.py with onnxruntime, docs/inference.md's Python snippets as
written, and the calibrated thresholds from --mode=eval to predict.py and the SavedModel."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from tensorflow.core.framework import variable_pb2
from tensorflow.core.protobuf import saved_model_pb2

import flags
from mlimages.inference import export, onnx_export, saved_models, serving
from mlimages.run import calibration, estimator as estimator_lib, evaluation
import train  # noqa: F401 (graph mode, as train.py runs)
from helpers import CLASSES, ENV, ROOT, laid_out, run_main, settings, train_model
from references import f1_optimal_thresholds
from mlimages.cli import export_onnx
from mlimages.cli import predict as predict_tool

pytestmark = pytest.mark.slow

IMAGE_SIZE = 32
BAD = b'\xff\xd8\xff this is no JPEG'
# onnxruntime against TensorFlow, relative to max(1, |value|) as test_serving's bounds.
ONNX_BOUND = 1e-5


@pytest.fixture(scope='module')
def exported(module_dir):
    """(data_dir, model_dir, the SavedModel's version directory)."""
    root = str(module_dir('export'))
    base = os.path.join(root, 'export')
    data, model_dir, result = train_model(root, 2, '--batch_size=12', '--lr=1e-4',
                                          '--batch_norm_decay=0', '--export_dir=' + base)
    (version,) = os.listdir(base)
    assert 'float_images: images -> scores, probabilities, features' in result.stderr
    return data, model_dir, os.path.join(base, version)


@pytest.fixture(scope='module')
def jpegs(exported):
    """The training images' JPEG files (the dataset's)."""
    directory = os.path.join(os.path.dirname(exported[0]), 'images')
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))]


class Loaded(object):
    """A SavedModel in a TF1 session (tf.saved_model.loader.load, as TensorFlow Serving);
    `run(batch, signature)` -> {output: array}."""

    def __init__(self, export_dir):
        self.graph = tf.Graph()
        self.session = tf.Session(graph=self.graph)
        with self.graph.as_default():
            self.meta = tf.saved_model.loader.load(self.session, ['serve'], export_dir)

    def run(self, batch, signature_key=serving.SIGNATURE_KEY):
        signature = self.meta.signature_def[signature_key]
        return self.session.run({key: info.name for key, info in signature.outputs.items()},
                                {signature.inputs['images'].name: batch})


@pytest.fixture(scope='module')
def loaded(exported):
    model = Loaded(exported[2])
    yield model
    model.session.close()


def network_inputs(encoded):
    """The SavedModel's preprocessing of encoded images, as the float signature takes it."""
    with tf.Graph().as_default(), tf.Session() as session:
        images = tf.placeholder(tf.string, [None])
        batch, _ = serving.decoded_batch(images, IMAGE_SIZE)
        return session.run(batch, {images: encoded})


def assert_close(got, want, what, bound=ONNX_BOUND):
    scale = max(1.0, float(np.max(np.abs(want))))
    difference = float(np.max(np.abs(got - want)))
    print('%s: max |difference| %.3g (scale %.3g)' % (what, difference, scale))
    assert difference <= bound * scale, what


def test_serving_graph_has_no_summary_initializer_or_custom_gradient(exported):
    """What the pruning left: the signatures' and the saver's nodes on resource variables,
    whose initializer is the one no-op; nothing random, no summary, no assignment outside
    the saver's restore, no _gradient_op_type."""
    model = saved_model_pb2.SavedModel()
    with open(os.path.join(exported[2], 'saved_model.pb'), 'rb') as f:
        model.ParseFromString(f.read())
    (meta,) = model.meta_graphs
    nodes = meta.graph_def.node
    kinds = {node.op for node in nodes}
    assert not kinds & {'ImageSummary', 'ScalarSummary', 'HistogramSummary', 'MergeSummary',
                        'TruncatedNormal', 'RandomUniform', 'RandomStandardNormal', 'Assign',
                        'VariableV2', 'VarIsInitializedOp'}, kinds
    assert [node.name for node in nodes if 'nitializer' in node.name] == []
    saver = meta.saver_def.restore_op_name.split('/')[0] + '/'
    assert all(node.name.startswith(saver) for node in nodes if node.op == 'AssignVariableOp')
    assert [node.name for node in nodes if '_gradient_op_type' in node.attr] == []
    assert set(meta.collection_def) == {'variables', 'trainable_variables'}
    for raw in meta.collection_def['variables'].bytes_list.value:
        variable = variable_pb2.VariableDef()
        variable.ParseFromString(raw)
        assert variable.is_resource and variable.initializer_name == export.RESTORED
        assert not variable.initial_value_name
    assert sorted(meta.signature_def) == [serving.FLOAT_SIGNATURE_KEY, serving.SIGNATURE_KEY]
    signatures = open(os.path.join(exported[2], saved_models.SIGNATURES_FILE)).read()
    assert 'input images, float32 [N, 32, 32, 3]: the network input' in signatures
    assert re.search(r'features +float32 +\[N, 512\]', signatures)


def assert_same_answer(got, want, key):
    """Exact for classes and flags; floats to float32 rounding (another batch size or
    process may pick other kernels on another CPU)."""
    if want.dtype.kind == 'f':
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.max(np.abs(want)),
                                   err_msg=key)
    else:
        np.testing.assert_array_equal(got, want, err_msg=key)


def test_a_bad_image_gets_an_empty_row_and_the_rest_of_the_batch_is_answered(loaded,
                                                                             jpegs):
    good = [open(path, 'rb').read() for path in jpegs[:3]]
    served = loaded.run([good[0], BAD, good[1], b'', good[2]])
    alone = loaded.run(good)
    assert served['valid'].tolist() == [True, False, True, False, True]
    for key, value in alone.items():
        assert_same_answer(served[key][[0, 2, 4]], value, key)
        empty = served[key][[1, 3]]
        if key == 'top_k_classes':
            assert np.all(empty == -1)
        elif key != 'valid':
            assert not np.any(empty), key
    assert np.array_equal(alone['positives'], alone['scores'] >= 0.5)
    nothing = loaded.run([BAD])
    assert nothing['valid'].tolist() == [False] and nothing['scores'].shape == (1, CLASSES)
    assert loaded.run([])['scores'].shape == (0, CLASSES)
    # the float signature: the same network on the preprocessed images
    floats = loaded.run(network_inputs(good), serving.FLOAT_SIGNATURE_KEY)
    for key in serving.FLOAT_OUTPUT_KEYS:
        assert_close(floats[key], alone[key], 'float_images vs serving_default ' + key, 1e-6)


def test_saved_model_cli_runs_the_batch_with_a_bad_image(exported, loaded, jpegs, tmp_path):
    batch = [open(path, 'rb').read() for path in jpegs[:2]] + [BAD]
    np.save(str(tmp_path / 'batch.npy'), np.array(batch))
    cli = os.path.join(os.path.dirname(sys.executable), 'saved_model_cli')
    done = subprocess.run([cli, 'run', '--dir', exported[2], '--tag_set', 'serve',
                           '--signature_def', 'serving_default', '--inputs',
                           'images=%s' % (tmp_path / 'batch.npy'), '--outdir',
                           str(tmp_path / 'out')], env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    want = loaded.run(batch)
    for key, value in want.items():
        assert_same_answer(np.load(str(tmp_path / 'out' / (key + '.npy'))), value, key)


def python_blocks(path):
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r'^```python\n(.*?)^```$', open(path).read(), re.M | re.S)


# After the documented snippets, in their namespace: what the test checks.
EPILOGUE = r'''
import json, sys
fresh = tf.saved_model.load(export)
want = fresh.signatures['float_images'](images=tf.constant(x))
answer = model.signatures['serving_default'](images=tf.constant(images + [b'not an image']))
json.dump({
    'variables': {v.name[:-2]: [list(v.shape), float(np.sum(v.numpy().astype(np.float64)))]
                  for v in fresh.variables},
    'trainable': sorted(v.name[:-2] for v in weights),
    'losses': losses,
    'tf1_valid': served['valid'].tolist(),
    'tf2_vs_tf1_before': float(np.max(np.abs(
        fresh.signatures['serving_default'](images=tf.constant(images))['scores'].numpy()
        - served['scores'][:8]))),
    'fine_tuned_moved': float(np.max(np.abs(answer['scores'].numpy()[:8]
                                            - served['scores'][:8]))),
    'onnx': {'scores': [float(np.max(np.abs(onnx_scores - want['scores'].numpy()))),
                        float(np.max(np.abs(want['scores'].numpy())))],
             'features': [float(np.max(np.abs(onnx_features - want['features'].numpy()))),
                          float(np.max(np.abs(want['features'].numpy())))]},
}, open(sys.argv[1], 'w'))
'''


def test_tf2_fine_tune_onnx_and_the_docs_snippets_as_written(exported, jpegs, tmp_path,
                                                             capsys):
    """tools/export_onnx.py writes demo/model.onnx; docs/inference.md's Python snippets run
    in order in one fresh Python (TF2, eager) from a directory holding demo/ (the export,
    val_0000k.jpg images); then, there: every weight is a variable of TF2's load, with the
    checkpoint's values, TF2 answers as the TF1 session, a three-step GradientTape
    fine-tune lowers the loss and moves the model, and onnxruntime gives TensorFlow's
    scores and features."""
    data, model_dir, export_dir = exported
    demo = tmp_path / 'demo'
    (demo / 'images').mkdir(parents=True)
    os.symlink(os.path.dirname(export_dir), str(demo / 'export'))
    for i, path in enumerate(jpegs[:8]):
        shutil.copyfile(path, str(demo / 'images' / ('val_%05d.jpg' % i)))
    status, _, err = run_main(export_onnx, capsys, '--saved_model', str(demo / 'export'),
                              '-o', str(demo / 'model.onnx'))
    assert status == 0, err
    assert re.match(r'export_onnx.py: wrote .*model.onnx .* onnxruntime vs TensorFlow on 4 '
                    r'random inputs: max \|difference\| features', err[-1]), err
    assert sorted(os.listdir(str(demo))) == ['export', 'images', 'model.onnx']

    blocks = python_blocks(os.path.join(ROOT, 'docs', 'inference.md'))
    assert len(blocks) == 3 and 'tf.compat.v1.Session' in blocks[0]
    script = tmp_path / 'snippets.py'
    script.write_text('\n'.join(blocks) + EPILOGUE)
    facts_file = tmp_path / 'facts.json'
    done = subprocess.run([sys.executable, str(script), str(facts_file)], cwd=str(tmp_path),
                          env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'reference variable' not in done.stderr
    facts = json.loads(facts_file.read_text())

    with tf.Graph().as_default():
        serving.build_inference_graph(flags.default_settings().model.replace(
            resnet_size=18, class_num=CLASSES, image_size=IMAGE_SIZE), 'channels_last')
        model_variables = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
        trainable = sorted(v.op.name for v in tf.trainable_variables())
    reader = tf.train.load_checkpoint(os.path.join(model_dir, 'model.ckpt-2'))
    assert sorted(facts['variables']) == sorted(model_variables) and len(model_variables) > 100
    for name, (shape, total) in facts['variables'].items():
        assert shape == model_variables[name]
        assert total == pytest.approx(np.sum(reader.get_tensor(name).astype(np.float64)),
                                      rel=1e-6, abs=1e-6), name
    assert facts['trainable'] == trainable
    assert facts['tf1_valid'] == [True] * 8 + [False]
    assert facts['tf2_vs_tf1_before'] <= 1e-6
    assert facts['losses'][-1] < facts['losses'][0] and facts['fine_tuned_moved'] > 1e-4
    for key, (difference, scale) in facts['onnx'].items():
        print('onnxruntime vs TF2 %s: max |difference| %.3g (scale %.3g)'
              % (key, difference, scale))
        assert difference <= ONNX_BOUND * max(1.0, scale), key
    print('fine-tune losses', facts['losses'])


def test_export_onnx_refuses_what_it_cannot_convert(exported, tmp_path, capsys, monkeypatch):
    status, out, _ = run_main(export_onnx, capsys, '--help')
    assert status == 0 and 'Exit status: 0 written; 1 the conversion or the check failed' \
        in ' '.join(out.split())
    output = str(tmp_path / 'model.onnx')
    status, _, err = run_main(export_onnx, capsys, '--saved_model', str(tmp_path), '-o',
                              output)
    assert status == 2 and err[-1].startswith('export_onnx.py: error: %s is not a SavedModel'
                                              % tmp_path)
    monkeypatch.setattr(onnx_export, 'missing_extras', lambda: ['tf2onnx'])
    status, _, err = run_main(export_onnx, capsys, '--saved_model', exported[2], '-o', output)
    assert status == 2 and err == ['export_onnx.py: error: tf2onnx not installed; install the '
                                   'ONNX extras: .venv/bin/pip install -r requirements-onnx.txt']
    assert os.listdir(str(tmp_path)) == []


def eval_settings(data, model_dir, **given):
    return settings(resnet_size=18, class_num=CLASSES, image_size=IMAGE_SIZE,
                    batch_norm_decay=0.0, data_dir=data, model_dir=model_dir, batch_size=12,
                    data_format='NHWC', **given)


def scores_of_eval(data, model_dir, checkpoint):
    """Estimator.predict's scores and the labels of the val split, through the evaluation's
    own input_fn (one batch, as the evaluation ran it)."""
    values = laid_out(eval_settings(data, model_dir))
    files = evaluation.evaluation_files(values.data, values.model.class_num)
    estimator = estimator_lib.make_estimator(values, estimator_lib.derived_values(values))
    scores = np.stack([row['scores'] for row in estimator.predict(
        estimator_lib.eval_input_fn(values.data, values.model, files),
        checkpoint_path=checkpoint)])
    with tf.Graph().as_default(), tf.Session() as session:
        dataset = estimator_lib.eval_input_fn(values.data, values.model, files)()
        _, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        labels = session.run(labels)
    return labels, scores


def test_calibrated_thresholds_from_eval_to_predict_and_the_saved_model(exported, jpegs,
                                                                        tmp_path, capsys):
    """The evaluation of --mode=eval --threshold=calibrated (evaluation.evaluate) writes the
    reference's thresholds (every score of the val split tried; class 3 has no positive
    there and keeps 0.5) and reports F1 at 0.5 (its own micro_f1 / macro_f1) and at them;
    predict.py --threshold=calibrated and the SavedModel's positives use them."""
    data, model_dir, _ = exported
    checkpoint = os.path.join(model_dir, 'model.ckpt-2')
    results = evaluation.evaluate(eval_settings(data, model_dir, mode='eval',
                                                threshold='calibrated', log_dir=str(tmp_path)))
    for key in ('micro_f1', 'macro_f1'):
        assert results[key + '_global'] == pytest.approx(results[key], abs=1e-12)
    assert results['macro_f1_calibrated'] >= results['macro_f1']
    path = os.path.join(model_dir, calibration.FILE_NAME)
    thresholds, chosen_for = calibration.read(path, CLASSES)
    assert chosen_for == 'model.ckpt-2'
    labels, scores = scores_of_eval(data, model_dir, checkpoint)
    want, _, positives = f1_optimal_thresholds(labels, scores, 0.7)
    np.testing.assert_allclose(thresholds, want, rtol=0, atol=1e-6)
    assert positives[3] == 0 and thresholds[3] == 0.5

    status, out, err = run_main(predict_tool, capsys, '--checkpoint', model_dir, '--format',
                                'jsonl', '--threshold', 'calibrated', *jpegs[:4])
    assert status == 0, err
    base = str(tmp_path / 'calibrated')
    version = export.export_saved_model(
        checkpoint, base, flags.default_settings().model.replace(
            resnet_size=18, class_num=CLASSES, image_size=IMAGE_SIZE),
        calibrated=path)
    assert open(os.path.join(version, saved_models.THRESHOLDS_FILE)).read() == \
        open(path).read()
    calibrated = Loaded(version)
    try:
        served = calibrated.run([open(p, 'rb').read() for p in jpegs[:4]])
    finally:
        calibrated.session.close()
    assert np.array_equal(served['positives'], served['scores'] >= thresholds)
    for record, positive in zip(map(json.loads, out.splitlines()), served['positives']):
        assert sorted(e['class'] for e in record['positives']) == np.flatnonzero(
            positive).tolist()
    status, out_saved, _ = run_main(predict_tool, capsys, '--saved_model', base, '--format',
                                    'jsonl', '--threshold', 'calibrated', *jpegs[:4])
    assert status == 0
    assert [json.loads(r)['positives'] for r in out_saved.splitlines()] == \
        [json.loads(r)['positives'] for r in out.splitlines()]
