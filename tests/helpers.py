"""What several test files share: the repository's paths, a small real dataset made with
make_tfrecords, train.py run as a user runs it, TensorBoard scalars, and image files of
every kind the record tools meet. Plain functions; conftest.py makes fixtures of them."""
import contextlib
import io
import os
import re
import subprocess
import sys

import numpy as np
import tensorflow.compat.v1 as tf
from PIL import Image

import flags as flags_lib
from mlimages.data import records
from mlimages.recordkit import make_tfrecords

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The start of a child program (python -c) that runs a strategy over two logical CPU devices:
# the mirrored code paths of GPUs, on a CPU (they must be set before TensorFlow starts).
LOGICAL_CPUS = '''
import sys
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
cpu = tf.config.list_physical_devices('CPU')[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, %r)
from mlimages.distributed import distribute
distribute.mirrored_devices = lambda k: ['/device:CPU:%%d' %% i for i in range(k)]
''' % ROOT
CLASSES = 5
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')


def write_dataset(root, train_lists=2, per_list=6, class_num=CLASSES, seed=0):
    """JPEGs and image lists; class 0 is positive in every image, so after n training
    steps its pos_count is exactly n. Labels include soft values and -1."""
    rng = np.random.default_rng(seed)
    images = os.path.join(root, 'images')
    os.makedirs(images, exist_ok=True)
    lists = []
    for k in range(train_lists + 1):
        path = os.path.join(root, 'list_%d.txt' % k)
        with open(path, 'w') as f:
            for i in range(per_list):
                name = 'im_%d_%d.jpg' % (k, i)
                pixels = rng.integers(0, 255, size=(40 + i, 48, 3)).astype(np.uint8)
                Image.fromarray(pixels).save(os.path.join(images, name), quality=90)
                f.write('%s\t0:1 %d:0.8 3:-1%s\n' % (name, 1 + i % 2, ' 4' if i % 3 else ''))
        lists.append(path)
    data = os.path.join(root, 'data')
    build_records(lists[:-1], images, data, split='train',
                  class_num=class_num, workers=1, progress=False)
    build_records(lists[-1:], images, data, split='val',
                  class_num=class_num, workers=1, progress=False)
    return data


def build_records(lists, image_root, out_dir, **settings):
    """make_tfrecords.build_records with its settings as keywords, each put in its group
    (make_tfrecords.Inputs, Records, Output, Work)."""
    groups = {}
    for group in (make_tfrecords.Inputs, make_tfrecords.Records, make_tfrecords.Output,
                  make_tfrecords.Work):
        groups[group] = {name: settings.pop(name) for name in group._fields if name in settings}
    assert not settings, 'not a setting of build_records: %s' % sorted(settings)
    return make_tfrecords.build_records(
        make_tfrecords.Inputs(lists, image_root, **groups[make_tfrecords.Inputs]),
        make_tfrecords.Records(**groups[make_tfrecords.Records]),
        make_tfrecords.Output(out_dir, **groups[make_tfrecords.Output]),
        make_tfrecords.Work(**groups[make_tfrecords.Work]))


def run_program(program, *args, env=ENV, cwd=ROOT, timeout=600):
    """A program of the checkout (train.py, tools/x.py) run by this Python with `args`:
    the CompletedProcess, stdout and stderr read as text."""
    return subprocess.run([sys.executable, os.path.join(ROOT, program)] + [str(a) for a in args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def run_train(*args, timeout=600, env=ENV):
    return run_program('train.py', *args, env=env, timeout=timeout)


def run_main(tool, capsys, *args):
    """A tool's main() in this process: (exit status, stdout, stderr lines)."""
    status = tool.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err.strip().splitlines()


def train_model(root, max_iter, *extra, data=None, env=ENV, program='train.py'):
    """The trained model every `trained` fixture starts from: write_dataset under root
    (unless data is given), then `program` (train.py) with small_run_flags and `extra`;
    asserts it exited 0. Returns (data, model_dir, the CompletedProcess)."""
    data = data or write_dataset(os.path.join(str(root), 'ds'))
    model_dir = os.path.join(str(root), 'model')
    result = run_program(program, *(small_run_flags(data, model_dir, max_iter) + list(extra)),
                         env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, model_dir, result


def small_run_flags(data, model_dir, max_iter):
    """A small train.py run: ResNet-18 (8 s and 170 MB of checkpoints for a few steps here,
    against ResNet-50's 12 s and 360 MB; test_model_fn trains the bottleneck ResNet-50)."""
    return ['--data_dir=' + data, '--model_dir=' + model_dir,
            '--log_dir=' + os.path.join(model_dir, 'log'), '--class_num=%d' % CLASSES,
            '--resnet_size=18', '--image_size=32', '--batch_size=4',
            '--max_iter=%d' % max_iter, '--log_interval=1', '--snapshot=100',
            '--shuffle_buffer=16', '--data_format=NHWC']


@contextlib.contextmanager
def tensorboard_server(logdir, timeout=120):
    """A real TensorBoard on 127.0.0.1 (a free port) serving logdir: yields
    get(route) -> the JSON of an HTTP GET of that route; stopped at the end."""
    import gzip
    import json
    import threading
    import urllib.request
    process = subprocess.Popen(
        [sys.executable, '-m', 'tensorboard.main', '--logdir', str(logdir), '--host',
         '127.0.0.1', '--port', '0', '--load_fast=false'],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    address, ready = [], threading.Event()

    def read():  # its "TensorBoard x at http://127.0.0.1:PORT/" line, then drain
        for line in process.stderr:
            found = re.search(r'at (http://127\.0\.0\.1:\d+)/', line)
            if found and not address:
                address.append(found.group(1))
                ready.set()
        ready.set()
    threading.Thread(target=read, daemon=True).start()
    try:
        ready.wait(timeout)
        assert address, 'TensorBoard did not start (exit status %s)' % process.poll()

        def get(route):
            with urllib.request.urlopen(address[0] + route, timeout=timeout) as response:
                body = response.read()  # the profile plugin gzips whatever is asked
                if response.headers.get('Content-Encoding') == 'gzip':
                    body = gzip.decompress(body)
                return json.loads(body)
        yield get
    finally:
        process.terminate()
        process.wait(timeout=30)


def scalar_tags(model_dir):
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(model_dir, size_guidance={'scalars': 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
            for tag in acc.Tags()['scalars']}


def cluster_run_flags(data, model_dir, max_iter, snapshot=100):
    """A tiny train.py run for the tasks of a cluster (ResNet-18, 32 px, batch 2, one
    preprocessing thread: several of them share 2 cores)."""
    return ['--data_dir=' + data, '--model_dir=' + model_dir,
            '--log_dir=' + os.path.join(model_dir, 'log'), '--class_num=%d' % CLASSES,
            '--resnet_size=18', '--image_size=32', '--batch_size=2', '--lr=0.01',
            '--max_iter=%d' % max_iter, '--log_interval=1', '--snapshot=%d' % snapshot,
            '--shuffle_buffer=8', '--data_format=NHWC', '--num_preprocess_threads=1']


def files_read(lines):
    """(k, shard names) of every 'worker k/n reads m shard files: a, b' line."""
    found = []
    for line in lines:
        match = re.search(r'worker (\d+)/(\d+) reads \d+ shard files: (.*)$', line)
        if match:
            found.append((int(match.group(1)), match.group(3).split(', ')))
    return found


def checkpoint_values(model_dir):
    """{variable name: value} of the latest checkpoint in model_dir (there must be one)."""
    path = tf.train.latest_checkpoint(model_dir)
    assert path, model_dir
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def assert_identical_weights(model_dir, max_iter):
    """A collective job's chief and worker ended at max_iter with the same variables:
    TensorFlow has the non-chief worker save its own copy under tmp_worker_<index>."""
    chief = checkpoint_values(model_dir)
    worker = checkpoint_values(os.path.join(model_dir, 'tmp_worker_0'))
    assert chief['global_step'] == worker['global_step'] == max_iter
    assert set(chief) == set(worker)
    for name in chief:
        np.testing.assert_array_equal(chief[name], worker[name], err_msg=name)


def write_lines(path, lines):
    """Text lines to a pathlib.Path; returns it."""
    path.write_text(''.join(line + '\n' for line in lines))
    return path


def write_text(path, text):
    """Text to a file; returns its path as a string."""
    with open(str(path), 'w') as f:
        f.write(text)
    return str(path)


def empty_dir(tmp_path):
    """An empty directory <tmp_path>/empty."""
    path = tmp_path / 'empty'
    path.mkdir()
    return str(path)


def label_array(pairs, class_num):
    """A float32 label of class_num entries with label[index] = value for (index, value)."""
    label = np.zeros(class_num, np.float32)
    for index, value in pairs:
        label[index] = value
    return label


# Image file -> (width, height), for the readable ones.
GOOD_IMAGES = {
    'rgb.jpg': (40, 30),
    'gray.jpg': (24, 36),
    'cmyk.jpg': (50, 20),
    'alpha.png': (32, 28),
    'sub/rgb2.jpeg': (20, 44),
    'palette.gif': (26, 22),
    'grey16.png': (30, 21),
}
BAD_IMAGES = {
    'empty.jpg': 'empty file',
    'text.jpg': 'not an image',
    'trunc.jpg': 'cannot decode',
    'missing.jpg': 'file not found',
}


def noise(width, height, seed):
    rng = np.random.RandomState(seed)
    return (rng.rand(height, width, 3) * 255).astype(np.uint8)


def make_image_files(root):
    """GOOD_IMAGES and BAD_IMAGES (but missing.jpg) as files under root (a pathlib.Path)."""
    (root / 'sub').mkdir()
    Image.fromarray(noise(40, 30, 1)).save(root / 'rgb.jpg', quality=90)
    Image.fromarray(noise(24, 36, 2)[:, :, 0], 'L').save(root / 'gray.jpg')
    Image.new('CMYK', (50, 20), (0, 255, 255, 0)).save(root / 'cmyk.jpg')
    rgba = np.zeros((28, 32, 4), np.uint8)
    rgba[:, :16] = (200, 100, 50, 0)     # fully transparent: must turn black
    rgba[:, 16:] = (10, 200, 30, 255)    # opaque green stays
    Image.fromarray(rgba, 'RGBA').save(root / 'alpha.png')
    Image.fromarray(noise(20, 44, 3)).save(root / 'sub' / 'rgb2.jpeg')
    Image.fromarray(noise(26, 22, 4)).convert('P').save(root / 'palette.gif')
    grey16 = np.full((21, 30), 40000, np.uint16)
    Image.fromarray(grey16).save(root / 'grey16.png')
    (root / 'empty.jpg').write_bytes(b'')
    (root / 'text.jpg').write_text('this is not a JPEG\n')
    buf = io.BytesIO()
    Image.fromarray(noise(60, 60, 5)).save(buf, 'JPEG')
    (root / 'trunc.jpg').write_bytes(buf.getvalue()[:len(buf.getvalue()) // 2])
    return root


def encode_pixels(pixels, fmt='JPEG', mode=None, **kw):
    buf = io.BytesIO()
    Image.fromarray(pixels, mode).save(buf, fmt, **kw)
    return buf.getvalue()


def smooth_pixels(height, width, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255.0 / width, y * 255.0 / height, (x + y) * 127.0 / (width + height)],
                    -1)
    return np.clip(base + rng.normal(0, 3, base.shape), 0, 255).astype(np.uint8)


def run_session(fetches, feed=None, seed=None):
    with tf.Session() as sess:
        return sess.run(fetches, feed)


def write_images_and_list(root, count=6, seed=0):
    images = os.path.join(root, 'images')
    os.makedirs(images, exist_ok=True)
    path = os.path.join(root, 'list.txt')
    with open(path, 'w') as f:
        for i in range(count):
            Image.fromarray(smooth_pixels(36 + i, 48, seed + i)).save(
                os.path.join(images, '%d.jpg' % i))
            f.write('%d.jpg 0:1 %d:0.8 3:-1%s\n' % (i, 1 + i % 2, '' if i else ' 5:0'))
    return path, images


def write_mixed_shards(root, class_num):
    """Three training shards under root/data/train: 9 images (8 JPEG, 1 PNG turned JPEG by
    the builder) dealt into two, and one PNG record stored as is (the fallback decode)."""
    list_path, images = write_images_and_list(root, count=8)
    extra = os.path.join(images, 'p.png')
    Image.fromarray(smooth_pixels(30, 30)).save(extra)
    with open(list_path, 'a') as f:
        f.write('p.png 2:1\n')
    build_records([list_path], images, os.path.join(root, 'data'),
                  class_num=class_num, workers=1, progress=False, num_shards=2)
    directory = os.path.join(root, 'data', 'train')
    # A PNG stored as is (the builder would convert it to JPEG): the fallback path.
    example = records.make_example(encode_pixels(smooth_pixels(20, 30), 'PNG'),
                                          np.eye(class_num)[0], 30, 20, 'raw.png')
    with tf.io.TFRecordWriter(os.path.join(directory, '2.tfrecords')) as writer:
        writer.write(example.SerializeToString())
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith('.tfrecords'))


# Records for the checker tests: CHECK_CLASSES classes, noise images.
CHECK_CLASSES = 7


def encode_noise(width, height, fmt='JPEG', mode='RGB', seed=0):
    rng = np.random.RandomState(seed)
    pixels = (rng.rand(height, width, 3) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buf, fmt)
    return buf.getvalue()


JPEG = encode_noise(12, 9)
ODD_BUT_FINE = {  # name -> (encoded, width, height): all decode to 3 channels
    'one_pixel': (encode_noise(1, 1), 1, 1),
    'gray': (encode_noise(10, 6, mode='L'), 10, 6),
    'cmyk': (encode_noise(8, 5, mode='CMYK'), 8, 5),
    'png_rgba': (encode_noise(7, 11, fmt='PNG', mode='RGBA'), 7, 11),
}


def label_vector(values=(), class_num=CHECK_CLASSES):
    label = np.zeros(class_num, np.float32)
    for index, value in values:
        label[index] = value
    return label


def record(image=JPEG, label=None, width=12, height=9, name='img.jpg', drop=()):
    """A serialized record made with records.make_example, minus `drop`."""
    example = records.make_example(
        image, label_vector() if label is None else label, width, height, name)
    for key in drop:
        del example.features.feature[key]
    return example.SerializeToString()


def raw_label_record(label_bytes):
    example = tf.train.Example.FromString(record())
    example.features.feature['label'].bytes_list.value[0] = label_bytes
    return example.SerializeToString()


def write_shard(path, records):
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for serialized in records:
            writer.write(serialized)
    return path


def model_parts(values, data_format='channels_last'):
    """model_fn.Parts of Settings, --data_format resolved to data_format."""
    from mlimages.run import model_fn
    return model_fn.parts(values, data_format)


def laid_out(values, data_format='channels_last'):
    """Settings as estimator.for_this_process leaves them in a process without GPUs: the
    model group's data_format resolved to data_format, the data group's augment_on."""
    from mlimages.data import input_pipeline
    return values.replace(
        model=values.model.replace(data_format=data_format),
        data=values.data.replace(augment_on=input_pipeline.resolve_augment_on(
            values.data.augment_on, has_gpu=False)))


def settings(**given):
    """train.py's Settings with every flag at its default but the given (by flag name)."""
    return flags_lib.replace(flags_lib.default_settings(), **given)


# ------------------------------------------------------------- a split of labels and scores

NO_POSITIVE = (0, 1, 2)  # classes given no positive in make_split
THRES = np.float32(0.7)  # mask_thres as the float32 labels meet it


def make_split(seed, scores='uniform', images=300, classes=40):
    """Labels with hard and soft positives (1, 0.9, exactly 0.7), soft negatives (0.3, 0.69),
    zeros and -1 entries; per-class prevalence from 1 % to 40 %; classes NO_POSITIVE have
    none. scores: 'uniform', 'correlated' (higher for positives) or 'sigmoid' (sigmoids of
    Gaussian logits, mostly near 0, as a trained multi-label net gives)."""
    rng = np.random.default_rng(seed)
    prevalence = rng.uniform(0.01, 0.4, size=classes)
    prevalence[list(NO_POSITIVE)] = 0.0
    positive = rng.random((images, classes)) < prevalence
    y = np.where(positive, rng.choice([1.0, 0.9, 0.7], size=(images, classes)),
                 rng.choice([0.0, 0.0, 0.0, 0.3, 0.69], size=(images, classes)))
    y[rng.random((images, classes)) < 0.1] = -1.0
    if scores == 'uniform':
        s = rng.random((images, classes))
    elif scores == 'correlated':
        s = np.clip(0.6 * rng.random((images, classes)) + 0.4 * positive * rng.random(
            (images, classes)), 0.0, 1.0)
    else:
        logits = np.where(positive, rng.normal(-3.0, 2.5, y.shape), rng.normal(-7.0, 2.0, y.shape))
        s = 1.0 / (1.0 + np.exp(-logits))
    return y.astype(np.float32), s.astype(np.float32)


# ------------------------------------------------------------- session.run calls a step

class RunCounter(tf.train.SessionRunHook):
    """Counts the tf.Session.run calls of the process (every run goes through the wrap of
    BaseSession.run) and notes the count at each step's before_run: per_step() is what ran
    from one step's start to the next's, the hooks' own runs included."""

    def __init__(self):
        self.calls, self.marks = 0, []

    def wrap(self, run):
        def counted(session, *args, **kwargs):
            self.calls += 1
            return run(session, *args, **kwargs)
        return counted

    def before_run(self, run_context):
        self.marks.append(self.calls)

    def per_step(self):
        return [b - a for a, b in zip(self.marks, self.marks[1:])]
