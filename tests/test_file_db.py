"""Shard listing and worker shares."""
import os

import pytest

import file_db


def make_shards(directory, count):
    os.makedirs(directory)
    for i in range(count):
        open(os.path.join(directory, '%d.tfrecords' % i), 'wb').close()


@pytest.mark.parametrize('files,workers', [(1, 1), (5, 1), (5, 2), (7, 3), (12, 4),
                                           (100, 7), (3, 3)])
def test_shares_are_disjoint_and_complete(files, workers):
    names = ['%d.tfrecords' % i for i in range(files)]
    shares = [file_db.worker_share(names, workers, k) for k in range(workers)]
    flat = [f for share in shares for f in share]
    assert sorted(flat) == sorted(names)
    assert len(flat) == len(set(flat))
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


def test_natural_order_and_pattern(tmp_path):
    make_shards(str(tmp_path / 'train'), 12)
    open(str(tmp_path / 'train' / 'notes.txt'), 'w').close()
    files = file_db.list_shards(str(tmp_path), 'train')
    assert [os.path.basename(f) for f in files] == ['%d.tfrecords' % i for i in range(12)]
    assert len(file_db.list_shards(str(tmp_path), 'train', '1*.tfrecords')) == 3


def test_missing_and_empty_directories_name_path_and_pattern(tmp_path):
    with pytest.raises(file_db.DataError, match='train.*does not exist'):
        file_db.list_shards(str(tmp_path), 'train')
    (tmp_path / 'val').mkdir()
    with pytest.raises(file_db.DataError, match=r"'\*tfrecords' in .*val"):
        file_db.list_shards(str(tmp_path), 'val')


def test_a_folder_of_images_as_data_dir_says_to_build_records(tmp_path):
    """Images where the records belong (or in ImageNet's class folders): the fix is named."""
    (tmp_path / 'n01440764').mkdir()
    (tmp_path / 'n01440764' / 'a.JPEG').write_bytes(b'')
    with pytest.raises(file_db.DataError) as error:
        file_db.list_shards(str(tmp_path), 'train')
    assert str(error.value).endswith(
        '; %s holds images (n01440764/a.JPEG), not records: build the shards from an image '
        'list with tools/make_tfrecords.py (docs/records.md)' % tmp_path)
    (tmp_path / 'val').mkdir()
    (tmp_path / 'val' / 'b.png').write_bytes(b'')
    with pytest.raises(file_db.DataError, match=r'val holds images \(b.png\), not records'):
        file_db.list_shards(str(tmp_path), 'val')
    (tmp_path / 'other').mkdir()
    with pytest.raises(file_db.DataError) as error:
        file_db.list_shards(str(tmp_path / 'other'), 'train')
    assert 'holds images' not in str(error.value)


def test_bad_worker_ids():
    with pytest.raises(ValueError):
        file_db.worker_share(['a'], 2, 2)
    with pytest.raises(ValueError):
        file_db.worker_share(['a'], 0, 0)
    assert file_db.worker_share(['a'], 2, 1) == []


def test_record_counts_are_kept_per_shard_and_merged(tmp_path):
    split = tmp_path / 'train'
    split.mkdir()
    files = [str(split / ('%d.tfrecords' % k)) for k in range(3)]
    assert file_db.record_count(files) is None  # no records.txt
    file_db.write_counts(str(split), {'0.tfrecords': 40, '1.tfrecords': 41})
    assert file_db.record_count(files) is None  # 2.tfrecords is not listed
    assert file_db.record_count(files[:2]) == 81
    file_db.write_counts(str(split), {'2.tfrecords': 7, '10.tfrecords': 1})  # a later run
    assert file_db.read_counts(str(split)) == {'0.tfrecords': 40, '1.tfrecords': 41,
                                               '2.tfrecords': 7, '10.tfrecords': 1}
    assert file_db.record_count(files) == 88
    lines = (split / 'records.txt').read_text().splitlines()
    assert lines == ['0.tfrecords 40', '1.tfrecords 41', '2.tfrecords 7', '10.tfrecords 1']
