#!/usr/bin/env python
"""The pooled feature of each image (the input of the logits layer: 2048 values for
ResNet-50 and deeper, 512 for ResNet-18/34), as the original's feature extraction gave.

    python tools/extract_features.py --checkpoint out/checkpoint --image_size 224 \\
        --list images.txt --output features.npy          # + features.txt, the image names
    python tools/extract_features.py --saved_model export/ photos/ -o features.npy

Writes OUTPUT (.npy, float32, N x D) and a text file with the N image names in row order
(--names, default OUTPUT with .txt for .npy). Images that cannot be read or decoded are
reported on stderr, one line each, and left out of both files. Both files are written under
temporary names and renamed when complete. The inference code is serving.py's; the model
and image options are tools/predict.py's.
"""
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tools import predict as _predict  # noqa: E402

PROG = 'extract_features.py'


def build_parser():
    parser = _predict.OneLineParser(
        prog=PROG, allow_abbrev=False,
        description='Extract the pooled ResNet feature of each image with a model of '
                    'train.py: OUTPUT.npy (float32, one row per image) and a text file of '
                    'the image names in row order.',
        epilog=_predict.EXIT_STATUS + ' With exit status 1 or 2 no file is written.')
    _predict.add_model_arguments(parser)
    _predict.add_image_arguments(parser)
    group = parser.add_argument_group('output')
    group.add_argument('-o', '--output', required=True, metavar='FILE.npy',
                       help='the feature matrix (numpy .npy, float32, N x D)')
    group.add_argument('--names', metavar='FILE',
                       help='the image names, one a line in row order (default: OUTPUT '
                            'with .txt instead of .npy)')
    return parser


def error(message):
    sys.stderr.write('%s: error: %s\n' % (PROG, ' '.join(str(message).split())))


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    parser = build_parser()
    try:
        args = parser.parse_intermixed_args(argv)
        _predict.check_model_arguments(parser, args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2

    def work(serving, predictor, images):
        return serving.run_extract_features(
            predictor, images, args.output, args.names, args.batch_size, PROG) + (
                predictor.feature_dim,)

    result = _predict.with_predictor(args, work, error)
    if result is None:
        return 2
    processed, skipped, dim = result
    if not processed:
        error('no image could be processed (%d skipped); nothing written' % skipped)
        return 1
    sys.stderr.write('%s: %d x %d features in %s, %d images skipped\n'
                     % (PROG, processed, dim, args.output, skipped))
    return 0


if __name__ == '__main__':
    sys.exit(main())
