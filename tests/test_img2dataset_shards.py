"""mlimages/recordkit/img2dataset_shards.py on small Parquet files written here: the shards
img2dataset makes of an input, and a download that is whole or not (the command end to end
is tests/test_img2dataset_to_list.py)."""
import json

import pytest

from mlimages import errors
from mlimages.recordkit import img2dataset_shards as shards

pa = pytest.importorskip('pyarrow')
pq = pytest.importorskip('pyarrow.parquet')


def _input(directory, *row_counts):
    directory.mkdir()
    for k, rows in enumerate(row_counts):
        pq.write_table(pa.table({'url': ['u%d' % i for i in range(rows)]}),
                       str(directory / ('part%d.parquet' % k)))
    return directory


def _shard(download, shard, rows, count=None):
    keys = ['%05d%04d' % (shard, i) for i in range(rows)]
    pq.write_table(pa.table({
        'key': keys[::-1], 'url': ['u' + k for k in keys[::-1]],
        'labels': ['0:1'] * rows, 'name': [k + '.jpg' for k in keys[::-1]],
        'status': ['success'] * rows, 'error_message': [None] * rows,
        'sha256': ['0' * 64] * rows}), str(download / ('%05d.parquet' % shard)))
    (download / ('%05d_stats.json' % shard)).write_text(
        json.dumps({'count': rows if count is None else count}))


def test_expected_shards_of_each_input_file_in_name_order(tmp_path):
    found = shards.expected_shards(str(_input(tmp_path / 'in', 5, 2)), 2)
    assert found == {0: 2, 1: 2, 2: 1, 3: 2}


def test_a_whole_download_gives_its_parquets_and_rows_in_input_order(tmp_path):
    download = tmp_path / 'download'
    download.mkdir()
    _shard(download, 0, 2)
    _shard(download, 1, 1)
    parquets = shards.complete_shard_parquets(str(download), {0: 2, 1: 1})
    assert sorted(parquets) == [0, 1]
    rows = shards.read_shard(parquets[0], 2)
    assert [r['key'] for r in rows] == ['000000000', '000000001']
    with pytest.raises(errors.IncompleteDownloadError, match='cut short'):
        shards.read_shard(parquets[0], 3)


def test_a_download_with_gaps_names_the_shards(tmp_path):
    download = tmp_path / 'download'
    download.mkdir()
    _shard(download, 0, 2)
    with pytest.raises(errors.IncompleteDownloadError, match='1 of 2 shards .*: 00001; rerun'):
        shards.complete_shard_parquets(str(download), {0: 2, 1: 1})
    _shard(download, 1, 1, count=2)
    with pytest.raises(errors.IncompleteDownloadError, match='shards 00001 in .* do not match'):
        shards.complete_shard_parquets(str(download), {0: 2, 1: 1})
    with pytest.raises(errors.ListError, match='shards 00001 that the input does not have'):
        shards.complete_shard_parquets(str(download), {0: 2})
    _shard(download, 1, 1)
    (download / '_tmp').mkdir()
    (download / '_tmp' / '1.feather').write_bytes(b'')
    with pytest.raises(errors.IncompleteDownloadError, match='_tmp still holds 1 shard'):
        shards.complete_shard_parquets(str(download), {0: 2, 1: 1})
