"""Turn a Tencent ML-Images URL list into img2dataset's input (step 1 of docs/download.md).

The published lists (train_urls_from_openimages.txt, val_urls_from_openimages.txt) have one
image a line:

    <URL><TAB><class>:<confidence><TAB><class>:<confidence> ...

Each line becomes one row of three string columns:

    url     the URL
    labels  the text after the URL's tab, verbatim (Parquet keeps it a string; a TSV
            would let pyarrow turn a bare class number into an int64)
    name    the file name the original's download_urls_multithreading.py gave the image:
            <second-last '/' part of the URL>_<last part>, e.g.
            https://farm3.staticflickr.com/2023/1234_abcd.jpg -> 2023_1234_abcd.jpg;
            the k-th repeat of a name (the original overwrote the file) gets '-k' before
            its extension, and is counted

The rows go, in list order, into DIR/part-NNNNN.parquet files of --rows_per_file rows
(img2dataset reads the files of a directory in name order, each one whole, so a file
bounds its memory). Every line is checked first -- the URL's scheme, the label grammar of
image_lists.py -- and a bad line stops the tool with '<list>:<line>: <what>' before anything
is written; DIR is written under a temporary name and renamed when complete.

    .venv/bin/python tools/urls_to_img2dataset.py train_urls_from_openimages.txt download/train_input

Needs pyarrow (requirements-download.txt).
"""
import os
import sys

from mlimages import errors
from mlimages.errors import ListFormatError, UrlListError
from mlimages.files import atomic_directory
from mlimages.cli import arguments, entry
from mlimages.cli import progress as _progress
from mlimages.recordkit.image_lists import parse_sparse

PROG = 'urls_to_img2dataset.py'
COLUMNS = ('url', 'labels', 'name')
PART_NAME = 'part-%05d.parquet'
# Labels are checked for their grammar and confidence range only: the class count is
# make_tfrecords.py's -cls, checked there.
_ANY_CLASS_NUM = sys.maxsize


def original_name(url):
    """<second-last URL part>_<last URL part>, as the original's downloader named files."""
    parts = url.split('/')
    return parts[-2] + '_' + parts[-1]


def row_of_line(line, source, lineno):
    """(url, labels text, name) of one list line, or None for a blank line."""
    line = line.rstrip('\r\n')
    if not line.strip():
        return None
    url, _, labels = line.partition('\t')
    url = url.strip()
    if not url.startswith(('http://', 'https://')) or len(url.split('/')) < 5:
        raise ListFormatError(source, lineno, 'not an http(s) URL with a path: %r '
                              '(expected <URL><TAB><class>:<confidence> ...)' % url[:200])
    parse_sparse('x\t' + labels, _ANY_CLASS_NUM, source, lineno)  # raises for a bad token
    name = original_name(url)
    if not all(url.split('/')[-2:]) or any(c.isspace() for c in name) \
            or name.startswith('.'):
        raise ListFormatError(source, lineno, 'URL %r gives no usable file name (%r)'
                              % (url[:200], name))
    return url, labels, name


def unique_name(name, seen):
    """name, or name with '-k' before the extension for its k-th repeat."""
    count = seen.get(name, 0)
    seen[name] = count + 1
    if not count:
        return name, False
    stem, ext = os.path.splitext(name)
    while True:  # the suffixed name may itself be taken by a later or earlier URL
        candidate = '%s-%d%s' % (stem, count, ext)
        if candidate not in seen:
            seen[candidate] = 1
            return candidate, True
        count += 1


class _Progress(_progress.ProgressLine):
    def __init__(self, enabled, what):
        super(_Progress, self).__init__(enabled)
        self.what, self.count = what, 0

    def text(self):
        return '%s: %d lines' % (self.what, self.count)


def _lines(path, meter):
    with open(path, 'rb') as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode('utf-8')
            except UnicodeDecodeError:
                raise ListFormatError(path, lineno, 'line is not valid UTF-8') from None
            if lineno == 1:
                line = line.lstrip('\ufeff')
            meter.count = lineno
            meter.tick()
            yield lineno, line


def convert(url_list, out_dir, rows_per_file=1000000, overwrite=False, progress=True):
    """Write url_list's rows to out_dir/part-NNNNN.parquet; returns a summary dict:
    rows, files, renamed (repeated names given a suffix), out_dir."""
    import pyarrow.parquet  # noqa: F401  without the extras: one line before any check

    _check_paths(url_list, out_dir, overwrite)
    # Pass 1 checks every line, so a bad last line costs no half-written directory.
    meter = _Progress(progress, 'checking %s' % os.path.basename(url_list))
    rows = sum(row_of_line(line, url_list, n) is not None for n, line in _lines(url_list, meter))
    meter.finish()
    if not rows:
        raise UrlListError('no URLs in %s' % url_list)

    with atomic_directory(out_dir) as tmp:
        meter = _Progress(progress, 'writing %s' % out_dir)
        files, renamed = _write_parts(url_list, tmp, rows_per_file, meter)
        meter.finish()
    return {'rows': rows, 'files': files, 'renamed': renamed, 'out_dir': out_dir}


def _check_paths(url_list, out_dir, overwrite):
    """UrlListError unless url_list is a file and out_dir may be written (absent, or
    --overwrite) and does not hold the list."""
    if not os.path.isfile(url_list):
        raise UrlListError('no such URL list: %s' % url_list)
    if os.path.exists(out_dir) and not overwrite:
        raise UrlListError('%s exists; remove it or pass --overwrite' % out_dir)
    real_out = os.path.realpath(out_dir).rstrip(os.sep) + os.sep
    if os.path.realpath(url_list).startswith(real_out):
        raise UrlListError('the output %s would hold the list %s: give another directory'
                           % (out_dir, url_list))


def _write_parts(url_list, tmp, rows_per_file, meter):
    """(files, renamed): url_list's rows written to tmp/part-NNNNN.parquet, rows_per_file
    a file, in list order; renamed counts the repeated names given a suffix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(c, pa.string()) for c in COLUMNS])
    seen, renamed, files = {}, 0, 0
    batch = {c: [] for c in COLUMNS}

    def flush():
        nonlocal files
        if batch['url']:
            pq.write_table(pa.Table.from_pydict(batch, schema),
                           os.path.join(tmp, PART_NAME % files))
            files += 1
            for column in batch.values():
                column.clear()

    for lineno, line in _lines(url_list, meter):
        row = row_of_line(line, url_list, lineno)
        if row is None:
            continue
        url, labels, name = row
        name, suffixed = unique_name(name, seen)
        renamed += suffixed
        for column, value in zip(COLUMNS, (url, labels, name)):
            batch[column].append(value)
        if len(batch['url']) >= rows_per_file:
            flush()
    flush()
    return files, renamed


def build_parser():
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Turn a Tencent ML-Images URL list ("<URL><TAB><class>:<confidence> '
                    '...") into img2dataset input: Parquet files with the string columns '
                    'url, labels (the text after the URL, verbatim) and name (the '
                    'original downloader\'s file name, <second-last URL part>_<last '
                    'part>). Every line is checked before anything is written.',
        epilog='Exit status: 0 done, 2 bad input, 143 / 130 stopped by SIGTERM / Ctrl-C '
               '(OUT_DIR as it was). Then run img2dataset on OUT_DIR with '
               '--input_format parquet --save_additional_columns \'["labels","name"]\' '
               '(docs/download.md has the whole command).')
    parser.add_argument('url_list', metavar='URL_LIST',
                        help='the URL list, e.g. train_urls_from_openimages.txt')
    parser.add_argument('out_dir', metavar='OUT_DIR',
                        help='directory to create with part-NNNNN.parquet files; '
                             'img2dataset\'s --url_list')
    parser.add_argument('--rows_per_file', type=arguments.positive_int, default=1000000,
                        metavar='N',
                        help='rows a Parquet file (default 1000000). img2dataset loads '
                             'one file at a time, whole; keep N a multiple of its '
                             '--number_sample_per_shard so that every shard but the '
                             'last is full')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace OUT_DIR if it exists (default: refuse)')
    parser.add_argument('--quiet', action='store_true', help='no progress line on stderr')
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (0 or 2)."""
    return entry.run(PROG, lambda: build_parser().parse_args(argv), convert_and_report,
                     (errors.UsageError, UrlListError, ListFormatError),
                     arguments.download_stopped_note)


def convert_and_report(args):
    """Converts the URL list the arguments name and prints the summary; returns the exit
    status (0)."""
    try:
        summary = convert(args.url_list, args.out_dir, args.rows_per_file,
                          args.overwrite, progress=not args.quiet)
    except ImportError as exc:
        raise arguments.missing_download_extras(exc) from None
    print('rows: %d in %d files (%s)' % (summary['rows'], summary['files'],
                                         summary['out_dir']))
    print('repeated file names given a -k suffix: %d' % summary['renamed'])
    return 0
