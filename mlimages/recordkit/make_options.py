"""The command line of tools/make_tfrecords.py: its argparse parser and how the ImageNet
archive flags combine (archives.py, imagenet.py)."""
import argparse

from mlimages.recordkit import archives
from mlimages.cli import arguments, worker_processes
from mlimages.recordkit import imagenet
from mlimages.errors import ArchiveError, InputError

PROG = 'make_tfrecords.py'
SPLITS = ('train', 'val')
LABEL_LAYOUTS = ('dense', 'sparse')  # records.LABEL_LAYOUTS, named here without TensorFlow
LABEL_TYPES = ('multi', 'single')  # records.LABEL_TYPES


def _one_hot_flag(value):
    if value.strip().lower() in ('true', '1', 'yes', 'y'):
        return True
    raise argparse.ArgumentTypeError(
        'only one-hot (float32 vector) labels are supported, got %r' % value)


def build_parser():
    """The argparse parser of the command line."""
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Write image lists ("<path> <class>:<confidence> ...") to TFRecord '
                    'shards <out_dir>/<split>/<N>.tfrecords with the features image '
                    '(JPEG bytes), label (float32 bytes), width, height and name. '
                    'Every list is checked before anything is written; unreadable '
                    'images are skipped and listed in a report.',
        epilog='Exit status: 0 done (also with skipped images), 1 every image was '
               'skipped, 2 bad input, 143 / 130 stopped by SIGTERM / Ctrl-C (finished '
               'shards are kept). The short options of the original ML-Images '
               'tfrecord.py (-idx, -tfs, -im, -cls, -sidx, -one) still work.')
    parser.add_argument('lists', nargs='*', metavar='LIST',
                        help='image list files; each becomes one shard unless '
                             '--num_shards is given (a directory is read like --list_dir)')
    parser.add_argument('-idx', '--indexs', '--list_dir', dest='list_dir', metavar='DIR',
                        help='directory of image lists: every regular file in it, sorted '
                             'by name, hidden files excepted (instead of LIST arguments)')
    parser.add_argument('-tfs', '--tfrecords', '--out_dir', dest='out_dir', required=True,
                        metavar='DIR',
                        help='output directory; shards go to DIR/<split>/<N>.tfrecords '
                             '(the original tfrecord.py wrote them directly into DIR)')
    parser.add_argument('-im', '--images', '--image_root', dest='image_root', default='.',
                        metavar='DIR',
                        help='directory the image paths in the lists are relative to '
                             '(default: the current directory)')
    parser.add_argument('-cls', '--num_class', '--class_num', dest='class_num', type=int,
                        metavar='N',
                        help='number of classes = length of every label vector '
                             '(11166 for ML-Images, 1000 for ImageNet; required except '
                             'with --dictionary, whose classes it then defaults to)')
    parser.add_argument('--split', choices=SPLITS, default=None,
                        help='subdirectory of the output directory (default: train; val '
                             'with --imagenet_val_tar)')
    tars = parser.add_argument_group(
        'ImageNet archives, read in place (nothing extracted; each archive indexed once, '
        'the index cached in <out_dir>/archive_index/)')
    tars.add_argument('--image_tars', metavar='DIR',
                      help='instead of --image_root: a directory of per-synset tars '
                           '<wnid>.tar holding <wnid>_<n>.JPEG (ImageNet fall 2011 / '
                           'winter 2021); list paths <wnid>/<file> such as the ML-Images '
                           'train_image_id_from_imagenet.txt, as they are. Listed images '
                           'absent from the release are counted in the report')
    tars.add_argument('--imagenet_train_tar', metavar='FILE',
                      help='ILSVRC2012_img_train.tar (a tar of <wnid>.tar): single-label '
                           'records (int64 class index, --label_type=single) of all its '
                           'images, no list argument; needs --dictionary. Writes its list, '
                           'shuffled, to <out_dir>/imagenet_train_list.txt')
    tars.add_argument('--imagenet_val_tar', metavar='FILE',
                      help='ILSVRC2012_img_val.tar (flat JPEGs): single-label records of '
                           'the images of --val_labels, in --split val; needs --dictionary')
    tars.add_argument('--val_labels', metavar='FILE',
                      help='with --imagenet_val_tar: "<file> <wnid>" per line, e.g. '
                           'ILSVRC2012_val_00000001.JPEG n01751748')
    tars.add_argument('--dictionary', metavar='FILE',
                      help='the class order of --imagenet_*_tar: the original\'s '
                           'imagenet2012_dictionary.txt ("index<TAB>name": the synsets in '
                           'sorted WordNet-id order) or a file naming a wnid on each line')
    parser.add_argument('-sidx', '--start_index', type=int, default=0, metavar='N',
                        help='number of the first shard file (default: 0)')
    parser.add_argument('--num_shards', type=int, metavar='K',
                        help='deal the lines of a single list round-robin into K shards')
    parser.add_argument('--workers', type=int, default=None, metavar='N',
                        help='parallel worker processes, one shard each at a time '
                             '(default: the number of CPUs, %d here)'
                             % worker_processes.default_workers())
    parser.add_argument('--report', metavar='FILE',
                        help='where to list the skipped images '
                             '(default: <out_dir>/<split>_report.txt)')
    parser.add_argument('--jpeg_quality', type=int, default=95, metavar='Q',
                        help='JPEG quality for images that must be re-encoded: non-JPEG '
                             'files, CMYK/YCCK JPEGs and downscaled images (default: 95)')
    parser.add_argument('--short_side', type=arguments.non_negative_int, default=0,
                        metavar='N',
                        help='store an image whose shorter side exceeds N downscaled to N '
                             '(aspect kept, antialiased, re-encoded at --jpeg_quality); '
                             'smaller images as they are. 0 = off, every image byte for '
                             'byte (default). 320 suits --image_size 224 (docs/photos.md)')
    parser.add_argument('--label_layout', choices=LABEL_LAYOUTS, default='dense',
                        help='dense: the label as class_num float32 bytes (the original\'s, read by '
                             'the original program; default). sparse: label/index + '
                             'label/value lists of the non-zero classes, a few dozen bytes '
                             'instead of 4 x class_num (train.py reads both)')
    parser.add_argument('--hierarchy', metavar='FILE',
                        help='the semantic hierarchy (dictionary_and_semantic_hierarchy.txt '
                             'of ML-Images, --class_num classes): close every image\'s '
                             'labels under ancestors -- an ancestor that is not annotated '
                             'gets the highest confidence of its annotated descendants, -1 '
                             'stays -1; the report counts the labels added')
    parser.add_argument('--label_type', choices=LABEL_TYPES, default=None,
                        help='multi: the label as class_num confidences (--label_layout; '
                             'the default). single: `label` one int64 class index, the '
                             'records of train.py --label_type=single; every list line '
                             'then names exactly one class with confidence 1 (`<path> '
                             '<class>`, as make_image_list.py writes a folder per class). '
                             'The --imagenet_*_tar records are single')
    parser.add_argument('--overwrite', action='store_true',
                        help='rewrite shards that already exist (default: skip them, so '
                             'an interrupted run can be resumed)')
    parser.add_argument('--quiet', action='store_true',
                        help='no progress line or per-shard notes on stderr')
    parser.add_argument('-one', '--one_hot', type=_one_hot_flag, default=True,
                        metavar='TRUE',
                        help='accepted for compatibility with the original, whose labels '
                             'were float32 vectors: only true is allowed (class-index '
                             'labels: --label_type single)')
    return parser


def archive_flag_problem(args):
    """What is wrong with the combination of the archive flags, or None."""
    imagenet = [f for f in ('imagenet_train_tar', 'imagenet_val_tar') if getattr(args, f)]
    given = ['--' + f for f in ['image_tars'] + imagenet if getattr(args, f)]
    if len(given) > 1:
        return 'give one of %s, not both' % ' and '.join(given)
    if args.label_type == 'single' and args.hierarchy:
        return '--hierarchy closes multi-label labels: not with --label_type single'
    if args.label_type == 'single' and args.label_layout == 'sparse':
        return '--label_layout sparse is a layout of multi-label labels: not with ' \
            '--label_type single'
    if imagenet and args.label_type == 'multi':
        return '--%s writes single-label records: drop --label_type multi' % imagenet[0]
    if args.val_labels and not args.imagenet_val_tar:
        return '--val_labels goes with --imagenet_val_tar'
    if imagenet:
        if args.lists or args.list_dir:
            return '--%s makes its own image list: give no list' % imagenet[0]
        if not args.dictionary:
            return ('--%s needs --dictionary imagenet2012_dictionary.txt (the class order)'
                    % imagenet[0])
        if args.imagenet_val_tar and not args.val_labels:
            return '--imagenet_val_tar needs --val_labels FILE ("<file> <wnid>" per line)'
        if args.split == ('val' if args.imagenet_train_tar else 'train'):
            return '--%s writes --split %s' % (imagenet[0], 'val' if args.split == 'train'
                                                else 'train')
        if args.hierarchy:
            return '--hierarchy is for multi-label lists, not --%s' % imagenet[0]
    elif args.dictionary:
        return '--dictionary goes with --imagenet_train_tar or --imagenet_val_tar'
    elif args.class_num is None:
        return 'the following arguments are required: -cls/--num_class/--class_num'
    return None


def inputs(args):
    """(lists, archives.Source or None, class_num) of the command line; the ImageNet-1k
    list is written here (imagenet.py)."""
    if args.imagenet_train_tar or args.imagenet_val_tar:
        count, _ = imagenet.load_dictionary(args.dictionary)
        if args.class_num is not None and args.class_num != count:
            raise InputError('--class_num %d, but dictionary %s has %d classes'
                             % (args.class_num, args.dictionary, count))
    if args.imagenet_train_tar:
        args.split = args.split or 'train'
        workers = args.workers or worker_processes.default_workers()
        try:
            path, count = imagenet.write_train_list(
                args.imagenet_train_tar, args.dictionary, args.out_dir,
                lambda tasks: archives.index_all(tasks, workers, not args.quiet))
        except ArchiveError as exc:
            raise InputError(str(exc)) from None
        source = archives.Source('nested', args.imagenet_train_tar)
    elif args.imagenet_val_tar:
        args.split = args.split or 'val'
        path, count = imagenet.write_val_list(args.val_labels, args.dictionary,
                                              args.out_dir)
        source = archives.Source('flat', args.imagenet_val_tar)
    else:
        args.split = args.split or 'train'
        source = archives.Source('tars', args.image_tars) if args.image_tars else None
        return ([args.list_dir] if args.list_dir is not None else args.lists, source,
                args.class_num)
    return [path], source, count
