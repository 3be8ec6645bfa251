"""tools/predict.py and tools/extract_features.py without a trained model: the per-image
error isolation of batched prediction, bad input that stops before a model is built, their
--help and the original programs' flag names. The end-to-end runs with a trained model are
in test_serving.py; dictionaries, lists and output formats in test_inference_io.py."""
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import flags as flags_lib
from mlimages.cli import predict_args
from mlimages.inference import serving
from mlimages.cli import extract_features
from mlimages.cli import predict as predict_tool
from helpers import empty_dir, run_main, write_text

DEFAULT_GROUPS = (flags_lib.default_settings().model, flags_lib.default_settings().data)


class FakePredictor(object):
    """b'bad' does not decode; b'odd' decodes but fails in the model."""
    feature_dim = 1

    def __init__(self):
        self.batches = []

    def run(self, encoded, keys):
        self.batches.append(list(encoded))
        if b'bad' in encoded or b'odd' in encoded:
            raise tf.errors.InvalidArgumentError(None, None, 'failed')
        return {key: np.array([[len(e)] for e in encoded], np.float32) for key in keys}

    def decode_error(self, data):
        return 'not an image' if data == b'bad' else None


def foreign_checkpoint(directory):
    with tf.Graph().as_default():
        variable = tf.Variable([1.0, 2.0], name='something_else')
        with tf.Session() as session:
            session.run(variable.initializer)
            return tf.train.Saver([variable]).save(session, os.path.join(directory, 'ckpt'))


def test_a_failing_batch_is_split_to_find_the_bad_images(tmp_path):
    data = {'a': b'a', 'bad': b'bad', 'cc': b'cc', 'odd': b'odd', 'dddd': b'dddd'}
    images = [(name, write_text(tmp_path / name, content.decode()))
              for name, content in data.items()] + [('gone', str(tmp_path / 'gone'))]
    skipped = []
    predictor = FakePredictor()
    rows = list(serving.predict_images(predictor, images, 4,
                                       lambda name, reason: skipped.append((name, reason)),
                                       keys=('features',)))
    assert [(name, float(out['features'][0])) for name, out in rows] == [
        ('a', 1.0), ('cc', 2.0), ('dddd', 4.0)]
    assert [name for name, _ in skipped] == ['bad', 'odd', 'gone']
    assert 'cannot decode: not an image' in skipped[0][1]
    assert 'cannot read' in skipped[2][1]
    # first batch whole, without the undecodable image, then one by one; then the last
    assert predictor.batches == [[b'a', b'bad', b'cc', b'odd'], [b'a', b'cc', b'odd'],
                                 [b'a'], [b'cc'], [b'odd'], [b'dddd']]


class ValidPredictor(FakePredictor):
    """A graph with `valid` (exports and checkpoints of this program): b'bad' gets valid
    false and a row of zeros, the batch is answered."""

    def run(self, encoded, keys):
        self.batches.append(list(encoded))
        valid = np.array([e != b'bad' for e in encoded])
        out = {key: np.array([[len(e) * v] for e, v in zip(encoded, valid)], np.float32)
               for key in keys}
        out['valid'] = valid
        return out


def test_a_graph_with_valid_reports_the_bad_images_from_one_run(tmp_path):
    data = {'a': b'a', 'bad': b'bad', 'cc': b'cc'}
    images = [(name, write_text(tmp_path / name, content.decode()))
              for name, content in data.items()]
    skipped = []
    predictor = ValidPredictor()
    rows = list(serving.predict_images(predictor, images, 4,
                                       lambda name, reason: skipped.append((name, reason)),
                                       keys=('features',)))
    assert [(name, float(out['features'][0])) for name, out in rows] == [('a', 1.0),
                                                                         ('cc', 2.0)]
    assert skipped == [('bad', 'cannot decode: not an image')]
    assert predictor.batches == [[b'a', b'bad', b'cc']]


def test_tools_bad_usage_and_models_that_do_not_exist(tmp_path, capsys):
    image = write_text(tmp_path / 'a.jpg', 'x')
    empty = empty_dir(tmp_path)
    foreign = foreign_checkpoint(str(tmp_path))
    out = str(tmp_path / 'out.tsv')
    cases = [
        (['--checkpoint', tmp_path / 'nope', image], '--checkpoint=%s does not exist'
         % (tmp_path / 'nope')),
        (['--checkpoint', empty, image], 'holds no checkpoint'),
        # The original programs' names are named back as given.
        (['--model_dir', tmp_path / 'nope', image], '--model_dir=%s does not exist'
         % (tmp_path / 'nope')),
        (['--pretrain_ckpt', empty, image], '--pretrain_ckpt=%s: the directory holds no'
         % empty),
        (['--checkpoint', foreign, image], 'holds no model variables of this program'),
        (['--saved_model', empty, image], 'is not a SavedModel directory'),
        (['--checkpoint', foreign, '--list', tmp_path / 'no_list.txt'], 'does not exist'),
        (['--checkpoint', foreign, empty], 'no images found in ' + empty),
        (['--checkpoint', foreign, '--single_label', '--threshold', '0.3', image],
         '--threshold is for multi-label'),
        (['--saved_model', empty, '--image_size', '32', image], '--image_size'),
        (['--checkpoint', foreign, '--top_k', '0', image], 'positive integer'),
        (['--checkpoint', foreign, '--threshold', 'best', image],
         'argument --threshold: expected a number in [0, 1] or calibrated, got \'best\''),
        (['--checkpoint', foreign, '--threshold', '1.5', image],
         'expected a number in [0, 1] or calibrated, got 1.5'),
        ([image], 'one of the arguments --checkpoint --saved_model is required'),
    ]
    for args, fragment in cases:
        status, stdout, err = run_main(predict_tool, capsys, *args, '--output', out)
        assert status == 2, (args, err)
        assert len(err) == 1 and err[0].startswith('predict.py: error: '), (args, err)
        assert fragment in err[0], (args, err)
        assert stdout == ''
        assert sorted(os.listdir(str(tmp_path))) == ['a.jpg', 'checkpoint', 'ckpt.data-00000-'
                                                     'of-00001', 'ckpt.index', 'ckpt.meta',
                                                     'empty'], args


def test_extract_features_bad_model_writes_nothing(tmp_path, capsys):
    image = write_text(tmp_path / 'a.jpg', 'x')
    status, _, err = run_main(extract_features, capsys, '--checkpoint', tmp_path / 'nope',
                              '-o', tmp_path / 'f.npy', image)
    assert status == 2 and err == ['extract_features.py: error: --checkpoint=%s does not '
                                   'exist' % (tmp_path / 'nope')]
    assert os.listdir(str(tmp_path)) == ['a.jpg']
    status, _, err = run_main(extract_features, capsys, image)
    assert status == 2 and 'the following arguments are required: -o/--output' in err[0]


def test_help_says_what_the_exit_status_means(capsys):
    for tool in (predict_tool, extract_features):
        with pytest.raises(SystemExit) as done:
            tool.build_parser().parse_args(['--help'])
        assert done.value.code == 0
        text = ' '.join(capsys.readouterr().out.split())
        assert 'Exit status: 0 when at least one image was processed' in text
        assert '1 when no image could be processed' in text


# ------------------------------------------------------------ the original programs' files

def test_original_flag_names_are_accepted(capsys):
    parser = predict_tool.build_parser()
    args = parser.parse_intermixed_args(
        ['--images=l.txt', '--top_k_pred=3', '--model_dir=m/resnet.ckpt',
         '--dictionary=d.txt', '--result=r.txt', '--format', 'original'])
    assert (args.list, args.top_k, args.checkpoint, args.class_dict, args.output) == (
        'l.txt', 3, 'm/resnet.ckpt', 'd.txt', 'r.txt')
    args = extract_features.build_parser().parse_intermixed_args(
        ['--pretrain_ckpt=./ckpts', '--images=imglist.txt', '--result=test.txt',
         '--resnet_size=101', '--data_format=NCHW', '--visiable_gpu=0'])
    assert (args.checkpoint, args.list, args.output, args.preprocess) == (
        './ckpts', 'imglist.txt', 'test.txt', None)
    status = predict_tool.main(['--saved_model', 'x', '--preprocess', 'eval', 'a.jpg'])
    assert status == 2
    assert '--preprocess go with --checkpoint' in capsys.readouterr().err


def test_a_checkpoints_settings_come_from_the_flags_txt_beside_it(tmp_path):
    """tools/predict.py's settings (inference_settings): trained unless given, the
    given ones that differ named in one warning line each; none from a SavedModel."""
    model = tmp_path / 'model'
    model.mkdir()
    write_text(model / 'flags.txt', '# train.py run\n--image_size=64\n--class_num=3\n'
                                    '--label_type=single\n')
    source = str(model / 'flags.txt')
    parse = predict_tool.build_parser().parse_intermixed_args
    args = parse(['--checkpoint', str(model / 'model.ckpt-5'), 'x.jpg'])
    values, lines = predict_args.chosen_settings(args, list(predict_args.SETTINGS), *DEFAULT_GROUPS)
    assert values == {'image_size': 64, 'resnet_size': None, 'class_num': 3,
                      'batch_norm_epsilon': 1e-5, 'label_type': 'single'}
    assert lines == ['inference settings: image_size 64, resnet_size from the checkpoint, '
                     'class_num 3, batch_norm_epsilon 1e-05 (default: not in flags.txt), '
                     'label_type single (trained: %s)' % source]
    write_text(model / 'flags.txt', '--image_size=64\n--label_type=multi\n')
    args = parse(['--checkpoint', str(model), '--image_size', '224', '--single_label', 'x'])
    values, lines = predict_args.chosen_settings(args, ['image_size', 'label_type'], *DEFAULT_GROUPS)
    assert values == {'image_size': 224, 'label_type': 'single'}
    assert lines[1:] == [
        'warning: --image_size=224 differs from the trained --image_size=64 (%s)' % source,
        'warning: --single_label differs from the trained --label_type=multi (%s)' % source]
    args = parse(['--saved_model', str(model), 'x.jpg'])
    assert predict_args.chosen_settings(args, list(predict_args.SETTINGS), *DEFAULT_GROUPS) == ({}, [])


def test_the_progress_line_counts_the_images_of_the_total():
    import io
    stream = io.StringIO()
    line = predict_args.ImageProgress('predict.py', 10, stream)
    line.update(4)  # into a file: no line before 30 s
    assert stream.getvalue() == ''
    line.finish()
    assert stream.getvalue().startswith('predict.py: 4 of 10 images, ')
    assert ' images/s, ETA ' in stream.getvalue()
