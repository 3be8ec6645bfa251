"""An export of train.py as an ONNX model: its float signature (the network input after
the preprocessing -> scores, probabilities, features) through tf2onnx, checked with
onnxruntime against TensorFlow before the file is written.

    .venv/bin/python train.py --mode=export --model_dir=demo/model --export_dir=demo/export
    .venv/bin/python tools/export_onnx.py --saved_model demo/export -o demo/model.onnx

The ONNX model's input `images` is float32 [N, S, S, 3]: NHWC, RGB, (pixel / 255 - 0.5) x 2
in [-1, 1], preprocessed as the SavedModel's assets.extra/preprocessing.txt says (the
client decodes and resizes; ONNX has no JPEG decoder). Needs the ONNX extras,
`.venv/bin/pip install -r requirements-onnx.txt` (tf2onnx, onnx, onnxruntime; pins that
work beside TensorFlow 2.15). The conversion is tf2onnx's command line, the route any
tf2onnx user takes (mlimages/inference/onnx_export.py).

Exit status: 0 written; 1 the conversion failed or the converted model differs from
TensorFlow by more than --tolerance (nothing written); 2 bad usage (no such SavedModel, one
without the float signature, the extras not installed); 143 / 130 stopped by SIGTERM /
Ctrl-C (nothing written).
"""
import os
import sys

from mlimages import errors
from mlimages.cli import arguments, entry, lazy_tensorflow
from mlimages.config import startup

PROG = 'export_onnx.py'


def build_parser():
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Convert the float signature of a SavedModel of train.py to ONNX with '
                    'tf2onnx and check it with onnxruntime against TensorFlow.',
        epilog='Exit status: 0 written; 1 the conversion or the check failed (nothing '
               'written); 2 bad usage; 143 / 130 stopped by SIGTERM / Ctrl-C.')
    parser.add_argument('--saved_model', required=True, metavar='DIR',
                        help='train.py --export_dir (its highest version) or one '
                             '<version>/ directory')
    parser.add_argument('-o', '--output', required=True, metavar='FILE',
                        help='the ONNX model (written under a temporary name, renamed once '
                             'checked)')
    parser.add_argument('--opset', type=arguments.int_at_least(13, '>= 13'), default=15,
                        help='ONNX opset (default: 15, tf2onnx\'s; onnxruntime 1.19 runs up '
                             'to 21)')
    parser.add_argument('--tolerance', type=float, default=1e-4, metavar='T',
                        help='largest |onnxruntime - TensorFlow| allowed on every output, '
                             'relative to max(1, max |TensorFlow|) (default: 1e-4)')
    parser.add_argument('--check_images', type=arguments.positive_int, default=4, metavar='N',
                        help='random network inputs the check runs (default: 4)')
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status."""
    startup.check_versions(PROG)
    return entry.run(PROG, lambda: build_parser().parse_args(argv), export,
                     (errors.UsageError, errors.ExportError),
                     lambda args: 'nothing was written to %s' % args.output)


def export(args):
    """Converts and checks the model as the arguments say, saying so on stderr; returns
    the exit status (0)."""
    lazy_tensorflow.tensorflow()
    from mlimages.inference import onnx_export
    lazy_tensorflow.tensorflow().get_logger().setLevel('ERROR')
    missing = onnx_export.missing_extras()
    if missing:
        raise errors.UsageError('%s not installed; install the ONNX extras: %s'
                                % (', '.join(missing), onnx_export.install()))
    sys.stderr.write('%s: converting the %s signature of %s with tf2onnx (opset %d; about a '
                     'minute on 2 CPU cores)\n' % (PROG, onnx_export.serving.FLOAT_SIGNATURE_KEY,
                                                   args.saved_model, args.opset))
    export_dir, found = onnx_export.export_onnx(args.saved_model, args.output, args.opset,
                                                args.tolerance, args.check_images)
    sys.stderr.write('%s: wrote %s (%.1f MB) from %s; onnxruntime vs TensorFlow on %d random '
                     'inputs: max |difference| %s\n' % (
                         PROG, args.output, os.path.getsize(args.output) / 1e6, export_dir,
                         args.check_images, ', '.join('%s %.2g (of max %.3g)' % (
                             key, diff, scale) for key, (diff, scale) in found.items())))
    return 0
