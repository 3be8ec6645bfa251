"""Classify images with a trained model: per image the top-k classes with their scores and
names, and (multi-label, the default) every class whose sigmoid score reaches --threshold.

    .venv/bin/python tools/predict.py --checkpoint out/checkpoint --class_dict dictionary.txt photos/
    .venv/bin/python tools/predict.py --saved_model export/ --list images.txt --format jsonl -o out.jsonl
    # the original's image_classification.py, its flags and its output text:
    .venv/bin/python tools/predict.py --format original --images=data/im_list_for_classification.txt \
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
one it was exported with. --threshold calibrated lists each class at its own threshold, the
ones train.py --mode=eval --threshold=calibrated chose on the validation split
(mlimages/run/calibration.py).

--engine openvino runs the network in OpenVINO on the CPU (mlimages/inference/
openvino_engine.py: the same preprocessing, outputs and per-image status); --dtype bf16
computes it in bfloat16 on a CPU with AVX512_BF16 or AMX (elsewhere one error line). A
progress line on stderr counts the images (predict_args.ImageProgress).

--hierarchy FILE (the ML-Images dictionary_and_semantic_hierarchy.txt, hierarchy.py) adds
every listed class's path to the root (TSV column `path`, JSON field `path`), and with
--consistent the scores are made consistent with the tree before top-k and the threshold:
s'_c = max(s_c, max over the descendants d of c of s_d), so that an ancestor never scores
below a descendant (the output says so: TSV starts with `# scores made consistent with
FILE`, JSON objects have `consistent_with`). The same rule applies to the softmax
probabilities of --single_label, which then no longer sum to 1. --format original keeps
the original's text, which has no place for either: both are usage errors there.
"""
import sys

import flags
from mlimages import errors
from mlimages.data import hierarchy as hierarchy_lib
from mlimages.cli import predict_args
from mlimages.config import startup
from mlimages.cli import arguments, entry, lazy_tensorflow

PROG = 'predict.py'


def build_parser():
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Classify images with a model of train.py: per image the top-k classes '
                    'with scores (and names from --class_dict), and in multi-label mode '
                    'every class with sigmoid score >= --threshold. Output: TSV with a '
                    'header, one row per image and listed class (image, rank, class, '
                    'score, positive, name), or JSON lines, one object per image '
                    '({"image", "top_k": [{"class", "score", "name"}], "positives": [...]}).',
        epilog=predict_args.EXIT_STATUS)
    predict_args.add_model_arguments(parser, flags.default_settings().model)
    predict_args.add_image_arguments(parser)
    group = parser.add_argument_group('output')
    group.add_argument('--class_dict', '--dictionary', metavar='FILE', dest='class_dict',
                       help='class names: the ML-Images dictionary (header "category_index '
                            '...", then "index WordNet-id parent-index name" per class), '
                            'ImageNet\'s imagenet2012_dictionary.txt ("index<TAB>name" per '
                            'line) or one name per line, line k naming class k. With '
                            '--format original read as the original did: field 2 of the '
                            'tab-separated line. --dictionary is the original\'s name')
    group.add_argument('--top_k', '--top_k_pred', type=predict_args.positive_int, default=5, metavar='K',
                       dest='top_k',
                       help='classes listed per image, best first (default: 5, at most the '
                            'number of classes)')
    group.add_argument('--threshold', type=predict_args.threshold, metavar='T',
                       help='multi-label: also list every class with sigmoid score >= T, '
                            'flagged positive (default: 0.5). calibrated: each class\'s own '
                            'threshold, from the thresholds.txt beside --checkpoint (train.py '
                            '--mode=eval --threshold=calibrated chooses them) or built into '
                            'the SavedModel (exported with --threshold=calibrated)')
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


def check_arguments(parser, args):
    """The usage errors of options that do not go together (parser.error: exit status 2)."""
    if (args.single_label or args.format == 'original') and args.threshold is not None:
        parser.error('--threshold is for multi-label scores, not --single_label or '
                     '--format original')
    if args.consistent and not args.hierarchy:
        parser.error('--consistent needs --hierarchy FILE (the tree to be consistent '
                     'with)')
    if args.format == 'original' and args.hierarchy:
        parser.error('--hierarchy and --consistent are for --format tsv or jsonl; the '
                     'original\'s text has no place for paths')


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    startup.check_versions('predict.py')
    return entry.run(PROG, lambda: predict_args.parsed(build_parser(), argv, check_arguments),
                     classify, predict_args.BAD_INPUT + (errors.HierarchyError,),
                     predict_args.unfinished_output)


def classify(args):
    """Classifies the images the arguments name and writes the results; returns the exit
    status (exit_status)."""
    tree = hierarchy_lib.load(args.hierarchy) if args.hierarchy else None
    names = [name for name in predict_args.SETTINGS
             if name != 'label_type' or args.format != 'original']
    defaults = flags.default_settings()
    return exit_status(predict_args.with_predictor(
        args, defaults.model, defaults.data, classifier(args, tree), PROG, args.top_k,
        '\t' if args.format == 'original' else None, names))


def classifier(args, tree):
    """predict_args.with_predictor's work: the class names, the thresholds and the
    scores' reading the arguments ask for, then batch_outputs.predict_to; returns its
    (processed, skipped)."""
    def work(serving, predictor, images, chosen, progress):
        # A model trained with --label_type=single is scored by softmax, as --single_label.
        single = args.single_label or chosen.get('label_type') == 'single'
        if single and args.threshold is not None:
            raise errors.UsageError(
                '--threshold is for multi-label scores; %s was trained with '
                '--label_type=single (softmax scores)' % args.checkpoint)
        threshold = None if single or args.format == 'original' else (
            0.5 if args.threshold is None else args.threshold)
        if threshold == predict_args.CALIBRATED:
            threshold = predict_args.calibrated_thresholds(predictor, PROG)
        names = class_names(args, tree, predictor.class_num)
        lazy_tensorflow.tensorflow()
        from mlimages.inference import batch_outputs
        return batch_outputs.predict_to(predictor, images, args.output, args.format,
                                        args.batch_size, args.top_k, threshold, names, PROG,
                                        tree, args.consistent, progress)
    return work


def class_names(args, tree, class_num):
    """The class names of --class_dict (as the original read it with --format original),
    else the hierarchy's, else None; UsageError for a hierarchy of another class count."""
    lazy_tensorflow.tensorflow()
    from mlimages.inference import inference_io
    load = (inference_io.load_original_class_names if args.format == 'original'
            else inference_io.load_class_names)
    names = load(args.class_dict, class_num) if args.class_dict else None
    if tree is not None:
        if len(tree) != class_num:
            raise errors.UsageError(hierarchy_lib.class_num_mismatch(
                tree, class_num, "the model's class count"))
        names = names or [' '.join(name.split()) for name in tree.names]
    return names


def exit_status(result):
    """The exit status of with_predictor's result, with the last line on stderr."""
    processed, skipped = result
    if not processed:
        arguments.error_line(PROG, 'no image could be processed (%d skipped)' % skipped)
        return 1
    sys.stderr.write('%s: %d image%s classified, %d skipped\n'
                     % (PROG, processed, '' if processed == 1 else 's', skipped))
    return 0
