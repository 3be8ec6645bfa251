"""The measured pipelines of tools/benchmark.py and mlimages/bench/photos.py and their data:
photograph-like JPEG shards, the pipeline variants (input_fn in both modes, the original's
to the letter, the decode+resize floor), a Measured variant's turns, and the run loop that
takes every variant in turn (rotating the order) so that a machine's load changes all of
them alike.
"""
import glob
import os
import sys
import tempfile
import time

import numpy as np

from mlimages.cli import lazy_tensorflow, worker_processes

PROG = 'benchmark.py'
PIPELINES = ('input_fn(cpu)', 'input_fn(device)', 'spec_literal', 'floor')
SHARD_DIR_PREFIX = os.path.join(tempfile.gettempdir(), 'ml_images_benchmark_shards')

# ------------------------------------------------------------------------------ shards

def photo_like(rng, height=375, width=500):
    """A uint8 [H, W, 3] image with a photograph's statistics: a 1/f amplitude spectrum
    (colour-correlated), a few hard-edged objects, sensor grain. At JPEG quality 90 a
    500x375 one takes about 100 KB (4.3 bits a pixel), like ImageNet's photographs."""
    from PIL import Image, ImageDraw
    fy = np.fft.fftfreq(height).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(width).astype(np.float32)[None, :]
    freq = np.sqrt(fx ** 2 + fy ** 2)
    freq[0, 0] = 1.0 / max(height, width)
    amplitude = freq ** np.float32(-rng.uniform(1.0, 1.25))
    phase = rng.uniform(0, 2 * np.pi, (3,) + amplitude.shape).astype(np.float32)
    fields = np.fft.irfft2(amplitude[None] * np.exp(1j * phase), s=(height, width))
    fields = (fields / fields.std(axis=(1, 2), keepdims=True)).astype(np.float32)
    # luminance, red-green, blue-yellow
    mix = np.array([[1, 1, 1], [0.5, 0, -0.5], [0.25, -0.5, 0.25]], np.float32)
    mix[1:] *= rng.uniform(0.3, 0.8, (2, 1)).astype(np.float32)
    image = np.tensordot(fields, mix, axes=([0], [0])) * np.float32(rng.uniform(40, 60))
    image += np.float32(120) + rng.uniform(-25, 25, 3).astype(np.float32)
    canvas = Image.new('L', (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    for k in range(int(rng.integers(2, 6))):
        x, y, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(20, 120)
        angles = np.sort(rng.uniform(0, 2 * np.pi, 7))
        draw.polygon([(x + r * rng.uniform(0.5, 1) * np.cos(a),
                       y + r * rng.uniform(0.5, 1) * np.sin(a)) for a in angles],
                     fill=k + 1)
    objects = np.asarray(canvas)
    for k in range(1, int(objects.max()) + 1):
        inside = objects == k
        colour = rng.uniform(20, 235, 3).astype(np.float32)
        image[inside] = image[inside] * np.float32(0.5) + colour * np.float32(0.5)
    image += rng.standard_normal((height, width, 1), dtype=np.float32) * np.float32(
        rng.uniform(2, 4))
    return np.clip(image, 0, 255).astype(np.uint8)


def soft_labels(rng, class_num):
    """'<class>:<confidence>' tokens: 1-8 positives with soft confidences, now and then a
    class to ignore (-1), as in the ML-Images lists."""
    count = int(rng.integers(1, 9))
    classes = rng.choice(class_num, count + 1, replace=False)
    tokens = ['%d:%s' % (c, rng.choice(['1', '1', '0.9', '0.8', '0.7', '0.6']))
              for c in classes[:count]]
    if rng.random() < 0.2:
        tokens.append('%d:-1' % classes[count])
    return tokens


def make_shards(shard_dir, num_images=384, num_shards=4, class_num=11166, quality=90,
                label_layout='dense', seed=0, sizes=((500, 375),)):
    """Writes <shard_dir>/train/N.tfrecords through tools/make_tfrecords.py (JPEG files
    of photo_like images, cycling through the (width, height) `sizes`, and image lists
    first); reuses shards that exist. Returns the shard paths."""
    from PIL import Image
    from mlimages.recordkit import make_tfrecords
    split_dir = os.path.join(shard_dir, 'train')
    existing = sorted(glob.glob(os.path.join(split_dir, '*.tfrecords')))
    if len(existing) == num_shards:
        return existing
    rng = np.random.default_rng(seed)
    image_dir = os.path.join(shard_dir, 'images')
    os.makedirs(image_dir, exist_ok=True)
    lists = [os.path.join(shard_dir, 'list_%d.txt' % k) for k in range(num_shards)]
    handles = [open(path, 'w') for path in lists]
    start = time.monotonic()
    for i in range(num_images):
        name = '%05d.jpg' % i
        width, height = sizes[i % len(sizes)]
        Image.fromarray(photo_like(rng, height, width)).save(os.path.join(image_dir, name),
                                                             quality=quality)
        handles[i % num_shards].write('%s\t%s\n' % (name, '\t'.join(
            soft_labels(rng, class_num))))
        sys.stderr.write('\r%s: %d/%d benchmark images' % (PROG, i + 1, num_images))
    for handle in handles:
        handle.close()
    make_tfrecords.build_records(make_tfrecords.Inputs(lists, image_dir),
                                 make_tfrecords.Records(class_num, label_layout),
                                 make_tfrecords.Output(shard_dir, 'train'),
                                 make_tfrecords.Work(progress=False))
    sys.stderr.write('\r%s: %d benchmark images in %d shards in %s (%.0f s)\n' % (
        PROG, num_images, num_shards, split_dir, time.monotonic() - start))
    return sorted(glob.glob(os.path.join(split_dir, '*.tfrecords')))


# --------------------------------------------------------------------------- pipelines

def floor_dataset(files, batch_size, image_size):
    """parse + decode_jpeg + resize, nothing else: the speed limit of full decoding."""
    tf = lazy_tensorflow.tensorflow()
    from mlimages.data import records

    def decode(value):
        encoded = records.parse_fields(value, ['image'])['image']
        image = tf.image.decode_jpeg(encoded, channels=3)
        return tf.image.resize(image, [image_size, image_size])

    dataset = tf.data.TFRecordDataset(files).repeat()
    dataset = dataset.map(decode, num_parallel_calls=tf.data.experimental.AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(
        tf.data.experimental.AUTOTUNE)


def spec_literal_dataset(files, batch_size, image_size, class_num, shuffle_buffer):
    """The original's input_fn and image_preprocessing.py to the letter (docs/original.md,
    Input pipeline and Augmentation)."""
    tf = lazy_tensorflow.tensorflow()
    from mlimages.data import records

    def parse(value):
        parsed = records.parse_fields(value, ['image', 'label'])
        image = tf.image.decode_image(parsed['image'], channels=3, expand_animations=False)
        image = tf.image.convert_image_dtype(image, tf.float32)
        image = distort_image(image, image_size, image_size, 0.7, 0.7)
        image = (image - 0.5) * 2.0
        label = tf.reshape(tf.io.decode_raw(parsed['label'], tf.float32), [class_num])
        return image, label

    dataset = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files))
    dataset = dataset.flat_map(tf.data.TFRecordDataset)
    dataset = dataset.map(parse, num_parallel_calls=5)
    dataset = dataset.shuffle(shuffle_buffer).repeat()
    dataset = dataset.prefetch(batch_size)
    return dataset.batch(batch_size)


def pipeline_dataset(name, files, args):
    """The dataset of one named pipeline; args: tools/benchmark.py's, with `defaults`
    (flags.default_settings(), the trainer's settings input_fn starts from)."""
    lazy_tensorflow.tensorflow()  # graph mode before input_pipeline builds anything
    import flags
    from mlimages.data import input_pipeline
    if name == 'floor':
        return floor_dataset(files, args.batch_size, args.image_size)
    if name == 'spec_literal':
        return spec_literal_dataset(files, args.batch_size, args.image_size,
                                    args.class_num, args.shuffle_buffer)
    augment_on = name[len('input_fn('):-1]
    settings = flags.replace(
        args.defaults, batch_size=args.batch_size, class_num=args.class_num,
        image_size=args.image_size, shuffle_buffer=args.shuffle_buffer,
        num_preprocess_threads=args.num_preprocess_threads,
        private_threads=args.private_threads, augment_on=augment_on)
    return input_pipeline.input_fn(settings.data, settings.model, True, files)


class Measured(object):
    """A graph whose `fetch` is timed in turns, each in a fresh session."""

    def __init__(self, name, graph, fetch, init, images_per_run, config=None):
        self.name, self.graph, self.fetch, self.init = name, graph, fetch, init
        self.images_per_run = images_per_run
        self.config = config
        self.rates, self.cores, self.cpu_ms = [], [], []

    def turn(self, warmup_runs, seconds, min_runs):
        tf = lazy_tensorflow.tensorflow()
        with tf.Session(graph=self.graph, config=self.config) as session:
            session.run(self.init)
            for _ in range(warmup_runs):
                session.run(self.fetch)
            runs = 0
            wall, cpu = time.monotonic(), time.process_time()
            while runs < min_runs or time.monotonic() - wall < seconds:
                session.run(self.fetch)
                runs += 1
            wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        self.rates.append(runs * self.images_per_run / wall)
        self.cores.append(cpu / wall)
        self.cpu_ms.append(cpu * 1e3 / (runs * self.images_per_run))
        return self.rates[-1]


def build_pipeline(name, files, args):
    tf = lazy_tensorflow.tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        iterator = tf.data.make_initializable_iterator(pipeline_dataset(name, files, args))
        batch = tf.nest.flatten(iterator.get_next())
        # Fetch something small: the batch itself would be copied into numpy.
        fetch = [tf.reduce_sum(tf.cast(t[:, 0], tf.float32)) for t in batch]
    return Measured(name, graph, fetch, iterator.initializer, args.batch_size)


# ---------------------------------------------------------------------------- measures

def run_turns(measured, repeats, warmup_runs, seconds, min_runs, label):
    for turn in range(repeats):
        shift = turn % len(measured)
        for m in measured[shift:] + measured[:shift]:
            rate = m.turn(warmup_runs, seconds, min_runs)
            sys.stderr.write('%s: %s turn %d/%d: %-24s %8.1f images/s\n'
                             % (PROG, label, turn + 1, repeats, m.name, rate))


def ratio_column(measured, reference):
    """Per turn: rate / the reference's rate in the same turn; the median."""
    return {m.name: float(np.median(np.array(m.rates) / np.array(reference.rates)))
            for m in measured}


def cpu_description():
    name = ''
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    name = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, 'getloadavg') else (float('nan'),) * 3
    return '%d usable cores (%d online)%s, load average %.1f' % (
        worker_processes.default_workers(), os.cpu_count() or 0, ', ' + name if name else '',
        load[0])


# ------------------------------------------------- the original's float-first augmentation

def contrib_rotate_images(images, angles):
    """image_preprocess.rotate_images as tf.contrib.image.rotate computed it, with the
    projective-transform kernel: the original's literal graph (spec_literal, the tests)."""
    tf = lazy_tensorflow.tensorflow()
    import image_preprocess
    shape = tf.shape(images)
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images, transforms=image_preprocess.rotation_transform(angles, shape[1],
                                                                      shape[2]),
        output_shape=shape[1:3], fill_value=tf.constant(0, tf.float32),
        interpolation='NEAREST', fill_mode='CONSTANT')


def distort_image(image, height, width, object_cover, area_cover,
                  rotate=contrib_rotate_images):
    """The original's training distortion in its float-first order: a float [H, W, 3]
    image in [0, 1] cropped (image_preprocess.crop_window), resized, then
    image_preprocess.augment_image (before the [-1, 1] map)."""
    tf = lazy_tensorflow.tensorflow()
    import image_preprocess
    with tf.name_scope('distort_image'):
        begin, size = image_preprocess.crop_window(tf.shape(image), object_cover, area_cover)
        image = tf.slice(image, begin, size)
        image = tf.image.resize(image, [height, width], method='bilinear')
        image.set_shape([height, width, 3])
        return image_preprocess.augment_image(image, rotate)
