"""Check TFRecord shards (docs/original.md, Records) before a long training run.

    .venv/bin/python tools/check_tfrecords.py --class_num 11166 data/            # train/ and val/
    .venv/bin/python tools/check_tfrecords.py --class_num 12 data/train/3.tfrecords --json

Every record of every shard is read and checked the way train.py would consume it: the
file (record_checks/shard_checks: readable to its end), the Example, its features, the
image (TensorFlow's own decoder) and the label (length class_num, finite, in [-1, 1]; with
--label_type single one int64 class index in [0, class_num), ImageNet's records).
Bad records make training fail or learn wrong; warnings are odd but train.

Totals: files, records, bad records, warnings, and over every record whose label is
valid: positives per class (label >= mask_thres) and the classes that never have one, the
label-cardinality histogram (positives per image) and the number of -1 entries.

With --hierarchy FILE (hierarchy.py): the records and the (class, ancestor) pairs where a
positive class has an ancestor that is not positive (0 <= label < mask_thres; an ignored
ancestor is none), summed over records, with the classes that have the most pairs and how
to fix it (close the labels with make_tfrecords.py or convert_tfrecords.py --hierarchy).
These are warnings: they do not change the exit status.

Files are checked in parallel by --workers processes (spawned; one file per task). A
worker that dies -- a native crash in a decoder, which would kill training as well --
costs only its file, reported with the record it died on and its last stderr lines; with
one worker everything runs in the calling process. The text report lists --max_bad bad
records and warnings; --json prints everything on stdout. Progress goes to stderr.

Exit status: 0 nothing bad (warnings allowed), 1 something bad, 2 bad usage, 143 / 130
stopped by SIGTERM / Ctrl-C.
"""
import argparse
import json
import math
import os
import sys
import time

import file_db
from mlimages import errors
from mlimages.data import hierarchy as hierarchy_lib
from mlimages.config import startup
from mlimages.errors import UsageError, stopped  # UsageError: exit 2
from mlimages.cli import arguments, entry, lazy_tensorflow, worker_processes
from mlimages.cli import progress as _progress
from mlimages.recordkit import shard_checks
from mlimages.recordkit.check_report import format_report

PROG = 'check_tfrecords.py'
SHARD_PATTERN = '*tfrecords'
SPLITS = ('train', 'val')


def _worker_main(conn, class_num, mask_thres, hierarchy, label_type, position, log_path):
    """A worker process: check the files the parent sends over `conn` until None."""
    extra = {} if label_type == 'multi' else {'label_type': label_type}

    def check(path, progress, at_record):
        return shard_checks.check_file(path, class_num, mask_thres, None, progress,
                                       at_record, hierarchy, **extra)
    worker_processes.serve(conn, position, log_path, check)


class _Progress(_progress.ProgressLine):
    """'files done/total, records, records/s'."""

    def __init__(self, total_files, enabled, stream=None):
        super(_Progress, self).__init__(enabled, stream)
        self.total = total_files
        self.files = self.records = 0

    def add(self, records=0, files=0):
        self.records += records
        self.files += files
        self.tick()

    def text(self):
        return '%d/%d files, %d records, %.1f records/s' % (
            self.files, self.total, self.records, self.rate(self.records))

    def done_total(self):
        return self.files, self.total


def check_files(paths, class_num, workers=None, progress=True, mask_thres=0.7,
                hierarchy=None, label_type='multi'):
    """Check shard files, `workers` processes in parallel, and return the overall summary.

    paths: shard file paths (use resolve_inputs for directories). workers: processes
    ('spawn' context), one file per task; None = the number of usable CPUs; with one
    worker or one file everything runs in this process. A worker process that dies
    makes its file bad (reason "checker crashed: ..." naming the record) and is
    replaced. progress: draw a progress line on stderr. hierarchy: a hierarchy.Hierarchy
    of class_num classes: also count the labels not closed under ancestors.
    label_type: 'multi', or 'single' for records whose label is one int64 class index.

    Returns a dict: class_num, mask_thres, ok (nothing bad), seconds, files (the per-file
    summaries of check_file, in the order of `paths`, without their per-class positives)
    and totals: files, records, bad_records, corrupt_files, warnings, labelled_records,
    ignored_entries, positives (per class), never_positive (classes without a positive),
    cardinality (list: positives per image -> records); with a hierarchy also hierarchy
    (shard_checks.Totals.hierarchy_totals).
    """
    paths = [os.fspath(p) for p in paths]
    if class_num < 1:
        raise ValueError('class_num must be >= 1, got %d' % class_num)
    if hierarchy is not None and len(hierarchy) != class_num:
        raise ValueError(hierarchy_lib.class_num_mismatch(hierarchy, class_num))
    if workers is not None and workers < 1:
        raise ValueError('workers must be >= 1, got %d' % workers)
    start = time.monotonic()
    meter = _Progress(len(paths), progress)
    workers = min(workers or worker_processes.default_workers(), len(paths))
    # Totals as the files come in: a per-class count of every file kept until the end
    # was class_num x files large (1.8-9 GB at 11,166 classes and 20,000 shards).
    acc = shard_checks.Totals(class_num, hierarchy)
    if workers <= 1:
        files = []
        for path in paths:
            files.append(acc.add(shard_checks.check_file(
                path, class_num, mask_thres, on_progress=lambda n: meter.add(n),
                hierarchy=hierarchy, label_type=label_type)))
            meter.add(files=1)
    else:
        files = worker_processes.run_workers(
            paths, _worker_main, (class_num, mask_thres, hierarchy, label_type), workers,
            on_progress=meter.add, on_finished=lambda: meter.add(files=1),
            on_crash=shard_checks.crashed_file, what='checking',
            log_prefix='check_tfrecords-', on_result=acc.add)
    if paths:
        meter.finish()

    totals = acc.totals()
    summary = {'class_num': class_num, 'mask_thres': mask_thres,
               'ok': totals['bad_records'] == 0, 'totals': totals, 'files': files,
               'seconds': time.monotonic() - start}
    if hierarchy is not None:
        summary['hierarchy'] = acc.hierarchy_totals()
    return summary


def resolve_inputs(inputs):
    """Shard paths from files and directories; raises UsageError for bad input.

    A directory contributes its own *tfrecords files and those of its train/ and val/
    subdirectories, each listed in natural order (2 before 10). A file given twice (or
    both directly and through its directory) is checked once.
    """
    paths, seen = [], set()
    for item in inputs:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = []
            for sub in ('',) + SPLITS:
                try:
                    found.extend(file_db.list_shards(item, sub, SHARD_PATTERN))
                except errors.DataError:
                    pass
            if not found:
                raise UsageError('no shard files (%s) in %s or its %s subdirectories'
                                 % (SHARD_PATTERN, item, '/ and '.join(SPLITS) + '/'))
        elif os.path.isfile(item):
            found = [item]
        elif os.path.exists(item):
            raise UsageError('not a regular file or directory: %s' % item)
        else:
            raise UsageError('no such file or directory: %s' % item)
        for path in found:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                paths.append(path)
    return paths


# -------------------------------------------------------------------------------- CLI

def _threshold(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('not a number: %r' % text) from None
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise argparse.ArgumentTypeError('must be in (0, 1], got %s' % text)
    return value


def build_parser():
    """The argparse parser of the command line."""
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False,
        description='Check TFRecord shards (records of image, label, width, height, name) '
                    'for everything that would break or silently spoil training, and '
                    'report label statistics.',
        epilog='Exit status: 0 nothing bad (warnings allowed), 1 bad records or corrupt '
               'files, 2 bad usage, 143 / 130 stopped by SIGTERM / Ctrl-C (nothing reported).')
    parser.add_argument('inputs', nargs='*', metavar='PATH',
                        help='shard files, or directories: their *tfrecords files and '
                             'those of their train/ and val/ subdirectories')
    parser.add_argument('--class_num', type=arguments.positive_int, required=True, metavar='N',
                        help='label length every record must have (11166 for ML-Images)')
    parser.add_argument('--workers', type=arguments.positive_int, default=None, metavar='N',
                        help='parallel processes, one file per task (default: the '
                             'number of CPUs, %d here)' % worker_processes.default_workers())
    parser.add_argument('--json', action='store_true',
                        help='print the whole summary as JSON on stdout (every bad record) '
                             'instead of the text report')
    parser.add_argument('--label_type', choices=('multi', 'single'), default='multi',
                        help='multi: class_num float32 labels (dense or sparse, the '
                             'default); single: one int64 class index per record, as '
                             'make_tfrecords.py --imagenet_*_tar writes and train.py '
                             '--label_type=single reads')
    parser.add_argument('--mask_thres', type=_threshold, default=0.7, metavar='T',
                        help='a label >= T counts as a positive (default: 0.7, as training)')
    parser.add_argument('--hierarchy', metavar='FILE',
                        help='the semantic hierarchy (dictionary_and_semantic_hierarchy.txt, '
                             '--class_num classes): also count the records and (class, '
                             'ancestor) pairs where a positive class has an ancestor that '
                             'is not positive, list the worst classes and say how to fix '
                             'it; warnings, the exit status stays 0')
    parser.add_argument('--max_bad', type=arguments.non_negative_int, default=50, metavar='N',
                        help='bad records (and warnings) listed in the text report '
                             '(default: 50)')
    parser.add_argument('--quiet', action='store_true', help='no progress line on stderr')
    return parser


def load_hierarchy(path, class_num):
    """--hierarchy: None, or the hierarchy of class_num classes; raises HierarchyError or
    UsageError (one line)."""
    if not path:
        return None
    hierarchy = hierarchy_lib.load(path)
    if len(hierarchy) != class_num:
        raise UsageError(hierarchy_lib.class_num_mismatch(hierarchy, class_num))
    return hierarchy


def main(argv=None):
    """Command-line entry point; returns the exit status (0 ok, 1 bad data, 2 usage)."""
    startup.check_versions('check_tfrecords.py')
    lazy_tensorflow.quiet_tensorflow()
    return entry.run(PROG, lambda: build_parser().parse_args(argv), check_and_report,
                     (UsageError, errors.HierarchyError), collapse=False)


def check_and_report(args):
    """Checks the shards the arguments name and writes the report (--json: as JSON);
    returns the exit status (0 every record ok, 1 bad data, 128 + the signal when
    stopped)."""
    if not args.inputs:
        raise UsageError('no shard files or directories given')
    paths = resolve_inputs(args.inputs)
    hierarchy = load_hierarchy(args.hierarchy, args.class_num)
    try:
        summary = check_files(paths, args.class_num, workers=args.workers,
                              progress=not args.quiet, mask_thres=args.mask_thres,
                              hierarchy=hierarchy, label_type=args.label_type)
    except KeyboardInterrupt as exc:  # a line of its own below the progress line, no report
        words, status = stopped(exc)
        sys.stderr.write('\n%s: %s; nothing was reported, rerun to check the files\n'
                         % (PROG, words))
        return status
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=1) + '\n')
    else:
        sys.stdout.write(format_report(summary, args.max_bad))
    sys.stdout.flush()
    return 0 if summary['ok'] else 1

