"""Tests of tools/convert_tfrecords.py on real JPEGs in real TFRecord shards."""
import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import file_db
from mlimages.data import hierarchy
from mlimages.data import records
from helpers import ROOT, encode_pixels, smooth_pixels
from mlimages import errors
from mlimages.recordkit import convert_tfrecords as ct

CLASSES = 6
SHORT = 100
# A 6-class tree: 0 <- 1 <- 2, 0 <- 3, 4 <- 5 (child <- parent written as parent first).
TREE = ['category_index\tcategory_id\tindex_of_parent_category\tcategory name',
        '0\tn0\t-1\troot a', '1\tn1\t0\tmiddle', '2\tn2\t1\tleaf, deep', '3\tn3\t0\tleaf',
        '4\tn4\t-1\troot b', '5\tn5\t4\tleaf b']


def _labels():
    return [np.array(v, np.float32) for v in (
        [0, 0, 1, 0, 0, 0], [0, 0.8, 0, -1, 0, 1], [0, 0, 0, 0, 0, 0], [1, 0, 0.6, 1, 0, 0])]


def _write(path, serialized):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for s in serialized:
            writer.write(s)


def _example(pixels, label, name, quality=90):
    jpeg = encode_pixels(pixels, quality=quality)
    h, w = pixels.shape[:2]
    return records.make_example(jpeg, label, w, h, name).SerializeToString()


@pytest.fixture
def shards_in(tmp_path):
    """IN/train/0 (2 big, 1 small JPEG), IN/train/1 (1 big + 3 broken records), IN/val/0."""
    labels = _labels()
    big, small = smooth_pixels(300, 400, 1), smooth_pixels(60, 80, 2)
    tall = smooth_pixels(500, 200, 3)
    in_dir = tmp_path / 'in'
    _write(str(in_dir / 'train' / '0.tfrecords'), [
        _example(big, labels[0], 'big.jpg'), _example(small, labels[1], 'small.jpg'),
        _example(tall, labels[2], 'tall.jpg')])
    trunc = encode_pixels(big, quality=90)
    trunc = trunc[:len(trunc) // 2]
    _write(str(in_dir / 'train' / '1.tfrecords'), [
        b'\xff\xfenot an example',
        records.make_example(trunc, labels[0], 400, 300, 'trunc.jpg').SerializeToString(),
        _example(big, labels[3], 'big2.jpg'),
        records.make_example(encode_pixels(small), [], 80, 60, 'nolabel.jpg')
        .SerializeToString().replace(b'label', b'lbl__')])
    _write(str(in_dir / 'val' / '0.tfrecords'), [_example(small, labels[3], 'v.jpg')])
    return in_dir


def _read(path):
    return [tf.train.Example.FromString(r) for r in tf.io.tf_record_iterator(str(path))]


def _parsed_labels(path, class_num=CLASSES):
    """Every record's [class_num] label through records.parse's record_label."""
    with tf.Graph().as_default():
        value = tf.placeholder(tf.string, [])
        label = records.record_label(tf.parse_single_example(value, records.PARSE_FEATURES),
                                     class_num)
        with tf.Session() as sess:
            return [sess.run(label, {value: r}) for r in tf.io.tf_record_iterator(str(path))]


def test_downscales_compacts_labels_and_names_bad_records(shards_in, tmp_path):
    out = tmp_path / 'out'
    summary = ct.convert(str(shards_in), str(out), short_side=SHORT, label_layout='sparse',
                         workers=1, progress=False)
    assert sorted(summary['shards_written']) == ['train/0.tfrecords', 'train/1.tfrecords',
                                                 'val/0.tfrecords']
    labels = _labels()
    assert [x.tolist() for x in _parsed_labels(out / 'train' / '0.tfrecords')] == \
        [x.tolist() for x in labels[:3]]
    assert _parsed_labels(out / 'train' / '1.tfrecords')[0].tolist() == labels[3].tolist()
    examples = _read(out / 'train' / '0.tfrecords')
    sizes = []
    for e in examples:
        f = e.features.feature
        assert 'label' not in f and records.LABEL_INDEX in f
        img = Image.open(io.BytesIO(f['image'].bytes_list.value[0]))
        assert img.size == (f['width'].int64_list.value[0], f['height'].int64_list.value[0])
        sizes.append(img.size)
    assert sizes == [(133, 100), (80, 60), (100, 250)]
    original = _read(shards_in / 'train' / '0.tfrecords')[1].features.feature
    assert examples[1].features.feature['image'].bytes_list.value[0] == \
        original['image'].bytes_list.value[0]  # smaller than N: byte for byte
    assert examples[0].features.feature['name'].bytes_list.value[0] == b'big.jpg'
    # The broken records of train/1: named, kept out.
    bad = {(b[0], b[1]): (b[2], b[3]) for b in summary['bad']}
    assert sorted(bad) == [('train/1.tfrecords', 0), ('train/1.tfrecords', 1),
                           ('train/1.tfrecords', 3)]
    assert 'not a tf.train.Example' in bad[('train/1.tfrecords', 0)][1]
    assert bad[('train/1.tfrecords', 1)][0] == 'trunc.jpg'
    assert 'image' in bad[('train/1.tfrecords', 1)][1]
    assert 'no label' in bad[('train/1.tfrecords', 3)][1]
    t = summary['totals']
    assert (t['records'], t['written'], t['downscaled'], t['kept'], t['bad']) == \
        (8, 5, 3, 2, 3)
    assert t['bytes_out'] == sum(os.path.getsize(str(p)) for p in out.rglob('*.tfrecords'))
    report = (out / ct.REPORT_NAME).read_text().splitlines()
    assert report[0].startswith('train/1.tfrecords:0\t-\tnot a tf.train.Example')
    assert report[1].startswith('train/1.tfrecords:1\ttrunc.jpg\timage: ')
    assert '# shard train/0.tfrecords: 3 records, 3 written, 2 downscaled, 1 kept, 0 bad' \
        in '\n'.join(report)
    assert report[-1].startswith('# totals: 3 shards converted, 0 skipped')


def test_corrupt_tfrecord_data_is_named_and_the_readable_records_kept(shards_in, tmp_path):
    path = shards_in / 'train' / '0.tfrecords'
    data = path.read_bytes()
    first = 12 + int.from_bytes(data[:8], 'little') + 4
    path.write_bytes(data[:first] + data[first:first + 40])  # record 1 cut short
    summary = ct.convert(str(shards_in), str(tmp_path / 'out'), short_side=SHORT,
                         workers=1, progress=False)
    assert len(_read(tmp_path / 'out' / 'train' / '0.tfrecords')) == 1
    corrupt = [b for b in summary['bad'] if b[0] == 'train/0.tfrecords']
    assert len(corrupt) == 1 and corrupt[0][1] == 1 and 'corrupt TFRecord' in corrupt[0][3]


def test_rerun_skips_finished_shards_and_removes_leftovers(shards_in, tmp_path):
    out = tmp_path / 'out'
    ct.convert(str(shards_in), str(out), short_side=SHORT, workers=1, progress=False)
    finished = (out / 'train' / '1.tfrecords').read_bytes()
    # A killed run: train/0 half written under its temporary name, val/0 never started.
    os.remove(str(out / 'train' / '0.tfrecords'))
    os.remove(str(out / 'val' / '0.tfrecords'))
    (out / 'train' / '0.tfrecords.tmp-99999').write_bytes(b'partial')
    summary = ct.convert(str(shards_in), str(out), short_side=SHORT, workers=1,
                         progress=False)
    assert summary['shards_skipped'] == ['train/1.tfrecords']
    assert sorted(summary['shards_written']) == ['train/0.tfrecords', 'val/0.tfrecords']
    assert (out / 'train' / '1.tfrecords').read_bytes() == finished
    assert sorted(os.listdir(str(out / 'train'))) == ['0.tfrecords', '1.tfrecords',
                                                      'records.txt']
    # Each split's records.txt lists every shard: for the training log's epochs.
    assert file_db.read_counts(str(out / 'train')) == {
        name: len(_read(out / 'train' / name)) for name in ('0.tfrecords', '1.tfrecords')}
    assert len(_read(out / 'train' / '0.tfrecords')) == 3
    report = (out / ct.REPORT_NAME).read_text()
    # The skipped shard's bad records and counts come over from the first run's report.
    assert sum(line.startswith('train/1.tfrecords:') for line in report.splitlines()) == 3
    assert '# shard train/1.tfrecords: 4 records, 1 written' in report
    assert '# shard train/1.tfrecords: skipped (exists in OUT)' in report


@pytest.mark.parametrize('layout', ['keep', 'sparse'])
def test_hierarchy_closes_labels_and_counts_them(shards_in, tmp_path, layout):
    tree = tmp_path / 'tree.txt'
    tree.write_text('\n'.join(TREE) + '\n')
    h = hierarchy.load(str(tree))
    out = tmp_path / 'out'
    summary = ct.convert(str(shards_in / 'train'), str(out), label_layout=layout,
                         hierarchy_path=str(tree), workers=1, progress=False)
    labels = _labels()
    closed = [hierarchy.close_labels(y, h) for y in labels]
    got = _parsed_labels(out / '0.tfrecords') + _parsed_labels(out / '1.tfrecords')
    assert [g.tolist() for g in got] == [c[0].tolist() for c in closed[:3] + closed[3:]]
    assert summary['totals']['labels_added'] == sum(c[1] for c in closed) == 2 + 2 + 0 + 1
    assert summary['totals']['downscaled'] == 0  # no --short_side: images untouched


def test_hierarchy_on_sparse_records_matches_close_sparse(shards_in, tmp_path):
    tree = tmp_path / 'tree.txt'
    tree.write_text('\n'.join(TREE) + '\n')
    h = hierarchy.load(str(tree))
    sparse = tmp_path / 'sparse'
    ct.convert(str(shards_in / 'val'), str(sparse), label_layout='sparse', workers=1,
               progress=False)
    summary = ct.convert(str(sparse), str(tmp_path / 'closed'), hierarchy_path=str(tree),
                         workers=1, progress=False, report_path=str(tmp_path / 'r.txt'))
    f = _read(tmp_path / 'closed' / '0.tfrecords')[0].features.feature
    index, value, added = hierarchy.close_sparse([0, 2, 3], [1, 0.6, 1], h)
    assert list(f[records.LABEL_INDEX].int64_list.value) == index.tolist()
    assert np.allclose(f[records.LABEL_VALUE].float_list.value, value)
    assert summary['totals']['labels_added'] == added == 1


def test_bad_arguments(shards_in, tmp_path):
    with pytest.raises(errors.ConvertError, match='inside'):
        ct.convert(str(shards_in), str(shards_in / 'sub'), short_side=10)
    with pytest.raises(errors.ConvertError, match='nothing to change'):
        ct.convert(str(shards_in), str(tmp_path / 'o'))
    (tmp_path / 'empty').mkdir()
    with pytest.raises(errors.ConvertError, match='no \\*.tfrecords'):
        ct.convert(str(tmp_path / 'empty'), str(tmp_path / 'x'), short_side=10)
    assert not (tmp_path / 'x').exists() and not (tmp_path / 'o').exists()


def test_cli_two_workers_and_usage_errors(shards_in, tmp_path):
    script = os.path.join(ROOT, 'tools', 'convert_tfrecords.py')
    run = lambda *a: subprocess.run([sys.executable, script] + [str(x) for x in a],
                                    cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = tmp_path / 'out'
    result = run(shards_in, out, '--short_side', SHORT, '--label_layout', 'sparse',
                 '--workers', 2, '--quiet')
    assert result.returncode == 0, result.stderr
    assert 'records: 8 read, 5 written (3 downscaled, 2 kept), 3 kept out' in result.stdout
    assert len(_read(out / 'train' / '0.tfrecords')) == 3
    for args, expected in [((shards_in, out), 'nothing to change'),
                           ((shards_in, out, '--short_side', '-5'), 'must be >= 0'),
                           ((tmp_path / 'none', out, '--short_side', 9), 'not a directory')]:
        result = run(*args)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
        assert result.stderr.count('\n') == 1


def test_a_second_converter_on_one_out_is_one_line_and_writes_nothing(shards_in, tmp_path):
    """OUT is locked for one writer (run_dirs, as make_tfrecords locks its split): while this
    process holds it, the command line exits 2 naming the holder and writes nothing; once it
    is released the same command converts."""
    from mlimages.run import run_dirs
    out = tmp_path / 'out'
    out.mkdir()
    command = [sys.executable, os.path.join(ROOT, 'tools', 'convert_tfrecords.py'),
               str(shards_in), str(out), '--short_side', str(SHORT), '--quiet']
    run_dirs.hold_lock(str(out), 'another convert_tfrecords.py')
    try:
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count('\n') == 1 and 'pid %d on host' % os.getpid() in \
            result.stderr, result.stderr
        assert os.listdir(str(out)) == ['.lock']
    finally:
        run_dirs.release_lock(str(out))
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert len(_read(out / 'train' / '0.tfrecords')) == 3
    assert '.lock' not in os.listdir(str(out))
