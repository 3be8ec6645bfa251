"""The command line of tools/make_image_list.py: a folder per class or a CSV of path,labels
-> an image list and its class dictionary (own_images.py has the rules), one line for
every file skipped and every empty class, a summary on stdout.

    .venv/bin/python tools/make_image_list.py --image_root photos --out my_data/train.txt \
        --val_out my_data/val.txt --val_fraction 0.1

Exit status: 0 written (also with skipped files), 1 no image kept (nothing written),
2 bad usage or input (nothing written), 143 / 130 stopped by SIGTERM / Ctrl-C (nothing
written).
"""
import argparse
import os
import sys

from mlimages.cli import arguments, entry, worker_processes
from mlimages.errors import AllImagesSkippedError, InputError, UsageError
from mlimages.recordkit import own_images

PROG = 'make_image_list.py'


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('not a number: %r' % text) from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError('must be in [0, 1), got %s' % text)
    return value


def build_parser():
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Make the image list of make_tfrecords.py ("<path> <class>[:<conf>] '
                    '...") and its class dictionary ("index<TAB>name", read by predict.py '
                    '--class_dict) from a folder per class (single-label) or a CSV of '
                    'path,labels (multi-label). Every file is decoded; unreadable, '
                    'missing, truncated, non-image and duplicate files (the same path, or '
                    'the same bytes) are skipped, each named on stderr, and every class '
                    'left without an image is named. EXIF orientation is not applied, as '
                    'nowhere in this project. docs/own-images.md.',
        epilog='Exit status: 0 written (also with skipped files), 1 no image kept, 2 bad '
               'usage or input (nothing written in either case), 143 / 130 stopped by '
               'SIGTERM / Ctrl-C.')
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--image_root', metavar='ROOT',
                        help='ROOT/<class>/<image>, subfolders included: one class per '
                             'image; list paths relative to ROOT (make_tfrecords.py '
                             '--image_root ROOT --label_type single)')
    source.add_argument('--csv', metavar='FILE',
                        help='a CSV with the header path,labels: labels ";"-separated, '
                             'each name or name:confidence in [-1, 1]; paths relative to '
                             'the CSV\'s folder (make_tfrecords.py --image_root that folder) '
                             'unless absolute')
    parser.add_argument('--out', required=True, metavar='LIST',
                        help='the image list to write (its folder is made)')
    parser.add_argument('--val_out', metavar='LIST',
                        help='with --val_fraction: the validation list to write')
    parser.add_argument('--val_fraction', type=_fraction, default=0.0, metavar='F',
                        help='hold out round(n x F) of the images of each class (a CSV: of '
                             'all images) for --val_out, at least one of each left to train '
                             '(default: 0, one list)')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the --val_fraction draw (default: 0; the same seed '
                             'and files give the same lists)')
    dictionary = parser.add_mutually_exclusive_group()
    dictionary.add_argument('--class_dict_out', metavar='FILE',
                            help='the class dictionary to write: classes in sorted name '
                                 'order (default: classes.txt beside --out)')
    dictionary.add_argument('--class_dict_in', metavar='FILE',
                            help='number the classes as this dictionary of an earlier run '
                                 'does (a validation tree or CSV of its own): nothing '
                                 'written but the list; an image of another class is '
                                 'skipped')
    parser.add_argument('--workers', type=arguments.int_at_least(1, '>= 1'), default=None,
                        metavar='N', help='processes decoding the files (default: the '
                                          'number of CPUs, %d here)' % worker_processes.default_workers())
    parser.add_argument('--quiet', action='store_true',
                        help='no progress line on stderr (skips are still named)')
    return parser


def _usage_problem(args):
    """What is wrong with the combination of the flags, or None."""
    if args.val_fraction and not args.val_out:
        return '--val_fraction %g needs --val_out LIST (where the held-out images go)' \
            % args.val_fraction
    if args.val_out and not args.val_fraction:
        return '--val_out needs --val_fraction F > 0 (the share of images it gets)'
    paths = [os.path.abspath(p) for p in (args.out, args.val_out, args.class_dict_out,
                                          args.class_dict_in) if p]
    if len(set(paths)) != len(paths):
        return '--out, --val_out and the class dictionary must be different files'
    return None


def _print_summary(summary, prog=PROG):
    """The skip lines (stderr, one per file and per empty class) and the summary (stdout)."""
    for where, kind, detail in summary['skips']:
        sys.stderr.write('%s: skipped %s: %s (%s)\n' % (prog, where, kind, detail))
    for name, files in summary['empty']:
        sys.stderr.write('%s: empty class %r: %s\n' % (prog, name, 'no file' if not files else
                         'no image kept (%d file%s skipped)' % (files, 's'[:files != 1])))
    sys.stderr.flush()
    kinds = {}
    for _, kind, _ in summary['skips']:
        kinds[kind] = kinds.get(kind, 0) + 1
    print('images kept: %s' % ', '.join('%d in %s' % (count, path)
                                         for path, count in summary['outputs']))
    print('files skipped: %d%s' % (len(summary['skips']), ''.join(
        sorted(', %s %d' % (kind, count) for kind, count in kinds.items()))))
    print('empty classes: %d%s' % (len(summary['empty']), ''.join(
        ', %r' % name for name, _ in summary['empty'])))
    rotated = summary['rotated']
    print('EXIF orientation other than 1: %d image%s%s, kept unrotated (as make_tfrecords.py, '
          'train.py and predict.py read them)' % (len(rotated), '' if len(rotated) == 1
                                                   else 's', ' (e.g. %s)' % rotated[0]
                                                   if rotated else ''))
    print('classes: %d in %s (make_tfrecords.py and train.py --class_num %d)'
          % (len(summary['classes']), summary['dictionary'], len(summary['classes'])))
    print('next: make_tfrecords.py --image_root %s --class_num %d%s'
          % (summary['image_root'], len(summary['classes']),
             ' --label_type single' if summary['single_label'] else ''))
    sys.stdout.flush()


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    return entry.run(PROG, lambda: build_parser().parse_args(argv), make_and_report,
                     (InputError, UsageError), lambda args: 'nothing written')


def make_and_report(args):
    """Writes the image list (and the held-out one, the class dictionary) the arguments
    ask for and says what was skipped; returns the exit status (0, 1 when every image was
    skipped)."""
    problem = _usage_problem(args)
    if problem:
        raise UsageError(problem)
    dictionary = None if args.class_dict_in else (
        args.class_dict_out or os.path.join(os.path.dirname(args.out), 'classes.txt'))
    try:
        summary = own_images.make_image_list(
            args.out, args.image_root, args.csv, args.val_out, args.val_fraction, args.seed,
            dictionary, args.class_dict_in, args.workers or worker_processes.default_workers(),
            not args.quiet)
    except AllImagesSkippedError as exc:  # what was skipped, then why nothing was written
        _print_summary(exc.summary)
        arguments.error_line(PROG, '%s; nothing written' % exc)
        return exc.status
    _print_summary(summary)
    return 0
