"""tools/make_tfrecords.py's main: its command line (make_options.py) -> build_records
(make_tfrecords.py, which describes what it writes) -> the summary on stdout, one line on
stderr for an error, and the exit status."""
import os
import sys

from mlimages.data import hierarchy as hierarchy_lib
from mlimages.config import startup
from mlimages import errors
from mlimages.errors import AllImagesSkippedError, InputError, MakeRecordsError
from mlimages.cli import entry
from mlimages.recordkit import make_tfrecords
from mlimages.recordkit.make_options import PROG, archive_flag_problem, build_parser, inputs


def _print_summary(summary, hierarchy=None):
    print('shards written: %d (in %s)' % (len(summary['shards_written']),
                                          summary['out_dir']))
    print('shards skipped (already exist): %d' % len(summary['shards_skipped']))
    if summary['shards_empty']:
        print('shards not written (no readable image): %d' % len(summary['shards_empty']))
    print('images written: %d' % summary['images_written'])
    print('images skipped: %d' % summary['images_skipped'])
    if 'images_missing' in summary:
        print('images missing from the release: %d' % summary['images_missing'])
    if hierarchy is not None:
        print(make_tfrecords.closure_line(summary, hierarchy))
    print('report: %s' % summary['report_path'])
    sys.stdout.flush()


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    startup.check_versions('make_tfrecords.py')
    # intermixed: list files may come after options, as in "-cls 5 a.txt b.txt"
    return entry.run(
        PROG, lambda: build_parser().parse_intermixed_args(argv), build_and_report,
        (MakeRecordsError, errors.HierarchyError),
        lambda args: 'finished shards are kept, rerun the same command to complete the rest')


def build_and_report(args):
    """Builds the records the arguments ask for and prints the summary; returns the exit
    status (0)."""
    if args.lists and args.list_dir:
        raise InputError('give list files or --list_dir, not both')
    if args.list_dir is not None and not os.path.isdir(args.list_dir):
        raise InputError('no such list directory: %s' % args.list_dir)
    problem = archive_flag_problem(args)
    if problem:
        raise InputError(problem)
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    hierarchy = None
    try:
        hierarchy = hierarchy_lib.load(args.hierarchy) if args.hierarchy else None
        lists, source, class_num = inputs(args)
        summary = make_tfrecords.build_records(
            make_tfrecords.Inputs(lists, args.image_root, source),
            _records(args, class_num, hierarchy),
            make_tfrecords.Output(args.out_dir, args.split, args.num_shards,
                                  args.start_index, args.report, args.overwrite),
            make_tfrecords.Work(args.workers, not args.quiet))
    except AllImagesSkippedError as exc:  # what was skipped, then the error line (exit 1)
        _print_summary(exc.summary, hierarchy)
        raise
    _print_summary(summary, hierarchy)
    return 0


def _records(args, class_num, hierarchy):
    """make_tfrecords.Records of the command line: single class indices for
    --label_type=single and ImageNet-1k's tars."""
    return make_tfrecords.Records(
        class_num, args.label_layout,
        bool(args.label_type == 'single' or args.imagenet_train_tar or args.imagenet_val_tar),
        hierarchy, args.jpeg_quality, args.short_side)
