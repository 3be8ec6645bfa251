"""The pooled feature of each image (the input of the logits layer: 2048 values for
ResNet-50 and deeper, 512 for ResNet-18/34), as the original's feature extraction gave.

    .venv/bin/python tools/extract_features.py --checkpoint out/checkpoint \\
        --list images.txt --output features.npy          # + features.txt, the image names
    .venv/bin/python tools/extract_features.py --saved_model export/ photos/ -o features.npy
    # the original's extract_feature.py, its flags and its text output:
    .venv/bin/python tools/extract_features.py --format original --pretrain_ckpt=./ckpts \
        --images=imglist.txt --result=test.txt

Writes OUTPUT (.npy, float32, N x D) and a text file with the N image names in row order
(--names, default OUTPUT with .txt for .npy); with --format original one text file as the
original's extract_feature.py: per image `path <TAB> second field of its list line <TAB>
f1 f2 ... fD` (the list lines split on spaces as the original did: `path label`).
Preprocessing: the original's by default (--preprocess, see tools/predict.py); the input
size the trained one of the run's flags.txt beside the checkpoint unless --image_size is
given. Images that cannot be read or decoded are reported on stderr, one line each, and
left out of both files. Both files are written under
temporary names and renamed when complete. The inference code is serving.py's; the model
and image options are tools/predict.py's.

Smaller features (mlimages/inference/pca.py): --pca_dim K fits a PCA of K components on
the features of this run's images, saves it (--pca FILE, default OUTPUT with .pca.npz for
.npy) and writes the reduced N x K features; --pca FILE alone applies a saved PCA to this
run's features, so that other image sets land in the same K dimensions:

    .venv/bin/python tools/extract_features.py --checkpoint out/checkpoint --list train.txt \
        --pca_dim 256 -o train.npy                       # + train.pca.npz
    .venv/bin/python tools/extract_features.py --checkpoint out/checkpoint --list query.txt \
        --pca train.pca.npz -o query.npy
"""
import os
import sys

import flags
from mlimages.config import startup
from mlimages.cli import arguments, entry, lazy_tensorflow
from mlimages.cli import predict_args

PROG = 'extract_features.py'


def build_parser():
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Extract the pooled ResNet feature of each image with a model of '
                    'train.py: OUTPUT.npy (float32, one row per image) and a text file of '
                    'the image names in row order.',
        epilog=predict_args.EXIT_STATUS + ' With exit status 1 or 2 no file is written.')
    predict_args.add_model_arguments(parser, flags.default_settings().model)
    predict_args.add_image_arguments(parser)
    group = parser.add_argument_group('output')
    group.add_argument('-o', '--output', '--result', required=True, metavar='FILE',
                       dest='output',
                       help='the feature matrix (numpy .npy, float32, N x D), or with '
                            '--format original the text file; --result is the original\'s '
                            'name')
    group.add_argument('--format', choices=('npy', 'original'), default='npy',
                       help='npy (default): OUTPUT.npy and the names file. original: '
                            'extract_feature.py\'s text, one line per image "path<TAB>'
                            'second field<TAB>f1 f2 ... fD" (each value as Python prints a '
                            'float32); --list lines are split on spaces as the original '
                            'did, "path label"')
    group.add_argument('--names', metavar='FILE',
                       help='the image names, one a line in row order (default: OUTPUT '
                            'with .txt instead of .npy)')
    group.add_argument('--pca_dim', type=predict_args.positive_int, metavar='K',
                       help='fit a PCA of K components on the features of these images '
                            '(centred; the K directions of largest variance), save it to '
                            '--pca and write the reduced N x K features (float32)')
    group.add_argument('--pca', metavar='FILE',
                       help='with --pca_dim: where the fitted PCA is saved (default: OUTPUT '
                            'with .pca.npz instead of .npy); without: a PCA saved so, '
                            'applied to these features: (x - mean) x components^T')
    return parser


def check_arguments(parser, args):
    """The usage errors of options that do not go together (parser.error: exit status 2)."""
    if args.format == 'original' and args.names:
        parser.error('--names goes with --format npy; --format original writes the '
                     'names in its one file')
    if args.format == 'original' and (args.pca or args.pca_dim):
        parser.error('--pca_dim and --pca go with --format npy')
    if args.pca_dim and args.pca and not os.path.isdir(
            os.path.dirname(os.path.abspath(args.pca))):
        parser.error('--pca %s: its directory does not exist' % args.pca)


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    startup.check_versions('extract_features.py')
    return entry.run(PROG, lambda: predict_args.parsed(build_parser(), argv, check_arguments),
                     extract, predict_args.BAD_INPUT, predict_args.unfinished_output)


def extract(args):
    """Extracts the features of the images the arguments name and writes them; returns
    the exit status (exit_status)."""
    defaults = flags.default_settings()
    # Features do not depend on how the scores are read: no label type.
    result = predict_args.with_predictor(
        args, defaults.model, defaults.data, extractor(args), PROG,
        list_separator=' ' if args.format == 'original' else None,
        names=[name for name in predict_args.SETTINGS if name != 'label_type'])
    return exit_status(result, args.output)


def pca_file(args):
    """Where --pca_dim saves its PCA: --pca, else OUTPUT with .pca.npz for .npy."""
    return args.pca or (
        (args.output[:-4] if args.output.endswith('.npy') else args.output) + '.pca.npz')


def extractor(args):
    """predict_args.with_predictor's work: batch_outputs' features (the original's text, or
    the .npy with a PCA fitted or applied); returns (processed, skipped, feature
    dimension, the PCA's line or None)."""
    def work(serving, predictor, images, chosen, progress):
        lazy_tensorflow.tensorflow()
        from mlimages.inference import batch_outputs
        if args.format == 'original':
            counts = batch_outputs.extract_features_text_to(predictor, images, args.output,
                                                            args.batch_size, PROG, progress)
            return counts + (predictor.feature_dim, None)
        lazy_tensorflow.tensorflow()
        from mlimages.inference import pca as pca_lib
        saved = (pca_lib.load(args.pca, predictor.feature_dim)
                 if args.pca and not args.pca_dim else None)
        processed, skipped, pca = batch_outputs.extract_features_to(
            predictor, images, args.output, args.names, args.batch_size, PROG, pca=saved,
            fit_pca=(args.pca_dim, pca_file(args)) if args.pca_dim else None,
            progress=progress)
        dim = predictor.feature_dim if pca is None else len(pca.components)
        return processed, skipped, dim, pca_note(args, pca_lib, pca, predictor.feature_dim)
    return work


def pca_note(args, pca_lib, pca, feature_dim):
    """The line that says which PCA reduced the features, None without one."""
    if pca is None:
        return None
    return '%s PCA %s: %d of %d dimensions, %.1f %% of the variance of the %d images ' \
        'it was fitted on' % ('fitted and saved' if args.pca_dim else 'applied the',
                              pca_file(args) if args.pca_dim else args.pca,
                              len(pca.components), feature_dim, 100 * pca_lib.explained(pca),
                              pca.count)


def exit_status(result, output):
    """The exit status of with_predictor's result, with the last lines on stderr."""
    processed, skipped, dim, note = result
    if not processed:
        arguments.error_line(PROG, 'no image could be processed (%d skipped); nothing '
                             'written' % skipped)
        return 1
    if note:
        sys.stderr.write('%s: %s\n' % (PROG, note))
    sys.stderr.write('%s: %d x %d features in %s, %d images skipped\n'
                     % (PROG, processed, dim, output, skipped))
    return 0
