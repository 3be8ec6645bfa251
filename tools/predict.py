#!/usr/bin/env python
"""Classify images with a trained model: per image the top-k classes with their scores and
names, and (multi-label, the default) every class whose sigmoid score reaches --threshold.

    python tools/predict.py --checkpoint out/checkpoint --class_dict dictionary.txt photos/
    python tools/predict.py --saved_model export/ --list images.txt --format jsonl -o out.jsonl
    # the original's image_classification.py, its flags and its output text:
    python tools/predict.py --format original --images=data/im_list_for_classification.txt \
        --top_k_pred=5 --model_dir=checkpoints/resnet.ckpt \
        --dictionary=data/imagenet2012_dictionary.txt --result=label_pred.txt

The model is a checkpoint of train.py (a model directory or a checkpoint path; architecture
and class count are read from it; the input size, batch-norm epsilon and label type are the
trained ones of the run's flags.txt beside it unless given, inference_settings.py) or a
SavedModel written by `train.py --export_dir` (its settings are built in). The first line
on stderr says which settings are used and where they came from. Images: file paths,
directories (their .jpg/.jpeg/.png/.gif/.bmp files, recursively) and --list files. The
inference code is serving.py's, shared with train.py --mode predict; this file only parses
the command line (extract_features.py reuses its options). Images go through the original's
inference preprocessing by default (--preprocess=original: shorter side 256, centre crop,
OpenCV's bilinear), or train.py's evaluation crop (--preprocess=eval); a SavedModel has the
one it was exported with.

--hierarchy FILE (the ML-Images dictionary_and_semantic_hierarchy.txt, hierarchy.py) adds
every listed class's path to the root (TSV column `path`, JSON field `path`), and with
--consistent the scores are made consistent with the tree before top-k and the threshold:
s'_c = max(s_c, max over the descendants d of c of s_d), so that an ancestor never scores
below a descendant (the output says so: TSV starts with `# scores made consistent with
FILE`, JSON objects have `consistent_with`). The same rule applies to the softmax
probabilities of --single_label, which then no longer sum to 1. --format original keeps
the original's text, which has no place for either: both are usage errors there.
"""
import argparse
import os
import sys

if __name__ == '__main__':
    import _checkout  # noqa: F401 -- python tools/predict.py: the checkout importable

import devices  # noqa: E402
import flags  # noqa: E402
import hierarchy as hierarchy_lib  # noqa: E402
import inference_settings  # noqa: E402
import startup  # noqa: E402
from errors import stop_raises, stopped  # noqa: E402
from tools import common  # noqa: E402

PROG = 'predict.py'
DEFAULT_IMAGE_SIZE = flags.defaults().image_size
# The network settings of --checkpoint (inference_settings: from the flags.txt beside it
# unless given) and their defaults without that file; depth and class count are read from
# the checkpoint's variables anyway. The layout (--data_format) does not change results.
SETTINGS = {'image_size': DEFAULT_IMAGE_SIZE,
            'resnet_size': inference_settings.FROM_CHECKPOINT,
            'class_num': inference_settings.FROM_CHECKPOINT,
            'batch_norm_epsilon': flags.defaults().batch_norm_epsilon,
            'label_type': flags.defaults().label_type}
EXIT_STATUS = ('Exit status: 0 when at least one image was processed (images that cannot '
               'be read or decoded are reported on stderr, one line each, and skipped); 1 '
               'when no image could be processed; 2 on bad usage or input (no checkpoint, a '
               'model that does not match --class_num/--resnet_size, a bad class dictionary '
               'or list file); then nothing is written; 143 / 130 when stopped by SIGTERM / '
               'Ctrl-C (an output file appears only when complete).')


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError('expected a positive integer, got %r' % text)
    if value <= 0:
        raise argparse.ArgumentTypeError('expected a positive integer, got %d' % value)
    return value


def unit_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('expected a number in [0, 1], got %r' % text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError('expected a number in [0, 1], got %g' % value)
    return value


def add_model_arguments(parser):
    """The model (checkpoint or SavedModel) and how to run it; shared with extract_features."""
    group = parser.add_argument_group('model')
    source = group.add_mutually_exclusive_group(required=True)
    source.add_argument('--checkpoint', metavar='PATH',
                        help='a model directory of train.py (its latest checkpoint) or a '
                             'checkpoint path such as out/checkpoint/model.ckpt-44000 (also '
                             'a checkpoint of the original program); --pretrain_ckpt and '
                             '--model_dir are the original programs\' names for it')
    for alias in ('--pretrain_ckpt', '--model_dir'):  # listed in --checkpoint's help
        source.add_argument(alias, dest='checkpoint', help=argparse.SUPPRESS)
    source.add_argument('--saved_model', metavar='DIR',
                        help='a SavedModel: the base directory of train.py --export_dir '
                             '(its highest version) or one <version>/ directory')
    group.add_argument('--image_size', type=positive_int, metavar='S',
                       help='network input size of the checkpoint\'s model (default: the '
                            'trained --image_size of the flags.txt beside the checkpoint, '
                            'else %d; a value that differs from the trained one is a '
                            'warning); a SavedModel has its own' % DEFAULT_IMAGE_SIZE)
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


def build_parser():
    parser = common.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Classify images with a model of train.py: per image the top-k classes '
                    'with scores (and names from --class_dict), and in multi-label mode '
                    'every class with sigmoid score >= --threshold. Output: TSV with a '
                    'header, one row per image and listed class (image, rank, class, '
                    'score, positive, name), or JSON lines, one object per image '
                    '({"image", "top_k": [{"class", "score", "name"}], "positives": [...]}).',
        epilog=EXIT_STATUS)
    add_model_arguments(parser)
    add_image_arguments(parser)
    group = parser.add_argument_group('output')
    group.add_argument('--class_dict', '--dictionary', metavar='FILE', dest='class_dict',
                       help='class names: the ML-Images dictionary (header "category_index '
                            '...", then "index WordNet-id parent-index name" per class), '
                            'ImageNet\'s imagenet2012_dictionary.txt ("index<TAB>name" per '
                            'line) or one name per line, line k naming class k. With '
                            '--format original read as the original did: field 2 of the '
                            'tab-separated line. --dictionary is the original\'s name')
    group.add_argument('--top_k', '--top_k_pred', type=positive_int, default=5, metavar='K',
                       dest='top_k',
                       help='classes listed per image, best first (default: 5, at most the '
                            'number of classes)')
    group.add_argument('--threshold', type=unit_float, metavar='T',
                       help='multi-label: also list every class with sigmoid score >= T, '
                            'flagged positive (default: 0.5)')
    group.add_argument('--single_label', action='store_true',
                       help='score classes with the softmax probability (a single-label '
                            'model, e.g. fine-tuned on ImageNet) and list only the top-k; '
                            'default: multi-label sigmoid scores, or softmax when the '
                            'flags.txt beside --checkpoint says --label_type=single')
    group.add_argument('--format', choices=('tsv', 'jsonl', 'original'), default='tsv',
                       help='tsv (default), jsonl (JSON lines) or original: the text of the '
                            'original\'s image_classification.py, per image "+++ the '
                            'predictions of PATH is:" then "INDEX NAME: PROB" for the top-k '
                            'softmax probabilities (%%.3f), "open pic PATH failed" for an '
                            'image that cannot be read; list lines split on tabs')
    group.add_argument('--hierarchy', metavar='FILE',
                       help='the semantic hierarchy (dictionary_and_semantic_hierarchy.txt, '
                            'one class per model class): list every class with its path to '
                            'the root, "dog < canine < ... < object" (TSV column path, JSON '
                            'field path); its names are the class names unless --class_dict '
                            'gives others. Not with --format original')
    group.add_argument('--consistent', action='store_true',
                       help='with --hierarchy: before top-k and --threshold, raise every '
                            'class\'s score to the highest score in its subtree, so that no '
                            'ancestor scores below a descendant (also the softmax scores of '
                            '--single_label); the output starts with "# scores made '
                            'consistent with FILE" (TSV) or has "consistent_with" (JSON)')
    group.add_argument('-o', '--output', '--result', metavar='FILE', dest='output',
                       help='write here (under a temporary name, renamed when complete) '
                            'instead of stdout')
    return parser


def error(message):
    common.error_line(PROG, message)


def check_model_arguments(parser, args):
    if args.saved_model and (args.image_size or args.resnet_size or args.preprocess):
        parser.error('--image_size, --resnet_size and --preprocess go with --checkpoint; a '
                     'SavedModel has them built in')


def choose_settings(args, names):
    """({setting: value}, log lines) of --checkpoint's network (inference_settings.choose:
    given, else the flags.txt beside the checkpoint, else SETTINGS); ({}, []) for a
    SavedModel, which has its settings built in. Raises UsageError for a bad flags.txt."""
    if not args.checkpoint:
        return {}, []
    defaults = {name: SETTINGS[name] for name in names}
    given = {'image_size': args.image_size, 'resnet_size': args.resnet_size,
             'class_num': args.class_num,
             'label_type': 'single' if getattr(args, 'single_label', False) else None}
    given = {name: value for name, value in given.items() if name in names and value}
    found, source = inference_settings.trained(args.checkpoint, defaults, names)
    values, lines = inference_settings.choose(defaults, given, found, source, args.checkpoint,
                                              {'label_type': '--single_label'})
    return values, lines


def load_model(serving, args, top_k=5, settings=None):
    """The serving.Predictor the model arguments name: the model of train.py's defaults
    (flags.defaults) with `settings` (choose_settings; else --image_size) and this tool's
    --data_format and --preprocess."""
    data_format = args.data_format
    if data_format.lower() in ('nchw', 'channels_first') and not devices.gpu_count():
        data_format = 'NHWC'  # CPU convolutions are NHWC only; the results are the same
    settings = settings or {}
    opts = flags.defaults()._replace(
        image_size=settings.get('image_size') or args.image_size or DEFAULT_IMAGE_SIZE,
        batch_norm_epsilon=settings.get('batch_norm_epsilon',
                                        SETTINGS['batch_norm_epsilon']),
        data_format=data_format)
    return serving.load_predictor(checkpoint=args.checkpoint, saved_model=args.saved_model,
                                  opts=opts, resnet_size=args.resnet_size,
                                  class_num=args.class_num, top_k=top_k,
                                  preprocess=args.preprocess or serving.DEFAULT_PREPROCESS)


def with_predictor(args, work, error, top_k=5, list_separator=None, settings=tuple(SETTINGS),
                   prog=PROG):
    """Chooses the network's `settings` (choose_settings), collects the images the
    arguments name, loads the model, says which settings it runs with (the first line on
    stderr, after the model loaded: a model that does not load is one error line) and
    returns work(serving, predictor, images, chosen settings), closing the model after; bad
    input is reported with `error` and gives None (exit status 2). list_separator: read
    --list as the original programs did (inference_io.original_list_entries)."""
    # One GPU, chosen before TensorFlow starts, as train.py chooses them.
    devices.choose(args.visiable_gpu, 1)
    serving = common.checkout_module('serving')
    common.tensorflow().get_logger().setLevel('ERROR')
    bad_input = (serving.UsageError, common.checkout_module('file_db').DataError)
    predictor = None
    try:
        chosen, lines = choose_settings(args, settings)
        inference_io = common.checkout_module('inference_io')
        if list_separator is not None and args.list and not os.path.isdir(args.list):
            images = inference_io.collect_images(args.images) if args.images else []
            images += inference_io.original_list_entries(args.list, list_separator,
                                                         args.image_root)
        else:
            images = inference_io.collect_images(args.images, args.list, args.image_root)
        predictor = load_model(serving, args, top_k, chosen)
        if args.saved_model:
            lines = ['inference settings: built into the SavedModel %s (%s)' % (
                predictor.source, predictor.preprocessing or 'preprocessing not recorded')]
        for line in lines:
            sys.stderr.write('%s: %s\n' % (prog, line))
        return work(serving, predictor, images, chosen)
    except bad_input as e:
        error(e)
        return None
    finally:
        if predictor is not None:
            predictor.close()


def unfinished_output(output):
    """What an interrupted run leaves of --output: a file appears only when complete
    (inference_io.atomic_output)."""
    if output in (None, '-'):
        return 'the output on stdout is incomplete'
    return 'nothing was written to %s' % output


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    startup.check_versions('predict.py')
    parser = build_parser()
    try:
        args = parser.parse_intermixed_args(argv)
        check_model_arguments(parser, args)
        if (args.single_label or args.format == 'original') and args.threshold is not None:
            parser.error('--threshold is for multi-label scores, not --single_label or '
                         '--format original')
        if args.consistent and not args.hierarchy:
            parser.error('--consistent needs --hierarchy FILE (the tree to be consistent '
                         'with)')
        if args.format == 'original' and args.hierarchy:
            parser.error('--hierarchy and --consistent are for --format tsv or jsonl; the '
                         'original\'s text has no place for paths')
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        tree = hierarchy_lib.load(args.hierarchy) if args.hierarchy else None
    except hierarchy_lib.HierarchyError as e:
        error(e)
        return 2

    def work(serving, predictor, images, settings):
        # A model trained with --label_type=single is scored by softmax, as --single_label.
        single = args.single_label or settings.get('label_type') == 'single'
        if single and args.threshold is not None:
            raise serving.UsageError(
                '--threshold is for multi-label scores; %s was trained with '
                '--label_type=single (softmax scores)' % args.checkpoint)
        threshold = None if single or args.format == 'original' else (
            0.5 if args.threshold is None else args.threshold)
        inference_io = common.checkout_module('inference_io')
        load = (inference_io.load_original_class_names if args.format == 'original'
                else inference_io.load_class_names)
        names = load(args.class_dict, predictor.class_num) if args.class_dict else None
        if tree is not None:
            if len(tree) != predictor.class_num:
                raise serving.UsageError(hierarchy_lib.class_num_mismatch(
                    tree, predictor.class_num, "the model's class count"))
            names = names or [' '.join(name.split()) for name in tree.names]
        return serving.run_predict(predictor, images, args.output, args.format,
                                   args.batch_size, args.top_k, threshold, names, PROG,
                                   tree, args.consistent)

    names = [name for name in SETTINGS if name != 'label_type' or args.format != 'original']
    try:
        result = with_predictor(args, work, error, args.top_k,
                                '\t' if args.format == 'original' else None, names)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: one line, not a traceback
        words, status = stopped(exc)
        error('%s; %s' % (words, unfinished_output(args.output)))
        return status
    if result is None:
        return 2
    processed, skipped = result
    if not processed:
        error('no image could be processed (%d skipped)' % skipped)
        return 1
    sys.stderr.write('%s: %d images classified, %d skipped\n' % (PROG, processed, skipped))
    return 0


if __name__ == '__main__':
    stop_raises()  # SIGTERM stops it as Ctrl-C does: one line, 128 + the signal
    sys.exit(main())
