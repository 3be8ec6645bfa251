"""The URL-list path end to end, with real components: a Tencent-format URL list of the
failure zoo (url_zoo.py, served on 127.0.0.1) -> urls_to_img2dataset.py -> img2dataset
itself, run as a user runs it, first with one shard made to fail -> img2dataset_to_list.py
-> make_tfrecords.py -> check_tfrecords.py -> two training steps."""
import hashlib
import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import url_zoo
from helpers import CLASSES, ENV, run_program, run_train, small_run_flags
from mlimages.recordkit import urls_to_img2dataset as u2i

PER_SHARD = 8
TIMEOUT = 5  # img2dataset's --timeout: the silent server outlasts it; each trickle gap is 1/50
IMG2DATASET = os.path.join(os.path.dirname(sys.executable), 'img2dataset')
I2D_ENV = dict(ENV, NO_ALBUMENTATIONS_UPDATE='1', WANDB_MODE='disabled')


def _tool(name, *args, timeout=300):
    return run_program(os.path.join('tools', name), *args, timeout=timeout)


def _labels(i):
    """Label text as the published lists have it: tab-separated tokens, some bare."""
    if i == 3:
        return ''
    if i == 4:
        return '3'
    return '%d:1\t%d:0.5' % (i % CLASSES, (i + 2) % CLASSES)


def _names():
    """The file name of every case, in list order: a repeated URL's with its -k suffix."""
    seen = {}
    return [u2i.unique_name(u2i.original_name(path), seen)[0] for _, path, _ in url_zoo.CASES]


NAMES = _names()


def _name(path):
    return u2i.original_name(path)


def _img2dataset(input_dir, out):
    """img2dataset with the settings of docs/download.md (scaled down: few threads)."""
    return subprocess.run(
        [IMG2DATASET, '--url_list', str(input_dir), '--input_format', 'parquet',
         '--save_additional_columns', '["labels","name"]',
         '--output_folder', str(out), '--output_format', 'files',
         '--resize_mode', 'keep_ratio', '--image_size', '320',
         '--resize_only_if_bigger', 'True', '--skip_reencode', 'True',
         '--number_sample_per_shard', str(PER_SHARD), '--timeout', str(TIMEOUT),
         '--processes_count', '1', '--thread_count', '16', '--retries', '0'],
        env=I2D_ENV, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope='module')
def run(module_dir):
    root = module_dir('urls')
    out = {'root': root}
    with url_zoo.ZooServer() as zoo:
        url_list = root / 'train_urls.txt'
        url_list.write_text(''.join('%s\t%s\n' % (zoo.url(path), _labels(i))
                                    for i, (_, path, _) in enumerate(url_zoo.CASES)))
        out['to_input'] = _tool('urls_to_img2dataset.py', url_list, root / 'input', '--quiet')
        download = root / 'download'
        download.mkdir()
        # Shard 1 cannot be written: img2dataset reports it failed and still exits 0.
        (download / '00001.parquet').mkdir()
        out['first'] = _img2dataset(root / 'input', download)
        out['incomplete'] = _tool('img2dataset_to_list.py', download, root / 'input',
                                  root / 'list', '--number_sample_per_shard', PER_SHARD)
        out['incomplete_made'] = os.path.exists(root / 'list')
        (download / '00001.parquet').rmdir()
        out['second'] = _img2dataset(root / 'input', download)  # redoes shard 1 only
        out['requests'] = list(zoo.requests)
    known = root / 'placeholders.txt'
    known.write_text('# our own placeholder\n%s\n'
                     % hashlib.sha256(url_zoo.KNOWN_PLACEHOLDER).hexdigest())
    out['to_list'] = _tool('img2dataset_to_list.py', download, root / 'input', root / 'list',
                           '--number_sample_per_shard', PER_SHARD,
                           '--placeholder_hashes', known, '--quiet')
    out['records'] = _tool('make_tfrecords.py', '-im', root / 'list' / 'images',
                           root / 'list' / 'list.txt', '-tfs', root / 'data',
                           '-cls', CLASSES, '--quiet', '--workers', '1')
    out['check'] = _tool('check_tfrecords.py', root / 'data', '--class_num', CLASSES,
                         '--quiet', '--workers', '1')
    return out


def _outcomes(root):
    """{name: ('kept', labels text) or (status, reason)} from the tool's two outputs."""
    found = {}
    for line in (root / 'list' / 'list.txt').read_text().splitlines():
        name, _, labels = line.partition('\t')
        found[name] = ('kept', labels)
    for line in (root / 'list' / 'failures.tsv').read_text().splitlines():
        if not line.startswith('#'):
            _, name, reason = line.split('\t')
            found[name] = (reason.split(':')[0], reason)
    return found


@pytest.mark.slow
def test_incomplete_download_fails_loudly(run):
    assert run['to_input'].returncode == 0, run['to_input'].stderr
    assert run['first'].returncode == 0  # img2dataset's own verdict on a failed shard
    assert 'shard 1 failed' in run['first'].stdout
    assert run['incomplete'].returncode == 1
    err = run['incomplete'].stderr.strip()
    assert len(err.splitlines()) == 1 and '00001' in err and 'rerun' in err
    assert '00000' not in err and not run['incomplete_made']


@pytest.mark.slow
def test_every_zoo_case_has_its_outcome(run):
    assert run['second'].returncode == 0
    assert run['to_list'].returncode == 0, run['to_list'].stderr
    found = _outcomes(run['root'])
    assert len(found) == len(url_zoo.CASES)  # one line per URL
    for i, (case, path, expected) in enumerate(url_zoo.CASES):
        outcome = found[NAMES[i]]
        if expected.startswith('kept') or expected == 'skipped_by_make_tfrecords':
            assert outcome == ('kept', _labels(i)), case  # labels verbatim
        else:
            assert outcome[0] == expected, (case, outcome)
    reasons = {name: reason for name, (_, reason) in found.items()}
    assert 'HTTP Error 404' in reasons['1004_130_404.jpg']
    assert 'timed out' in reasons['1006_150_slow.jpg']
    for path in url_zoo.REDIRECTS:
        assert 'shared by %d URLs' % len(url_zoo.REDIRECTS) in reasons[_name(path)]
    assert 'known placeholder' in reasons['1002_122_known.png']
    assert 'placeholders dropped: 5 (2 distinct images)' in run['to_list'].stdout


@pytest.mark.slow
def test_kept_images_are_stored_at_shorter_side_320(run):
    images = run['root'] / 'list' / 'images'
    for name, (case, path, expected) in zip(NAMES, url_zoo.CASES):
        if not expected.startswith('kept'):
            continue
        data = (images / name).read_bytes()
        note = expected.partition(':')[2]
        if note == 'bytes as served':
            assert data == url_zoo.BODIES[path], case
        else:
            img = Image.open(io.BytesIO(data))
            assert img.format == 'JPEG', case
            if 'x' in note.split(',')[0]:
                size = tuple(int(v) for v in note.split(',')[0].split('x'))
                assert img.size == size, (case, img.size)


def _records(root):
    found = {}
    for name in os.listdir(root / 'data' / 'train'):
        if name.endswith('.tfrecords'):
            for raw in tf.io.tf_record_iterator(str(root / 'data' / 'train' / name)):
                f = tf.train.Example.FromString(raw).features.feature
                found[f['name'].bytes_list.value[0].decode()] = (
                    f['image'].bytes_list.value[0],
                    np.frombuffer(f['label'].bytes_list.value[0], '<f4'))
    return found


@pytest.mark.slow
def test_records_are_clean_and_train(run):
    assert run['records'].returncode == 0, run['records'].stderr
    assert run['check'].returncode == 0, run['check'].stdout + run['check'].stderr
    records = _records(run['root'])
    kept = [(i, NAMES[i]) for i, (_, _, expected) in enumerate(url_zoo.CASES)
            if expected.startswith('kept')]
    assert sorted(records) == sorted(name for _, name in kept)
    for i, name in kept:
        label = np.zeros(CLASSES, np.float32)
        for token in _labels(i).split():
            cls, _, conf = token.partition(':')
            label[int(cls)] = float(conf or 1)
        assert records[name][1].tolist() == label.tolist(), name
    # make_tfrecords decodes fully: the truncated original img2dataset kept is skipped.
    report = (run['root'] / 'data' / 'train_report.txt').read_text()
    assert '1001_107_trunc_small.jpg' in report
    # img2dataset mattes transparency onto white (the project's own conversion: black).
    rgba = np.asarray(Image.open(io.BytesIO(records['1001_106_alpha.png'][0])).convert('RGB'))
    assert rgba[:, :20].min() > 230 and rgba[:, 30:, 1].min() > 150
    model_dir = str(run['root'] / 'model')
    proc = run_train(*small_run_flags(str(run['root'] / 'data'), model_dir, 2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert tf.train.latest_checkpoint(model_dir).endswith('-2')


@pytest.mark.slow
def test_every_url_was_requested(run):
    # every URL of the list was requested (the redirects once more for the placeholder)
    paths = {p for _, p, _ in url_zoo.CASES}
    assert paths <= set(run['requests'])
    assert set(run['requests']) - paths <= {'/placeholder/photo_unavailable.png'}


@pytest.mark.slow
def test_unfinished_or_foreign_shards_fail_loudly(run, tmp_path):
    download = tmp_path / 'download'
    shutil.copytree(run['root'] / 'download', download)
    args = (download, run['root'] / 'input', tmp_path / 'list', '--quiet')
    (download / '00002_stats.json').unlink()  # as if killed while writing shard 2
    proc = _tool('img2dataset_to_list.py', *args, '--number_sample_per_shard', PER_SHARD)
    assert proc.returncode == 1 and 'shards failed or unfinished' in proc.stderr
    assert '00002' in proc.stderr and not (tmp_path / 'list').exists()
    shutil.copy(run['root'] / 'download' / '00002_stats.json', download)
    (download / '_tmp').mkdir(exist_ok=True)
    (download / '_tmp' / '3.feather').write_bytes(b'')
    proc = _tool('img2dataset_to_list.py', *args, '--number_sample_per_shard', PER_SHARD)
    assert proc.returncode == 1 and '_tmp' in proc.stderr
    shutil.rmtree(download / '_tmp')
    shutil.rmtree(download / '00003')  # as --output_format webdataset leaves it: no folder
    proc = _tool('img2dataset_to_list.py', *args, '--number_sample_per_shard', PER_SHARD)
    assert proc.returncode == 2 and '--output_format files' in proc.stderr
    assert not (tmp_path / 'list').exists()
    proc = _tool('img2dataset_to_list.py', download, run['root'] / 'input', download,
                 '--overwrite', '--number_sample_per_shard', PER_SHARD)
    assert proc.returncode == 2 and 'would hold' in proc.stderr and download.exists()
    proc = _tool('img2dataset_to_list.py', *args)  # the default 10000 a shard: 1 shard
    assert proc.returncode == 2 and 'number_sample_per_shard' in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_usage_errors_are_one_line(tmp_path):
    cases = [
        ((tmp_path / 'none', tmp_path / 'none', tmp_path / 'out'), 'no such input'),
        ((tmp_path, tmp_path, tmp_path / 'out', '--placeholder_min_urls', 1), '>= 2'),
        ((tmp_path, tmp_path, tmp_path), 'exists'),
    ]
    bad_hashes = tmp_path / 'hashes.txt'
    bad_hashes.write_text('abc\n')
    cases.append(((tmp_path, tmp_path, tmp_path / 'out', '--placeholder_hashes', bad_hashes),
                  'hashes.txt:1: not a sha256'))
    for args, what in cases:
        proc = _tool('img2dataset_to_list.py', *args, timeout=120)
        assert proc.returncode == 2 and what in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / 'out').exists()
