"""Issue 5: crop-window decoding, on-device batched augmentation, sparse labels, synthetic
data, --dtype / --xla, tools/benchmark.py. No timings here: speed is tools/benchmark.py's."""
import io
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import image_preprocess as ip
import input_pipeline
import model_fn
import records as records_lib
import train
from tools import make_tfrecords

tf.disable_v2_behavior()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = 7


def encode(pixels, fmt='JPEG', mode=None, **kw):
    buf = io.BytesIO()
    Image.fromarray(pixels, mode).save(buf, fmt, **kw)
    return buf.getvalue()


def smooth_pixels(height, width, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255.0 / width, y * 255.0 / height, (x + y) * 127.0 / (width + height)],
                    -1)
    return np.clip(base + rng.normal(0, 3, base.shape), 0, 255).astype(np.uint8)


def run(fetches, feed=None, seed=None):
    with tf.Session() as sess:
        return sess.run(fetches, feed)


# ------------------------------------------------------------------ decoding the window

def test_jpeg_window_decode_matches_full_decode_sliced():
    data = encode(smooth_pixels(60, 80), quality=95)
    with tf.Graph().as_default():
        window = lambda shape: (tf.constant([16, 24, 0]), tf.constant([24, 32, -1]))
        cropped = ip.decode_window(tf.constant(data), window)
        full = tf.image.decode_jpeg(data, channels=3)[16:40, 24:56]
        got, want = run([cropped, full])
    assert got.shape == (24, 32, 3) and got.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 2  # chroma at the edges


@pytest.mark.parametrize('fmt,mode', [('PNG', 'RGB'), ('PNG', 'RGBA'), ('GIF', 'P'),
                                      ('BMP', 'RGB'), ('JPEG', 'L'), ('JPEG', 'CMYK')])
def test_other_formats_and_modes_fall_back_and_give_rgb(fmt, mode):
    pixels = smooth_pixels(30, 40)
    image = Image.fromarray(pixels).convert(mode)
    buf = io.BytesIO()
    image.save(buf, fmt)
    with tf.Graph().as_default():
        encoded = tf.constant(buf.getvalue())
        train_image = ip.decode_crop_resize(encoded, 16, True)
        small_crop = ip.decode_crop_resize(encoded, 16, True, 0.0, 0.05)  # window decode
        eval_image = ip.decode_crop_resize(encoded, 16, False)
        got = run([train_image, small_crop, eval_image])
    for image in got:
        assert image.shape == (16, 16, 3)
        assert 0.0 <= image.min() and image.max() <= 255.0


def test_eval_window_is_tf1_central_crop_and_matches_the_float_path():
    data = encode(smooth_pixels(50, 70), quality=95)
    with tf.Graph().as_default():
        new = ip.preprocess_encoded(tf.constant(data), 32, is_training=False)
        old = ip.preprocess_image(ip.decode_image(tf.constant(data)), 32, is_training=False)
        begin, size = ip.central_window(tf.constant([50, 70, 3]))
        decoded = tf.placeholder_with_default(np.zeros((50, 70, 1), np.float32),
                                              [None, None, 1])
        want_shape = tf.shape(tf.image.central_crop(decoded, 0.8))
        got_new, got_old, b, s, want = run([new, old, begin, size, want_shape])
    # TF 1.x's window (double fraction: 5), not TF 2's central_crop on a decoded image (4)
    assert b.tolist() == [5, 7, 0] and s.tolist() == [40, 56, -1]
    assert want.tolist() == [42, 58, 1]
    # the window decode differs from the full one by a level or two at the window edges
    np.testing.assert_allclose(got_new, got_old, atol=0.01)
    assert np.abs(got_new - got_old).mean() < 1e-3


def test_training_crop_window_distribution():
    """The window is drawn from the shape alone with the original's (docs/original.md, Augmentation) bounds."""
    with tf.Graph().as_default():
        begin, size = ip.crop_window(tf.constant([375, 500, 3]), 0.7, 0.7)
        with tf.Session() as sess:
            draws = [sess.run([begin, size]) for _ in range(200)]
    areas = [s[0] * s[1] / (375.0 * 500) for _, s in draws]
    aspects = [s[1] / float(s[0]) for _, s in draws]
    assert min(areas) >= 0.69 and max(areas) <= 1.0
    assert min(aspects) >= 0.74 and max(aspects) <= 1.34
    for b, s in draws:
        assert b[0] + s[0] <= 375 and b[1] + s[1] <= 500 and b[2] == 0 and s[2] == -1
    assert len({tuple(b) + tuple(s) for b, s in draws}) > 100


# --------------------------------------------------------------- batched augmentation

def test_batched_colour_ops_equal_tensorflows_per_image_ops():
    rng = np.random.default_rng(3)
    images = rng.random((3, 9, 11, 3)).astype(np.float32)
    saturation, hue, contrast = [1.4, 0.6, 1.0], [0.15, -0.2, 0.0], [0.5, 1.5, 1.2]
    with tf.Graph().as_default():
        got = [ip.adjust_saturation_hue_batch(images, saturation, hue),
               ip.adjust_contrast_batch(images, contrast)]
        want = [tf.stack([tf.image.adjust_hue(tf.image.adjust_saturation(images[i],
                                                                         saturation[i]),
                                              hue[i]) for i in range(3)]),
                tf.stack([tf.image.adjust_contrast(images[i], contrast[i])
                          for i in range(3)])]
        got, want = run([got, want])
    np.testing.assert_allclose(got[0], want[0], atol=2e-5)
    np.testing.assert_allclose(got[1], want[1], atol=2e-5)


@pytest.mark.parametrize('height,width,dtype', [(16, 24, np.float32), (31, 20, np.uint8),
                                                (224, 224, np.float32)])
def test_rotation_gathers_the_projective_transform_kernels_pixels(height, width, dtype):
    rng = np.random.default_rng(height)
    images = rng.integers(1, 255, (40, height, width, 3)).astype(dtype)
    angles = rng.uniform(-ip.MAX_ROTATION, ip.MAX_ROTATION, 40).astype(np.float32)
    angles[:3] = [0.0, math.pi / 4, -math.pi / 4]
    with tf.Graph().as_default():
        got, want = run([ip.rotate_images(tf.constant(images), tf.constant(angles)),
                         ip.contrib_rotate_images(tf.constant(images),
                                                  tf.constant(angles))])
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[0], images[0])  # angle 0: the image as it is
    assert (got == 0).all(-1).sum() > (images == 0).all(-1).sum()  # black corners


def test_augment_batch_draws_spec_distribution_per_image():
    """300 copies of one image: about half flipped; a third untouched (thread_id 2), a
    third rotated (black corners: thread_id 0), a third only recoloured (thread_id 1)."""
    n = 300
    image = smooth_pixels(20, 20).astype(np.float32) / 255.0 * 0.8 + 0.1
    with tf.Graph().as_default():
        tf.set_random_seed(5)
        out = ip.augment_batch(tf.constant(np.repeat(image[None], n, 0)))
        got = run(out)
    assert got.shape == (n, 20, 20, 3) and got.min() >= 0.0 and got.max() <= 1.0
    same = np.array([np.allclose(g, image, atol=1e-6) for g in got])
    mirrored = np.array([np.allclose(g, image[:, ::-1], atol=1e-6) for g in got])
    untouched = same | mirrored
    # Rotated: four identical corners (black fill, then the same colour ops).
    corners = lambda g: np.stack([g[0, 0], g[0, -1], g[-1, 0], g[-1, -1]])
    rotated = np.array([np.ptp(corners(g), axis=0).max() < 1e-6 for g in got])
    coloured = ~untouched & ~rotated
    # (a rotation by less than ~4 degrees fills no corner of a 20-pixel image)
    for share in (untouched.mean(), rotated.mean(), coloured.mean()):
        assert 0.22 < share < 0.45, (untouched.mean(), rotated.mean(), coloured.mean())
    flipped = [np.abs(g - image[:, ::-1]).mean() < np.abs(g - image).mean()
               for g in got[untouched]]
    assert 0.3 < np.mean(flipped) < 0.7


def test_network_input_finishes_uint8_batches_and_passes_float_ones():
    images = np.random.default_rng(6).integers(0, 256, (4, 8, 8, 3)).astype(np.uint8)
    with tf.Graph().as_default():
        evaluated = ip.network_input(tf.constant(images), training=False)
        trained = ip.network_input(tf.constant(images), training=True)
        assert trained.shape.as_list() == [4, 8, 8, 3]  # static, as the model wants
        floats = tf.constant(np.zeros((2, 8, 8, 3), np.float32))
        assert ip.network_input(floats, True) is floats
        evaluated, trained = run([evaluated, trained])
    np.testing.assert_allclose(evaluated, images / 255.0 * 2 - 1, atol=1e-6)
    assert trained.dtype == np.float32 and -1 <= trained.min() and trained.max() <= 1


# ------------------------------------------------------------------------ sparse labels

def sparse_and_dense_records(label):
    data = encode(smooth_pixels(30, 40))
    return (make_tfrecords.make_example(data, label, 40, 30, 'a.jpg').SerializeToString(),
            make_tfrecords.make_example(data, label, 40, 30, 'a.jpg',
                                        label_layout='sparse').SerializeToString())


def parse_labels(records, class_num=CLASSES):
    with tf.Graph().as_default():
        value = tf.placeholder(tf.string, [])
        _, label = records_lib.parse_record(value, False, 16, class_num)
        with tf.Session() as sess:
            out = []
            for record in records:
                try:
                    out.append(sess.run(label, {value: record}))
                except tf.errors.InvalidArgumentError as e:
                    out.append(e.message)
            return out


def test_sparse_and_dense_layouts_give_the_same_label():
    label = np.array([0, 1, 0, 0.7, -1, 0, 0.25], np.float32)
    dense, sparse = sparse_and_dense_records(label)
    example = tf.train.Example.FromString(sparse).features.feature
    assert 'label' not in example
    assert list(example['label/index'].int64_list.value) == [1, 3, 4, 6]
    assert len(sparse) < len(dense) + 40
    got_dense, got_sparse = parse_labels([dense, sparse])
    np.testing.assert_array_equal(got_dense, label)
    np.testing.assert_array_equal(got_sparse, label)


def test_sparse_label_errors_and_the_unlabelled_image():
    data = encode(smooth_pixels(30, 40))
    unlabelled = make_tfrecords.make_sparse_example(data, [], [], 40, 30, 'u').SerializeToString()
    out_of_range = make_tfrecords.make_sparse_example(data, [CLASSES], [1.0], 40, 30, 'x')
    no_label = tf.train.Example.FromString(unlabelled)
    del no_label.features.feature['label/index']
    del no_label.features.feature['label/value']
    short = make_tfrecords.make_example(data, np.ones(CLASSES - 1), 40, 30, 's')
    both = tf.train.Example.FromString(
        make_tfrecords.make_example(data, np.eye(CLASSES)[1], 40, 30, 'b').SerializeToString())
    both.MergeFrom(make_tfrecords.make_sparse_example(data, [2], [1.0], 40, 30, 'b'))
    got = parse_labels([unlabelled, out_of_range.SerializeToString(),
                        no_label.SerializeToString(), short.SerializeToString(),
                        both.SerializeToString()])
    np.testing.assert_array_equal(got[0], np.zeros(CLASSES))
    assert 'outside [0, --class_num=%d)' % CLASSES in got[1]
    assert 'has no label' in got[2]
    assert 'label length differs from --class_num=%d' % CLASSES in got[3]
    np.testing.assert_array_equal(got[4], np.eye(CLASSES)[1])  # the dense layout wins


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


def test_make_tfrecords_sparse_flag_and_mixed_layouts_train_side_by_side(tmp_path):
    list_path, images = write_images_and_list(str(tmp_path))
    data = str(tmp_path / 'data')
    assert make_tfrecords.main(['--out_dir', data, '--image_root', images, '--class_num',
                                str(CLASSES), '--label_layout', 'sparse', '--quiet',
                                '--workers', '1', list_path]) == 0
    make_tfrecords.build_records([list_path], images, data, class_num=CLASSES, workers=1,
                                 progress=False, start_index=1)
    files = [os.path.join(data, 'train', '%d.tfrecords' % k) for k in (0, 1)]
    first = tf.train.Example.FromString(next(tf.io.tf_record_iterator(files[0])))
    assert 'label/index' in first.features.feature and 'label' not in first.features.feature
    assert records_lib.first_label_length(files[1]) == CLASSES
    assert records_lib.first_label_length(files[0]) is None  # sparse: checked per record
    with tf.Graph().as_default():
        dataset = input_pipeline.input_fn(False, None, 12, CLASSES, 16, files=files)
        images_out, labels = run(tf.data.make_one_shot_iterator(dataset).get_next())
    assert images_out.shape == (12, 16, 16, 3)
    np.testing.assert_array_equal(labels[:6], labels[6:])  # same lists, two layouts
    np.testing.assert_array_equal(labels[0], np.float32([1, 0.8, 0, -1, 0, 0, 0]))


# --------------------------------------------------------------------- input pipelines

@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('perf'))
    list_path, images = write_images_and_list(root, count=8)
    extra = os.path.join(images, 'p.png')
    Image.fromarray(smooth_pixels(30, 30)).save(extra)
    with open(list_path, 'a') as f:
        f.write('p.png 2:1\n')
    make_tfrecords.build_records([list_path], images, os.path.join(root, 'data'),
                                 class_num=CLASSES, workers=1, progress=False, num_shards=2)
    directory = os.path.join(root, 'data', 'train')
    # A PNG stored as is (the builder would convert it to JPEG): the fallback path.
    example = make_tfrecords.make_example(encode(smooth_pixels(20, 30), 'PNG'),
                                          np.eye(CLASSES)[0], 30, 20, 'raw.png')
    with tf.io.TFRecordWriter(os.path.join(directory, '2.tfrecords')) as writer:
        writer.write(example.SerializeToString())
    return sorted(os.path.join(directory, n) for n in os.listdir(directory))


@pytest.mark.parametrize('augment_on', ['cpu', 'device'])
def test_training_input_fn_in_both_modes(shards, augment_on):
    with tf.Graph().as_default():
        dataset = input_pipeline.input_fn(True, None, 4, CLASSES, 24, files=shards, shuffle_buffer=8,
                                 augment_on=augment_on, private_threads=2)
        images, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        assert images.shape.as_list() == [4, 24, 24, 3]
        assert images.dtype == (tf.uint8 if augment_on == 'device' else tf.float32)
        finished = ip.network_input(images, training=True)
        with tf.Session() as sess:
            batches = [sess.run([finished, labels]) for _ in range(6)]  # > one epoch
    for image, label in batches:
        assert -1.0 <= image.min() and image.max() <= 1.0
        assert label.shape == (4, CLASSES)


def test_cpu_pipeline_augments_every_training_batch(tmp_path):
    """input_fn(augment_on='cpu') augments every training image in the pipeline: with a
    crop that must be the whole image, an image comes out as it is (no flip, thread_id 2),
    flipped only, or otherwise changed (rotation, colour) -- all three within 64 draws."""
    pixels = smooth_pixels(32, 32, seed=3)
    path = str(tmp_path / 'one.tfrecords')
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(make_tfrecords.make_example(encode(pixels, 'PNG'), np.eye(CLASSES)[1],
                                                 32, 32, 'one.png').SerializeToString())
    with tf.Graph().as_default():
        dataset = input_pipeline.input_fn(True, None, 8, CLASSES, 32, files=[path], shuffle_buffer=1,
                                 object_cover=1.0, area_cover=1.0, augment_on='cpu')
        images, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        assert images.dtype == tf.float32 and images.shape.as_list() == [8, 32, 32, 3]
        with tf.Session() as sess:
            batches = [sess.run([images, labels]) for _ in range(8)]
    base = pixels / 255.0 * 2.0 - 1.0
    kinds = []
    for batch, label in batches:
        assert np.all(label == np.eye(CLASSES)[1])
        for image in batch:
            assert -1.0 <= image.min() and image.max() <= 1.0
            kinds.append('same' if np.allclose(image, base, atol=1e-5) else
                         'flipped' if np.allclose(image, base[:, ::-1], atol=1e-5) else
                         'changed')
    assert {'same', 'flipped', 'changed'} == set(kinds), kinds


def test_skip_bad_records_in_device_mode(shards, tmp_path):
    bad = str(tmp_path / 'bad.tfrecords')
    with tf.io.TFRecordWriter(bad) as writer:
        writer.write(make_tfrecords.make_example(b'\xff\xd8\xff\xe0 no jpeg', np.ones(CLASSES),
                                                 1, 1, 'bad').SerializeToString())
    with tf.Graph().as_default():
        dataset = input_pipeline.input_fn(True, None, 4, CLASSES, 24, files=shards + [bad],
                                 shuffle_buffer=16, skip_bad_records=True,
                                 augment_on='device')
        features, _ = tf.data.make_one_shot_iterator(dataset).get_next()
        assert features['image'].dtype == tf.uint8
        with tf.Session() as sess:
            skipped = [sess.run(features['skipped_records']).max() for _ in range(8)]
    assert max(skipped) >= 1


def test_synthetic_data_reads_no_file_and_the_model_draws_a_new_batch_each_step():
    with tf.Graph().as_default():
        dataset = input_pipeline.input_fn(True, '/does/not/exist', 3, CLASSES, 16,
                                 use_synthetic_data=True)
        features, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        # only the shape crosses from the pipeline: no pixel, no label
        assert features[input_pipeline.SYNTHETIC].shape.as_list() == [3, 16, 16, 0]
        assert labels.shape.as_list() == [3, 0]
        images, labels = input_pipeline.synthetic_batch(features[input_pipeline.SYNTHETIC], CLASSES)
        assert images.shape.as_list() == [3, 16, 16, 3]
        with tf.Session() as sess:
            first, second = [sess.run([images, labels]) for _ in range(2)]
    assert first[0].shape == (3, 16, 16, 3) and first[1].shape == (3, CLASSES)
    assert -1.0 <= first[0].min() and first[0].max() <= 1.0
    assert set(np.unique(first[1])) <= {0.0, 1.0}
    assert not np.array_equal(first[0], second[0])


# ------------------------------------------------------------------ dtype, XLA, flags

def model_params(resnet_size, dtype):
    return {'resnet_size': resnet_size, 'class_num': CLASSES, 'data_format': 'channels_last',
            'batch_norm_decay': 0.9, 'batch_norm_epsilon': 1e-5, 'mask_thres': 0.7,
            'neg_select': 0.3, 'random_seed': 1, 'weight_decay': 1e-4, 'lr': 0.01,
            'lr_decay_step': 0, 'lr_decay_factor': 0.1, 'warmup': 0, 'lr_warmup': 0.1,
            'lr_warmup_decay_step': 0, 'lr_warmup_decay_factor': 1.4, 'opt_momentum': 0.9,
            'batch_size': 2, 'log_interval': 1, 'max_steps': None, 'dtype': dtype}


@pytest.mark.parametrize('resnet_size,dtype,augment_on', [
    (18, 'fp32', 'device'), (18, 'fp16', 'cpu'), (18, 'bf16', 'cpu'),
    pytest.param(50, 'fp32', 'cpu', marks=pytest.mark.slow)])
def test_dtype_graphs_build_and_train_two_steps_on_cpu(shards, resnet_size, dtype,
                                                      augment_on):
    try:
        dtype_graph_trains(shards, resnet_size, dtype, augment_on)
    finally:
        if dtype == 'fp16':  # the rewrite is switched on process-wide
            tf.mixed_precision.disable_mixed_precision_graph_rewrite()


def dtype_graph_trains(shards, resnet_size, dtype, augment_on):
    with tf.Graph().as_default():
        dataset = input_pipeline.input_fn(True, None, 2, CLASSES, 32, files=shards, shuffle_buffer=8,
                                 augment_on=augment_on)
        features, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        spec = model_fn.resnet_model_fn(features, labels, tf.estimator.ModeKeys.TRAIN,
                                     model_params(resnet_size, dtype))
        variables = tf.global_variables()
        assert all(v.dtype.base_dtype in (tf.float32, tf.int64) for v in variables)
        names = {v.op.name for v in variables}
        assert ('current_loss_scale' in names) == (dtype == 'fp16')  # dynamic loss scaling
        assert spec.predictions['scores'].dtype == tf.float32
        step = tf.train.get_global_step()
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            before = sess.run('logits/dense/kernel:0')
            losses = [sess.run([spec.train_op, spec.loss])[1] for _ in range(2)]
            assert sess.run(step) == 2
            assert np.all(np.isfinite(losses))
            assert np.any(sess.run('logits/dense/kernel:0') != before)


@pytest.mark.slow
def test_xla_and_synthetic_data_flags_train_with_train_py(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='',
               TF_XLA_FLAGS='--tf_xla_cpu_global_jit')
    model_dir = str(tmp_path / 'model')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'train.py'), '--use_synthetic_data', '--xla',
         '--data_dir=' + str(tmp_path / 'nowhere'), '--model_dir=' + model_dir,
         '--log_dir=' + str(tmp_path / 'log'), '--class_num=%d' % CLASSES,
         '--resnet_size=18', '--image_size=32', '--batch_size=2', '--max_iter=2',
         '--log_interval=1', '--augment_on=device'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'XLA on' in result.stderr and 'synthetic data' in result.stderr
    assert 'step 2: cross_entropy' in result.stderr
    assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-2')


class Flags(dict):
    __getattr__ = dict.__getitem__


@pytest.mark.parametrize('name,value', [('augment_on', 'gpu'), ('dtype', 'fp64'),
                                        ('private_threads', -1)])
def test_bad_performance_flags_are_usage_errors(name, value):
    flags = Flags(augment_on='auto', dtype='fp32', private_threads=0)
    train.check_performance_flags(**flags)
    flags[name] = value
    with pytest.raises(train.UsageError, match='--' + name):
        train.check_performance_flags(**flags)


def test_augment_on_auto_follows_the_gpu():
    assert input_pipeline.resolve_augment_on('auto', True) == 'device'
    assert input_pipeline.resolve_augment_on('auto', False) == 'cpu'
    assert input_pipeline.resolve_augment_on('cpu', True) == 'cpu'


# ---------------------------------------------------------------------------- benchmark

def test_benchmark_images_are_photograph_sized_jpegs():
    from tools import benchmark
    pixels = benchmark.photo_like(np.random.default_rng(0))
    assert pixels.shape == (375, 500, 3) and pixels.dtype == np.uint8
    size = len(encode(pixels, quality=90))
    assert 50000 < size < 200000  # ImageNet-like bits per pixel, not noise, not flat
    tokens = benchmark.soft_labels(np.random.default_rng(1), 11166)
    assert 1 <= len(tokens) <= 9 and all(':' in t for t in tokens)


@pytest.mark.slow
def test_benchmark_runs_end_to_end_and_prints_the_table(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'benchmark.py'), '--shard_dir',
         str(tmp_path / 'shards'), '--num_images', '8', '--class_num', '50',
         '--batch_size', '4', '--image_size', '32', '--shuffle_buffer', '8',
         '--seconds', '0.2', '--repeats', '1', '--warmup_batches', '1',
         '--resnet_size', '18', '--step_image_size', '32', '--step_batch_size', '2',
         '--step_seconds', '0.2', '--step_repeats', '1', '--step_warmup', '1'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ('input_fn(cpu)', 'input_fn(device)', 'spec_literal', 'floor', 'synthetic',
                 'usable cores', 'cores busy'):
        assert name in result.stdout, (name, result.stdout)
    assert len(os.listdir(str(tmp_path / 'shards' / 'train'))) == 4


def test_checker_reads_the_sparse_layout():
    from tools import record_checks as rc
    data = encode(smooth_pixels(30, 40))
    good = make_tfrecords.make_sparse_example(data, [2, 5], [1.0, 0.7], 40, 30, 'a')
    result = rc.check_record(good.SerializeToString(), CLASSES)
    assert result.ok and result.positives == 2, result
    np.testing.assert_array_equal(result.label, np.float32([0, 0, 1, 0, 0, 0.7, 0]))
    bad = make_tfrecords.make_sparse_example(data, [CLASSES], [1.0], 40, 30, 'b')
    result = rc.check_record(bad.SerializeToString(), CLASSES)
    assert not result.ok and 'outside [0, class_num=7)' in result.reasons[0]
