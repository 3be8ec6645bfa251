"""Turn img2dataset's `files` output into an image list for make_tfrecords.py and a
failures file (step 3 of docs/download.md).

img2dataset writes, per shard s (s = 0, 1, ...; S = its --number_sample_per_shard):
<dir>/<s>.parquet (one row per URL: key, status, error_message, sha256 of the downloaded
bytes, and the input's url, labels, name), <dir>/<s>/<key>.jpg for every success and, when
the shard is complete, <dir>/<s>_stats.json. It exits 0 even when shards failed, so this
tool first checks that the download is whole:

    expected shards = sum over the input's Parquet files (name order) of ceil(rows / S)

and every expected shard must have its stats file and parquet, with as many rows as the
input gave it, and no `_tmp` directory may be left (a run still going, or killed). Any gap
stops the tool with exit 1, the shard numbers and the fix (rerun the same img2dataset
command: it redoes the shards without a stats file), and nothing is written.

A success whose downloaded bytes are a placeholder is dropped: a sha256 shared by
>= --placeholder_min_urls distinct successful URLs (a "photo unavailable" image that missing photos
redirect to), or listed in --placeholder_hashes. Everything else that succeeded is kept:

    OUT/images/<name>   a hard link to <dir>/<s>/<key>.jpg, named as the original's
                        downloader named it (so records carry the original's names)
    OUT/list.txt        <name><TAB><labels verbatim>, in input order: make_tfrecords.py's
                        list, with -im OUT/images
    OUT/failures.tsv    <url><TAB><name><TAB><reason> for every URL not kept, the reason
                        being img2dataset's status and error, or the placeholder rule hit

OUT is written under a temporary name and renamed when complete.

    .venv/bin/python tools/img2dataset_to_list.py download/train download/train_input download/train_list

Needs pyarrow (requirements-download.txt).
"""
import collections
import errno
import os
import re

from mlimages import errors, files
from mlimages.errors import IncompleteDownloadError, ListError
from mlimages.cli import arguments, entry
from mlimages.cli import progress as _progress
from mlimages.recordkit.img2dataset_shards import (complete_shard_parquets, expected_shards,
                                                  read_shard)

PROG = 'img2dataset_to_list.py'
# Hashes (sha256 of the bytes as served) of placeholder images known to be served with
# status 200 for missing photos. Empty: Flickr's "photo unavailable" image could not be
# fetched where this was written; pass it with --placeholder_hashes (docs/download.md),
# and the shared-bytes rule catches it anyway once >= --placeholder_min_urls URLs hit it.
KNOWN_PLACEHOLDERS = frozenset()
_HEX64 = re.compile(r'[0-9a-f]{64}\Z')


def read_hashes(path):
    """The sha256 hex digests in a file, one a line ('#' starts a comment)."""
    hashes = set()
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            text = line.split('#', 1)[0].strip().lower()
            if text and not _HEX64.match(text):
                raise ListError('%s:%d: not a sha256 hex digest: %r' % (path, lineno, text))
            if text:
                hashes.add(text)
    return hashes


class _UrlsPerHash(object):
    """How many distinct URLs gave each sha256: a list that names a URL twice must not
    make its photo a placeholder. Most digests have one URL, kept as its hash() alone."""

    def __init__(self):
        self.first = {}   # sha256 -> hash(url) of its only URL so far
        self.many = {}    # sha256 -> {hash(url), ...} once a second URL came

    def add(self, digest, url):
        key = hash(url)
        if digest in self.many:
            self.many[digest].add(key)
        elif digest not in self.first:
            self.first[digest] = key
        elif self.first[digest] != key:
            self.many[digest] = {self.first.pop(digest), key}

    def shared(self, min_urls, known):
        """{sha256: distinct URLs} of the placeholders: >= min_urls URLs, or known."""
        found = {d: len(keys) for d, keys in self.many.items() if len(keys) >= min_urls}
        found.update({d: 1 for d in self.first if d in known})
        found.update({d: len(keys) for d, keys in self.many.items() if d in known})
        return found


class _Progress(_progress.ProgressLine):
    def __init__(self, enabled, total):
        super(_Progress, self).__init__(enabled)
        self.total, self.done, self.what = total, 0, 'counting hashes'

    def done_total(self):
        return self.done, self.total

    def text(self):
        return '%s: %d/%d shards' % (self.what, self.done, self.total)


def _reason(row):
    return '%s: %s' % (row['status'], ' '.join(str(row['error_message']).split()))


def convert(download_dir, input_dir, out_dir, per_shard=10000, min_urls=3,
            known=frozenset(), overwrite=False, progress=True):
    """Write out_dir/{images/,list.txt,failures.tsv}; returns a summary dict: kept,
    placeholders, failed (Counter by status), placeholder_hashes ({sha256: URLs})."""
    _check_out_dir(out_dir, (download_dir, input_dir), overwrite)
    shards = expected_shards(input_dir, per_shard)
    parquets = complete_shard_parquets(download_dir, shards)
    inputs = [(parquets[shard], shards[shard]) for shard in sorted(shards)]
    meter = _Progress(progress, 2 * len(inputs))
    shared = _placeholder_hashes(inputs, min_urls, known, meter)

    with files.atomic_directory(out_dir) as tmp:
        os.makedirs(os.path.join(tmp, 'images'))
        meter.what = 'linking images'
        kept, placeholders, failed = _write_list(tmp, inputs, shared, known, meter)
        meter.finish()
    return {'kept': kept, 'placeholders': placeholders, 'failed': failed,
            'placeholder_hashes': shared, 'out_dir': out_dir}


def _check_out_dir(out_dir, inputs, overwrite):
    """Raises ListError when out_dir exists (without overwrite) or would hold an input."""
    if os.path.exists(out_dir) and not overwrite:
        raise ListError('%s exists; remove it or pass --overwrite' % out_dir)
    for path in inputs:
        if _inside(path, out_dir):
            raise ListError('the output %s would hold %s: give another directory'
                            % (out_dir, path))


def _placeholder_hashes(inputs, min_urls, known, meter):
    """Pass 1: {sha256: distinct URLs} of the placeholders among the successes of `inputs`
    ((parquet path, rows) a shard), by the distinct URLs behind every success's sha256."""
    urls = _UrlsPerHash()
    for parquet, rows in inputs:
        for row in read_shard(parquet, rows):
            if row['status'] == 'success':
                if not row['sha256']:
                    raise ListError('%s: a success without a sha256: run img2dataset with '
                                    'its default --compute_hash sha256' % parquet)
                urls.add(row['sha256'], row['url'])
        meter.done += 1
        meter.tick()
    return urls.shared(min_urls, known)


def _write_list(tmp, inputs, shared, known, meter):
    """Pass 2: link the kept images into tmp/images, write tmp/list.txt and
    tmp/failures.tsv; returns (kept, placeholders, failed: Counter by status)."""
    kept, placeholders, failed = 0, 0, collections.Counter()
    with open(os.path.join(tmp, 'list.txt'), 'w') as image_list, \
            open(os.path.join(tmp, 'failures.tsv'), 'w') as failures:
        failures.write('# url\tname\treason\n')
        for parquet, rows in inputs:
            shard_dir = os.path.splitext(parquet)[0]
            if not os.path.isdir(shard_dir):
                raise ListError('%s is not a directory: run img2dataset with '
                                '--output_format files (and its default --encode_format '
                                'jpg)' % shard_dir)
            for row in read_shard(parquet, rows):
                reason = _dropped_reason(row, shared, known)
                if reason is None:
                    _link(os.path.join(shard_dir, row['key'] + '.jpg'),
                          os.path.join(tmp, 'images', row['name']))
                    labels = row['labels'] or ''
                    image_list.write(row['name'] + ('\t' + labels if labels else '') + '\n')
                    kept += 1
                    continue
                if row['status'] != 'success':
                    failed[row['status']] += 1
                else:
                    placeholders += 1
                failures.write('%s\t%s\t%s\n' % (row['url'], row['name'], reason))
            meter.done += 1
            meter.tick()
        failures.write('# %d kept, %d placeholders dropped, %s\n' % (
            kept, placeholders, ', '.join('%d %s' % (n, s) for s, n
                                          in sorted(failed.items())) or '0 failed'))
    return kept, placeholders, failed


def _dropped_reason(row, shared, known):
    """Why a row is not kept (img2dataset's status and error, or the placeholder rule
    hit), or None for an image to keep."""
    if row['status'] != 'success':
        return _reason(row)
    digest = row['sha256']
    if digest in shared:
        return ('placeholder: sha256 %s %s' % (
            digest, 'is a known placeholder' if digest in known else
            'shared by %d URLs' % shared[digest]))
    return None


def _inside(path, directory):
    """Whether path is directory or lies under it (so replacing directory would lose it)."""
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _link(source, target):
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise IncompleteDownloadError('%s is missing though its parquet row says success: '
                                      'delete that shard\'s files and rerun img2dataset'
                                      % source) from None
    except FileExistsError:
        raise ListError('two rows of the input have the file name %s: make the input '
                        'with urls_to_img2dataset.py' % os.path.basename(target)) from None
    except OSError as exc:
        hint = (': put the output on the same file system as the download'
                if exc.errno == errno.EXDEV else '')
        raise ListError('cannot hard-link %s to %s (%s)%s'
                        % (source, target, exc.strerror, hint)) from None


def build_parser():
    parser = arguments.OneLineParser(
        prog=PROG, allow_abbrev=False, error_hint=' (see --help)',
        description='Check that an img2dataset download (output_format files) is whole, '
                    'then write OUT/images/<name> (hard links), OUT/list.txt for '
                    'make_tfrecords.py and OUT/failures.tsv (one reason per URL not '
                    'kept); placeholder images are dropped and counted.',
        epilog='Exit status: 0 done, 1 img2dataset left shards failed or unfinished (or '
               'nothing was kept), 2 bad input, 143 / 130 stopped by SIGTERM / Ctrl-C (OUT '
               'as it was). Next: .venv/bin/python tools/make_tfrecords.py '
               '-im OUT/images OUT/list.txt -tfs data/ -cls 11166 ...')
    parser.add_argument('download_dir', metavar='DOWNLOAD_DIR',
                        help="img2dataset's --output_folder")
    parser.add_argument('input_dir', metavar='INPUT',
                        help="img2dataset's --url_list: the directory (or a Parquet file) "
                             'urls_to_img2dataset.py wrote; its row counts say which '
                             'shards must exist')
    parser.add_argument('out_dir', metavar='OUT', help='directory to create')
    parser.add_argument('--number_sample_per_shard', type=arguments.positive_int,
                        default=10000, metavar='N',
                        help="img2dataset's --number_sample_per_shard of the download "
                             '(default 10000, its default)')
    parser.add_argument('--placeholder_min_urls', type=arguments.int_at_least(2, '>= 2'),
                        default=3, metavar='N',
                        help='drop the images whose downloaded bytes (sha256) came from '
                             'N or more distinct URLs: a placeholder served for missing '
                             'photos. Default 3: a pair of identical uploads is kept, a '
                             'placeholder is hit by thousands')
    parser.add_argument('--placeholder_hashes', metavar='FILE',
                        help='more placeholder sha256 digests (hex, one a line, # '
                             'comments), dropped however few URLs share them')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace OUT if it exists (default: refuse)')
    parser.add_argument('--quiet', action='store_true', help='no progress line on stderr')
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (0, 1 or 2)."""
    return entry.run(PROG, lambda: build_parser().parse_args(argv), convert_and_report,
                     (errors.UsageError, ListError, IncompleteDownloadError),
                     arguments.download_stopped_note)


def convert_and_report(args):
    """Converts the download the arguments name and prints the summary; returns the exit
    status (0, 1 when no image was kept)."""
    try:
        known = set(KNOWN_PLACEHOLDERS)
        if args.placeholder_hashes:
            known |= read_hashes(args.placeholder_hashes)
        summary = convert(args.download_dir, args.input_dir, args.out_dir,
                          args.number_sample_per_shard, args.placeholder_min_urls,
                          frozenset(known), args.overwrite, progress=not args.quiet)
    except ImportError as exc:
        raise arguments.missing_download_extras(exc) from None
    except OSError as exc:  # a file of the download that cannot be read: bad input
        raise ListError(exc) from None
    failed = summary['failed']
    print('kept: %d (list %s)' % (summary['kept'], os.path.join(args.out_dir, 'list.txt')))
    print('placeholders dropped: %d (%d distinct images)'
          % (summary['placeholders'], len(summary['placeholder_hashes'])))
    for status in sorted(failed):
        print('%s: %d' % (status, failed[status]))
    print('failures: %s' % os.path.join(args.out_dir, 'failures.tsv'))
    if not summary['kept']:
        arguments.error_line(PROG, 'no image was kept; see %s'
                             % os.path.join(args.out_dir, 'failures.tsv'))
        return 1
    return 0
