"""mlimages/recordkit/archives.py through make_tfrecords.py: ImageNet's tar archives, built here in
the releases' layouts with real JPEGs, read in place into real records."""
import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

from mlimages.data import input_pipeline
from helpers import ROOT, build_records, run_program, run_session, settings, write_lines
from mlimages.recordkit import archives
from mlimages.recordkit import imagenet

CLASS_NUM = 12


def _jpeg(seed, size=(40, 30), mode='RGB'):
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, 'JPEG', quality=90)
    return out.getvalue()


def _tar_bytes(members):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode='w') as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
        f.write(data)
    return path


def _examples(path):
    return [tf.train.Example.FromString(r) for r in tf.io.tf_record_iterator(str(path))]


def _name(example):
    return example.features.feature['name'].bytes_list.value[0].decode()


def _run_cli(*args):
    return run_program(os.path.join('tools', 'make_tfrecords.py'), *args, env=os.environ,
                       timeout=300)


@pytest.fixture(scope='module')
def release(module_dir):
    """Per-synset tars as ImageNet fall 2011 ships them; one listed synset is absent."""
    root = module_dir('imagenet21k')
    tars = root / 'fall11_whole'
    images = {}
    for s, wnid in enumerate(['n01440764', 'n02084071', 'n04310904']):
        members = []
        for i in range(5):
            name = '%s_%d.JPEG' % (wnid, 100 + i)
            data = _jpeg(10 * s + i, (40 + 8 * i, 30), 'L' if i == 3 else 'RGB')
            if wnid == 'n02084071' and i == 4:
                data = b'\xff\xd8 not a whole JPEG'
            members.append((name, data))
            images['%s/%s' % (wnid, name)] = data
        members.insert(2, ('%s_extra.txt' % wnid, b'not listed'))
        _write(str(tars / (wnid + '.tar')), _tar_bytes(members))
    return root, tars, images


def _ml_images_list(path, images):
    """Lines as train_image_id_from_imagenet.txt: '<wnid>/<file>\\t<class>:<conf> ...'."""
    lines = ['%s\t%d:1\t%d:0.8' % (name, k % CLASS_NUM, (k + 5) % CLASS_NUM)
             for k, name in enumerate(sorted(images))]
    lines.insert(4, 'n09999999/n09999999_7.JPEG\t3:1')      # a synset removed from the release
    lines.insert(9, 'n04310904/n04310904_999.JPEG\t2:1')    # an id absent from its tar
    return write_lines(path, lines), lines


def test_synset_tars_to_records_round_robin_with_missing_ids(release, tmp_path,
                                                             monkeypatch):
    root, tars, images = release
    lst, lines = _ml_images_list(tmp_path / 'train_image_id_from_imagenet.txt', images)
    out = tmp_path / 'out'
    summary = build_records(str(lst), None, str(out), class_num=CLASS_NUM, num_shards=3,
                            workers=2, progress=False,
                            source=archives.Source('tars', str(tars)))
    assert summary['images_missing'] == 2
    assert summary['images_skipped'] == 1            # the broken JPEG
    assert summary['images_written'] == 14
    present = [line.split('\t')[0] for line in lines
               if 'n09999999' not in line and '_999.' not in line]
    by_name = {line.split('\t')[0]: line for line in lines}
    for k in range(3):
        written = [_name(e) for e in _examples(out / 'train' / ('%d.tfrecords' % k))]
        # round-robin over the images the release has, in list order
        assert written == [p for p in present[k::3] if p != 'n02084071/n02084071_104.JPEG']
        for example in _examples(out / 'train' / ('%d.tfrecords' % k)):
            f = example.features.feature
            name = _name(example)
            assert f['image'].bytes_list.value[0] == images[name]   # byte for byte
            label = np.frombuffer(f['label'].bytes_list.value[0], '<f4')
            expected = np.zeros(CLASS_NUM, '<f4')
            for token in by_name[name].split('\t')[1:]:
                c, v = token.split(':')
                expected[int(c)] = float(v)
            np.testing.assert_array_equal(label, expected)
    report = (out / 'train_report.txt').read_text()
    assert 'n09999999/n09999999_7.JPEG\tmissing from the release: no %s' % (
        tars / 'n09999999.tar') in report
    assert 'n04310904_999.JPEG in %s' % (tars / 'n04310904.tar') in report
    assert '# 2 listed images missing from the release' in report
    assert 'n02084071/n02084071_104.JPEG\tnot an image Pillow can identify' in report
    assert sorted(os.listdir(out / archives.INDEX_DIR)) == [
        'n01440764.idx', 'n02084071.idx', 'n04310904.idx']
    counts = (out / 'train' / 'records.txt').read_text()
    assert counts == ''.join('%d.tfrecords %d\n' % (k, len(_examples(
        out / 'train' / ('%d.tfrecords' % k)))) for k in range(3))

    # A rerun reuses the index: the cached files are not rewritten, and no tar is
    # scanned, neither by the parent nor by a shard task (members are read by offset).
    def no_scan(*args, **kwargs):
        raise AssertionError('a tar was scanned')

    monkeypatch.setattr(tarfile, 'open', no_scan)
    stamps = {n: os.stat(out / archives.INDEX_DIR / n).st_mtime_ns
              for n in os.listdir(out / archives.INDEX_DIR)}
    again = build_records(str(lst), None, str(out), class_num=CLASS_NUM, num_shards=3,
                          workers=1, progress=False, overwrite=True,
                          source=archives.Source('tars', str(tars)))
    assert again['images_written'] == 14
    assert stamps == {n: os.stat(out / archives.INDEX_DIR / n).st_mtime_ns
                      for n in os.listdir(out / archives.INDEX_DIR)}


def test_a_changed_archive_is_indexed_again(release, tmp_path):
    root, tars, images = release
    copy = tmp_path / 'tars'
    os.makedirs(copy)
    data = _jpeg(99)
    _write(str(copy / 'n01440764.tar'), _tar_bytes([('n01440764_1.JPEG', data)]))
    lst = write_lines(tmp_path / 'l.txt', ['n01440764/n01440764_1.JPEG 1'])
    out = tmp_path / 'out'
    source = archives.Source('tars', str(copy))
    build_records(str(lst), None, str(out), class_num=CLASS_NUM, workers=1,
                  progress=False, source=source)
    other = _jpeg(98, (50, 20))
    _write(str(copy / 'n01440764.tar'), _tar_bytes([('pad.txt', b'x' * 3000),
                                                    ('n01440764_1.JPEG', other)]))
    os.utime(copy / 'n01440764.tar', ns=(1, 1))
    build_records(str(lst), None, str(out), class_num=CLASS_NUM, workers=1,
                  progress=False, source=source, overwrite=True)
    example, = _examples(out / 'train' / '0.tfrecords')
    assert example.features.feature['image'].bytes_list.value[0] == other


@pytest.fixture(scope='module')
def ilsvrc(module_dir):
    """ILSVRC2012_img_train.tar (a tar of per-class tars), the flat validation tar, its
    '<file> <wnid>' labels and a names-only imagenet2012_dictionary.txt."""
    root = module_dir('ilsvrc')
    wnids = ['n01443537', 'n01440764', 'n01484850']   # not in sorted order in the tar
    train = {}
    inner = []
    for s, wnid in enumerate(wnids):
        members = [('%s_%d.JPEG' % (wnid, i), _jpeg(100 + 10 * s + i)) for i in range(4)]
        train.update({'%s/%s' % (wnid, n): d for n, d in members})
        inner.append((wnid + '.tar', _tar_bytes(members)))
    _write(str(root / 'ILSVRC2012_img_train.tar'), _tar_bytes(inner))
    val = [('ILSVRC2012_val_%08d.JPEG' % (i + 1), _jpeg(200 + i)) for i in range(5)]
    _write(str(root / 'ILSVRC2012_img_val.tar'), _tar_bytes(val))
    val_wnids = ['n01484850', 'n01440764', 'n01443537', 'n01440764', 'n01484850']
    labels = write_lines(root / 'val_labels.txt',
                         ['%s %s' % (n, w) for (n, _), w in zip(val, val_wnids)])
    dictionary = write_lines(root / 'imagenet2012_dictionary.txt', [
        '0\ttench\tTinca\ttinca', '1\tgoldfish\tCarassius\tauratus',
        '2\tgreat\twhite\tshark'])
    return root, train, dict(val), val_wnids, labels, dictionary


def _single_label(example):
    return example.features.feature['label'].int64_list.value[0]


def test_imagenet_1k_train_tar_of_tars_to_single_label_records(ilsvrc, tmp_path):
    root, train, _, _, _, dictionary = ilsvrc
    out = tmp_path / 'imagenet'
    result = _run_cli('--imagenet_train_tar', root / 'ILSVRC2012_img_train.tar',
                      '--dictionary', dictionary, '--out_dir', out, '--num_shards', 2,
                      '--workers', 2, '--quiet')
    assert result.returncode == 0, result.stderr
    assert 'images written: 12' in result.stdout
    order = {'n01440764': 0, 'n01443537': 1, 'n01484850': 2}  # sorted wnids = dictionary
    seen = []
    for k in range(2):
        examples = _examples(out / 'train' / ('%d.tfrecords' % k))
        assert len(examples) == 6
        for example in examples:
            name = _name(example)
            assert example.features.feature['image'].bytes_list.value[0] == train[name]
            assert _single_label(example) == order[name.split('/')[0]]
            seen.append(name)
    assert sorted(seen) == sorted(train)
    check = subprocess.run(
        [sys.executable, os.path.join('tools', 'check_tfrecords.py'), '--class_num', '3',
         '--label_type', 'single', '--workers', '2', '--quiet', '--json', str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr
    totals = json.loads(check.stdout)['totals']
    assert totals['records'] == 12 and totals['positives'] == [4, 4, 4]
    lines = (out / 'imagenet_train_list.txt').read_text().splitlines()
    assert sorted(lines) == sorted('%s %d' % (n, order[n[:9]]) for n in train)
    assert lines != sorted(lines)       # shuffled: the shards are not class-sorted
    # ready for --label_type=single: the trainer's parser reads them
    serialized = next(tf.io.tf_record_iterator(str(out / 'train' / '0.tfrecords')))
    with tf.Graph().as_default():
        crop = settings().data  # an evaluation crop: the training crop's settings are not used
        image, label = input_pipeline.parse_record(tf.constant(serialized), False, 32, 3,
                                                crop.object_cover, crop.area_cover, 'single',
                                                'cpu')
        image, label = run_session([image, label])
    assert image.shape == (32, 32, 3) and label.sum() == 1


def test_imagenet_1k_val_tar_with_label_list(ilsvrc, tmp_path):
    root, _, val, val_wnids, labels, dictionary = ilsvrc
    out = tmp_path / 'imagenet'
    result = _run_cli('--imagenet_val_tar', root / 'ILSVRC2012_img_val.tar',
                      '--val_labels', labels, '--dictionary', dictionary,
                      '--out_dir', out, '--quiet', '-cls', 3)
    assert result.returncode == 0, result.stderr
    examples = _examples(out / 'val' / '0.tfrecords')
    assert [_name(e) for e in examples] == sorted(val)
    order = {'n01440764': 0, 'n01443537': 1, 'n01484850': 2}
    assert [_single_label(e) for e in examples] == [order[w] for w in val_wnids]
    assert [e.features.feature['image'].bytes_list.value[0] for e in examples] == \
        [val[n] for n in sorted(val)]
    check = [sys.executable, os.path.join('tools', 'check_tfrecords.py'), '--class_num', '3',
             '--workers', '1', '--quiet', str(out / 'val')]
    result = subprocess.run(check + ['--label_type', 'single'], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'checked 1 files, 5 records' in result.stdout
    assert 'positives per image: 1: 5' in result.stdout
    result = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert 'a class index: check with --label_type single' in result.stdout


def test_dictionary_with_wordnet_ids_gives_its_own_order(tmp_path):
    path = write_lines(tmp_path / 'd.txt', ['n01484850', 'n01440764'])
    assert imagenet.class_indices(str(path), ['n01440764'], 'x') == (
        {'n01484850': 0, 'n01440764': 1}, 2)


@pytest.mark.parametrize('args, expected', [
    (['--imagenet_train_tar', 'TRAIN'], '--imagenet_train_tar needs --dictionary'),
    (['--imagenet_val_tar', 'VAL', '--dictionary', 'DICT'],
     '--imagenet_val_tar needs --val_labels'),
    (['--imagenet_train_tar', 'TRAIN', '--dictionary', 'DICT', '-cls', '5'],
     '--class_num 5, but dictionary'),
    (['--imagenet_train_tar', 'TRAIN', '--dictionary', 'DICT', 'list.txt'],
     'makes its own image list'),
    (['--imagenet_train_tar', 'TRAIN', '--image_tars', 'TRAIN'], 'not both'),
    (['--imagenet_train_tar', 'DICT', '--dictionary', 'DICT'], 'not a readable tar'),
    (['--image_tars', 'nowhere', '-cls', '3', 'LIST'], '--image_tars is not a directory'),
    (['--imagenet_val_tar', 'VAL', '--val_labels', 'DICT', '--dictionary', 'DICT'],
     'expected "<file> <wnid>"'),
])
def test_archive_flags_bad_usage_exits_2_in_one_line(ilsvrc, tmp_path, args, expected):
    root, _, _, _, _, dictionary = ilsvrc
    lst = write_lines(tmp_path / 'list.txt', ['a/b.JPEG 1'])
    names = {'TRAIN': root / 'ILSVRC2012_img_train.tar', 'VAL': root / 'ILSVRC2012_img_val.tar',
             'DICT': dictionary, 'LIST': lst}
    result = _run_cli('--out_dir', tmp_path / 'out', *[names.get(a, a) for a in args])
    assert result.returncode == 2, result
    assert result.stderr.count('\n') == 1 and expected in result.stderr, result.stderr
