"""mlimages/recordkit/shards.py: finding the shards to write and counting them, on real files."""
import os

import file_db
from mlimages.recordkit import shards


def test_shards_to_write_lists_the_directory_once_and_removes_only_stale_leftovers(
        tmp_path, monkeypatch):
    paths = [shards.shard_path(str(tmp_path), k) for k in range(60)]
    for path in paths[::2]:
        open(path, 'wb').close()
    for k in (1, 2, 3):  # leftovers of a killed run: of shards to write and of a done one
        open(paths[k] + shards.TMP_MARKER + '4242', 'wb').close()
    listings = []
    real = os.listdir

    def counting(path='.'):
        listings.append(path)
        return real(path)

    monkeypatch.setattr(os, 'listdir', counting)
    notes = []
    to_write, existing = shards.shards_to_write(paths, note=notes.append)
    assert len(listings) == 1
    assert existing == paths[::2] and to_write == paths[1::2]
    assert notes == ['skipping existing shard %s' % os.path.basename(p) for p in paths[::2]]
    left = sorted(n for n in real(str(tmp_path)) if shards.TMP_MARKER in n)
    assert left == [os.path.basename(paths[2]) + shards.TMP_MARKER + '4242']
    to_write, existing = shards.shards_to_write(paths, overwrite=True)
    assert to_write == paths and not existing
    assert not [n for n in real(str(tmp_path)) if shards.TMP_MARKER in n]


def test_append_count_lines_survive_and_record_counts_sorts_them(tmp_path):
    split = str(tmp_path)
    file_db.write_counts(split, {'0.tfrecords': 3})
    for k, n in ((10, 5), (2, 7), (10, 6)):
        shards.append_count(shards.shard_path(split, k), n)
    assert file_db.read_counts(split) == {'0.tfrecords': 3, '10.tfrecords': 6,
                                          '2.tfrecords': 7}
    shards.record_counts(split, {})
    assert (tmp_path / 'records.txt').read_text() == \
        '0.tfrecords 3\n2.tfrecords 7\n10.tfrecords 6\n'
