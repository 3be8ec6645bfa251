"""Inference end to end with a really trained model: train.py trains a ResNet-18 two steps
and exports it (--export_dir); the SavedModel, loaded with the SavedModel loader, and
tools/predict.py, tools/extract_features.py and train.py --mode=predict/export must give
what Estimator.predict gives on the same Pillow-made JPEG and PNG files. The preprocessing
is the original's inference (the default, --preprocess=original), checked against OpenCV;
--preprocess=eval, and the original programs' output formats, are checked too."""
import json
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import flags
import image_preprocess
from mlimages import errors
from mlimages.run import model_fn
from mlimages.inference import export, saved_models, serving
import train  # noqa: F401 (graph mode, as train.py runs)
from helpers import CLASSES, model_parts, run_main, run_train, settings, train_model
from mlimages.cli import extract_features
from mlimages.cli import predict as predict_tool


def model_group(**given):
    """train.py's default model group (flags.Model) but the given."""
    return flags.default_settings().model.replace(**given)


pytestmark = pytest.mark.slow

IMAGE_SIZE = 32
FEATURE_DIM = 512  # ResNet-18
DICTIONARY = ('category_index\tcategory_id\tindex_of_parent_category\tcategory name\n'
              '0\tn00002452\t-1\tthing\n1\tn00020827\t-1\tmatter\n'
              '2\tn00002684\t-1\tobject, physical object\n3\tn11425580\t-1\tatmospheric '
              'phenomenon\n4\tn05220461\t0\tbody part\n')
NAMES = ['thing', 'matter', 'object, physical object', 'atmospheric phenomenon', 'body part']
# Two graphs of the same weights (the SavedModel's or the Estimator's) fed the same batch
# gave identical outputs here (AVX-512, oneDNN on and off); another batch size rounds
# convolutions differently, ~1e-6 of the values' scale. Bounds are 1e-5 of that scale, so
# that another CPU's kernels (AVX2, other oneDNN paths) fit too.
RELATIVE = 1e-5


def assert_close(got, want, what=''):
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=0, atol=RELATIVE * scale, err_msg=what)


def assert_top_k(classes, scores, k=None):
    """`classes` is a top-k of `scores` (one image) up to the rounding bound: their scores
    do not increase, and no class left out scores higher. Near-ties may come in either
    order, so the exact argsort is not required."""
    classes = [int(c) for c in classes]
    k = len(classes) if k is None else k
    assert len(classes) == k and len(set(classes)) == k, classes
    tol = RELATIVE * max(1.0, float(np.max(np.abs(scores))))
    chosen = scores[classes]
    assert np.all(np.diff(chosen) <= tol), (classes, scores)
    rest = np.delete(scores, classes)
    assert rest.size == 0 or chosen.min() >= rest.max() - tol, (classes, scores)


@pytest.fixture(scope='module')
def trained(module_dir):
    """(model_dir, export_dir): two training steps, then the SavedModel of the last one."""
    root = str(module_dir('serving'))
    export_dir = os.path.join(root, 'export')
    # batch_norm_decay 0: moving statistics of the last batch, finite after two steps.
    _, model_dir, result = train_model(root, 2, '--image_size=%d' % IMAGE_SIZE,
                                       '--batch_norm_decay=0', '--lr=1e-4',
                                       '--export_dir=' + export_dir)
    # TensorFlow Serving's layout: <export_dir>/<integer version>/.
    (version,) = os.listdir(export_dir)
    assert version.isdigit()
    assert 'exported %s as the SavedModel %s' % (os.path.join(model_dir, 'model.ckpt-2'),
                                                 os.path.join(export_dir, version)) \
        in result.stderr
    assert 'preprocess=original: the original\'s inference preprocessing' in result.stderr
    return model_dir, os.path.join(export_dir, version)


@pytest.fixture(scope='module')
def images(module_dir):
    """A directory of real images, an undecodable one in the middle (natural order) and a
    text file a directory search skips; returns (directory, [(path, bytes)] of the good)."""
    directory = module_dir('images')
    rng = np.random.default_rng(7)
    made = [('1_rgb.jpg', 'RGB', (60, 50), 'JPEG'), ('2_rgb.png', 'RGB', (30, 30), 'PNG'),
            ('4_gray.jpg', 'L', (41, 23), 'JPEG'), ('5_rgba.png', 'RGBA', (20, 35), 'PNG'),
            ('10_tiny.jpg', 'RGB', (1, 1), 'JPEG')]
    for name, mode, size, fmt in made:
        channels = {'RGB': 3, 'L': 1, 'RGBA': 4}[mode]
        pixels = rng.integers(0, 255, size=(size[1], size[0], channels)).astype(np.uint8)
        image = Image.fromarray(pixels[..., 0] if channels == 1 else pixels)
        assert image.mode == mode
        image.save(str(directory / name), fmt)
    (directory / '3_broken.jpg').write_bytes(b'\xff\xd8\xff this is no JPEG')
    (directory / 'notes.txt').write_text('not an image')
    good = [str(directory / name) for name in
            ('1_rgb.jpg', '2_rgb.png', '4_gray.jpg', '5_rgba.png', '10_tiny.jpg')]
    return str(directory), [(path, open(path, 'rb').read()) for path in good]


def original_input(data):
    """The default inference preprocessing (the original's), one encoded image."""
    return image_preprocess.original_inference_image(
        image_preprocess.decode_uint8_like_opencv(data), IMAGE_SIZE)


def eval_input(data):
    """--preprocess=eval: train.py's evaluation crop, one encoded image."""
    return image_preprocess.eval_network_input(image_preprocess.decode_image(data), IMAGE_SIZE)


@pytest.fixture(scope='module')
def reference(trained, images):
    """Estimator.predict of model_fn.resnet_model_fn on the good images, in order, with the
    default (original) preprocessing."""
    return estimator_reference(trained, images, original_input)


@pytest.fixture(scope='module')
def eval_reference(trained, images):
    return estimator_reference(trained, images, eval_input)


def estimator_reference(trained, images, preprocess):
    model_dir, _ = trained
    encoded = [data for _, data in images[1]]

    def input_fn():
        dataset = tf.data.Dataset.from_tensor_slices(encoded)
        dataset = dataset.map(preprocess)
        # One batch, as the SavedModel is fed below: a convolution's float rounding can
        # depend on the batch size (~1e-6 relative), the graph itself does not differ.
        return dataset.batch(len(encoded))

    values = settings(resnet_size=18, class_num=CLASSES, batch_norm_decay=0.0)
    estimator = tf.estimator.Estimator(
        model_fn.make_model_fn(model_parts(values), model_fn.Derived()),
        model_dir=model_dir)
    rows = list(estimator.predict(input_fn))
    result = {key: np.stack([row[key] for row in rows])
              for key in ('scores', 'probabilities', 'features')}
    assert result['features'].shape == (len(encoded), FEATURE_DIM)
    assert np.all(np.isfinite(result['scores']))
    return result


def test_saved_model_matches_estimator_predict(trained, images, reference):
    _, export_dir = trained
    encoded = [data for _, data in images[1]]
    with tf.Graph().as_default() as graph, tf.Session() as session:
        meta = tf.saved_model.loader.load(session, ['serve'], export_dir)
        signature = meta.signature_def['serving_default']
        assert set(signature.inputs) == {'images'}
        assert set(signature.outputs) == set(serving.OUTPUT_KEYS + serving.NEW_KEYS)
        assert signature.inputs['images'].dtype == tf.string.as_datatype_enum
        fetches = {key: graph.get_tensor_by_name(info.name)
                   for key, info in signature.outputs.items()}
        feed = {graph.get_tensor_by_name(signature.inputs['images'].name): encoded}
        served = session.run(fetches, feed)
    for key in ('scores', 'probabilities', 'features'):
        assert_close(served[key], reference[key], key)
        print('max |SavedModel - Estimator.predict| %s: %.3g'
              % (key, np.max(np.abs(served[key] - reference[key]))))
    k = min(5, CLASSES)
    assert served['top_k_classes'].shape == (len(encoded), k)
    for i in range(len(encoded)):
        assert_top_k(served['top_k_classes'][i], reference['scores'][i], k)
        assert_close(served['top_k_scores'][i],
                     reference['scores'][i][served['top_k_classes'][i]])


def test_scores_and_probabilities_are_the_head_over_the_features(trained, images,
                                                                  reference):
    """Independent of the model code: from the checkpoint's head weights in numpy,
    scores = sigmoid(features W + b) and probabilities = softmax(features W + b)."""
    model_dir, _ = trained
    reader = tf.train.load_checkpoint(os.path.join(model_dir, 'model.ckpt-2'))
    kernel = reader.get_tensor('logits/dense/kernel').astype(np.float64)
    bias = reader.get_tensor('logits/dense/bias').astype(np.float64)
    assert kernel.shape == (FEATURE_DIM, CLASSES)
    logits = reference['features'].astype(np.float64) @ kernel + bias
    assert_close(reference['scores'], 1 / (1 + np.exp(-logits)), 'scores')
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    assert_close(reference['probabilities'], exp / exp.sum(axis=1, keepdims=True),
                 'probabilities')


def tsv_rows(text):
    lines = text.splitlines()
    return lines[0].split('\t'), [line.split('\t') for line in lines[1:]]


def test_predict_tsv_with_ml_images_names_reports_the_broken_image_and_goes_on(
        trained, images, reference, tmp_path, capsys):
    model_dir, _ = trained
    directory, good = images
    dictionary = tmp_path / 'dictionary.txt'
    dictionary.write_text(DICTIONARY)
    # No --image_size: the trained one, from the run's flags.txt (inference_settings).
    status, out, err = run_main(predict_tool, capsys, '--checkpoint', model_dir,
                                '--class_dict', dictionary,
                                '--top_k', 2, '--threshold', 0.5, '--batch_size', 2, directory)
    assert status == 0, err
    broken = os.path.join(directory, '3_broken.jpg')
    assert len(err) == 3 and err[0] == (
        'predict.py: inference settings: image_size %d, resnet_size 18, class_num %d, '
        'batch_norm_epsilon 1e-05, label_type multi (trained: %s)'
        % (IMAGE_SIZE, CLASSES, os.path.join(model_dir, 'flags.txt'))), err
    assert err[1].startswith('predict.py: skipped %s: cannot decode: ' % broken), err
    assert err[2] == 'predict.py: 5 images classified, 1 skipped'
    header, rows = tsv_rows(out)
    assert header == ['image', 'rank', 'class', 'score', 'positive', 'name']
    assert list(dict.fromkeys(row[0] for row in rows)) == [path for path, _ in good]
    for i, (path, _) in enumerate(good):
        scores = reference['scores'][i]
        mine = [r for r in rows if r[0] == path]
        expected = max(2, int(np.sum(scores >= 0.5)))
        assert len(mine) == expected
        assert_top_k([row[2] for row in mine], scores)
        for rank, row in enumerate(mine, 1):
            c = int(row[2])
            assert int(row[1]) == rank
            assert abs(float(row[3]) - scores[c]) < 1e-5
            if abs(scores[c] - 0.5) > 1e-5:  # a score at the threshold may round either way
                assert row[4] == ('1' if scores[c] >= 0.5 else '0')
            assert row[5] == NAMES[c]


def test_predict_json_lines_single_label_and_name_per_line_from_a_saved_model(
        trained, images, reference, tmp_path, capsys):
    _, export_dir = trained
    directory, good = images
    names = tmp_path / 'names.txt'
    names.write_text('\n'.join('class %d' % c for c in range(CLASSES)) + '\n')
    listing = tmp_path / 'list.txt'
    broken = os.path.join(directory, '3_broken.jpg')
    lines = ['%s\t0:1 2:0.9' % good[0][0], broken + ' 1', good[1][0],
             os.path.basename(good[2][0]), os.path.join(directory, 'missing.jpg')]
    listing.write_text('\n'.join(lines) + '\n')
    output = tmp_path / 'out.jsonl'
    status, out, err = run_main(predict_tool, capsys, '--saved_model', export_dir,
                                '--single_label', '--top_k', 3, '--class_dict', names,
                                '--format', 'jsonl', '--list', listing, '--output', output)
    assert status == 0 and out == ''
    assert len(err) == 5 and err[-1] == 'predict.py: 2 images classified, 3 skipped'
    assert err[0] == ('predict.py: inference settings: built into the SavedModel %s (%s)'
                      % (export_dir, saved_models.saved_model_preprocessing(export_dir)))
    skipped = sorted(err[1:4])
    assert skipped[0].startswith('predict.py: skipped %s: cannot decode: ' % broken)
    assert skipped[1].startswith('predict.py: skipped %s: cannot read: '
                                 % os.path.join(directory, 'missing.jpg'))
    # without --image_root, relative to the current directory: not found
    assert skipped[2].startswith('predict.py: skipped 4_gray.jpg: cannot read: ')
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r['image'] for r in records] == [good[0][0], good[1][0]]
    for i, record in enumerate(records):
        probabilities = reference['probabilities'][i]
        order = [e['class'] for e in record['top_k']]
        assert_top_k(order, probabilities, 3)
        assert [e['name'] for e in record['top_k']] == ['class %d' % c for c in order]
        assert_close([e['score'] for e in record['top_k']], probabilities[order])
        assert 'positives' not in record
    # with --image_root the relative entry is found
    status, out, err = run_main(predict_tool, capsys, '--saved_model', export_dir,
                                '--format', 'jsonl', '--list', listing, '--image_root',
                                directory, '--threshold', 0.0)
    records = [json.loads(line) for line in out.splitlines()]
    assert [r['image'] for r in records] == [good[0][0], good[1][0], '4_gray.jpg']
    assert all(len(r['positives']) == CLASSES for r in records)  # threshold 0: every class


def test_threshold_one_lists_only_the_top_k(trained, images, reference, capsys):
    model_dir, _ = trained
    directory, good = images
    status, out, _ = run_main(predict_tool, capsys, '--checkpoint', model_dir, '--image_size',
                              IMAGE_SIZE, '--top_k', 1, '--threshold', 1.0, good[3][0])
    header, rows = tsv_rows(out)
    assert status == 0 and header[-1] == 'positive' and len(rows) == 1
    assert_top_k([rows[0][2]], reference['scores'][3])


def test_no_decodable_image_is_exit_status_1_and_no_output_file(trained, images, tmp_path,
                                                                 capsys):
    model_dir, _ = trained
    directory, _ = images
    output = tmp_path / 'out.tsv'
    status, out, err = run_main(predict_tool, capsys, '--checkpoint', model_dir,
                                '--image_size', IMAGE_SIZE, '--output', output,
                                os.path.join(directory, '3_broken.jpg'))
    assert status == 1 and err[-1] == 'predict.py: error: no image could be processed ' \
                                      '(1 skipped)'
    assert os.listdir(str(tmp_path)) == []


def test_extract_features_rows_and_names_in_order(trained, images, reference, tmp_path,
                                                  capsys):
    model_dir, export_dir = trained
    directory, good = images
    # The default batch of 32 runs the 5 good images as one batch, as the reference did;
    # batches of 2 round differently (a convolution's rounding depends on the batch size).
    for source, batch in (
            (['--checkpoint', os.path.join(model_dir, 'model.ckpt-2'), '--image_size',
              IMAGE_SIZE], 32), (['--saved_model', export_dir], 2)):
        output = tmp_path / 'features.npy'
        status, _, err = run_main(extract_features, capsys, *source, '--batch_size', batch,
                                  directory, '-o', output)
        assert status == 0, err
        assert err[0].startswith('extract_features.py: inference settings: ')
        assert 'skipped %s' % os.path.join(directory, '3_broken.jpg') in err[1]
        features = np.load(str(output))
        assert features.shape == (len(good), FEATURE_DIM) and features.dtype == np.float32
        assert_close(features, reference['features'], 'features')
        names = (tmp_path / 'features.txt').read_text().splitlines()
        assert names == [path for path, _ in good]
        assert sorted(os.listdir(str(tmp_path))) == ['features.npy', 'features.txt']


def test_extract_features_pca_fitted_saved_and_reapplied(trained, images, reference,
                                                        tmp_path, capsys):
    """--pca_dim 3 on the 5 good images: numpy's SVD of their features (up to each
    component's sign), the PCA saved beside the output; --pca applies it unchanged to
    another set (here two of the images): the same rows."""
    from references import pca as numpy_pca
    model_dir, _ = trained
    directory, good = images
    output = tmp_path / 'train.npy'
    status, _, err = run_main(extract_features, capsys, '--checkpoint', model_dir,
                              '--pca_dim', 3, directory, '-o', output)
    assert status == 0, err
    assert re.match(r'extract_features.py: fitted and saved PCA .*train.pca.npz: 3 of 512 '
                    r'dimensions, [\d.]+ % of the variance of the 5 images', err[-2]), err
    assert err[-1] == 'extract_features.py: 5 x 3 features in %s, 1 images skipped' % output
    reduced = np.load(str(output))
    mean, components, _ = numpy_pca(reference['features'], 3)
    want = (reference['features'] - mean) @ components.T
    signs = np.sign(np.sum(reduced * want, axis=0))
    assert_close(reduced * signs, want, 'PCA projections')
    again = tmp_path / 'other.npy'
    status, _, err = run_main(extract_features, capsys, '--checkpoint', model_dir, '--pca',
                              tmp_path / 'train.pca.npz', good[3][0], good[1][0], '-o', again)
    assert status == 0 and 'applied the PCA' in err[-2], err
    assert_close(np.load(str(again)), reduced[[3, 1]], 'PCA reapplied')
    status, _, err = run_main(extract_features, capsys, '--checkpoint', model_dir,
                              '--pca_dim', 5, directory, '-o', tmp_path / 'x.npy')
    assert status == 2 and 'a PCA of 5 images of 512-d features has at most 4' in err[-1]
    assert sorted(os.listdir(str(tmp_path))) == ['other.npy', 'other.txt', 'train.npy',
                                                 'train.pca.npz', 'train.txt']


def test_model_mismatches_are_one_line_and_exit_2(trained, images, tmp_path, capsys):
    model_dir, export_dir = trained
    _, good = images
    dictionary = tmp_path / 'dictionary.txt'
    dictionary.write_text('\n'.join(NAMES[:4]) + '\n')
    output = tmp_path / 'out.tsv'
    checkpoint = os.path.join(model_dir, 'model.ckpt-2')
    cases = [
        (['--checkpoint', model_dir, '--class_num', 7], '%s has %d classes, --class_num is 7'
         % (checkpoint, CLASSES)),
        (['--saved_model', export_dir, '--class_num', 7], '%s has %d classes, --class_num is '
         '7' % (export_dir, CLASSES)),
        (['--checkpoint', model_dir, '--resnet_size', 50], '%s is a ResNet-18, --resnet_size '
         'is 50' % checkpoint),
        (['--checkpoint', model_dir, '--class_dict', dictionary],
         'class dictionary %s has 4 classes, the model has %d' % (dictionary, CLASSES)),
    ]
    for args, message in cases:
        status, out, err = run_main(predict_tool, capsys, *args, '--output', output,
                                    good[0][0])
        # A model that does not load: the error is the only line; a dictionary that does
        # not fit it comes after the settings line.
        assert status == 2 and err[-1] == 'predict.py: error: ' + message, (args, err)
        assert len(err) == 1 or err[0].startswith('predict.py: inference settings:'), err
        assert os.listdir(str(tmp_path)) == ['dictionary.txt']


def test_export_mode_and_predict_mode_of_train_py(trained, images, reference, tmp_path,
                                                  capsys):
    model_dir, _ = trained
    directory, good = images
    common = ['--model_dir=' + model_dir, '--class_num=%d' % CLASSES, '--resnet_size=18',
              '--image_size=%d' % IMAGE_SIZE]
    export_dir = str(tmp_path / 'first')
    result = run_train(*common, '--mode=export', '--export_dir=' + export_dir,
                       '--checkpoint_path=' + os.path.join(model_dir, 'model.ckpt-2'))
    assert result.returncode == 0, result.stderr[-2000:]
    predictor = serving.load_predictor(saved_model=export_dir)
    try:
        served = predictor.run([data for _, data in good], ('scores', 'features'))
    finally:
        predictor.close()
    for key in ('scores', 'features'):
        assert_close(served[key], reference[key], key)

    bad = run_train(*common[:1], '--class_num=7', *common[2:], '--mode=export',
                    '--export_dir=' + str(tmp_path / 'second'))
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == 'train.py: error: %s has %d classes, ' \
        '--class_num is 7' % (os.path.join(model_dir, 'model.ckpt-2'), CLASSES)
    assert not os.path.exists(str(tmp_path / 'second'))

    listing = tmp_path / 'piclist.txt'
    listing.write_text(''.join('%s\t0:1\n' % path for path in
                               [good[0][0], os.path.join(directory, '3_broken.jpg'),
                                good[1][0]]))
    result = run_train(*common, '--mode=predict', '--piclist=%s' % listing, '--top_k=2',
                       '--threshold=0.6')
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'train.py: skipped %s' % os.path.join(directory, '3_broken.jpg') in result.stderr
    status, expected, _ = run_main(predict_tool, capsys, '--checkpoint', model_dir,
                                   '--image_size', IMAGE_SIZE, '--top_k', 2, '--threshold',
                                   0.6, '--list', listing)
    assert status == 0

    # The same rows; scores may differ in the last printed digit (another process and batch
    # size: float rounding, ~1e-6).
    def rows(text):
        return [line.split('\t') for line in text.splitlines()]
    got, want = rows(result.stdout), rows(expected)
    assert len(got) == len(want) and got[0] == want[0]
    score, klass = want[0].index('score'), want[0].index('class')
    for a, b in zip(got[1:], want[1:]):
        # Near-ties may swap ranks: then the two classes' scores agree to the bound.
        assert abs(float(a[score]) - float(b[score])) <= RELATIVE
        if a[klass] == b[klass]:
            assert a[:score] + a[score + 1:] == b[:score] + b[score + 1:]



# ------------------------------------------------ the original's inference, OpenCV, formats

def opencv_network_input(cv2, path, image_size=IMAGE_SIZE):
    """The original's extract_feature.py / image_classification.py input written with
    OpenCV: cv2.imread (BGR), shorter side 256 x image_size / 224, int() sizes, centre crop
    at int((new - S) / 2), (x / 255 - 0.5) * 2, BGR -> RGB."""
    image = cv2.imread(path)
    assert image is not None, path
    side = round(256 * image_size / 224)
    raw_h, raw_w = float(image.shape[0]), float(image.shape[1])
    new_h = new_w = float(side)
    if raw_h <= raw_w:
        new_w = raw_w / raw_h * new_h
    else:
        new_h = raw_h / raw_w * new_w
    image = cv2.resize(image, (int(new_w), int(new_h)))
    top, left = int((new_h - image_size) / 2), int((new_w - image_size) / 2)
    crop = image[top:top + image_size, left:left + image_size]
    return (((crop / 255.0) - 0.5) * 2.0)[..., ::-1]


@pytest.fixture(scope='module')
def photos(module_dir):
    """Non-square photo-like JPEGs (smooth gradients and noise, both orientations) and a PNG."""
    directory = module_dir('photos')
    rng = np.random.default_rng(3)
    paths = []
    for i, (height, width) in enumerate([(375, 500), (500, 333), (120, 347), (61, 40)]):
        y, x = np.mgrid[0:height, 0:width]
        pixels = np.stack([x * 255.0 / width, y * 255.0 / height,
                           127 + 60 * np.sin(x / 7.0) * np.cos(y / 5.0)], -1)
        pixels = np.clip(pixels + rng.normal(0, 12, pixels.shape), 0, 255).astype(np.uint8)
        path = str(directory / ('photo_%d.%s' % (i, 'png' if i == 3 else 'jpg')))
        Image.fromarray(pixels).save(path, quality=92)
        paths.append(path)
    return paths


@pytest.mark.parametrize('image_size', [224, IMAGE_SIZE])
def test_tools_network_input_is_opencvs_within_one_level(photos, image_size):
    """serving.decoded_batch, the input stage of predict.py, extract_features.py and the
    SavedModel, against the OpenCV reference: within 1/255 on [0, 1] (2/255 on [-1, 1])."""
    cv2 = pytest.importorskip('cv2')
    with tf.Graph().as_default(), tf.Session() as session:
        encoded = tf.placeholder(tf.string, [None])
        batch, _ = serving.decoded_batch(encoded, image_size)
        for path in photos:
            got = session.run(batch, {encoded: [open(path, 'rb').read()]})[0]
            want = opencv_network_input(cv2, path, image_size)
            assert got.shape == want.shape == (image_size, image_size, 3)
            difference = np.max(np.abs(got - want)) / 2
            print('%s at %d: max |input - OpenCV\'s| = %.3g / 255'
                  % (os.path.basename(path), image_size, difference * 255))
            assert difference <= 1 / 255 + 1e-6, path


def model_on_inputs(model_dir, inputs):
    """features and probabilities of the checkpoint's model on given network inputs."""
    with tf.Graph().as_default(), tf.Session() as session:
        images = tf.placeholder(tf.float32, [None, IMAGE_SIZE, IMAGE_SIZE, 3])
        model = model_fn.make_model_fn(
            model_parts(settings(resnet_size=18, class_num=CLASSES)), model_fn.Derived())
        spec = model(images, None, tf.estimator.ModeKeys.PREDICT)
        serving.restore(session, tf.train.latest_checkpoint(model_dir))
        return session.run(spec.predictions, {images: np.stack(inputs).astype(np.float32)})


def test_extract_features_original_format_from_the_original_list(trained, photos, tmp_path,
                                                                  capsys):
    """--format original with the original's flag names: `path \t label \t f1 ... fD` for
    each line of a `path label` list, the features those of the OpenCV-made input."""
    cv2 = pytest.importorskip('cv2')
    model_dir, _ = trained
    listing = tmp_path / 'imglist.txt'
    listing.write_text(''.join('%s %d\n' % (path, 10 + i) for i, path in enumerate(photos)))
    result = tmp_path / 'test.txt'
    status, _, err = run_main(extract_features, capsys, '--format', 'original',
                              '--pretrain_ckpt', model_dir, '--image_size', IMAGE_SIZE,
                              '--images', listing, '--result', result)
    assert status == 0, err
    lines = result.read_text().splitlines()
    assert len(lines) == len(photos)
    want = model_on_inputs(model_dir, [opencv_network_input(cv2, p) for p in photos])
    for i, (line, path) in enumerate(zip(lines, photos)):
        name, label, values = line.split('\t')
        assert (name, label) == (path, str(10 + i))
        features = np.array([float(v) for v in values.split(' ')], np.float32)
        assert features.shape == (FEATURE_DIM,)
        # Python's str() of each float32 reads back to the same float32
        assert values.split(' ') == [str(x) for x in features]
        assert_close(features, want['features'][i], path)


def test_predict_original_format_reads_imagenets_dictionary_as_the_original(
        trained, images, photos, tmp_path, capsys):
    """image_classification.py's text: `+++ the predictions of PATH is:`, then the top-k
    `INDEX NAME: PROB` (softmax, %.3f, NAME = the dictionary line's second tab field), and
    `open pic PATH failed` in place for an unreadable image."""
    cv2 = pytest.importorskip('cv2')
    model_dir, _ = trained
    directory, _ = images
    dictionary = tmp_path / 'imagenet2012_dictionary.txt'
    words = ['tench\tTinca\ttinca', 'goldfish\tCarassius\tauratus',
             'great\twhite\tshark\twhite\tshark', 'tiger\tshark', 'hammerhead']
    dictionary.write_text(''.join('%d\t%s\n' % (i, w) for i, w in enumerate(words)))
    broken = os.path.join(directory, '3_broken.jpg')
    order = [photos[0], broken, photos[1], photos[2]]
    listing = tmp_path / 'im_list_for_classification.txt'
    listing.write_text(''.join('%s\n' % path for path in order))
    result = tmp_path / 'label_pred.txt'
    status, _, err = run_main(predict_tool, capsys, '--format', 'original', '--images',
                              listing, '--top_k_pred', 3, '--model_dir', model_dir,
                              '--image_size', IMAGE_SIZE, '--dictionary', dictionary,
                              '--result', result)
    assert status == 0, err
    good = [p for p in order if p != broken]
    want = model_on_inputs(model_dir, [opencv_network_input(cv2, p) for p in good])
    lines = iter(result.read_text().splitlines())
    k = 0
    for path in order:
        if path == broken:
            assert next(lines) == 'open pic %s failed' % broken
            continue
        assert next(lines) == '+++ the predictions of %s is:' % path
        probabilities = want['probabilities'][k]
        classes = []
        for _ in range(3):
            index, name, probability = re.match(r'^(\d+) (\S+): (\d\.\d{3})$',
                                                next(lines)).groups()
            classes.append(int(index))
            assert name == words[int(index)].split('\t')[0]
            assert abs(float(probability) - probabilities[int(index)]) <= 0.0005 + 1e-5
        assert_top_k(classes, probabilities, 3)
        k += 1
    assert next(lines, None) is None
    # the project's own formats read the same file as names of whole words
    from mlimages.inference import inference_io
    assert inference_io.load_class_names(str(dictionary))[2] == 'great white shark white shark'


def test_preprocess_eval_in_tools_and_export(trained, images, eval_reference, tmp_path,
                                             capsys):
    """--preprocess=eval gives train.py's evaluation crop in extract_features.py and in a
    SavedModel exported with it, which records its preprocessing."""
    model_dir, _ = trained
    directory, good = images
    output = tmp_path / 'features.npy'
    status, _, err = run_main(extract_features, capsys, '--checkpoint', model_dir,
                              '--image_size', IMAGE_SIZE, '--preprocess', 'eval', directory,
                              '-o', output)
    assert status == 0, err
    assert_close(np.load(str(output)), eval_reference['features'], 'features')
    export_dir = str(tmp_path / 'eval_export')
    result = run_train('--model_dir=' + model_dir, '--class_num=%d' % CLASSES,
                       '--resnet_size=18', '--image_size=%d' % IMAGE_SIZE, '--mode=export',
                       '--export_dir=' + export_dir, '--preprocess=eval')
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'preprocess=eval: train.py\'s evaluation crop' in result.stderr
    assert saved_models.saved_model_preprocessing(saved_models.resolve_saved_model(export_dir)) \
        .startswith('preprocess=eval: ')
    predictor = serving.load_predictor(saved_model=export_dir)
    try:
        assert predictor.preprocessing.startswith('preprocess=eval: ')
        served = predictor.run([data for _, data in good], ('features',))
    finally:
        predictor.close()
    assert_close(served['features'], eval_reference['features'], 'features')
    bad = run_train('--model_dir=' + model_dir, '--mode=export', '--preprocess=crop',
                    '--export_dir=' + str(tmp_path / 'x'))
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        'train.py: error: --preprocess must be original (the original\'s inference) or '
        'eval (the evaluation crop), got \'crop\'')


def test_exports_are_versions_of_a_base_and_the_base_serves_the_latest(trained, images,
                                                                       tmp_path):
    """--export_dir=D writes D/<version>/ and keeps older versions; --saved_model takes D
    (its highest version) or one version; what is not a base of versions is refused."""
    model_dir, first_version = trained
    _, good = images
    base = str(tmp_path / 'base')
    model = model_group(resnet_size=18, class_num=CLASSES, image_size=IMAGE_SIZE)
    checkpoint = os.path.join(model_dir, 'model.ckpt-2')
    old = export.export_saved_model(checkpoint, base, model, version=7)
    new = export.export_saved_model(checkpoint, base, model, preprocess='eval')
    assert old == os.path.join(base, '7') and int(os.path.basename(new)) > 7
    assert sorted(os.listdir(base)) == sorted(['7', os.path.basename(new)])  # no leftovers
    assert saved_models.resolve_saved_model(base) == new
    assert saved_models.resolve_saved_model(old) == old
    latest = serving.load_predictor(saved_model=base)
    try:
        assert latest.preprocessing.startswith('preprocess=eval: ')
    finally:
        latest.close()
    for bad, fragment in ((first_version, 'is itself a SavedModel'),
                          (str(tmp_path), 'something other than SavedModel versions')):
        with pytest.raises(errors.UsageError, match=fragment):
            export.export_saved_model(checkpoint, bad, model)
    with pytest.raises(errors.UsageError, match='nor a base directory of versions'):
        saved_models.resolve_saved_model(str(tmp_path / 'empty'))


def test_rest_request_rows_reach_the_signature(trained, images, reference):
    """What TensorFlow Serving's REST API hands the signature for
    {"instances": [{"b64": ...}, ...]}: each instance's base64 decoded to the bytes of the
    image file, a batch of strings for the one input 'images'; the response rows are
    {output: value} per image."""
    import base64
    _, export_dir = trained
    _, good = images
    request = json.dumps({'instances': [{'b64': base64.b64encode(data).decode('ascii')}
                                        for _, data in good]})
    rows = json.loads(request)['instances']
    batch = [base64.b64decode(row['b64']) for row in rows]  # as the model server decodes
    assert batch == [data for _, data in good]
    with tf.Graph().as_default() as graph, tf.Session() as session:
        meta = tf.saved_model.loader.load(session, ['serve'], export_dir)
        signature = meta.signature_def['serving_default']
        (name, info), = signature.inputs.items()
        assert name == 'images' and info.dtype == tf.string.as_datatype_enum
        assert [d.size for d in info.tensor_shape.dim] == [-1]  # a batch of strings
        fetches = {key: graph.get_tensor_by_name(out.name)
                   for key, out in signature.outputs.items()}
        served = session.run(fetches, {graph.get_tensor_by_name(info.name): batch})
    response = {'predictions': [{key: value[i].tolist() for key, value in served.items()}
                                for i in range(len(batch))]}
    assert len(response['predictions']) == len(good)
    for i, row in enumerate(response['predictions']):
        assert len(row['scores']) == CLASSES and len(row['features']) == FEATURE_DIM
        assert_close(np.array(row['scores']), reference['scores'][i])


@pytest.mark.parametrize('dtype', ['bf16', 'fp16'])
def test_exports_are_float32_whatever_the_training_dtype(trained, images, reference,
                                                         tmp_path, dtype):
    """A --dtype=bf16 or fp16 run's export (its options carry the dtype) is a float32
    SavedModel: no bfloat16 or float16 tensor anywhere in its graph, and it serves the fp32
    reference's scores."""
    model_dir, _ = trained
    model = model_group(resnet_size=18, class_num=CLASSES, image_size=IMAGE_SIZE, dtype=dtype)
    path = export.export_saved_model(os.path.join(model_dir, 'model.ckpt-2'),
                                      str(tmp_path / 'export'), model)
    with tf.Graph().as_default(), tf.Session() as session:
        graph_def = tf.saved_model.loader.load(session, serving.SERVING_TAGS, path).graph_def
    half = {tf.bfloat16.as_datatype_enum, tf.float16.as_datatype_enum}
    typed = [(node.name, key) for node in graph_def.node for key, value in node.attr.items()
             if value.type in half or half & set(value.list.type)]
    assert not typed, typed[:5]
    assert any(node.op == 'Conv2D' and node.attr['T'].type == tf.float32.as_datatype_enum
               for node in graph_def.node)
    predictor = serving.load_predictor(saved_model=path)
    try:
        served = predictor.run([data for _, data in images[1]], ('scores',))
    finally:
        predictor.close()
    assert_close(served['scores'], reference['scores'], 'scores')
