"""openvino_engine.py against TensorFlow fp32 on real JPEGs (ResNet-18, 32 px, 5 classes,
random weights), the contract every engine keeps (a bad image's status, streaming,
progress, the output written whole), --dtype bf16 (its one-line error on a CPU without
bfloat16 instructions) and the line that names the install command without openvino.

Tolerances (stated in docs/engines.md): OpenVINO fp32 against TensorFlow fp32, every
score, probability and feature within 1e-4 x max(1, max |TensorFlow|); the top-k classes
the same where their scores are further apart than that. bf16 against fp32: the features'
cosine >= 0.99. OpenVINO tests run where openvino is installed (requirements-openvino.txt);
the speed and precision of bf16 are measured only on a CPU with bfloat16 instructions."""
import importlib.util
import itertools
import os
import sys

import numpy as np
import pytest
from PIL import Image

import flags as flags_lib
from mlimages.bench import engines
from mlimages.cli import extract_features, predict as predict_tool
from mlimages.inference import export, openvino_engine, serving
from mlimages.config import cpu
from mlimages.model import precision
from helpers import run_main, smooth_pixels

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec('openvino') is None,
    reason='openvino is not installed (pip install -r requirements-openvino.txt)')
needs_bf16_cpu = pytest.mark.skipif(
    not cpu.has_bf16(cpu.this_cpu()),
    reason='this CPU has no bfloat16 instructions (AVX512_BF16 or AMX)')
RELATIVE = 1e-4
MIN_COSINE = 0.99


@pytest.fixture(scope='module')
def trained(module_dir):
    """(checkpoint path, export_dir): a ResNet-18 at its initial weights (the engines'
    agreement does not need training; no train.py run keeps the suite short) and its
    SavedModel."""
    root = str(module_dir('openvino'))
    model = model_group().replace(resnet_size=18, class_num=5)
    checkpoint = engines.random_checkpoint(model, root)
    return checkpoint, export.export_saved_model(checkpoint, os.path.join(root, 'export'),
                                                 model)


@pytest.fixture(scope='module')
def jpegs(module_dir):
    """[(name, path)]: photo-like JPEGs of several shapes, a text file named .jpg third."""
    directory = module_dir('jpegs')
    entries = []
    for i, (height, width) in enumerate([(75, 100), (100, 66), (40, 40), (33, 90), (64, 48)]):
        path = str(directory / ('%d.jpg' % i))
        Image.fromarray(smooth_pixels(height, width, i)).save(path, quality=90)
        entries.append(('%d.jpg' % i, path))
    bad = str(directory / 'bad.jpg')
    with open(bad, 'w') as f:
        f.write('not a JPEG\n')
    entries.insert(2, ('bad.jpg', bad))
    return entries


def model_group():
    return flags_lib.default_settings().model.replace(image_size=32)


def load(engine, model_dir=None, export_dir=None, dtype='fp32', onnx=None):
    module = openvino_engine if engine == 'openvino' else serving
    extra = {'onnx': onnx} if engine == 'openvino' else {}
    return module.load_predictor(checkpoint=model_dir, saved_model=export_dir,
                                 model=model_group(), dtype=dtype, **extra)


def results(predictor, jpegs, batch_size=4):
    """({name: {key: row}}, [skipped names]) of every image."""
    skipped = []
    rows = dict(serving.predict_images(predictor, jpegs, batch_size,
                                       lambda name, reason: skipped.append(name),
                                       serving.OUTPUT_KEYS))
    return rows, skipped


def assert_agree(got, want, relative=RELATIVE):
    assert sorted(got) == sorted(want)
    for name in want:
        for key in serving.FLOAT_OUTPUT_KEYS:
            scale = max(1.0, float(np.max(np.abs(want[name][key]))))
            np.testing.assert_allclose(got[name][key], want[name][key], rtol=0,
                                       atol=relative * scale, err_msg='%s %s' % (name, key))
        scores = want[name]['scores']
        for rank, (a, b) in enumerate(zip(got[name]['top_k_classes'],
                                          want[name]['top_k_classes'])):
            # the same class unless the scores at this rank are a tie within tolerance
            assert a == b or abs(scores[a] - scores[b]) <= relative, (name, rank)


def cosines(got, want):
    return [float(np.dot(got[n]['features'], want[n]['features']) / (
        np.linalg.norm(got[n]['features']) * np.linalg.norm(want[n]['features'])))
        for n in want]


@pytest.fixture(scope='module')
def tensorflow_fp32(predictors, jpegs):
    return results(predictors['tensorflow'], jpegs)


@pytest.fixture(scope='module')
def predictors(trained):
    """{engine: the Predictor of the checkpoint}, loaded once (a conversion takes seconds)."""
    made = {'tensorflow': load('tensorflow', trained[0])}
    if importlib.util.find_spec('openvino'):
        made['openvino'] = load('openvino', trained[0])
    yield made
    for predictor in made.values():
        predictor.close()


@needs_openvino
@pytest.mark.parametrize('source', ['checkpoint', 'saved_model'])
def test_openvino_agrees_with_tensorflow_fp32(trained, jpegs, tensorflow_fp32, predictors,
                                              source):
    if source == 'checkpoint':
        got, skipped = results(predictors['openvino'], jpegs, batch_size=3)
    else:
        predictor = load('openvino', export_dir=trained[1])
        try:
            assert (predictor.class_num, predictor.feature_dim) == (5, 512)
            got, skipped = results(predictor, jpegs, batch_size=3)
        finally:
            predictor.close()
    want, want_skipped = tensorflow_fp32
    assert skipped == want_skipped == ['bad.jpg']
    assert_agree(got, want)


@needs_openvino
def test_a_batch_of_bad_images_only_gives_invalid_rows(predictors):
    predictor = predictors['openvino']
    out = predictor.run([b'not an image', b''], serving.OUTPUT_KEYS)
    assert predictor.decode_error(b'not an image')
    assert not out['valid'].any()
    assert (out['top_k_classes'] == -1).all() and not out['features'].any()


@pytest.mark.parametrize('engine', ['tensorflow', pytest.param('openvino', marks=needs_openvino)])
def test_every_engine_streams_its_images_and_reports_progress(predictors, jpegs, engine):
    """An endless iterator of images: the first results come after reading a batch or two,
    progress counts the images taken, the bad one is skipped each time round."""
    taken, skipped = [], []
    first = list(itertools.islice(serving.predict_images(
        predictors[engine], itertools.cycle(jpegs), 4,
        lambda name, reason: skipped.append(name), ('features',), taken.append), 9))
    good = [name for name, _ in jpegs if name != 'bad.jpg']
    assert [name for name, _ in first] == (good * 2)[:9]
    assert taken == [4, 8] and skipped == ['bad.jpg', 'bad.jpg']


@needs_openvino
def test_extract_features_with_openvino_writes_what_tensorflow_writes(trained, jpegs, tmp_path,
                                                                     capsys):
    model_dir, _ = trained
    paths = [path for _, path in jpegs]
    outputs = {}
    for engine in ('tensorflow', 'openvino'):
        out = str(tmp_path / ('%s.npy' % engine))
        status, _, err = run_main(extract_features, capsys, '--checkpoint', model_dir,
                                  '--image_size', 32, '--engine', engine, '--batch_size', 2,
                                  '-o', out, *paths)
        assert status == 0, err
        assert sum('skipped' in line and 'bad.jpg' in line for line in err) == 1
        outputs[engine] = np.load(out)
    assert ('extract_features.py: engine openvino, fp32' in err)
    assert sorted(os.listdir(str(tmp_path))) == ['openvino.npy', 'openvino.txt',
                                                'tensorflow.npy', 'tensorflow.txt']
    want = outputs['tensorflow']
    np.testing.assert_allclose(outputs['openvino'], want, rtol=0,
                               atol=RELATIVE * max(1.0, float(np.abs(want).max())))


def test_without_openvino_one_line_names_the_install(trained, jpegs, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, 'openvino', None)  # import openvino fails
    status, out, err = run_main(predict_tool, capsys, '--checkpoint', trained[0],
                                '--engine', 'openvino', jpegs[0][1])
    assert status == 2 and not out
    assert len(err) == 1 and 'the openvino package is not installed' in err[0]
    assert 'install -r requirements-openvino.txt' in err[0]


def test_onnx_goes_with_openvino_and_a_saved_model(trained, jpegs, capsys):
    status, _, err = run_main(predict_tool, capsys, '--checkpoint', trained[0], '--onnx',
                              'model.onnx', jpegs[0][1])
    assert status == 2 and '--onnx goes with --engine openvino and --saved_model' in err[-1]


@pytest.mark.skipif(cpu.has_bf16(cpu.this_cpu()), reason='this CPU has bfloat16 instructions: '
                    'bf16 runs instead of the error')
@pytest.mark.parametrize('engine', ['tensorflow', 'openvino'])
def test_bf16_on_a_cpu_without_it_is_one_line(trained, jpegs, capsys, engine):
    status, out, err = run_main(predict_tool, capsys, '--checkpoint', trained[0], '--engine',
                                engine, '--dtype', 'bf16', jpegs[0][1])
    assert status == 2 and not out
    assert len(err) == 1 and 'this CPU (%s) has no bfloat16 instructions' % (
        cpu.this_cpu().model or 'model unknown') in err[0]
    assert err[0].endswith('run with --dtype=fp32')


def test_bf16_of_a_saved_model_in_tensorflow_is_a_usage_error(trained):
    with pytest.raises(Exception, match='a SavedModel computes in float32 in TensorFlow'):
        load('tensorflow', export_dir=trained[1], dtype='bf16')


@pytest.mark.skipif(precision.cpu_kernel_error('bf16') is not None,
                    reason='TensorFlow has no bfloat16 convolution on this CPU')
def test_tensorflow_bf16_is_the_same_checkpoint_in_bfloat16(trained, jpegs, tensorflow_fp32):
    """The library computes bf16 wherever TensorFlow has the kernels (emulated here: the
    commands refuse it on such a CPU); the result is fp32's within bfloat16's precision."""
    predictor = load('tensorflow', trained[0], dtype='bf16')
    try:
        got, skipped = results(predictor, jpegs)
    finally:
        predictor.close()
    want, want_skipped = tensorflow_fp32
    assert skipped == want_skipped
    assert min(cosines(got, want)) >= MIN_COSINE


@needs_openvino
@needs_bf16_cpu
def test_openvino_bf16_agrees_with_tensorflow_fp32(trained, jpegs, tensorflow_fp32):
    predictor = load('openvino', trained[0], dtype='bf16')
    try:
        got, _ = results(predictor, jpegs)
    finally:
        predictor.close()
    assert min(cosines(got, tensorflow_fp32[0])) >= MIN_COSINE


@needs_openvino
@pytest.mark.slow
def test_the_exported_onnx_runs_in_openvino(trained, jpegs, tensorflow_fp32, tmp_path):
    pytest.importorskip('tf2onnx', reason='the ONNX extras are not installed '
                                          '(requirements-onnx.txt)')
    from mlimages.inference import onnx_export
    onnx = str(tmp_path / 'model.onnx')
    onnx_export.export_onnx(trained[1], onnx, 15, 1e-4, 2)
    predictor = load('openvino', export_dir=trained[1], onnx=onnx)
    try:
        got, _ = results(predictor, jpegs)
    finally:
        predictor.close()
    assert_agree(got, tensorflow_fp32[0])
