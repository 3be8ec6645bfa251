"""Whether an img2dataset download (--output_format files) is whole, and its shards' rows
(img2dataset_to_list.py has the layout). img2dataset exits 0 even when shards failed, so:

    expected shards = sum over the input's Parquet files (name order) of ceil(rows / S)

(S its --number_sample_per_shard) and every expected shard must have its stats file and
parquet, with as many rows as the input gave it, and no `_tmp` directory may be left.

Needs pyarrow (requirements-download.txt), imported when first used.
"""
import glob
import json
import math
import os

from mlimages.errors import IncompleteDownloadError, ListError

COLUMNS = ['key', 'url', 'labels', 'name', 'status', 'error_message', 'sha256']


def expected_shards(input_dir, per_shard):
    """{shard id: row count} of img2dataset's sharding of the input Parquet files."""
    import pyarrow.parquet as pq
    if os.path.isdir(input_dir):
        files = sorted(glob.glob(os.path.join(input_dir, '*.parquet')))
    elif os.path.isfile(input_dir):
        files = [input_dir]
    else:
        raise ListError('no such input: %s (the directory urls_to_img2dataset.py wrote)'
                        % input_dir)
    if not files:
        raise ListError('no .parquet files in %s' % input_dir)
    shards, first = {}, 0
    for path in files:
        rows = pq.ParquetFile(path).metadata.num_rows
        count = math.ceil(rows / per_shard)
        for k in range(count):
            shards[first + k] = min(per_shard, rows - k * per_shard)
        first += count
    return shards


def _shard_files(download_dir):
    """({shard id: parquet path}, {shard id: stats path})."""
    parquets, stats = {}, {}
    for path in glob.glob(os.path.join(download_dir, '*.parquet')):
        stem = os.path.basename(path)[:-len('.parquet')]
        if stem.isdigit():
            parquets[int(stem)] = path
    for path in glob.glob(os.path.join(download_dir, '*_stats.json')):
        stem = os.path.basename(path)[:-len('_stats.json')]
        if stem.isdigit():
            stats[int(stem)] = path
    return parquets, stats


def _ids(ids, limit=10):
    ids = sorted(ids)
    text = ', '.join('%05d' % i for i in ids[:limit])
    return text + (' and %d more' % (len(ids) - limit) if len(ids) > limit else '')


def complete_shard_parquets(download_dir, shards):
    """Raises IncompleteDownloadError unless every expected shard is complete; returns
    {shard id: parquet path}."""
    rerun = ('; rerun the same img2dataset command (it redoes the shards that have no '
             '*_stats.json), then this tool')
    if not os.path.isdir(download_dir):
        raise ListError('no such img2dataset output folder: %s' % download_dir)
    parquets, stats = _shard_files(download_dir)
    foreign = set(stats) - set(shards)
    if foreign:
        raise ListError('%s has shards %s that the input does not have: another input, '
                        'or another --number_sample_per_shard?' % (download_dir, _ids(foreign)))
    missing = set(shards) - set(stats)
    if missing:
        raise IncompleteDownloadError(
            'img2dataset left %d of %d shards failed or unfinished in %s (no stats file): '
            '%s%s' % (len(missing), len(shards), download_dir, _ids(missing), rerun))
    wrong = []
    for shard in sorted(shards):
        with open(stats[shard]) as f:
            count = json.load(f).get('count')
        if shard not in parquets or count != shards[shard]:
            wrong.append(shard)
    if wrong:
        raise IncompleteDownloadError(
            'shards %s in %s do not match the input (parquet missing, or a count other '
            'than the input\'s rows): was --number_sample_per_shard the download\'s? '
            'Otherwise delete those shards\' files%s' % (_ids(wrong), download_dir, rerun))
    leftovers = glob.glob(os.path.join(download_dir, '_tmp', '*'))
    if leftovers:
        raise IncompleteDownloadError(
            '%s/_tmp still holds %d shard inputs: img2dataset is still running, or was '
            'killed%s' % (download_dir, len(leftovers), rerun))
    return parquets


def read_shard(path, shard_rows):
    """The rows of one shard's parquet as dicts of COLUMNS, in input order (by key);
    raises ListError for a missing column, IncompleteDownloadError for a row count other
    than shard_rows."""
    import pyarrow.parquet as pq
    names = pq.ParquetFile(path).schema_arrow.names
    absent = [c for c in COLUMNS if c not in names]
    if absent:
        raise ListError('%s has no column %s: run img2dataset with --input_format parquet '
                        '--save_additional_columns \'["labels","name"]\' on the input of '
                        'urls_to_img2dataset.py' % (path, '/'.join(absent)))
    table = pq.read_table(path, columns=COLUMNS).to_pydict()
    rows = sorted(zip(*(table[c] for c in COLUMNS)))  # by key = input order
    if len(rows) != shard_rows:
        raise IncompleteDownloadError('%s has %d rows, the input %d: the shard was cut '
                                      'short; delete its files and rerun img2dataset'
                                      % (path, len(rows), shard_rows))
    return [dict(zip(COLUMNS, row)) for row in rows]
