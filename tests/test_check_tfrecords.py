"""Tests of tools/check_tfrecords.py on real shards of Pillow-made images: whole files, the
report, the command line and its worker processes."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import train  # noqa: F401 (graph mode, as train.py runs)
from helpers import CHECK_CLASSES as CLASSES, JPEG, ODD_BUT_FINE, ROOT, encode_noise as encode, \
    label_vector, raw_label_record, record, write_shard
from mlimages.recordkit import check_tfrecords as ct
from mlimages.cli.progress import PLAIN_INTERVAL
from mlimages.recordkit import record_checks as rc

SCRIPT = os.path.join('tools', 'check_tfrecords.py')
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')


def record_offsets(records):
    """Byte offset of each record in a shard (8 length + 4 CRC + data + 4 CRC)."""
    offsets, position = [], 0
    for serialized in records:
        offsets.append(position)
        position += 16 + len(serialized)
    return offsets


def problems(summary):
    """{(file basename, index, reason kind)} of every bad record."""
    return {(os.path.basename(b['file']), b['index'], reason.split(':')[0])
            for s in summary['files'] for b in s['bad'] for reason in b['reasons']}


def without_seconds(summary):
    out = {k: v for k, v in summary.items() if k != 'seconds'}
    out['files'] = [{k: v for k, v in s.items() if k != 'seconds'} for s in summary['files']]
    return out


# ------------------------------------------------------------------------ datasets

@pytest.fixture(scope='module')
def clean(module_dir):
    """data/train/{0,1}.tfrecords, data/val/0.tfrecords with known labels; classes 5 and 6
    are never >= 0.7 (only 0.5 or -1); includes 1x1, grey, CMYK and PNG images."""
    root = module_dir('clean')
    rng = np.random.RandomState(3)
    labels = []
    shards = {'train/0.tfrecords': 9, 'train/1.tfrecords': 8, 'val/0.tfrecords': 6}
    odd = list(ODD_BUT_FINE.values())
    for shard, count in shards.items():
        records = []
        for i in range(count):
            label = rng.choice([0, 0, 1, 0.8, 0.7, 0.3, -1], size=CLASSES).astype(np.float32)
            label[5:] = rng.choice([0, 0.5, -1], size=2)
            labels.append(label)
            image, width, height = odd[i] if i < len(odd) else (
                encode(10 + i, 8, seed=i), 10 + i, 8)
            records.append(record(image, label, width, height, '%s/%d.jpg' % (shard, i)))
        write_shard(root / 'data' / shard, records)
    return {'data': str(root / 'data'), 'labels': np.array(labels), 'shards': shards}


@pytest.fixture(scope='module')
def broken(module_dir):
    """One shard per kind of damage; `expected` = {(file, index, kind)}."""
    root = module_dir('broken')
    good = [record(encode(10, 8, seed=i), label_vector([(i % CLASSES, 1)]), 10, 8,
                   'g%d.jpg' % i) for i in range(6)]
    expected = set()

    def shard(name, records, *bad):
        expected.update((name, index, kind) for index, kind in bad)
        return write_shard(root / name, records)

    # A byte flipped in the middle of record 3 fails its CRC; 0..2 stay readable.
    path = shard('flipped.tfrecords', good, (3, rc.CORRUPT_FILE))
    data = bytearray(open(path, 'rb').read())
    data[record_offsets(good)[3] + 16 + len(good[3]) // 2] ^= 0xff
    open(path, 'wb').write(bytes(data))
    # Cut inside record 4, and cut inside the header of record 4 (which TF's reader
    # silently takes for the end of the file).
    for name, keep in (('truncated.tfrecords', 40), ('cut_header.tfrecords', 5)):
        path = shard(name, good, (4, rc.CORRUPT_FILE))
        data = open(path, 'rb').read()
        open(path, 'wb').write(data[:record_offsets(good)[4] + keep])
    shard('label_length.tfrecords',
          [good[0], record(label=label_vector(class_num=CLASSES - 1)), good[2],
           raw_label_record(b'\0' * 7)],
          (1, rc.LABEL_LENGTH), (3, rc.LABEL_LENGTH))
    shard('label_values.tfrecords',
          [record(label=label_vector([(2, 1.5)])), good[1],
           record(label=label_vector([(0, np.nan)])),
           record(label=label_vector([(6, -np.inf)])),
           record(label=label_vector([(3, -1.01)]))],
          (0, rc.LABEL_VALUES), (2, rc.LABEL_VALUES), (3, rc.LABEL_VALUES),
          (4, rc.LABEL_VALUES))
    shard('not_image.tfrecords',
          [good[0], good[1], record(image=b'this is not an image'), record(image=b''),
           record(image=JPEG[:len(JPEG) // 2])],
          (2, rc.BAD_IMAGE), (3, rc.BAD_IMAGE), (4, rc.BAD_IMAGE))
    shard('not_example.tfrecords', [good[0], b'\x0a\xff\xffnot a proto', good[2]],
          (1, rc.NOT_EXAMPLE))
    shard('missing.tfrecords',
          [record(drop=['label']), good[1], record(drop=['image']),
           record(drop=['image', 'label'])],
          (0, rc.MISSING_FEATURE), (2, rc.MISSING_FEATURE), (3, rc.MISSING_FEATURE))
    open(str(root / 'empty.tfrecords'), 'wb').close()
    # Oddities that train: warnings only.
    shard('warnings.tfrecords',
          [record(drop=['width', 'height', 'name']), record(width=99),
           record(label=label_vector([(1, -0.5)])), good[3]])
    return {'dir': str(root), 'expected': expected}


# --------------------------------------------------------------------------- tests

def test_clean_dataset(clean, capsys):
    paths = ct.resolve_inputs([clean['data']])
    assert [os.path.relpath(p, clean['data']) for p in paths] == list(clean['shards'])
    summary = ct.check_files(paths, CLASSES, workers=1, progress=False)
    labels = clean['labels']
    positive = labels >= np.float32(0.7)
    totals = summary['totals']
    assert summary['ok'] and totals['bad_records'] == 0 and totals['warnings'] == 0
    assert totals['files'] == 3 and totals['records'] == len(labels) == 23
    assert [s['records'] for s in summary['files']] == list(clean['shards'].values())
    assert totals['labelled_records'] == len(labels)
    assert totals['positives'] == positive.sum(axis=0).tolist()
    assert totals['never_positive'] == np.flatnonzero(~positive.any(axis=0)).tolist()
    assert totals['never_positive'][-2:] == [5, 6]
    assert totals['cardinality'] == np.bincount(positive.sum(axis=1)).tolist()
    assert totals['ignored_entries'] == int((labels == -1).sum())

    assert ct.main(['--class_num', str(CLASSES), '--quiet', '--workers', '1',
                    clean['data']]) == 0
    out, err = capsys.readouterr()
    assert err == ''
    assert 'checked 3 files, 23 records' in out and out.rstrip().endswith(
        'OK: no bad records (0 warnings)')
    assert 'classes never positive: %d of 7' % len(totals['never_positive']) in out

    # mask_thres decides what the statistics count as positive, nothing else
    high = ct.check_files(paths, CLASSES, workers=1, progress=False, mask_thres=0.9)
    assert high['totals']['cardinality'] == np.bincount(
        (labels >= 0.9).sum(axis=1)).tolist()


def test_cli_json_with_two_workers_matches_one_worker_in_process(clean, broken):
    """python tools/check_tfrecords.py --workers 2 --json == check_files(workers=1)."""
    inputs = [broken['dir'], clean['data']]
    direct = ct.check_files(ct.resolve_inputs(inputs), CLASSES, workers=1, progress=False)
    proc = subprocess.run(
        [sys.executable, SCRIPT, '--class_num', str(CLASSES), '--json', '--workers', '2']
        + inputs, cwd=ROOT, env=ENV, capture_output=True, timeout=300)
    assert proc.returncode == 1, proc.stderr.decode()
    parsed = json.loads(proc.stdout)
    assert without_seconds(parsed) == without_seconds(direct)
    assert parsed['totals']['bad_records'] == len({(f, i) for f, i, _ in broken['expected']})
    # stderr (a pipe, not a terminal) holds only plain progress lines, no carriage return:
    # one each PLAIN_INTERVAL and the final one, which says all is done.
    files, records = len(direct['files']), direct['totals']['records']
    text = proc.stderr.decode()
    lines = text.splitlines()
    assert '\r' not in text and lines, text
    assert lines[-1] == '%d/%d files, %d records, %s records/s, ETA 0:00:00' % (
        files, files, records, lines[-1].split()[-4].rstrip(','))
    assert all(re.fullmatch(r'\d+/%d files, \d+ records, [0-9.]+ records/s(, ETA [0-9:]+)?'
                            % files, line) for line in lines), lines  # no decoder noise
    assert len(lines) <= parsed['seconds'] / PLAIN_INTERVAL + 2


def test_every_kind_of_damage_is_found(broken, capsys):
    paths = ct.resolve_inputs([broken['dir']])
    summary = ct.check_files(paths, CLASSES, workers=1, progress=False)
    assert problems(summary) == broken['expected']
    by_name = {os.path.basename(s['path']): s for s in summary['files']}

    flipped = by_name['flipped.tfrecords']
    assert flipped['corrupt'] and flipped['records'] == 3
    [entry] = flipped['bad']
    assert entry['last_good_index'] == 2
    assert 'last good record: 2' in entry['reason'] and 'corrupted record' in entry['reason']
    for name in ('truncated.tfrecords', 'cut_header.tfrecords'):
        assert by_name[name]['records'] == 4 and by_name[name]['corrupt']
        assert by_name[name]['bad'][0]['last_good_index'] == 3
        assert 'truncated' in by_name[name]['bad'][0]['reason']
    assert by_name['label_length.tfrecords']['bad'][0]['reason'] == (
        'label length: 6 values, expected class_num=7')
    assert 'not a multiple of 4' in by_name['label_length.tfrecords']['bad'][1]['reason']
    assert by_name['missing.tfrecords']['bad'][2]['reasons'] == [
        "missing feature: 'image'", "missing feature: 'label'"]
    assert by_name['not_example.tfrecords']['records'] == 3
    assert by_name['not_image.tfrecords']['bad'][0]['name'] == 'img.jpg'

    empty = by_name['empty.tfrecords']
    assert empty['records'] == 0 and not empty['bad'] and not empty['corrupt']
    assert [w['warning'].split(':')[0] for w in empty['warnings']] == [rc.EMPTY_SHARD]
    kinds = by_name['warnings.tfrecords']['warning_kinds']
    assert kinds == {rc.MISSING_OPTIONAL: 3, rc.SIZE_MISMATCH: 1, rc.LABEL_NEGATIVE: 1}
    assert not by_name['warnings.tfrecords']['bad']

    totals = summary['totals']
    assert totals['bad_records'] == len({(f, i) for f, i, _ in broken['expected']})
    assert totals['corrupt_files'] == 3 and totals['warnings'] == 6 and not summary['ok']

    # the text report lists --max_bad of them; --json lists every one, same numbers
    assert ct.main(['--class_num', str(CLASSES), '--quiet', '--workers', '1',
                    '--max_bad', '2', broken['dir']]) == 1
    out, _ = capsys.readouterr()
    bad_section = out.split('bad records (%d):\n' % totals['bad_records'])[1].split('\n\n')[0]
    assert bad_section.splitlines() == [
        '  %s: record 4: %s' % (by_name['cut_header.tfrecords']['path'],
                                by_name['cut_header.tfrecords']['bad'][0]['reason']),
        '  %s: record 3: %s' % (flipped['path'], entry['reason']),
        '  ... and %d more (--max_bad, or --json for all)' % (totals['bad_records'] - 2)]
    assert 'warnings (6: empty shard 1, label values in (-1, 0) 1, missing optional ' \
           'feature 3, size mismatch 1):' in out and '  ... and 4 more\n' in out
    assert out.rstrip().endswith('BAD: %d bad records, 3 corrupt files' % totals['bad_records'])
    assert ct.main(['--class_num', str(CLASSES), '--quiet', '--workers', '1', '--json',
                    broken['dir']]) == 1
    parsed = json.loads(capsys.readouterr().out)
    assert parsed['totals'] == totals
    assert sum(len(s['bad']) for s in parsed['files']) == totals['bad_records']


def test_each_damage_alone_exits_1_and_empty_shard_alone_exits_0(broken, clean, capsys):
    base = ['--class_num', str(CLASSES), '--quiet', '--workers', '1']
    for name in sorted({f for f, _, _ in broken['expected']}):
        path = os.path.join(broken['dir'], name)
        assert ct.main(base + [path]) == 1, name
    empty = os.path.join(broken['dir'], 'empty.tfrecords')
    warnings = os.path.join(broken['dir'], 'warnings.tfrecords')
    assert ct.main(base + [empty, warnings, clean['data']]) == 0
    out = capsys.readouterr().out
    assert 'empty shard' in out and out.rstrip().endswith('OK: no bad records (6 warnings)')


@pytest.mark.parametrize('args, what', [
    ([], 'no shard files or directories given'),
    (['{missing}'], 'no such file or directory'),
    (['{nodata}'], 'no shard files'),
    (['--class_num', '0', '{data}'], '--class_num: must be > 0'),
    (['--class_num', '-3', '{data}'], '--class_num: must be > 0'),
    (['--class_num', 'x', '{data}'], '--class_num: not an integer'),
    (['--workers', '0', '{data}'], '--workers: must be > 0'),
    (['--mask_thres', 'nan', '{data}'], '--mask_thres: must be in (0, 1]'),
    (['--bogus', '{data}'], 'unrecognized arguments'),
])
def test_bad_usage_exits_2_with_one_line(args, what, clean, tmp_path, capsys):
    (tmp_path / 'nodata' / 'train').mkdir(parents=True)
    (tmp_path / 'nodata' / 'notes.txt').write_text('x')
    fill = {'missing': str(tmp_path / 'missing.tfrecords'),
            'nodata': str(tmp_path / 'nodata'), 'data': clean['data']}
    argv = [a.format(**fill) for a in args]
    if '--class_num' not in argv:
        argv = ['--class_num', str(CLASSES)] + argv
    assert ct.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ''
    assert err.count('\n') == 1 and err.startswith('check_tfrecords.py: error: ')
    assert what in err
    # --class_num is required
    assert ct.main(['--quiet', clean['data']]) == 2
    assert 'class_num' in capsys.readouterr().err


def test_bad_usage_from_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, '--class_num', '5', str(tmp_path)],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ''
    assert proc.stderr.splitlines() == [
        'check_tfrecords.py: error: no shard files (*tfrecords) in %s or its train/ and '
        'val/ subdirectories' % tmp_path]


def test_a_worker_that_dies_costs_its_file_only(tmp_path, monkeypatch):
    # Worker processes whose checker dies on record 2 of a file, as on a failed CHECK in
    # TensorFlow; no TensorFlow is loaded in them, so the test stays fast.
    (tmp_path / 'dying_worker.py').write_text(
        'import os, signal\n'
        'from mlimages.recordkit import check_tfrecords\n'
        'from mlimages.recordkit import shard_checks\n'
        'def main(*args):\n'
        '    def check(path, class_num, mask_thres, decoder, on_progress, on_record,\n'
        '              hierarchy=None):\n'
        '        on_record(0)\n'
        '        os.write(2, b"noise of record 0\\n")\n'
        '        on_record(2)\n'
        '        os.write(2, b"F image_op.cc:42] Check failed: oops\\n")\n'
        '        os.kill(os.getpid(), signal.SIGKILL)\n'
        '    shard_checks.check_file = check\n'
        '    check_tfrecords._worker_main(*args)\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    import dying_worker
    monkeypatch.setattr(ct, '_worker_main', dying_worker.main)
    paths = [write_shard(tmp_path / ('%d.tfrecords' % i), [record()] * 3) for i in range(3)]
    summary = ct.check_files(paths, CLASSES, workers=2, progress=False)
    assert [s['path'] for s in summary['files']] == paths  # 3 files, 2 workers: replaced
    for file_summary in summary['files']:
        [entry] = file_summary['bad']
        assert entry['index'] == 2 and entry['reason'].startswith(
            'checker crashed: the checking process died (killed by SIGKILL) at record 2')
        assert entry['reason'].endswith(
            'its last output: F image_op.cc:42] Check failed: oops')
    assert not summary['ok'] and summary['totals']['bad_records'] == 3
