"""train.py under failure: kills at random moments, NaN loss, corrupt and odd records."""
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

from mlimages.data import records
from mlimages.model import memory
from helpers import (CLASSES, ENV, ROOT, run_program, run_train, small_run_flags,
                     write_dataset)

pytestmark = pytest.mark.slow


def jpeg_bytes(mode='RGB', size=(40, 36), fmt='JPEG', seed=0):
    rng = np.random.default_rng(seed)
    channels = {'RGB': 3, 'L': 1, 'CMYK': 4, 'RGBA': 4}[mode]
    pixels = rng.integers(0, 255, size=(size[1], size[0], channels)).astype(np.uint8)
    image = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


def write_shards(data_dir, images, labels=None, shards=2):
    """Writes records with the given encoded images straight to <data_dir>/train."""
    directory = os.path.join(data_dir, 'train')
    os.makedirs(directory, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(directory, '%d.tfrecords' % k))
               for k in range(shards)]
    for i, data in enumerate(images):
        label = np.zeros(CLASSES, np.float32) if labels is None else labels[i]
        label[0] = 1.0 if labels is None else label[0]
        example = records.make_example(data, label, 10, 10, 'im%d' % i)
        writers[i % shards].write(example.SerializeToString())
    for w in writers:
        w.close()
    return data_dir


@pytest.fixture(scope='module')
def good_data(module_dir):
    return write_dataset(str(module_dir('good')))


def latest_step(model_dir):
    path = tf.train.latest_checkpoint(model_dir)
    return None if path is None else int(path.rsplit('-', 1)[1])


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(good_data, tmp_path):
    model_dir = str(tmp_path / 'model')
    assert run_train(*small_run_flags(good_data, model_dir, 2)).returncode == 0
    nan_labels = [np.full(CLASSES, np.nan, np.float32) for _ in range(8)]
    nan_data = write_shards(str(tmp_path / 'nan'), [jpeg_bytes(seed=i) for i in range(8)],
                            nan_labels)
    result = run_train(*small_run_flags(nan_data, model_dir, 6))
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1, result.stderr[-2000:]
    assert 'NaN or Inf at step 3' in last and 'model.ckpt-2 is kept' in last, last
    assert latest_step(model_dir) == 2


def failing_run(model_dir, failure):
    """tests/failing_train.py (train.py whose step meets a real failing op, `failure` =
    KIND:STEP) on synthetic data, a checkpoint after every step; the CompletedProcess.
    oneDNN off: its CPU allocator waits 10 s for memory before an out-of-memory error."""
    env = dict(ENV, TRAIN_TEST_FAILURE=failure, TF_ENABLE_ONEDNN_OPTS='0')
    return run_program('tests/failing_train.py', '--use_synthetic_data', '--class_num=5',
                       '--model_dir=' + model_dir, '--resnet_size=18', '--image_size=32',
                       '--batch_size=2', '--max_iter=3', '--snapshot=1', '--log_interval=1',
                       '--data_format=NHWC', env=env)


def test_out_of_memory_stops_naming_the_batch_size_and_keeps_the_last_checkpoint(tmp_path):
    model_dir = str(tmp_path / 'model')
    result = failing_run(model_dir, 'oom:2')
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        'train.py: error: out of memory on CPU:0 at step 2 (OOM when allocating tensor with '
        'shape[1048576,4096,4096,3] and type float): lower --batch_size (2 images a replica '
        'now); %s; the last checkpoint model.ckpt-1 is kept'
        % memory.oom_note(18, 5, 2, 32, 'fp32'))
    assert latest_step(model_dir) == 1


@pytest.mark.matrix
@pytest.mark.parametrize('failure,start', [
    ('xla:1', 'train.py: error: XLA could not compile the training step at step 1 (Detected '
              'unsupported operations when trying to compile graph __inference_lengths_'),
    ('reshape:1', 'train.py: error: an op of the training step rejected its input at step 1 '
                  '(Input to reshape is a tensor with 4 values, but the requested shape has 3, '
                  'node Reshape): not a bad record'),
])
def test_xla_and_op_failures_stop_with_their_own_line(tmp_path, failure, start):
    result = failing_run(str(tmp_path / 'model'), failure)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1, result.stderr[-2000:]
    assert last.startswith(start) and last.endswith('model.ckpt-0 is kept'), last


def test_odd_but_valid_images_train(tmp_path):
    images = [jpeg_bytes('RGB', (1, 1)), jpeg_bytes('L'), jpeg_bytes('CMYK'),
              jpeg_bytes('RGBA', fmt='PNG'), jpeg_bytes('RGB', (3, 200)),
              jpeg_bytes('RGB', fmt='PNG'), jpeg_bytes('L', (1, 1)), jpeg_bytes('RGB')]
    data = write_shards(str(tmp_path / 'odd'), images)
    model_dir = str(tmp_path / 'model')
    result = run_train(*small_run_flags(data, model_dir, 4))
    assert result.returncode == 0, result.stderr[-3000:]
    assert latest_step(model_dir) == 4


def corrupt_dataset(tmp_path):
    images = [jpeg_bytes(seed=i) for i in range(12)]
    images[3] = b'\xff\xd8\xff\xe0 this is no jpeg'
    images[8] = images[8][:40]  # truncated JPEG
    return write_shards(str(tmp_path / 'corrupt'), images)


def test_corrupt_image_stops_with_a_message_by_default(tmp_path):
    data = corrupt_dataset(tmp_path)
    result = run_train(*small_run_flags(data, str(tmp_path / 'model'), 12))
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1
    assert last.startswith('train.py: error: bad record') and 'skip_bad_records' in last, last


def test_skip_bad_records_counts_them(tmp_path):
    from helpers import scalar_tags
    data = corrupt_dataset(tmp_path)
    model_dir = str(tmp_path / 'model')
    result = run_train(*small_run_flags(data, model_dir, 12), '--skip_bad_records')
    assert result.returncode == 0, result.stderr[-3000:]
    counts = [int(float(line.split('skipped_records = ')[1].split(',')[0].split(' ')[0]))
              for line in result.stderr.splitlines() if 'skipped_records = ' in line]
    assert counts and max(counts) >= 2  # both bad records seen within 12 steps x 4 images
    scalars = scalar_tags(model_dir)
    assert max(v for _, v in scalars['skipped_records']) >= 2


def test_truncated_shard_points_to_the_checker(good_data, tmp_path):
    import shutil
    data = str(tmp_path / 'trunc')
    shutil.copytree(good_data, data)
    shard = os.path.join(data, 'train', '1.tfrecords')
    size = os.path.getsize(shard)
    with open(shard, 'r+b') as f:
        f.truncate(size - 100)
    result = run_train(*small_run_flags(data, str(tmp_path / 'model'), 30))
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1
    assert 'truncated or corrupt' in last and 'check_tfrecords.py' in last, last


# The five kills of the test below: the n-th line that matches each pattern triggers it.
# Every run holds before its local step 10 (tests/gated_train.py with a file that never
# appears), so a kill lands with work left whatever the machine's speed: at most 9 steps a
# run, 36 in all, short of 40. Within 9 steps every run logs two step lines (every 4) and
# saves twice (at its start and at the next multiple of 3).
KILL_EVENTS = [
    ('training to global step', 1),   # start-up, before the session exists
    ('Saving checkpoints for', 1),    # the checkpoint a session saves when it starts
    (r'\bstep \d+: ', 1),              # between steps
    ('Saving checkpoints for', 2),    # a checkpoint of the snapshot interval
    (r'\bstep \d+: ', 2),
]


def run_until(flags, pattern, occurrence, gate):
    """Runs train.py until the `occurrence`-th stderr line matching `pattern`, then
    SIGKILLs it; returns whether that line came and the lines read. A watchdog bounds a
    broken run (the gate would otherwise hold it forever)."""
    env = dict(ENV, TRAIN_TEST_GATE='10:' + gate)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, 'tests', 'gated_train.py')]
                            + flags, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    lines, seen = [], 0
    try:
        for line in proc.stderr:
            lines.append(line)
            seen += bool(re.search(pattern, line))
            if seen == occurrence:
                proc.send_signal(signal.SIGKILL)
                return True, lines
        return False, lines
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
        proc.stderr.close()


def test_killed_five_times_at_chosen_events_ends_at_max_iter(good_data, tmp_path):
    """SIGKILL at start-up, between steps and while checkpoints are saved; every checkpoint
    stays loadable with counters that match its step (class 0 is in every batch:
    pos_count[0] == step), and the last run resumes to max_iter."""
    model_dir = str(tmp_path / 'model')
    flags = small_run_flags(good_data, model_dir, 40)
    flags[flags.index('--snapshot=100')] = '--snapshot=3'
    # Restarts are not aligned with the log interval: the log of the last step must not
    # run the graph again (that would advance the counters past the step).
    flags[flags.index('--log_interval=1')] = '--log_interval=4'
    steps_before = []
    for pattern, occurrence in KILL_EVENTS:
        came, lines = run_until(flags, pattern, occurrence, str(tmp_path / 'never'))
        assert came, (pattern, occurrence, ''.join(lines[-30:]))
        steps_before.append(latest_step(model_dir))
    # The kills landed inside the run: progress was made and work was left.
    assert 0 < steps_before[-1] < 40, steps_before
    final = run_train(*flags)
    assert final.returncode == 0, final.stderr[-3000:]
    assert latest_step(model_dir) == 40
    state = tf.train.get_checkpoint_state(model_dir)
    for path in state.all_model_checkpoint_paths:
        reader = tf.train.load_checkpoint(path)
        step = reader.get_tensor('global_step')
        assert path.endswith('-%d' % step)
        assert reader.get_tensor('pos_count')[0] == step
        if step > 0:
            assert np.any(reader.get_tensor('logits/dense/kernel/Momentum') != 0)


def test_record_builder_killed_mid_run_resumes(tmp_path):
    """Image 5 is a named pipe with no writer: reading it blocks, so shard 5 (lines 5, 11,
    ... of 6 round-robin shards) cannot finish while shards 0-4 can. The builder is killed
    once a shard is complete; the rerun, with the image in place, writes the rest."""
    rng = np.random.default_rng(0)
    images = tmp_path / 'images'
    images.mkdir()
    lines = []
    for i in range(240):
        if i != 5:
            Image.fromarray(rng.integers(0, 255, (64, 64, 3)).astype(np.uint8)).save(
                str(images / ('%d.jpg' % i)))
        lines.append('%d.jpg %d:1' % (i, i % CLASSES))
    os.mkfifo(str(images / '5.jpg'))
    (tmp_path / 'list.txt').write_text('\n'.join(lines) + '\n')
    cmd = [sys.executable, os.path.join(ROOT, 'tools', 'make_tfrecords.py'), '--out_dir',
           str(tmp_path / 'out'), '--image_root', str(images), '--class_num', str(CLASSES),
           '--num_shards', '6', '--workers', '1', str(tmp_path / 'list.txt')]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    train_dir = tmp_path / 'out' / 'train'
    try:
        # The event: a finished shard appears. The pipe keeps the builder alive meanwhile;
        # the deadline only bounds a broken run.
        deadline = time.monotonic() + 300
        while not list(train_dir.glob('*.tfrecords')) and proc.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, 'the builder ended (status %s)' % proc.returncode
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finished = sorted(p.name for p in train_dir.glob('*.tfrecords'))
    assert 0 < len(finished) < 6 and '5.tfrecords' not in finished, finished
    for p in train_dir.glob('*.tfrecords'):  # what exists is complete
        assert sum(1 for _ in tf.io.tf_record_iterator(str(p))) == 40
    os.remove(str(images / '5.jpg'))
    Image.fromarray(rng.integers(0, 255, (64, 64, 3)).astype(np.uint8)).save(
        str(images / '5.jpg'))
    rerun = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert 'skipping existing shard %s' % finished[0] in rerun.stderr
    names = set()
    for p in train_dir.glob('*.tfrecords'):
        for record in tf.io.tf_record_iterator(str(p)):
            names.add(tf.train.Example.FromString(record).features.feature['name']
                      .bytes_list.value[0])
    assert len(names) == 240
    assert not [p for p in train_dir.iterdir() if 'tmp' in p.name]


def test_a_record_that_is_no_example_is_one_line_or_skipped(tmp_path):
    data = write_shards(str(tmp_path / 'raw'), [jpeg_bytes(seed=i) for i in range(8)],
                        shards=1)
    shard = os.path.join(data, 'train', '0.tfrecords')
    records = list(tf.io.tf_record_iterator(shard))
    with tf.io.TFRecordWriter(shard) as writer:
        for i, record in enumerate(records):
            writer.write(record)
            if i == 1:
                writer.write(b'\x0a\xff\xff not an Example')
    result = run_train(*small_run_flags(data, str(tmp_path / 'model'), 6))
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1
    assert 'is not a tf.train.Example' in last and 'check_tfrecords' in last, last
    skipped = run_train(*small_run_flags(data, str(tmp_path / 'model2'), 6),
                        '--skip_bad_records')
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    # The count runs over the repeated stream (the bad record is met once per epoch).
    assert re.search(r'skipped_records = [1-9]', skipped.stderr)
