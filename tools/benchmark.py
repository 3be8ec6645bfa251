#!/usr/bin/env python
"""Input-pipeline and training-step speed, measured side by side in one run.

    python tools/benchmark.py                      # makes its own shards, a few minutes
    python tools/benchmark.py --files 'data/train/*.tfrecords' --class_num 11166
    python tools/benchmark.py --resnet_size 50 --step_batch_size 32 --xla
    python tools/benchmark.py --skip_steps --repeats 9       # pipelines only, more turns

On the same shards, in this one process and with the same batch size:

  pipelines (images/s and ratio to the floor):
    input_fn(cpu)       input_pipeline.input_fn(is_training=True, augment_on='cpu') as train.py
                        runs it on a CPU box: every augmentation per image in the pipeline
    input_fn(device)    input_pipeline.input_fn(is_training=True) with its default
                        augment_on='device', as train.py runs it on a GPU box: the
                        pipeline decodes the crop window and resizes; flip, rotation and
                        colour run batched in the model on the GPU
    spec_literal        the original's input_fn and image_preprocessing.py (docs/original.md, Input pipeline and Augmentation) to the letter: full decode_image, float before
                        the crop, sequential flat_map over the files, map with 5 parallel
                        calls, shuffle of decoded images, prefetch before batch,
                        tf.contrib.image.rotate's projective-transform kernel
    floor               parse + decode_jpeg + resize to the network size, nothing else
  training steps (images/s): the model with synthetic data (no input cost) and with the
    real input_fn, for --resnet_size/--step_image_size/--step_batch_size/--dtype/--xla.
  CPU: the cores this process may use, and the cores each variant kept busy (process CPU
    time / wall time).

Other jobs on the machine change absolute speeds from minute to minute, so every figure
is taken in turns: each turn measures every variant once (a fresh session, warm-up
batches dropped, then --seconds of batches), the order rotating from turn to turn, and
the table shows medians over --repeats turns; a ratio is the median of the per-turn
ratios. Shards are made once (photograph-like 500x375 JPEGs of quality 90, soft labels
over 11,166 classes, written by tools/make_tfrecords.py) and reused from --shard_dir.
--photos / --coverage: photo-size records instead (1-10 MP, before and after
convert_tfrecords.py --short_side) and the crop resolution the network sees (tools/photos.py).
"""
import argparse
import glob
import os
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

from tools import photos  # noqa: E402

PROG = 'benchmark.py'
PIPELINES = ('input_fn(cpu)', 'input_fn(device)', 'spec_literal', 'floor')
SHARD_DIR_PREFIX = os.path.join(tempfile.gettempdir(), 'ml_images_benchmark_shards')

_tf_module = None


def _tf():
    global _tf_module
    if _tf_module is None:
        import tensorflow.compat.v1 as tf
        tf.disable_v2_behavior()
        _tf_module = tf
    return _tf_module


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
                label_layout='dense', seed=0):
    """Writes <shard_dir>/train/N.tfrecords through tools/make_tfrecords.py (JPEG files
    and image lists first); reuses shards that exist. Returns the shard paths."""
    from PIL import Image
    from tools import make_tfrecords
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
        Image.fromarray(photo_like(rng)).save(os.path.join(image_dir, name), quality=quality)
        handles[i % num_shards].write('%s\t%s\n' % (name, '\t'.join(
            soft_labels(rng, class_num))))
        if (i + 1) % 64 == 0:
            sys.stderr.write('\r%s: %d/%d benchmark images' % (PROG, i + 1, num_images))
    for handle in handles:
        handle.close()
    make_tfrecords.build_records(lists, image_dir, shard_dir, split='train',
                                 class_num=class_num, progress=False,
                                 label_layout=label_layout)
    sys.stderr.write('\r%s: %d benchmark images in %d shards in %s (%.0f s)\n' % (
        PROG, num_images, num_shards, split_dir, time.monotonic() - start))
    return sorted(glob.glob(os.path.join(split_dir, '*.tfrecords')))


# --------------------------------------------------------------------------- pipelines

def floor_dataset(files, batch_size, image_size):
    """parse + decode_jpeg + resize, nothing else: the speed limit of full decoding."""
    tf = _tf()

    def decode(value):
        encoded = tf.parse_single_example(
            value, {'image': tf.FixedLenFeature([], tf.string)})['image']
        image = tf.image.decode_jpeg(encoded, channels=3)
        return tf.image.resize(image, [image_size, image_size])

    dataset = tf.data.TFRecordDataset(files).repeat()
    dataset = dataset.map(decode, num_parallel_calls=tf.data.experimental.AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(
        tf.data.experimental.AUTOTUNE)


def spec_literal_dataset(files, batch_size, image_size, class_num, shuffle_buffer):
    """the original's input_fn and image_preprocessing.py (docs/original.md, Input pipeline and Augmentation) to the letter (the original program's pipeline)."""
    tf = _tf()
    import image_preprocess

    def parse(value):
        parsed = tf.parse_single_example(value, {
            'image': tf.FixedLenFeature([], tf.string),
            'label': tf.FixedLenFeature([], tf.string)})
        image = tf.image.decode_image(parsed['image'], channels=3, expand_animations=False)
        image = tf.image.convert_image_dtype(image, tf.float32)
        image = image_preprocess.distort_image(image, image_size, image_size, 0.7, 0.7,
                                               image_preprocess.contrib_rotate_images)
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
    tf = _tf()
    import input_pipeline
    if name == 'floor':
        return floor_dataset(files, args.batch_size, args.image_size)
    if name == 'spec_literal':
        return spec_literal_dataset(files, args.batch_size, args.image_size,
                                    args.class_num, args.shuffle_buffer)
    augment_on = name[len('input_fn('):-1]
    return input_pipeline.input_fn(True, None, args.batch_size, args.class_num,
                                   args.image_size, shuffle_buffer=args.shuffle_buffer,
                                   num_parallel_calls=args.num_preprocess_threads,
                                   files=files, augment_on=augment_on,
                                   private_threads=args.private_threads)


class Measured(object):
    """A graph whose `fetch` is timed in turns, each in a fresh session."""

    def __init__(self, name, graph, fetch, init, images_per_run, config=None):
        self.name, self.graph, self.fetch, self.init = name, graph, fetch, init
        self.images_per_run = images_per_run
        self.config = config
        self.rates, self.cores, self.cpu_ms = [], [], []

    def turn(self, warmup_runs, seconds, min_runs):
        tf = _tf()
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
    tf = _tf()
    graph = tf.Graph()
    with graph.as_default():
        iterator = tf.data.make_initializable_iterator(pipeline_dataset(name, files, args))
        batch = tf.nest.flatten(iterator.get_next())
        # Fetch something small: the batch itself would be copied into numpy.
        fetch = [tf.reduce_sum(tf.cast(t[:, 0], tf.float32)) for t in batch]
    return Measured(name, graph, fetch, iterator.initializer, args.batch_size)


# ------------------------------------------------------------------------------ steps

def step_params(args, data_format='channels_last'):
    return {
        'resnet_size': args.resnet_size, 'class_num': args.class_num,
        'data_format': data_format, 'batch_norm_decay': 0.997, 'batch_norm_epsilon': 1e-5,
        'mask_thres': 0.7, 'neg_select': 0.3, 'random_seed': 1234, 'weight_decay': 1e-4,
        'lr': 0.01, 'lr_decay_step': 0, 'lr_decay_factor': 0.1, 'warmup': 0,
        'lr_warmup': 0.1, 'lr_warmup_decay_step': 0, 'lr_warmup_decay_factor': 1.414,
        'opt_momentum': 0.9, 'batch_size': args.step_batch_size, 'log_interval': 100,
        'max_steps': None, 'dtype': args.dtype,
    }


def build_step(name, files, args, literal_model=False, xla=None):
    """A training step of model_fn.resnet_model_fn on synthetic or real input.

    literal_model: the convolutions' input gradients as TensorFlow computes them (the
    original's graph) instead of resnet.py's CPU fast path.
    """
    tf = _tf()
    import input_pipeline
    import model_fn
    import resnet
    params = step_params(args)
    xla = args.xla if xla is None else xla
    graph = tf.Graph()
    saved = resnet._conv_same_fast_input_grad
    if literal_model:
        resnet._conv_same_fast_input_grad = lambda x, k: tf.nn.conv2d(x, k, 1, 'SAME')
    try:
        with graph.as_default():
            dataset = input_pipeline.input_fn(
                True, None, args.step_batch_size, args.class_num, args.step_image_size,
                shuffle_buffer=args.shuffle_buffer,
                num_parallel_calls=args.num_preprocess_threads, files=files,
                augment_on=args.step_augment_on,
                use_synthetic_data=name.startswith('synthetic'),
                private_threads=args.private_threads)
            iterator = tf.data.make_initializable_iterator(dataset)
            features, labels = iterator.get_next()
            spec = model_fn.resnet_model_fn(features, labels, tf.estimator.ModeKeys.TRAIN,
                                            params)
            init = [iterator.initializer, tf.global_variables_initializer(),
                    tf.local_variables_initializer()]
    finally:
        resnet._conv_same_fast_input_grad = saved
    config = tf.ConfigProto()
    if xla:
        config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
    return Measured(name, graph, spec.train_op, init, args.step_batch_size, config)


# ------------------------------------------------------------------------------- runs

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
    from tools import common
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
        common.default_workers(), os.cpu_count() or 0, ', ' + name if name else '',
        load[0])


def format_table(title, measured, ratios, reference_name, args):
    reference = [m for m in measured if m.name == reference_name][0]
    lines = [title, '  %-26s %10s %8s %11s %13s %9s' % (
        'variant', 'images/s', 'ratio', 'cores busy', 'CPU ms/image', 'CPU ratio')]
    for m in measured:
        cpu_ratio = float(np.median(np.array(reference.cpu_ms) / np.array(m.cpu_ms)))
        lines.append('  %-26s %10.1f %7.2fx %11.2f %13.2f %8.2fx' % (
            m.name, float(np.median(m.rates)), ratios[m.name], float(np.median(m.cores)),
            float(np.median(m.cpu_ms)), cpu_ratio))
    lines.append('  (medians of %d turns; ratio = median per-turn ratio of images/s to %s; '
                 'CPU ratio = the same for CPU time per image, %s / variant)'
                 % (len(measured[0].rates), reference_name, reference_name))
    return '\n'.join(lines)


def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split('\n\n')[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group('data')
    data.add_argument('--files', default='',
                      help='glob of the shards to read; empty: make benchmark shards in '
                           '--shard_dir (or reuse them)')
    data.add_argument('--shard_dir', default='',
                      help='where the benchmark shards are made and reused (default: '
                           '%s_<label_layout>_<num_images>_<class_num>)' % SHARD_DIR_PREFIX)
    data.add_argument('--num_images', type=int, default=384,
                      help='images in the benchmark shards (500x375, JPEG quality 90)')
    data.add_argument('--label_layout', choices=('dense', 'sparse'), default='dense',
                      help='label layout of the benchmark shards (spec_literal needs dense)')
    data.add_argument('--class_num', type=int, default=11166)
    pipe = parser.add_argument_group('pipelines')
    pipe.add_argument('--pipelines', default=','.join(PIPELINES),
                      help='comma-separated subset of %s' % ', '.join(PIPELINES))
    pipe.add_argument('--batch_size', type=int, default=64)
    pipe.add_argument('--image_size', type=int, default=224)
    pipe.add_argument('--shuffle_buffer', type=int, default=256,
                      help='record shuffle buffer of input_fn and spec_literal (the '
                           'latter fills it with decoded images in every turn)')
    pipe.add_argument('--num_preprocess_threads', type=int, default=0,
                      help='input_fn map parallelism (0 = AUTOTUNE, train.py\'s flag)')
    pipe.add_argument('--private_threads', type=int, default=0,
                      help='input_fn private tf.data thread pool size (0 = shared)')
    pipe.add_argument('--seconds', type=float, default=6.0,
                      help='timed seconds per variant and turn')
    pipe.add_argument('--repeats', type=int, default=5, help='turns')
    pipe.add_argument('--warmup_batches', type=int, default=3)
    step = parser.add_argument_group('training steps')
    step.add_argument('--skip_steps', action='store_true', help='pipelines only')
    step.add_argument('--skip_pipelines', action='store_true', help='steps only')
    step.add_argument('--resnet_size', type=int, default=50)
    step.add_argument('--step_image_size', type=int, default=224)
    step.add_argument('--step_batch_size', type=int, default=8)
    step.add_argument('--dtype', choices=('fp32', 'fp16', 'bf16'), default='fp32')
    step.add_argument('--xla', action='store_true',
                      help='XLA global JIT (this tool sets TF_XLA_FLAGS='
                           '--tf_xla_cpu_global_jit for the CPU)')
    step.add_argument('--step_augment_on', choices=('cpu', 'device'), default='cpu',
                      help='augment_on of the real input_fn feeding the training step')
    step.add_argument('--compare_model', default='',
                      help='comma-separated extra synthetic-data steps: "original" = the '
                           'original\'s graph (TensorFlow\'s own convolution input '
                           'gradients instead of resnet.py\'s CPU fast path), "xla" = XLA '
                           'toggled (slow to compile on a CPU)')
    step.add_argument('--step_seconds', type=float, default=10.0)
    step.add_argument('--step_repeats', type=int, default=3)
    step.add_argument('--step_warmup', type=int, default=1)
    photos.add_arguments(parser)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    flags = os.environ.get('TF_XLA_FLAGS', '')
    if '--tf_xla_cpu_global_jit' not in flags:
        # Only read when a session asks for global JIT (--xla); harmless otherwise.
        os.environ['TF_XLA_FLAGS'] = (flags + ' --tf_xla_cpu_global_jit').strip()
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    tf = _tf()
    tf.logging.set_verbosity(tf.logging.ERROR)
    if args.photos or args.coverage:
        return photos.main(args)
    if args.files:
        files = sorted(glob.glob(args.files))
        if not files:
            sys.stderr.write('%s: error: no file matches %s\n' % (PROG, args.files))
            return 2
    else:
        shard_dir = args.shard_dir or '%s_%s_%d_%d' % (
            SHARD_DIR_PREFIX, args.label_layout, args.num_images, args.class_num)
        files = make_shards(shard_dir, args.num_images, class_num=args.class_num,
                            label_layout=args.label_layout)
    sizes = [os.path.getsize(p) for p in files]
    records = sum(1 for p in files for _ in tf.io.tf_record_iterator(p))
    out = ['%s: %d shards, %d records, %.0f KB a record; %s' % (
        PROG, len(files), records, sum(sizes) / max(records, 1) / 1e3, cpu_description())]
    if not args.skip_pipelines:
        names = [n.strip() for n in args.pipelines.split(',') if n.strip()]
        unknown = sorted(set(names) - set(PIPELINES))
        if unknown or 'floor' not in names:
            sys.stderr.write('%s: error: --pipelines must include floor and name only %s\n'
                             % (PROG, ', '.join(PIPELINES)))
            return 2
        if args.label_layout == 'sparse' and 'spec_literal' in names:
            names.remove('spec_literal')
            sys.stderr.write('%s: spec_literal left out: it reads only dense labels\n'
                             % PROG)
        measured = [build_pipeline(n, files, args) for n in names]
        run_turns(measured, args.repeats, args.warmup_batches, args.seconds, 3, 'pipeline')
        floor = measured[names.index('floor')]
        out.append(format_table(
            'input pipelines, batch %d, image %d:' % (args.batch_size, args.image_size),
            measured, ratio_column(measured, floor), 'floor', args))
    if not args.skip_steps:
        steps = [build_step('synthetic', files, args),
                 build_step('input_fn(%s)' % args.step_augment_on, files, args)]
        extra = [n.strip() for n in args.compare_model.split(',') if n.strip()]
        if set(extra) - {'original', 'xla'}:
            sys.stderr.write('%s: error: --compare_model takes original and/or xla\n' % PROG)
            return 2
        if 'original' in extra:
            steps.append(build_step('synthetic, original graph', files, args,
                                    literal_model=True))
        if 'xla' in extra:
            steps.append(build_step('synthetic, XLA %s' % ('off' if args.xla else 'on'),
                                    files, args, xla=not args.xla))
        run_turns(steps, args.step_repeats, args.step_warmup, args.step_seconds, 2, 'step')
        out.append(format_table(
            'training steps, ResNet-%d, batch %d, image %d, %s%s:' % (
                args.resnet_size, args.step_batch_size, args.step_image_size, args.dtype,
                ', XLA' if args.xla else ''),
            steps, ratio_column(steps, steps[0]), steps[0].name, args))
    out.append('%s: load average at the end %.1f' % (
        PROG, os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')))
    print('\n'.join(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
