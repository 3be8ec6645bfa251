"""Photo-size records for tools/benchmark.py: what storing images downscaled buys and what
it costs (issue #15; docs/photos.md has the numbers and the recommended N).

    .venv/bin/python tools/benchmark.py --photos                   # originals vs --short_side 320
    .venv/bin/python tools/benchmark.py --photos --cost_sides 224,256,288,320,384,448,512,640
    .venv/bin/python tools/benchmark.py --coverage                 # crop resolution only, no timing

Speed (--photos): the photograph-like images of pipelines.photo_like at 1-10 MP
(PHOTO_SIZES, JPEG quality 90) written by make_tfrecords.py, then the same shards after
convert_tfrecords.py --short_side N, and ImageNet-size (500x375) shards before and after
the same conversion (a pass-through: the bytes must stay identical). input_fn(cpu) and
input_fn(device) read each, in turns as benchmark.py measures; reported per variant:

    images/s per core  = images/s / cores busy        (cores busy = CPU time / wall time)
    CPU ms per image   = CPU time / images
    cores for G GPUs   = G * --gpu_rate / (images/s per core)

and the layout of one process a GPU on this box (docs/gpu.md's for 8 GPUs): each of G
processes gets min(A, Q) / G cores (A: the CPUs this process may run on, Q: its cgroup
quota; devices.cpu_share) and needs --gpu_rate / (images/s per core).

--cost_sides N1,N2,...: instead, the CPU ms per image of input_fn (both augment_on
modes) on the photo shards converted to each N, next to the originals.

Coverage (--coverage): the resolution the network sees. A stored image of aspect a
(4:3, 3:2, 16:9, 1:1) with shorter side N is H x W = images.downscaled_size of a photo
larger than any N. For network size S, a crop of h x w source pixels is *upsampled* on a
side when h < S or w < S. Reported per (S, N, aspect):
  train  the share of upsampled crops among --coverage_samples windows drawn by the real
         tf.image.sample_distorted_bounding_box with image_preprocess.crop_window's
         arguments (object_cover 0.7, area 0.7-1, aspect 3/4-4/3, 100 attempts);
  eval   upsampled or not (1/0): TF 1.x's central 80 % window (central_window),
         h = H - 2 * int((H - 0.8 H) / 2), likewise w;
  infer  upsampled or not: the original's inference resize to shorter side
         round(256 S / 224) before its S x S centre crop; upsampled iff N < that side.
A square image's training crops have min(h, w) >= ~sqrt(0.7 * 3/4) N = 0.72 N, so S <=
0.72 N is never upsampled in training (the closed form tests/test_photos.py checks).
"""
import os
import sys

import numpy as np

from mlimages.cli import lazy_tensorflow
from mlimages.distributed import devices

PHOTO_SIZES = ((1024, 768), (1600, 1067), (2560, 1920), (3648, 2736))
SHORT_SIDES = (224, 256, 288, 320, 384, 448, 512, 640)
ASPECTS = (('4:3', 4.0 / 3.0), ('3:2', 1.5), ('16:9', 16.0 / 9.0), ('1:1', 1.0))
COVERAGE_IMAGE_SIZES = (224, 299, 320)
BIG = 3000  # the shorter side of the photo a coverage shape is downscaled from
PROG = 'benchmark.py'


def add_arguments(parser):
    """benchmark.py's photo flags."""
    group = parser.add_argument_group('photo-size records (mlimages/bench/photos.py)')
    group.add_argument('--photos', action='store_true',
                       help='benchmark photo-size records (1-10 MP) against the same '
                            'converted to --short_side, and ImageNet-size ones before and '
                            'after that conversion, instead of the default set')
    group.add_argument('--short_side', type=int, default=320,
                       help='N of convert_tfrecords.py --short_side for --photos')
    group.add_argument('--num_photos', type=int, default=24,
                       help='photos in the photo shards, cycling through %s'
                            % ', '.join('%dx%d' % s for s in PHOTO_SIZES))
    group.add_argument('--gpu_rate', type=float, default=2375.0,
                       help='images/s one GPU trains at, for the capacity line (NVIDIA\'s '
                            'TF1 ResNet-50 AMP figure for an A100)')
    group.add_argument('--cost_sides', default='',
                       help='with --photos, comma-separated N: instead of the speed table, '
                            'the CPU ms per image of input_fn on the photos converted to '
                            'each N (e.g. %s)'
                            % ','.join(map(str, SHORT_SIDES)))
    group.add_argument('--coverage', action='store_true',
                       help='print the crop coverage table (no timing) and exit')
    group.add_argument('--coverage_samples', type=int, default=4000,
                       help='training windows drawn per image shape for --coverage')


# ---------------------------------------------------------------------------- coverage

def stored_shape(aspect, short_side):
    """(H, W) of a landscape photo of this aspect stored with --short_side N (0: BIG)."""
    from mlimages.recordkit.images import downscaled_size
    width, height = downscaled_size(int(round(BIG * aspect)), BIG, short_side)
    return height, width


def train_windows(height, width, samples, object_cover=0.7, area_cover=0.7, seed=1):
    """int [samples, 2]: (h, w) of training crop windows of an H x W image, drawn by
    image_preprocess.crop_window (the real sample_distorted_bounding_box) with op seed
    `seed`, so a report is the same on every run and machine."""
    import image_preprocess
    tf = lazy_tensorflow.tensorflow()
    with tf.Graph().as_default():
        shape = tf.constant([height, width, 3], tf.int32)
        sizes = tf.map_fn(
            lambda _: image_preprocess.crop_window(shape, object_cover, area_cover, seed)[1][:2],
            tf.range(samples), dtype=tf.int32, parallel_iterations=1)
        with tf.Session(config=devices.session_config()) as session:
            return session.run(sizes)


def eval_window(height, width):
    """(h, w) of the evaluation crop, image_preprocess.central_window run on the shape."""
    import image_preprocess
    tf = lazy_tensorflow.tensorflow()
    with tf.Graph().as_default():
        _, size = image_preprocess.central_window(tf.constant([height, width, 3]))
        with tf.Session(config=devices.session_config()) as session:
            return tuple(int(v) for v in session.run(size)[:2])


def upsampled_share(windows, image_size):
    """The share of (h, w) windows with fewer source pixels than image_size on a side."""
    windows = np.asarray(windows).reshape(-1, 2)
    return float(np.mean(windows.min(axis=1) < image_size))


def coverage_rows(short_sides=SHORT_SIDES, image_sizes=COVERAGE_IMAGE_SIZES,
                  samples=4000):
    """[(S, N, {aspect: train share}, eval 0/1, infer 0/1)] for every S and N (0 = the
    original photo, BIG on its shorter side)."""
    import image_preprocess
    windows, evals = {}, {}
    for n in (0,) + tuple(short_sides):
        for name, aspect in ASPECTS:
            shape = stored_shape(aspect, n)
            if shape not in windows:
                windows[shape] = train_windows(shape[0], shape[1], samples)
                evals[shape] = eval_window(*shape)
    rows = []
    for s in image_sizes:
        side = image_preprocess.inference_resize_side(s)
        for n in (0,) + tuple(short_sides):
            train = {name: upsampled_share(windows[stored_shape(a, n)], s)
                     for name, a in ASPECTS}
            shapes = [stored_shape(a, n) for _, a in ASPECTS]
            ev = max(upsampled_share(evals[shape], s) for shape in shapes)
            infer = float(min(min(shape) for shape in shapes) < side)
            rows.append((s, n, train, ev, infer))
    return rows


def format_coverage(rows, samples):
    lines = ['crop coverage: share of crops upsampled on a side (fewer source pixels than '
             'output pixels), stored shorter side N (0 = the %d-pixel original)' % BIG,
             '  %5s %5s  %s  %6s %6s' % ('S', 'N', '  '.join(
                 'train %-4s' % name for name, _ in ASPECTS), 'eval', 'infer')]
    for s, n, train, ev, infer in rows:
        lines.append('  %5d %5s  %s  %6.0f %6.0f' % (s, n or 'orig', '  '.join(
            '%10.3f' % train[name] for name, _ in ASPECTS), ev, infer))
    lines.append('  (train: %d windows of sample_distorted_bounding_box per shape; eval: '
                 'central 80 %%; infer: shorter side round(256 S / 224), then S x S; 1 = '
                 'upsampled)' % samples)
    return '\n'.join(lines)


# ------------------------------------------------------------------------------ shards

def make_photo_shards(shard_dir, num_images, class_num, num_shards=4, quality=90, seed=0,
                      sizes=PHOTO_SIZES):
    """<shard_dir>/train/N.tfrecords of photo_like images cycling through `sizes`, written
    by make_tfrecords.py (byte for byte); reused when they exist. Returns the split dir."""
    from mlimages.bench import pipelines
    return os.path.dirname(pipelines.make_shards(shard_dir, num_images, num_shards,
                                                 class_num, quality, seed=seed,
                                                 sizes=sizes)[0])


def converted(split_dir, short_side):
    """convert_tfrecords.py --short_side N of <set>/<split> into <set>_short<N>/<split>
    (reused when it exists)."""
    from mlimages.recordkit import convert_tfrecords
    set_dir, split = os.path.split(split_dir.rstrip(os.sep))
    out_dir = os.path.join('%s_short%d' % (set_dir, short_side), split)
    convert_tfrecords.convert(split_dir, out_dir, short_side=short_side, progress=False)
    return out_dir


def shard_files(directory):
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith('.tfrecords'))


def directory_bytes(directory):
    return sum(os.path.getsize(p) for p in shard_files(directory))


# ---------------------------------------------------------------------------- measures

def _pipelines(sets, args, modes=('cpu', 'device')):
    """pipelines.Measured input_fn pipelines, '<mode> <set>' for every set and mode."""
    from mlimages.bench import pipelines
    measured = []
    for mode in modes:
        for name, directory in sets:
            m = pipelines.build_pipeline('input_fn(%s)' % mode, shard_files(directory), args)
            m.name = '%s %s' % (mode, name)
            measured.append(m)
    return measured


def per_core(m):
    return float(np.median(np.array(m.rates) / np.array(m.cores)))


def speed_table(measured, sizes, gpu_rate):
    lines = ['  %-22s %10s %11s %14s %13s %12s %12s' % (
        'variant', 'images/s', 'cores busy', 'images/s/core', 'CPU ms/image',
        'cores, 1 GPU', 'cores, 8 GPU')]
    for m in measured:
        rate = per_core(m)
        lines.append('  %-22s %10.1f %11.2f %14.1f %13.2f %12.1f %12.1f' % (
            m.name, float(np.median(m.rates)), float(np.median(m.cores)), rate,
            float(np.median(m.cpu_ms)), gpu_rate / rate, 8 * gpu_rate / rate))
    lines.append('  capacity: cores needed to feed 1 and 8 GPUs at %.0f images/s per GPU '
                 '(--gpu_rate) = GPUs x rate / (images/s per core)' % gpu_rate)
    lines.extend(process_layout(measured, gpu_rate, devices.cpu_share()))
    lines.append('  stored: ' + ', '.join('%s %.1f MB (%.0f KB a record)' % (
        name, b / 1e6, b / n / 1e3) for name, (b, n) in sizes.items()))
    return '\n'.join(lines)


def process_layout(measured, gpu_rate, share, gpus=(1, 8)):
    """Lines: for one process a GPU with G of them on this box, the cores each gets (the
    box's min(A, Q) / G) against what each variant needs to feed its GPU."""
    box = min(share.allowed, share.quota or share.allowed)
    lines = []
    for count in gpus:
        gets = box / count
        needs = ', '.join('%s %.1f%s' % (m.name, gpu_rate / per_core(m), ' (short %.1fx)' % (
            gpu_rate / per_core(m) / gets) if gpu_rate / per_core(m) > gets else '')
            for m in measured)
        lines.append('  one process a GPU, %d on this box: each gets %.2f cores (%.3g / %d); '
                     'each needs: %s' % (count, gets, box, count, needs))
    return lines


def ratio(measured, numerator, denominator):
    """Median per-turn ratio of two variants' images/s."""
    by_name = {m.name: m for m in measured}
    a, b = by_name[numerator], by_name[denominator]
    return float(np.median(np.array(a.rates) / np.array(b.rates)))


def main(args):
    """benchmark.py --photos / --coverage: prints the tables; returns the exit status."""
    from mlimages.bench import pipelines
    if args.coverage:
        print(format_coverage(coverage_rows(samples=args.coverage_samples),
                              args.coverage_samples))
        return 0
    if args.short_side <= 0:
        sys.stderr.write('%s: error: --short_side must be > 0 for --photos\n' % PROG)
        return 2
    try:
        cost_sides = [int(v) for v in args.cost_sides.split(',') if v.strip()]
    except ValueError:
        sys.stderr.write('%s: error: --cost_sides takes integers, e.g. 256,320\n' % PROG)
        return 2
    root = args.shard_dir or '%s_photos_%d_%d' % (pipelines.SHARD_DIR_PREFIX,
                                                   args.num_photos, args.class_num)
    photos = make_photo_shards(os.path.join(root, 'photos'), args.num_photos,
                               args.class_num)
    out = ['%s: photo-size records; %s' % (PROG, pipelines.cpu_description())]
    if cost_sides:  # the CPU cost per image against N, its own run
        out += cost_lines(photos, cost_sides, args)
    else:
        out += speed_lines(root, photos, args)
    out.append('%s: load average at the end %.1f' % (PROG, os.getloadavg()[0]))
    print('\n'.join(out))
    return 0


def cost_lines(photos, cost_sides, args):
    """--cost_sides: the table of input_fn's CPU time per image against the stored shorter
    side N (the photos as they are and converted to each N)."""
    from mlimages.bench import pipelines
    cost_sets = [('photos', photos)] + [('@%d' % c, converted(photos, c))
                                        for c in cost_sides]
    cost = _pipelines(cost_sets, args)
    pipelines.run_turns(cost, args.repeats, args.warmup_batches, args.seconds, 3,
                        'cost')
    out = ['CPU ms per image of input_fn, batch %d, image %d, vs the stored '
           'shorter side N:' % (args.batch_size, args.image_size)]
    out.append('  %-10s %10s %13s %10s %13s %9s' % (
        'N', 'cpu ms', 'images/s/core', 'device ms', 'images/s/core', 'KB/record'))
    half = len(cost_sets)
    for k, (name, directory) in enumerate(cost_sets):
        c, d = cost[k], cost[half + k]
        out.append('  %-10s %10.2f %13.1f %10.2f %13.1f %9.0f' % (
            name, float(np.median(c.cpu_ms)), per_core(c), float(np.median(d.cpu_ms)),
            per_core(d), directory_bytes(directory) / args.num_photos / 1e3))
    return out


def speed_lines(root, photos, args):
    """--photos: input_fn's speed on photo-size and ImageNet-size records, before and after
    --short_side, with the bytes they take."""
    from mlimages.bench import pipelines
    small = os.path.dirname(pipelines.make_shards(
        os.path.join(root, 'imagenet'), args.num_images, class_num=args.class_num)[0])
    n = args.short_side
    sets = [('photos', photos), ('photos@%d' % n, converted(photos, n)),
            ('imagenet', small), ('imagenet@%d' % n, converted(small, n))]
    count = lambda d: sum(1 for p in shard_files(d) for _ in lazy_tensorflow.tensorflow().io.
                          tf_record_iterator(p))
    sizes = {name: (directory_bytes(d), count(d)) for name, d in sets}
    same = all(open(a, 'rb').read() == open(b, 'rb').read() for a, b in zip(
        shard_files(small), shard_files(sets[3][1])))
    measured = _pipelines(sets, args)
    pipelines.run_turns(measured, args.repeats, args.warmup_batches, args.seconds, 3,
                        'photos')
    out = ['input_fn on photo-size and ImageNet-size records, batch %d, image %d:'
           % (args.batch_size, args.image_size)]
    out.append(speed_table(measured, sizes, args.gpu_rate))
    for mode in ('cpu', 'device'):
        out.append('  %s: photos@%d / photos images/s %.2fx; imagenet@%d / imagenet %.2fx'
                   % (mode, n, ratio(measured, '%s photos@%d' % (mode, n),
                                     '%s photos' % mode),
                      n, ratio(measured, '%s imagenet@%d' % (mode, n), '%s imagenet' % mode)))
    out.append('  bytes: photos / photos@%d %.1fx smaller; imagenet@%d shards %s'
               % (n, sizes['photos'][0] / sizes['photos@%d' % n][0], n,
                  'identical to the originals (shorter side <= N: byte for byte)' if same
                  else 'downscaled (500x375: shorter side 375 > N)'))
    return out
