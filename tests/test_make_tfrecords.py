"""Tests of tools/make_tfrecords.py on real image files and real TFRecord shards."""
import io
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import file_db
from mlimages.data import input_pipeline
from mlimages.data import records as records_lib
from helpers import BAD_IMAGES as BAD, GOOD_IMAGES as GOOD, build_records, label_array, \
    run_program, run_session, write_images_and_list, write_lines as _write
from mlimages import errors
from mlimages.recordkit import make_command
from mlimages.recordkit import make_tfrecords as mt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join('tools', 'make_tfrecords.py')
CLASS_NUM = 12


def _records(path):
    """The tf.train.Example protos of one shard, in file order."""
    return [tf.train.Example.FromString(r) for r in tf.io.tf_record_iterator(str(path))]


def _features(example):
    f = example.features.feature
    assert sorted(f.keys()) == ['height', 'image', 'label', 'name', 'width']
    return {
        'image': f['image'].bytes_list.value[0],
        'label': np.frombuffer(f['label'].bytes_list.value[0], '<f4'),
        'width': f['width'].int64_list.value[0],
        'height': f['height'].int64_list.value[0],
        'name': f['name'].bytes_list.value[0].decode('utf-8'),
    }


def _expected(pairs):
    return label_array(pairs, CLASS_NUM)


def _run_cli(*args):
    return run_program(SCRIPT, *args, env=os.environ, timeout=120)


def test_make_example_features():
    example = records_lib.make_example(b'\xff\xd8jpeg', [0, 0.5, -1], 7, 9, 'dir/ü.jpg')
    f = _features(tf.train.Example.FromString(example.SerializeToString()))
    assert f['image'] == b'\xff\xd8jpeg' and (f['width'], f['height']) == (7, 9)
    assert f['name'] == 'dir/ü.jpg'
    assert f['label'].tolist() == [0, 0.5, -1]


# ------------------------------------------------------------------------ shards

def _all_images_list(path):
    return _write(path, [
        'rgb.jpg\t1:1\t2:0.8\t5:-1',
        'empty.jpg 1',
        'gray.jpg 0 11:0.25',
        '',
        'cmyk.jpg\t3:0.5',
        'text.jpg 2',
        'alpha.png',
        'trunc.jpg 3',
        'missing.jpg 4',
        'sub/rgb2.jpeg 7:1 7:1.0',
        'palette.gif 9:0.1',
        'grey16.png 10:0',
    ])


EXPECTED_LABELS = {
    'rgb.jpg': [(1, 1), (2, 0.8), (5, -1)], 'gray.jpg': [(0, 1), (11, 0.25)],
    'cmyk.jpg': [(3, 0.5)], 'alpha.png': [], 'sub/rgb2.jpeg': [(7, 1)],
    'palette.gif': [(9, 0.1)], 'grey16.png': [],
}


def test_round_trip_and_skipped_images(images, tmp_path):
    lst = _all_images_list(tmp_path / 'list.txt')
    out = tmp_path / 'out'
    summary = build_records([str(lst)], str(images), str(out), class_num=CLASS_NUM,
                            workers=1, progress=False)
    shard = out / 'train' / '0.tfrecords'
    assert summary['shards_written'] == [str(shard)]
    assert summary['images_written'] == 7 and summary['images_skipped'] == 4
    records = [_features(e) for e in _records(shard)]
    assert [r['name'] for r in records] == ['rgb.jpg', 'gray.jpg', 'cmyk.jpg', 'alpha.png',
                                           'sub/rgb2.jpeg', 'palette.gif', 'grey16.png']
    for r in records:
        np.testing.assert_array_equal(r['label'], _expected(EXPECTED_LABELS[r['name']]))
        assert (r['width'], r['height']) == GOOD[r['name']]
        decoded = Image.open(io.BytesIO(r['image']))
        assert decoded.format == 'JPEG' and decoded.size == GOOD[r['name']]
        if r['name'] in ('rgb.jpg', 'gray.jpg', 'sub/rgb2.jpeg'):
            assert r['image'] == (images / r['name']).read_bytes()
        else:
            assert decoded.mode == 'RGB'

    report = (out / 'train_report.txt').read_text().splitlines()
    assert summary['report_path'] == str(out / 'train_report.txt')
    assert len(report) == 5 and report[-1].startswith('#')
    assert '7 images written, 4 images skipped' in report[-1]
    rows = [line.split('\t') for line in report[:-1]]
    assert [(r[0], r[1]) for r in rows] == [('%s:%d' % (lst, n), p) for n, p in
                                            [(2, 'empty.jpg'), (6, 'text.jpg'),
                                             (8, 'trunc.jpg'), (9, 'missing.jpg')]]
    for row in rows:
        assert BAD[row[1]] in row[2]
    assert not [n for n in os.listdir(out / 'train') if '.tmp' in n]


def test_one_shard_per_list_from_directory_with_start_index(images, tmp_path):
    lists = tmp_path / 'lists'
    lists.mkdir()
    _write(lists / 'b.txt', ['gray.jpg 2', 'rgb.jpg 3'])
    _write(lists / 'a.txt', ['rgb.jpg 1'])
    _write(lists / '.hidden', ['ignored.jpg'])
    out = tmp_path / 'out'
    summary = build_records(str(lists), str(images), str(out), split='val',
                            class_num=CLASS_NUM, start_index=5, workers=1,
                            progress=False)
    assert sorted(os.listdir(out / 'val')) == ['5.tfrecords', '6.tfrecords', 'records.txt']
    # The records of each shard, for the training log's epochs.
    assert (out / 'val' / 'records.txt').read_text() == '5.tfrecords 1\n6.tfrecords 2\n'
    assert summary['shards_written'] == [str(out / 'val' / '5.tfrecords'),
                                         str(out / 'val' / '6.tfrecords')]
    assert (out / 'val_report.txt').exists()
    first = [_features(e) for e in _records(out / 'val' / '5.tfrecords')]
    second = [_features(e) for e in _records(out / 'val' / '6.tfrecords')]
    assert [r['name'] for r in first] == ['rgb.jpg']           # a.txt sorts first
    assert [r['name'] for r in second] == ['gray.jpg', 'rgb.jpg']
    np.testing.assert_array_equal(second[1]['label'], _expected([(3, 1)]))


def test_num_shards_deals_lines_round_robin(images, tmp_path):
    names = ['rgb.jpg', 'gray.jpg', 'cmyk.jpg', 'alpha.png', 'sub/rgb2.jpeg',
             'palette.gif', 'grey16.png']
    lst = _write(tmp_path / 'one.txt', ['%s %d' % (n, i) for i, n in enumerate(names)])
    out = tmp_path / 'out'
    summary = build_records(str(lst), str(images), str(out), class_num=CLASS_NUM,
                            num_shards=3, start_index=2, workers=1, progress=False)
    assert len(summary['shards_written']) == 3
    shards = {k: [_features(e) for e in _records(out / 'train' / ('%d.tfrecords' % k))]
              for k in (2, 3, 4)}
    assert {k: len(v) for k, v in shards.items()} == {2: 3, 3: 2, 4: 2}
    for k, records in shards.items():
        assert [r['name'] for r in records] == names[k - 2::3]
        for r in records:
            assert int(np.argmax(r['label'])) == names.index(r['name'])
    everything = sorted(r['name'] for rs in shards.values() for r in rs)
    assert everything == sorted(names)


def test_rerun_skips_existing_shards_and_overwrite_rewrites(images, tmp_path, capsys):
    lst_a = _write(tmp_path / 'a.txt', ['rgb.jpg 1'])
    lst_b = _write(tmp_path / 'b.txt', ['gray.jpg 2'])
    out = tmp_path / 'out'
    kwargs = dict(class_num=CLASS_NUM, workers=1)
    build_records([str(lst_a), str(lst_b)], str(images), str(out), **kwargs)
    shard0 = out / 'train' / '0.tfrecords'
    past = 1_000_000_000
    os.utime(shard0, (past, past))
    os.remove(out / 'train' / '1.tfrecords')
    os.remove(out / 'train' / 'records.txt')  # as after a run killed before its end
    stale = out / 'train' / '1.tfrecords.tmp-999999'
    stale.write_bytes(b'half a shard')
    capsys.readouterr()

    summary = build_records([str(lst_a), str(lst_b)], str(images), str(out), **kwargs)
    assert 'skipping existing shard 0.tfrecords' in capsys.readouterr().err
    assert os.stat(shard0).st_mtime == past
    assert summary['shards_skipped'] == [str(shard0)]
    assert summary['shards_written'] == [str(out / 'train' / '1.tfrecords')]
    assert summary['images_written'] == 1
    assert sorted(os.listdir(out / 'train')) == ['0.tfrecords', '1.tfrecords', 'records.txt']
    # The skipped shard, never listed (its count file was removed), was counted by reading.
    assert file_db.read_counts(str(out / 'train')) == {
        '0.tfrecords': len(_records(shard0)), '1.tfrecords': 1}

    summary = build_records([str(lst_a), str(lst_b)], str(images), str(out),
                            overwrite=True, **kwargs)
    assert os.stat(shard0).st_mtime != past
    assert len(summary['shards_written']) == 2 and not summary['shards_skipped']
    assert [_features(e)['name'] for e in _records(shard0)] == ['rgb.jpg']


def test_failure_mid_shard_leaves_no_partial_file(images, tmp_path, monkeypatch):
    lst = _write(tmp_path / 'a.txt', ['rgb.jpg 1', 'gray.jpg 2', 'cmyk.jpg 3'])
    calls = []
    real = records_lib.make_example

    def dying_make_example(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(records_lib, 'make_example', dying_make_example)
    out = tmp_path / 'out'
    with pytest.raises(KeyboardInterrupt):
        build_records(str(lst), str(images), str(out), class_num=CLASS_NUM, workers=1,
                      progress=False)
    assert os.listdir(out / 'train') == []


def test_two_workers_write_the_same_records_as_one(images, tmp_path):
    lists = [_all_images_list(tmp_path / 'l0.txt'),
             _write(tmp_path / 'l1.txt', ['gray.jpg 1', 'alpha.png 2:0.5', 'rgb.jpg']),
             _write(tmp_path / 'l2.txt', ['cmyk.jpg 4', 'missing.jpg 2'])]
    shards = {}
    for workers in (1, 2):
        out = tmp_path / ('out%d' % workers)
        summary = build_records([str(p) for p in lists], str(images), str(out),
                                class_num=CLASS_NUM, workers=workers, progress=False)
        assert summary['images_written'] == 11 and summary['images_skipped'] == 5
        shards[workers] = {n: [r.SerializeToString() for r in _records(out / 'train' / n)]
                           for n in sorted(os.listdir(out / 'train')) if n != 'records.txt'}
        report = (out / 'train_report.txt').read_text()
        shards[workers]['report'] = report.replace(str(out), '')
    assert sorted(shards[1]) == ['0.tfrecords', '1.tfrecords', '2.tfrecords', 'report']
    assert shards[1] == shards[2]


def test_all_images_skipped_exits_1(images, tmp_path, capsys):
    lst = _write(tmp_path / 'bad.txt', ['missing.jpg 1', 'empty.jpg'])
    out = tmp_path / 'out'
    with pytest.raises(errors.AllImagesSkippedError) as info:
        build_records(str(lst), str(images), str(out), class_num=CLASS_NUM, workers=1,
                      progress=False)
    assert info.value.summary['images_skipped'] == 2
    assert os.listdir(out / 'train') == []   # nothing that a rerun would skip
    capsys.readouterr()
    code = make_command.main([str(lst), '--out_dir', str(out), '--image_root', str(images),
                              '--class_num', str(CLASS_NUM), '--workers', '1', '--quiet'])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.count('\n') == 1 and 'all 2 images were skipped' in captured.err
    assert 'images skipped: 2' in captured.out
    assert len((out / 'train_report.txt').read_text().splitlines()) == 3
    assert 'tar archives' not in captured.err


def test_image_root_of_archives_names_the_flag_that_reads_them(tmp_path):
    """ImageNet's per-synset tars (or ILSVRC2012's) given as --image_root: nothing can be
    read, and the one line names --image_tars (--imagenet_train_tar)."""
    tars = tmp_path / 'fall11_whole'
    tars.mkdir()
    (tars / 'n01440764.tar').write_bytes(b'')
    lst = _write(tmp_path / 'ids.txt', ['n01440764/n01440764_18.JPEG 0:1'])
    with pytest.raises(errors.AllImagesSkippedError, match=(
            r'; --image_root %s holds tar archives \(n01440764.tar\): they are read in place '
            r'with --image_tars %s instead' % (tars, tars))):
        build_records(str(lst), str(tars), str(tmp_path / 'out'), class_num=CLASS_NUM,
                      workers=1, progress=False)
    (tars / 'ILSVRC2012_img_train.tar').write_bytes(b'')
    assert mt.archives_hint(str(tars)).endswith(
        'with --imagenet_train_tar %s instead (docs/records.md)'
        % (tars / 'ILSVRC2012_img_train.tar'))


# --------------------------------------------------------------------------- CLI

def test_cli_with_original_options_skips_bad_images(images, tmp_path):
    lists = tmp_path / 'lists'
    lists.mkdir()
    lst = _all_images_list(lists / 'train_im_list_0.txt')
    out = tmp_path / 'tfrecords'
    result = _run_cli('-idx', lists, '-tfs', out, '-im', images, '-cls', CLASS_NUM,
                      '-sidx', 3, '-one', 'True', '--workers', 1)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out / 'train')) == ['3.tfrecords', 'records.txt']
    assert len(_records(out / 'train' / '3.tfrecords')) == 7
    assert 'images written: 7' in result.stdout
    assert 'images skipped: 4' in result.stdout
    assert str(out / 'train_report.txt') in result.stdout
    assert '11/11 images, 4 skipped' in result.stderr and 'images/s' in result.stderr
    report = (out / 'train_report.txt').read_text()
    assert '%s:8\ttrunc.jpg\t' % lst in report


def test_cli_help_mentions_layout():
    result = _run_cli('--help')
    assert result.returncode == 0
    for option in ('-idx', '--list_dir', '-tfs', '--out_dir', '-im', '-cls', '-sidx',
                   '--num_shards', '--workers', '--report', '--jpeg_quality',
                   '--overwrite', '--quiet', '<split>'):
        assert option in result.stdout


@pytest.mark.parametrize('lines, extra, expected', [
    (['rgb.jpg 12:1'], [], 'second.txt:2: class index 12 out of range'),
    (['rgb.jpg -3:1'], [], 'second.txt:2: negative class index -3'),
    (['rgb.jpg 3:x'], [], "second.txt:2: malformed label '3:x'"),
    (['rgb.jpg 3:1.5'], [], 'second.txt:2: confidence 1.5 of class 3 outside [-1, 1]'),
    (['rgb.jpg 3:-2'], [], 'second.txt:2: confidence -2 of class 3 outside [-1, 1]'),
    (None, ['--num_shards', '2'], 'num_shards needs exactly one list file'),
    (None, ['--class_num', '0'], 'class_num must be a positive integer'),
    (None, ['--class_num', '-4'], 'class_num must be a positive integer'),
    (None, ['--class_num', 'x'], "invalid int value: 'x'"),
    (None, ['missing_list.txt'], 'no such list file: missing_list.txt'),
])
def test_cli_bad_input_exits_2_and_writes_nothing(images, tmp_path, lines, extra,
                                                  expected):
    first = _write(tmp_path / 'first.txt', ['rgb.jpg 1', 'gray.jpg'])
    second = _write(tmp_path / 'second.txt', ['\t'] + (lines or ['gray.jpg 2']))
    out = tmp_path / 'out'
    result = _run_cli(first, second, '--out_dir', out, '--image_root', images,
                      '--class_num', CLASS_NUM, *extra)
    assert result.returncode == 2
    assert result.stderr.count('\n') == 1, result.stderr
    assert result.stderr.startswith('make_tfrecords.py: error: ')
    assert expected in result.stderr
    assert not out.exists()


@pytest.mark.parametrize('args, expected', [
    ([], 'no image list given'),
    (['--num_shards', '0', 'LIST'], 'num_shards must be > 0'),
    (['--list_dir', 'nowhere'], 'no such list directory: nowhere'),
    (['--list_dir', 'LISTDIR', 'LIST'], 'not both'),
    (['--short_side', '-1', 'LIST'], 'argument --short_side: must be >= 0'),
])
def test_cli_bad_arguments_exit_2(images, tmp_path, args, expected):
    lst = _write(tmp_path / 'a.txt', ['rgb.jpg 1'])
    args = [str(lst) if a == 'LIST' else str(tmp_path) if a == 'LISTDIR' else a
            for a in args]
    out = tmp_path / 'out'
    result = _run_cli('-tfs', out, '-im', images, '-cls', CLASS_NUM, *args)
    assert result.returncode == 2
    assert result.stderr.count('\n') == 1, result.stderr
    assert expected in result.stderr
    assert not out.exists()


def test_short_side_downscales_big_images_and_keeps_small_ones(images, tmp_path):
    from helpers import smooth_pixels
    Image.fromarray(smooth_pixels(600, 800)).save(str(tmp_path / 'big.jpg'), quality=90)
    for name in ('rgb.jpg', 'alpha.png'):
        (tmp_path / name).write_bytes((images / name).read_bytes())
    lst = _write(tmp_path / 'a.txt', ['big.jpg 1', 'rgb.jpg 2', 'alpha.png 3'])
    for short_side in (0, 200):
        build_records([str(lst)], str(tmp_path), str(tmp_path / str(short_side)),
                      class_num=CLASS_NUM, workers=1, progress=False,
                      short_side=short_side)
    plain = [_features(e) for e in _records(tmp_path / '0' / 'train' / '0.tfrecords')]
    small = [_features(e) for e in _records(tmp_path / '200' / 'train' / '0.tfrecords')]
    for f in plain + small:  # width/height describe the stored image
        assert Image.open(io.BytesIO(f['image'])).size == (f['width'], f['height'])
    assert plain[0]['image'] == (tmp_path / 'big.jpg').read_bytes()
    assert len(plain) == len(small) == 3
    assert (small[0]['width'], small[0]['height']) == (267, 200)
    assert [f['image'] for f in small[1:]] == [f['image'] for f in plain[1:]]
    assert [f['label'].tolist() for f in small] == [f['label'].tolist() for f in plain]


SPARSE_CLASSES = 7


def test_make_tfrecords_sparse_flag_and_mixed_layouts_train_side_by_side(tmp_path):
    list_path, images = write_images_and_list(str(tmp_path))
    data = str(tmp_path / 'data')
    assert make_command.main(['--out_dir', data, '--image_root', images, '--class_num',
                              str(SPARSE_CLASSES), '--label_layout', 'sparse', '--quiet',
                              '--workers', '1', list_path]) == 0
    build_records([list_path], images, data, class_num=SPARSE_CLASSES, workers=1,
                  progress=False, start_index=1)
    files = [os.path.join(data, 'train', '%d.tfrecords' % k) for k in (0, 1)]
    first = tf.train.Example.FromString(next(tf.io.tf_record_iterator(files[0])))
    assert 'label/index' in first.features.feature and 'label' not in first.features.feature
    assert records_lib.first_label_length(files[1]) == SPARSE_CLASSES
    assert records_lib.first_label_length(files[0]) is None  # sparse: checked per record
    with tf.Graph().as_default():
        from helpers import settings
        values = settings(batch_size=12, class_num=SPARSE_CLASSES, image_size=16,
                          augment_on='device')
        dataset = input_pipeline.input_fn(values.data, values.model, False, files)
        images_out, labels = run_session(tf.data.make_one_shot_iterator(dataset).get_next())
    assert images_out.shape == (12, 16, 16, 3)
    np.testing.assert_array_equal(labels[:6], labels[6:])  # same lists, two layouts
    np.testing.assert_array_equal(labels[0], np.float32([1, 0.8, 0, -1, 0, 0, 0]))


def test_shard_tasks_parse_only_their_own_lines(images, tmp_path, monkeypatch):
    names = ['rgb.jpg', 'gray.jpg', 'cmyk.jpg', 'alpha.png', 'sub/rgb2.jpeg'] * 4
    lst = _write(tmp_path / 'one.txt', ['%s %d' % (n, i % CLASS_NUM)
                                        for i, n in enumerate(names)])
    from mlimages.recordkit import shard_plan
    parsed = []
    real = shard_plan.parse_raw_line

    def counting(raw, *args):
        parsed.append(raw)
        return real(raw, *args)

    monkeypatch.setattr(shard_plan, 'parse_raw_line', counting)
    summary = build_records(str(lst), str(images), str(tmp_path / 'out'),
                            class_num=CLASS_NUM, num_shards=7, workers=1, progress=False)
    assert summary['images_written'] == len(names)
    # 7 shard tasks, each line parsed once by its own task (a scan of the whole list per
    # task would make 7 x 20)
    assert len(parsed) == len(names)
    assert not [n for n in os.listdir(tmp_path / 'out' / 'train') if n.startswith('.plan')]


def test_records_txt_grows_as_shards_finish_so_a_resume_reads_no_shard(images, tmp_path,
                                                                        monkeypatch):
    lists = [_write(tmp_path / ('%d.txt' % k), [name + ' 1']) for k, name in
             enumerate(['rgb.jpg', 'gray.jpg', 'cmyk.jpg'])]
    out = tmp_path / 'out'
    calls = []
    real = records_lib.make_example

    def dying_make_example(*args):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed while writing the third shard
        return real(*args)

    monkeypatch.setattr(records_lib, 'make_example', dying_make_example)
    with pytest.raises(KeyboardInterrupt):
        build_records([str(p) for p in lists], str(images), str(out),
                      class_num=CLASS_NUM, workers=1, progress=False)
    assert file_db.read_counts(str(out / 'train')) == {'0.tfrecords': 1, '1.tfrecords': 1}
    monkeypatch.setattr(records_lib, 'make_example', real)

    def no_reading(*args):
        raise AssertionError('a finished shard was read to count it')

    monkeypatch.setattr(tf.io, 'tf_record_iterator', no_reading)
    summary = build_records([str(p) for p in lists], str(images), str(out),
                            class_num=CLASS_NUM, workers=1, progress=False)
    assert len(summary['shards_skipped']) == 2 and len(summary['shards_written']) == 1
    assert (out / 'train' / 'records.txt').read_text() == \
        '0.tfrecords 1\n1.tfrecords 1\n2.tfrecords 1\n'


def test_label_type_single_writes_class_indices_from_any_list(tmp_path, capsys):
    """--label_type single: one int64 class index a record (train.py --label_type=single);
    a line naming another number of classes, or a confidence other than 1, is exit 2 with
    nothing written."""
    from helpers import run_main
    _, images = write_images_and_list(str(tmp_path), count=3)
    good = _write(tmp_path / 'single.txt', ['0.jpg 4', '1.jpg\t2:1', '2.jpg 0'])
    status, out, err = run_main(make_command, capsys, '--image_root', images,
                                '--out_dir', tmp_path / 'data', '--class_num', 5,
                                '--label_type', 'single', '--quiet', good)
    assert status == 0, err
    examples = _records(tmp_path / 'data' / 'train' / '0.tfrecords')
    assert [e.features.feature['label'].int64_list.value[:] for e in examples] == \
        [[4], [2], [0]]
    for line, got in (('0.jpg 1 2', '1:1 2:1'), ('0.jpg', 'none'),
                      ('0.jpg 1:0.5', '1:0.5')):
        bad = _write(tmp_path / 'bad.txt', ['1.jpg 3', line])
        status, _, err = run_main(make_command, capsys, '--image_root', images,
                                  '--out_dir', tmp_path / 'other', '--class_num', 5,
                                  '--label_type', 'single', '--quiet', bad)
        assert (status, err) == (2, ['make_tfrecords.py: error: %s:2: --label_type single '
                                     'needs exactly one class with confidence 1 a line, got %s'
                                     % (bad, got)])
    assert not (tmp_path / 'other').exists()


@pytest.mark.parametrize('args,message', [
    (['--label_type', 'single', '--hierarchy', 'h.txt'],
     '--hierarchy closes multi-label labels: not with --label_type single'),
    (['--label_type', 'single', '--label_layout', 'sparse'],
     '--label_layout sparse is a layout of multi-label labels: not with --label_type single'),
    (['--label_type', 'multi', '--imagenet_train_tar', 't.tar', '--dictionary', 'd.txt'],
     '--imagenet_train_tar writes single-label records: drop --label_type multi')])
def test_label_type_combinations_refused(tmp_path, capsys, args, message):
    from helpers import run_main
    lists = [] if '--imagenet_train_tar' in args else [str(tmp_path / 'l.txt')]
    status, _, err = run_main(make_command, capsys, '--out_dir', tmp_path / 'out',
                              '--class_num', 5, *(args + lists))
    assert (status, err) == (2, ['make_tfrecords.py: error: ' + message])
