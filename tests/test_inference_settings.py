"""inference_settings.py: the trained settings read from the flags.txt beside a checkpoint,
and the rule given > trained > default with its log line and warnings. The end-to-end
check that inference reproduces evaluation is test_inference_matches_eval below."""
import json
import os
import pathlib
import re

import numpy as np
import pytest

import flags
from mlimages.inference import inference_settings
from mlimages.errors import UsageError
from helpers import build_records, run_main, run_train, write_lines

DEFAULTS = dict(flags.flat(flags.default_settings()))
TRAINED = ['# train.py run started ...', '--image_size=48', '--resnet_size=18',
           '--class_num=12', '--batch_norm_epsilon=0.001', '--label_type=multi',
           '--hierarchy=', '--lr=0.001']


def model_dir_with(tmp_path, lines=TRAINED):
    directory = tmp_path / 'model'
    directory.mkdir()
    write_lines(directory / 'flags.txt', lines)
    return str(directory)


def test_trained_settings_of_a_model_dir_or_a_checkpoint_in_it_take_the_flags_types(
        tmp_path):
    model_dir = model_dir_with(tmp_path)
    want = {'image_size': 48, 'resnet_size': 18, 'class_num': 12,
            'batch_norm_epsilon': 0.001, 'label_type': 'multi', 'hierarchy': ''}
    for path in (model_dir, os.path.join(model_dir, 'model.ckpt-1200')):
        values, source = inference_settings.trained(path, DEFAULTS)
        assert values == want and type(values['batch_norm_epsilon']) is float
        assert source == os.path.join(model_dir, 'flags.txt')
    assert inference_settings.trained(str(tmp_path / 'published' / 'model.ckpt'),
                                      DEFAULTS) == ({}, None)


def test_a_bad_value_in_flags_txt_is_one_line_naming_the_file(tmp_path):
    model_dir = model_dir_with(tmp_path, ['--image_size=large'])
    with pytest.raises(UsageError, match=r'flags.txt: --image_size=large is not a valid'):
        inference_settings.trained(model_dir, DEFAULTS)


def test_given_wins_with_a_warning_trained_else_default(tmp_path):
    model_dir = model_dir_with(tmp_path, TRAINED[:2] + TRAINED[3:4])  # no resnet_size
    source = os.path.join(model_dir, 'flags.txt')
    values, lines = inference_settings.checkpoint_settings(
        DEFAULTS, {'image_size'}, model_dir, ('image_size', 'class_num', 'resnet_size'))
    assert (values['image_size'], values['class_num'], values['resnet_size']) == (224, 12, 101)
    assert lines == [
        'inference settings: image_size 224 (given), class_num 12, resnet_size 101 '
        '(default: not in flags.txt) (trained: %s)' % source,
        'warning: --image_size=224 differs from the trained --image_size=48 (%s)' % source]
    # The same given value as the trained one: no warning.
    values, lines = inference_settings.checkpoint_settings(
        dict(DEFAULTS, image_size=48), {'image_size'}, model_dir, ('image_size',))
    assert values['image_size'] == 48 and len(lines) == 1
    # No flags.txt: the defaults, and the line says so.
    values, lines = inference_settings.checkpoint_settings(DEFAULTS, set(), str(tmp_path),
                                                           ('image_size', 'class_num'))
    assert flags.replace(flags.default_settings(), **values) == flags.default_settings()
    assert lines == ['inference settings: image_size 224, class_num 1000 (defaults: no '
                     'flags.txt beside %s)' % tmp_path]


def test_a_trained_hierarchy_that_is_gone_is_a_warning_and_left_out(tmp_path):
    tree = tmp_path / 'tree.txt'
    tree.write_text('x')
    model_dir = model_dir_with(tmp_path, ['--hierarchy=%s' % tree])
    values, lines = inference_settings.checkpoint_settings(DEFAULTS, set(), model_dir,
                                                           ('hierarchy',))
    assert values['hierarchy'] == str(tree) and len(lines) == 1
    tree.unlink()
    values, lines = inference_settings.checkpoint_settings(DEFAULTS, set(), model_dir,
                                                           ('hierarchy',))
    assert values['hierarchy'] == ''
    assert lines[1].startswith('warning: the trained --hierarchy=%s (' % tree)


def test_a_saved_model_records_the_training_run_or_the_exports_settings(tmp_path):
    model_dir = model_dir_with(tmp_path)
    values = inference_settings.setting_values(flags.default_settings())
    record = inference_settings.export_record(values, os.path.join(model_dir, 'model.ckpt-3'))
    assert record[1:] == TRAINED and record[0].startswith('# flags.txt of the run')
    record = inference_settings.export_record(values, str(tmp_path / 'model.ckpt'))
    assert '--image_size=224' in record and record[0].startswith('# no flags.txt beside')


# ---------------------------------------------------------------- inference = evaluation

IMAGE_SIZE = 32  # trained size; the tools' default without flags.txt is 224
CLASS_NUM = 5
VAL_IMAGES = 400  # enough that the histogram mAP of eval is within MAP_TOLERANCE
MAP_TOLERANCE = 1e-3  # metrics.py's histogram mAP against the exact (tests/test_metrics.py)


def write_split(root, name, count, rng):
    """count noise JPEGs and their list (labels: positives, soft 0.8 and ignored -1)."""
    from PIL import Image
    images = os.path.join(root, 'images')
    os.makedirs(images, exist_ok=True)
    lines = []
    for i in range(count):
        image = '%s_%04d.jpg' % (name, i)
        pixels = rng.integers(0, 255, size=(36 + i % 7, 40, 3)).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(images, image), quality=90)
        draw = rng.random(CLASS_NUM)
        labels = ['%d' % c if d < 0.3 else '%d:0.8' % c if d < 0.4 else '%d:-1' % c
                  for c, d in enumerate(draw) if d < 0.5]
        lines.append('%s\t%s' % (image, ' '.join(labels)))
    path = os.path.join(root, '%s_list.txt' % name)
    write_lines(pathlib.Path(path), lines)
    return path, images


def list_labels(path):
    from mlimages.recordkit import image_lists
    rows = list(image_lists.scan_list(path, CLASS_NUM))
    y = np.zeros((len(rows), CLASS_NUM), np.float32)
    for i, (_, _, labels) in enumerate(rows):
        for c, value in labels.items():
            y[i, c] = value
    return [name for _, name, _ in rows], y


@pytest.mark.slow
def test_inference_matches_eval_with_the_trained_settings_and_none_given(tmp_path, capsys):
    """A ResNet-18 trained 2 steps at 32 px: train.py --mode=eval and tools/predict.py
    (--preprocess=eval) on the same 400 validation images, both without --image_size,
    --resnet_size or --class_num, give the same mAP and precision@1, the tool's scored
    with tests/references.py's average precision (scikit-learn's formula); the feature
    tool without --image_size gives the features of the trained size, not of 224; the
    export keeps the training run's flags.txt."""
    from references import multilabel_metrics
    from mlimages.cli import extract_features
    from mlimages.cli import predict as predict_tool
    from mlimages.inference import saved_models
    rng = np.random.default_rng(26)
    root = str(tmp_path)
    train_list, images = write_split(root, 'train', 16, rng)
    val_list, _ = write_split(root, 'val', VAL_IMAGES, rng)
    data = os.path.join(root, 'data')
    for split, path in (('train', train_list), ('val', val_list)):
        build_records([path], images, data, split=split, class_num=CLASS_NUM,
                      workers=1, progress=False)
    model_dir = os.path.join(root, 'model')
    common = ['--data_dir=' + data, '--model_dir=' + model_dir,
              '--log_dir=' + os.path.join(root, 'log'), '--batch_size=8']
    # batch_norm_decay 0: the moving statistics of the last batch, finite after two steps.
    trained = run_train(*common, '--class_num=%d' % CLASS_NUM, '--resnet_size=18',
                        '--image_size=%d' % IMAGE_SIZE, '--batch_norm_decay=0',
                        '--batch_norm_epsilon=0.001', '--max_iter=2', '--lr=1e-4',
                        '--data_format=NHWC', '--shuffle_buffer=16')
    assert trained.returncode == 0, trained.stderr[-3000:]

    evaluated = run_train(*common, '--mode=eval', '--batch_size=100')
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert ('inference settings: image_size 32, resnet_size 18, class_num 5, '
            'batch_norm_epsilon 0.001, label_type multi, hierarchy none (trained: %s)'
            % os.path.join(model_dir, 'flags.txt')) in evaluated.stderr
    wrong = run_train(*common, '--mode=eval', '--resnet_size=50')
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1] == (
        'train.py: error: %s is a ResNet-18, --resnet_size is 50'
        % os.path.join(model_dir, 'model.ckpt-2')), wrong.stderr[-2000:]
    assert ('warning: --resnet_size=50 differs from the trained --resnet_size=18'
            in wrong.stderr)
    line = [l for l in evaluated.stderr.splitlines() if '] evaluated ' in l][-1]
    want = {key: float(re.search(r'\b%s = ([0-9.]+)' % re.escape(key), line).group(1))
            for key in ('mAP', 'precision@1')}

    output = os.path.join(root, 'val.jsonl')
    status, _, err = run_main(predict_tool, capsys, '--checkpoint', model_dir, '--list',
                           val_list, '--image_root', images, '--top_k', CLASS_NUM,
                           '--preprocess', 'eval', '--format', 'jsonl', '-o', output)
    assert status == 0, err
    assert err[0] == ('predict.py: inference settings: image_size 32, resnet_size 18, '
                      'class_num 5, batch_norm_epsilon 0.001, label_type multi (trained: %s)'
                      % os.path.join(model_dir, 'flags.txt')), err
    names, y = list_labels(val_list)
    rows = [json.loads(text) for text in open(output)]
    assert [row['image'] for row in rows] == names
    s = np.zeros((len(rows), CLASS_NUM))
    for i, row in enumerate(rows):
        for entry in row['top_k']:
            s[i, entry['class']] = entry['score']
    got = multilabel_metrics(y, s)
    assert abs(got['mAP'] - want['mAP']) <= MAP_TOLERANCE + 5e-5, (got, want)
    # One image may differ at a near-tie of two classes (float rounding of another batch).
    assert abs(got['precision@1'] - want['precision@1']) <= 1.0 / VAL_IMAGES + 5e-5

    def features(*extra):
        out = os.path.join(root, 'f%d.npy' % len(os.listdir(root)))
        status, _, err = run_main(extract_features, capsys, '--checkpoint', model_dir,
                               os.path.join(images, 'val_0000.jpg'),
                               os.path.join(images, 'val_0001.jpg'), '-o', out, *extra)
        assert status == 0, err
        return np.load(out), err
    trained_features, err = features()
    assert err[0].startswith('extract_features.py: inference settings: image_size 32, ')
    given_features, err = features('--image_size', IMAGE_SIZE)
    np.testing.assert_array_equal(trained_features, given_features)
    assert not any('warning' in line for line in err)
    default_features, err = features('--image_size', 224)
    assert err[1] == ('extract_features.py: warning: --image_size=224 differs from the '
                      'trained --image_size=32 (%s)' % os.path.join(model_dir, 'flags.txt'))
    assert np.max(np.abs(default_features - trained_features)) > 1e-3

    export_dir = os.path.join(root, 'export')
    exported = run_train('--mode=export', '--model_dir=' + model_dir,
                         '--export_dir=' + export_dir)
    assert exported.returncode == 0, exported.stderr[-3000:]
    (version,) = os.listdir(export_dir)
    saved = os.path.join(export_dir, version)
    assert saved_models.saved_model_preprocessing(saved).endswith('(S = 32)')
    record = open(os.path.join(saved, saved_models.FLAGS_FILE)).read().splitlines()
    assert record[1:] == open(os.path.join(model_dir, 'flags.txt')).read().splitlines()
