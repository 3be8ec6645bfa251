"""Input-pipeline and training-step speed, measured side by side in one run.

    .venv/bin/python tools/benchmark.py                      # makes its own shards, a few minutes
    .venv/bin/python tools/benchmark.py --files 'data/train/*.tfrecords' --class_num 11166
    .venv/bin/python tools/benchmark.py --resnet_size 50 --step_batch_size 32 --xla
    .venv/bin/python tools/benchmark.py --skip_steps --repeats 9       # pipelines only, more turns

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
convert_tfrecords.py --short_side) and the crop resolution the network sees (mlimages/bench/photos.py).
--bookkeeping: the record tools' per-shard costs at 20,000 shards, before and after
(mlimages/bench/bookkeeping.py). --startup: the time to the first training step of one
device, MirroredStrategy and one process per device, in parts (mlimages/bench/first_step.py).
--engines: inference img/s of each engine x dtype on one model (mlimages/bench/engines.py).
--report_cost: the per-class report's time, memory and bytes at 11,166 classes
(mlimages/bench/report_cost.py).
--versus_keras: train.py's training step against Keras' ResNet-V2 of the same depth, fp32
and bf16 where the CPU has it (mlimages/bench/versus_keras.py).
"""
import argparse
import glob
import os
import sys

import numpy as np

from mlimages.config import cpu, startup
from mlimages.bench import (bookkeeping, engines, first_step, photos, report_cost,
                            versus_keras)
from mlimages import errors
from mlimages.cli import entry, lazy_tensorflow

from mlimages.bench.pipelines import (PIPELINES, PROG, SHARD_DIR_PREFIX, Measured,
                                      build_pipeline, cpu_description, make_shards,
                                      ratio_column, run_turns)

# ------------------------------------------------------------------------------ steps

def step_settings(args):
    """train.py's settings (flags.default_settings) with the benchmark's model, batch and
    input."""
    import flags
    return flags.replace(
        flags.default_settings(), resnet_size=args.resnet_size, class_num=args.class_num,
        lr=0.01, batch_size=args.step_batch_size, image_size=args.step_image_size,
        shuffle_buffer=args.shuffle_buffer, num_preprocess_threads=args.num_preprocess_threads,
        private_threads=args.private_threads, dtype=args.dtype)


def build_step(name, files, args, literal_model=False, xla=None):
    """A training step of model_fn.resnet_model_fn on synthetic or real input.

    literal_model: the convolutions and their input gradients as TensorFlow computes them
    (the original's graph) instead of resnet.py's CPU forms.
    """
    tf = lazy_tensorflow.tensorflow()
    from mlimages.data import input_pipeline
    from mlimages.run import model_fn
    import flags
    settings = flags.replace(step_settings(args), augment_on=args.step_augment_on,
                             use_synthetic_data=name.startswith('synthetic'))
    xla = args.xla if xla is None else xla
    graph = tf.Graph()
    with graph.as_default():
        dataset = input_pipeline.input_fn(settings.data, settings.model, True, files)
        iterator = tf.data.make_initializable_iterator(dataset)
        features, labels = iterator.get_next()
        derived = model_fn.Derived(images_per_step=settings.data.batch_size,
                                   cpu_input_grad=not literal_model,
                                   cpu_pointwise=not literal_model)
        spec = model_fn.make_model_fn(model_fn.parts(settings, 'channels_last'), derived)(
            features, labels, tf.estimator.ModeKeys.TRAIN)
        init = [iterator.initializer, tf.global_variables_initializer(),
                tf.local_variables_initializer()]
    config = tf.ConfigProto()
    if xla:
        config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
    return Measured(name, graph, spec.train_op, init, args.step_batch_size, config)


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
    bookkeeping.add_arguments(parser)
    first_step.add_arguments(parser)
    report_cost.add_arguments(parser)
    engines.add_arguments(parser)
    versus_keras.add_arguments(parser)
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (0 or 2)."""
    startup.check_versions('benchmark.py')
    return entry.run(PROG, lambda: build_parser().parse_args(argv), measure,
                     (errors.UsageError,), collapse=False)


def measure(args):
    """The measurement the arguments ask for (by default the input pipelines' and the
    training steps' tables on stdout); returns the exit status (0, 2 bad usage)."""
    import flags as flags_lib  # absl only; TensorFlow comes later
    # train.py's kernel library for the steps it times (train.py's start-up's choice).
    cpu.prefer_onednn(cpu.this_cpu(), os.environ, args.dtype)
    args.defaults = flags_lib.default_settings()  # the trainer's settings the pipelines start from
    tf = start_tensorflow()
    if args.photos or args.coverage:
        return photos.main(args)
    if args.bookkeeping:
        return bookkeeping.main(args)
    if args.startup:
        return first_step.main(args)
    if args.report_cost:
        return report_cost.main(args)
    if args.engines:
        return engines.main(args)
    if args.versus_keras:
        return versus_keras.main(args)
    files = shard_files(args)
    sizes = [os.path.getsize(p) for p in files]
    records = sum(1 for p in files for _ in tf.io.tf_record_iterator(p))
    out = ['%s: %d shards, %d records, %.0f KB a record; %s' % (
        PROG, len(files), records, sum(sizes) / max(records, 1) / 1e3, cpu_description())]
    for skip, table in ((args.skip_pipelines, pipelines_table),
                        (args.skip_steps, steps_table)):
        if not skip:
            out.append(table(files, args))
    out.append('%s: load average at the end %.1f' % (
        PROG, os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')))
    print('\n'.join(out))
    return 0


def start_tensorflow():
    """TensorFlow, quiet, with XLA's CPU JIT available to --xla; returns tf."""
    flags = os.environ.get('TF_XLA_FLAGS', '')
    if '--tf_xla_cpu_global_jit' not in flags:
        # Only read when a session asks for global JIT (--xla); harmless otherwise.
        os.environ['TF_XLA_FLAGS'] = (flags + ' --tf_xla_cpu_global_jit').strip()
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    tf = lazy_tensorflow.tensorflow()
    tf.logging.set_verbosity(tf.logging.ERROR)
    return tf


def shard_files(args):
    """The shards of --files, else the benchmark's own (made once in --shard_dir); a
    UsageError when --files matches nothing."""
    if args.files:
        files = sorted(glob.glob(args.files))
        if not files:
            raise errors.UsageError('no file matches %s' % args.files)
        return files
    shard_dir = args.shard_dir or '%s_%s_%d_%d' % (
        SHARD_DIR_PREFIX, args.label_layout, args.num_images, args.class_num)
    return make_shards(shard_dir, args.num_images, class_num=args.class_num,
                       label_layout=args.label_layout)


def pipelines_table(files, args):
    """The input pipelines of --pipelines measured in turns: their table; a UsageError
    for a bad --pipelines."""
    names = [n.strip() for n in args.pipelines.split(',') if n.strip()]
    unknown = sorted(set(names) - set(PIPELINES))
    if unknown or 'floor' not in names:
        raise errors.UsageError('--pipelines must include floor and name only %s'
                                % ', '.join(PIPELINES))
    if args.label_layout == 'sparse' and 'spec_literal' in names:
        names.remove('spec_literal')
        sys.stderr.write('%s: spec_literal left out: it reads only dense labels\n'
                         % PROG)
    measured = [build_pipeline(n, files, args) for n in names]
    run_turns(measured, args.repeats, args.warmup_batches, args.seconds, 3, 'pipeline')
    floor = measured[names.index('floor')]
    return format_table(
        'input pipelines, batch %d, image %d:' % (args.batch_size, args.image_size),
        measured, ratio_column(measured, floor), 'floor', args)


def steps_table(files, args):
    """The training steps (synthetic, the real input_fn, --compare_model's) measured in
    turns: their table; a UsageError for a bad --compare_model."""
    steps = [build_step('synthetic', files, args),
             build_step('input_fn(%s)' % args.step_augment_on, files, args)]
    extra = [n.strip() for n in args.compare_model.split(',') if n.strip()]
    if set(extra) - {'original', 'xla'}:
        raise errors.UsageError('--compare_model takes original and/or xla')
    if 'original' in extra:
        steps.append(build_step('synthetic, original graph', files, args,
                                literal_model=True))
    if 'xla' in extra:
        steps.append(build_step('synthetic, XLA %s' % ('off' if args.xla else 'on'),
                                files, args, xla=not args.xla))
    run_turns(steps, args.step_repeats, args.step_warmup, args.step_seconds, 2, 'step')
    return format_table(
        'training steps, ResNet-%d, batch %d, image %d, %s%s:' % (
            args.resnet_size, args.step_batch_size, args.step_image_size, args.dtype,
            ', XLA' if args.xla else ''),
        steps, ratio_column(steps, steps[0]), steps[0].name, args)
