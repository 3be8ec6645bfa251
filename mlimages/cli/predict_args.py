"""What tools/predict.py and tools/extract_features.py share: the model and image arguments,
the trained settings of --checkpoint (inference_settings), loading the serving.Predictor
and the exit-status text. `model` and `data` are groups of train.py's defaults
(flags.default_settings()), which the commands pass in (only entry points read flags)."""
import argparse
import os
import sys

from mlimages.cli import lazy_tensorflow, progress
from mlimages.config import gpu_env
from mlimages.distributed import devices
from mlimages import errors
from mlimages.errors import UsageError
from mlimages.inference import inference_settings

# The network settings of --checkpoint (inference_settings: from the flags.txt beside it
# unless given) and their defaults without that file; depth and class count are read from
# the checkpoint's variables anyway. The layout (--data_format) does not change results.
SETTINGS = ('image_size', 'resnet_size', 'class_num', 'batch_norm_epsilon', 'label_type')


def setting_defaults(model, data):
    """{setting: default} of SETTINGS from train.py's defaults (the model and data
    groups)."""
    return {'image_size': model.image_size,
            'resnet_size': inference_settings.FROM_CHECKPOINT,
            'class_num': inference_settings.FROM_CHECKPOINT,
            'batch_norm_epsilon': model.batch_norm_epsilon,
            'label_type': data.label_type}
EXIT_STATUS = ('Exit status: 0 when at least one image was processed (images that cannot '
               'be read or decoded are reported on stderr, one line each, and skipped); 1 '
               'when no image could be processed; 2 on bad usage or input (no checkpoint, a '
               'model that does not match --class_num/--resnet_size, a bad class dictionary '
               'or list file); then nothing is written; 143 / 130 when stopped by SIGTERM / '
               'Ctrl-C (an output file appears only when complete).')


ENGINES = ('tensorflow', 'openvino')  # --engine
# The bad input with_predictor meets: the model, its settings, the images (exit status 2).
BAD_INPUT = (errors.UsageError, errors.DataError)
CALIBRATED = 'calibrated'  # --threshold: the per-class thresholds (calibration.py)


def threshold(text):
    """--threshold: a number in [0, 1] or 'calibrated'."""
    if text == CALIBRATED:
        return CALIBRATED
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('expected a number in [0, 1] or calibrated, got %r'
                                         % text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError('expected a number in [0, 1] or calibrated, got %g'
                                         % value)
    return value


def calibrated_thresholds(predictor, prog):
    """The per-class thresholds of --threshold=calibrated for the model of predictor: the
    thresholds.txt beside its checkpoint (a warning line when chosen for another one), or
    a SavedModel's assets.extra/thresholds.txt; UsageError without them."""
    lazy_tensorflow.tensorflow()
    from mlimages.run import calibration
    if predictor.checkpoint:
        values, _, warnings = calibration.for_checkpoint(predictor.checkpoint,
                                                         predictor.class_num)
        for line in warnings:
            sys.stderr.write('%s: %s\n' % (prog, line))
        return values
    if predictor.thresholds_file is None:
        raise UsageError(
            '--threshold=calibrated: the SavedModel %s has no calibrated thresholds (export it '
            'with train.py --mode=export --threshold=calibrated, or give --threshold T)'
            % predictor.source)
    return calibration.read(predictor.thresholds_file, predictor.class_num)[0]


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError('expected a positive integer, got %r' % text)
    if value <= 0:
        raise argparse.ArgumentTypeError('expected a positive integer, got %d' % value)
    return value


class _NamedCheckpoint(argparse._StoreAction):
    """--checkpoint and its other names: also records which name was given, for the
    errors about it."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.checkpoint_flag = option_string.lstrip('-')
        super().__call__(parser, namespace, values, option_string)


def add_model_arguments(parser, model):
    """The model (checkpoint or SavedModel) and how to run it; shared with extract_features."""
    group = parser.add_argument_group('model')
    source = group.add_mutually_exclusive_group(required=True)
    source.add_argument('--checkpoint', metavar='PATH', action=_NamedCheckpoint,
                        help='a model directory of train.py (its latest checkpoint) or a '
                             'checkpoint path such as out/checkpoint/model.ckpt-44000 (also '
                             'a checkpoint of the original program); --pretrain_ckpt and '
                             '--model_dir are the original programs\' names for it')
    for alias in ('--pretrain_ckpt', '--model_dir'):  # listed in --checkpoint's help
        source.add_argument(alias, dest='checkpoint', action=_NamedCheckpoint,
                            help=argparse.SUPPRESS)
    source.add_argument('--saved_model', metavar='DIR',
                        help='a SavedModel: the base directory of train.py --export_dir '
                             '(its highest version) or one <version>/ directory')
    group.add_argument('--image_size', type=positive_int, metavar='S',
                       help='network input size of the checkpoint\'s model (default: the '
                            'trained --image_size of the flags.txt beside the checkpoint, '
                            'else %d; a value that differs from the trained one is a '
                            'warning); a SavedModel has its own' % model.image_size)
    group.add_argument('--resnet_size', type=positive_int, metavar='N',
                       help='check that the checkpoint holds a ResNet-N (it is read from '
                            'the checkpoint anyway)')
    group.add_argument('--class_num', type=positive_int, metavar='N',
                       help='check that the model has N classes')
    group.add_argument('--batch_size', type=positive_int, default=32, metavar='N',
                       help='images per run of the model (default: 32)')
    group.add_argument('--preprocess', choices=('original', 'eval'),
                       help='how an image becomes the network input with --checkpoint. '
                            'original (default): as the original\'s extract_feature.py and '
                            'image_classification.py, the shorter side resized to 256 x '
                            'image_size / 224 (OpenCV\'s bilinear), the centre square. eval: '
                            'train.py\'s evaluation crop (the central 80 %%, squashed). A '
                            'SavedModel has the one it was exported with')
    group.add_argument('--data_format', default='auto',
                       help='layout of the checkpoint\'s model: NCHW (on a GPU; NHWC '
                            'without one), NHWC or auto (NCHW with a GPU; default); the '
                            'results do not depend on it')
    group.add_argument('--engine', choices=ENGINES, default='tensorflow',
                       help='what runs the network. tensorflow (default): the graph of '
                            'train.py, on a GPU when there is one. openvino: OpenVINO on the '
                            'CPU (pip install -r requirements-openvino.txt), the same '
                            'preprocessing in TensorFlow; the network converted from '
                            '--checkpoint or --saved_model at the start, or --onnx')
    group.add_argument('--dtype', choices=('fp32', 'bf16'), default='fp32',
                       help='what the network computes in: fp32 (default) or bf16 (the same '
                            'weights in bfloat16; for CPUs with AVX512_BF16 or AMX, and GPUs '
                            'of compute capability 8.0+; elsewhere a one-line error). With '
                            '--engine tensorflow bf16 needs --checkpoint')
    group.add_argument('--onnx', metavar='FILE',
                       help='with --engine openvino and --saved_model: run this ONNX model '
                            '(tools/export_onnx.py of that SavedModel) instead of converting '
                            'the SavedModel')
    group.add_argument('--visiable_gpu', type=int, default=0, metavar='K',
                       help='run on GPU K (the original\'s spelling; default 0, when there '
                            'is one); -1 = leave the visible GPUs as they are')


def add_image_arguments(parser):
    group = parser.add_argument_group('images')
    group.add_argument('images', nargs='*', metavar='IMAGE',
                       help='image files, or directories searched recursively for '
                            '.jpg/.jpeg/.png/.gif/.bmp files (natural order)')
    group.add_argument('--list', '--images', metavar='FILE', dest='list',
                       help='a list of images, one a line: the path is the text before the '
                            'first tab, or the first field of a line without tabs, so the '
                            'record builder\'s image lists (with labels) work as they are. '
                            'With --format original the line is split as the original '
                            'program did. --images is the original programs\' name')
    group.add_argument('--image_root', metavar='DIR',
                       help='directory the relative paths of --list are relative to '
                            '(default: the current directory)')


def parsed(parser, argv, check):
    """The arguments of argv (intermixed: images may follow the options) after
    check_model_arguments and the tool's own check(parser, args); a usage error is
    parser.error's (SystemExit, exit status 2)."""
    args = parser.parse_intermixed_args(argv)
    check_model_arguments(parser, args)
    check(parser, args)
    return args


def check_model_arguments(parser, args):
    if args.onnx and not (args.engine == 'openvino' and args.saved_model):
        parser.error('--onnx goes with --engine openvino and --saved_model (the SavedModel '
                     'it was exported from, for its preprocessing)')
    if args.saved_model and (args.image_size or args.resnet_size or args.preprocess):
        parser.error('--image_size, --resnet_size and --preprocess go with --checkpoint; a '
                     'SavedModel has them built in')


def chosen_settings(args, names, model, data):
    """({setting: value}, log lines) of --checkpoint's network (inference_settings.choose:
    given, else the flags.txt beside the checkpoint, else setting_defaults of the model and
    data groups); ({}, []) for a SavedModel, which has its settings built in. Raises
    UsageError for a bad flags.txt."""
    if not args.checkpoint:
        return {}, []
    defaults = {name: setting_defaults(model, data)[name] for name in names}
    given = {'image_size': args.image_size, 'resnet_size': args.resnet_size,
             'class_num': args.class_num,
             'label_type': 'single' if getattr(args, 'single_label', False) else None}
    given = {name: value for name, value in given.items() if name in names and value}
    found, source = inference_settings.trained(args.checkpoint, defaults, names)
    values, lines = inference_settings.choose(defaults, given, found, source, args.checkpoint,
                                              {'label_type': '--single_label'})
    return values, lines


def load_model(serving, args, model, top_k=5, chosen=None):
    """The serving.Predictor the model arguments name: the network of train.py's default
    model group (`model`) with the `chosen` settings (chosen_settings; else --image_size)
    and this tool's --data_format and --preprocess."""
    data_format = args.data_format
    if data_format.lower() in ('nchw', 'channels_first') and not devices.gpu_count():
        data_format = 'NHWC'  # CPU convolutions are NHWC only; the results are the same
    chosen = chosen or {}
    model = model.replace(
        image_size=chosen.get('image_size') or args.image_size or model.image_size,
        batch_norm_epsilon=chosen.get('batch_norm_epsilon', model.batch_norm_epsilon),
        data_format=data_format)
    arguments = dict(checkpoint=args.checkpoint, saved_model=args.saved_model,
                     checkpoint_flag=getattr(args, 'checkpoint_flag', 'checkpoint'),
                     model=model, resnet_size=args.resnet_size, class_num=args.class_num,
                     top_k=top_k, preprocess=args.preprocess or serving.DEFAULT_PREPROCESS,
                     dtype=args.dtype)
    if args.engine == 'openvino':
        from mlimages.inference import openvino_engine
        return openvino_engine.load_predictor(onnx=args.onnx, **arguments)
    return serving.load_predictor(**arguments)


def check_dtype(args):
    """UsageError when --dtype cannot run natively with --engine here
    (precision.bf16_inference_error: OpenVINO runs on the CPU; TensorFlow on a GPU of
    compute capability 8.0+ when there is one)."""
    from mlimages.model import precision  # imports TensorFlow: not before devices.choose
    gpu = args.engine == 'tensorflow' and any(
        tuple(c) >= (8, 0) for c in gpu_env.device_capabilities())
    error = precision.bf16_inference_error(args.dtype, gpu)
    if error:
        raise UsageError(error)


class ImageProgress(progress.ProgressLine):
    """The inference commands' progress line on stderr: images taken of the total, their
    rate and the ETA (a plain line every 30 s into a file, redrawn on a terminal)."""

    def __init__(self, prog, total, stream=None):
        super().__init__(True, stream)
        self.prog, self.total, self.done = prog, total, 0

    def update(self, done):
        """serving.predict_images' progress."""
        self.done = done
        self.tick()

    def done_total(self):
        return self.done, self.total

    def text(self):
        return '%s: %d of %d images, %.1f images/s' % (self.prog, self.done, self.total,
                                                        self.rate(self.done))


def with_predictor(args, model, data, work, prog, top_k=5, list_separator=None,
                   names=SETTINGS):
    """Chooses the network's settings `names` (chosen_settings of the default model and
    data groups), collects the images the
    arguments name, loads the model, says which settings it runs with (the first line on
    stderr, after the model loaded: a model that does not load is one error line) and
    returns work(serving, predictor, images, chosen settings, ImageProgress(...).update),
    closing the model after (the model: serving's, or openvino_engine's for --engine
    openvino; --dtype checked first, check_dtype); bad input raises one of BAD_INPUT.
    list_separator: read --list as the original programs did
    (inference_io.original_list_entries)."""
    # One GPU, chosen before TensorFlow starts, as train.py chooses them.
    devices.choose(args.visiable_gpu, 1)
    lazy_tensorflow.tensorflow()
    from mlimages.inference import serving
    lazy_tensorflow.tensorflow().get_logger().setLevel('ERROR')
    predictor = None
    try:
        check_dtype(args)
        chosen, lines = chosen_settings(args, names, model, data)
        from mlimages.inference import inference_io
        if list_separator is not None and args.list and not os.path.isdir(args.list):
            images = inference_io.collect_images(args.images) if args.images else []
            images += inference_io.original_list_entries(args.list, list_separator,
                                                         args.image_root)
        else:
            images = inference_io.collect_images(args.images, args.list, args.image_root)
        predictor = load_model(serving, args, model, top_k, chosen)
        if args.saved_model:
            lines = ['inference settings: built into the SavedModel %s (%s)' % (
                predictor.source, predictor.preprocessing or 'preprocessing not recorded')]
        if args.engine != 'tensorflow' or args.dtype != 'fp32':
            lines.append('engine %s, %s' % (args.engine, args.dtype))
        for line in lines:
            sys.stderr.write('%s: %s\n' % (prog, line))
        line = ImageProgress(prog, len(images))
        result = work(serving, predictor, images, chosen, line.update)
        if line.terminal:  # ends the line redrawn in place
            line.finish()
        return result
    finally:
        if predictor is not None:
            predictor.close()


def unfinished_output(args):
    """What an interrupted run leaves of --output: a file appears only when complete
    (files.atomic_output)."""
    if args.output in (None, '-'):
        return 'the output on stdout is incomplete'
    return 'nothing was written to %s' % args.output
