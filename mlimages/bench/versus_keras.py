"""train.py's training step against Keras' ResNet-V2 of the same depth (--versus_keras).

    .venv/bin/python tools/benchmark.py --versus_keras --resnet_size 50

Both sides train on a synthetic batch of the same size, classes and image size, with a
sigmoid cross-entropy and Momentum SGD:
  train.py  model_fn's training step as train.py --use_synthetic_data builds it (its
            --dtype, its session options and CPU choices), run in this process
  Keras     tf.keras.applications.ResNet<depth>V2(weights=None), compiled with
            BinaryCrossentropy(from_logits=True) and SGD(momentum=0.9), stepped by the
            train function model.fit runs, in a child process (TensorFlow 2 mode); bf16 is
            the 'mixed_bfloat16' policy
train.py's network does more work than Keras' V2 at the same depth (the original's: no
max-pool, so each stage's first block reads its input at twice the resolution; at 160 px
ResNet-50 is 2.11 G multiply-adds an image against Keras' 1.78 G, and 1.7x the batch
norm's elements). train.py runs with the kernel library its start-up chooses
(cpu.prefer_onednn), Keras with TensorFlow's default; the table names both. The sides
take turns of --keras_steps steps, the first side alternating; the table shows the
medians of the turns' images/s and of the per-turn ratio train.py / Keras. fp32 always; bf16 only on a
CPU with AMX_BF16 or AVX512_BF16 (config/cpu.py), the line says why not otherwise.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

from mlimages.config import cpu

PROG = 'benchmark.py'
KERAS_MODELS = {50: 'ResNet50V2', 101: 'ResNet101V2', 152: 'ResNet152V2'}
WARMUP_STEPS = 2


def add_arguments(parser):
    group = parser.add_argument_group('train.py vs Keras (--versus_keras; the depth is '
                                      '--resnet_size)')
    group.add_argument('--versus_keras', action='store_true',
                       help='train.py\'s training step against Keras\' ResNet-V2 of the '
                            'same depth, side by side, fp32 and bf16 where the CPU has it '
                            '(mlimages/bench/versus_keras.py)')
    group.add_argument('--keras_image_size', type=int, default=160,
                       help='image size of both sides\' synthetic batch')
    group.add_argument('--keras_batch_size', type=int, default=16,
                       help='images a step of each side')
    group.add_argument('--keras_class_num', type=int, default=1000,
                       help='classes of both models')
    group.add_argument('--keras_steps', type=int, default=8,
                       help='timed steps of each side in a turn')
    group.add_argument('--keras_turns', type=int, default=3,
                       help='turns; the side that goes first alternates')


def dtypes(this_cpu):
    """(the dtypes compared, a line on bf16 or None)."""
    if cpu.has_bf16(this_cpu):
        return ['fp32', 'bf16'], None
    return ['fp32'], ('bf16 not compared: the CPU has neither %s'
                      % ' nor '.join(cpu.BF16_FLAGS))


def thread_counts():
    """train.py's inter-op and intra-op threads for this process (0: TensorFlow's)."""
    from mlimages.distributed import devices
    inter_op, intra_op, _ = devices.share_threads(devices.cpu_share(), 0, 0, 0)
    return inter_op, intra_op


class TrainPySide(object):
    """model_fn's training step on synthetic data, as train.py builds and runs it."""

    def __init__(self, args, dtype):
        from mlimages.cli import lazy_tensorflow
        tf = lazy_tensorflow.tensorflow()
        import flags
        from mlimages.data import input_pipeline
        from mlimages.run import estimator, model_fn
        settings = flags.replace(
            flags.default_settings(), resnet_size=args.resnet_size,
            class_num=args.keras_class_num, lr=0.01, batch_size=args.keras_batch_size,
            image_size=args.keras_image_size, dtype=dtype, use_synthetic_data=True)
        inter_op, intra_op = thread_counts()
        settings = estimator.for_this_process(settings.replace(
            devices=settings.devices.replace(inter_op_threads=inter_op,
                                              intra_op_threads=intra_op)))
        self.graph = tf.Graph()
        with self.graph.as_default():
            dataset = input_pipeline.input_fn(settings.data, settings.model, True, [])
            features, labels = tf.data.make_one_shot_iterator(dataset).get_next()
            forms = estimator.conv_forms()
            derived = model_fn.Derived(images_per_step=args.keras_batch_size,
                                       cpu_input_grad=forms.input_grad.value,
                                       cpu_pointwise=forms.pointwise.value)
            parts = model_fn.parts(settings, settings.model.data_format)
            self.train_op = model_fn.make_model_fn(parts, derived)(
                features, labels, tf.estimator.ModeKeys.TRAIN).train_op
            init = [tf.global_variables_initializer(), tf.local_variables_initializer()]
        self.session = tf.Session(graph=self.graph, config=estimator.session_config(
            settings.devices, dtype))
        self.session.run(init)
        self.steps(WARMUP_STEPS)

    def steps(self, n):
        """(wall seconds, CPU seconds of this process) of n steps."""
        wall, cpu_time = time.monotonic(), time.process_time()
        for _ in range(n):
            self.session.run(self.train_op)
        return time.monotonic() - wall, time.process_time() - cpu_time

    def close(self):
        self.session.close()


def keras_environment(environ):
    """The Keras child's environment: this one, without the oneDNN setting train.py's
    start-up chose (cpu.prefer_onednn): Keras runs on TensorFlow's default kernels, as
    its users do; a setting of the user's stays for both sides."""
    env = dict(environ)
    if env.pop(cpu.ONEDNN_CHOSEN_ENV, None):
        env.pop(cpu.ONEDNN_ENV, None)
    return env


class KerasSide(object):
    """The Keras peer in a child process: it builds, warms up, then runs n steps on each
    request and answers their wall and CPU seconds."""

    def __init__(self, args, dtype):
        inter_op, intra_op = thread_counts()
        spec = dict(model=KERAS_MODELS[args.resnet_size], image_size=args.keras_image_size,
                    batch_size=args.keras_batch_size, class_num=args.keras_class_num,
                    dtype=dtype, inter_op=inter_op, intra_op=intra_op)
        env = keras_environment(os.environ)
        env.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
        self.child = subprocess.Popen(
            [sys.executable, '-m', 'mlimages.bench.versus_keras', json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._answer()  # ready: built and warmed up

    def _answer(self):
        line = self.child.stdout.readline()
        if not line:
            raise RuntimeError('the Keras child process ended (status %s)'
                               % self.child.wait())
        return tuple(float(x) for x in line.split())

    def steps(self, n):
        self.child.stdin.write('%d\n' % n)
        self.child.stdin.flush()
        return self._answer()

    def close(self):
        self.child.stdin.close()
        self.child.wait()


def compare(args, dtype):
    """{'rates': [train.py's images/s of each turn, Keras'], 'cpu_ms': [their CPU ms an
    image]}."""
    sides = [TrainPySide(args, dtype), KerasSide(args, dtype)]
    images = args.keras_steps * args.keras_batch_size
    rates, cpu_ms = [[], []], [[], []]
    try:
        for turn in range(args.keras_turns):
            for i in ([0, 1] if turn % 2 == 0 else [1, 0]):
                wall, cpu_time = sides[i].steps(args.keras_steps)
                rates[i].append(images / wall)
                cpu_ms[i].append(cpu_time * 1e3 / images)
            sys.stderr.write('%s: %s turn %d/%d: train.py %.2f, Keras %.2f images/s\n' % (
                PROG, dtype, turn + 1, args.keras_turns, rates[0][-1], rates[1][-1]))
    finally:
        for side in sides:
            side.close()
    return {'rates': rates, 'cpu_ms': cpu_ms}


def median_ratio(ours, theirs):
    return float(np.median(np.array(ours) / np.array(theirs)))


def table(args, results, note):
    """The side-by-side table's lines: results, [(dtype, compare's figures)]."""
    this_cpu = cpu.this_cpu()
    ours, theirs = (cpu.onednn(this_cpu, env)
                    for env in (os.environ, keras_environment(os.environ)))
    lines = ['train.py vs Keras %s: ResNet-%d, batch %d, image %d, %d classes' % (
                 KERAS_MODELS[args.resnet_size], args.resnet_size, args.keras_batch_size,
                 args.keras_image_size, args.keras_class_num),
             'CPU %s: oneDNN kernels for train.py %s (%s), for Keras %s (%s)' % (
                 this_cpu.model or 'unknown', 'on' if ours.value else 'off', ours.reason,
                 'on' if theirs.value else 'off', theirs.reason),
             '  %-6s %16s %13s %8s %19s %13s %10s' % (
                 'dtype', 'train.py img/s', 'Keras img/s', 'ratio', 'train.py CPU ms/img',
                 'Keras CPU ms', 'CPU ratio')]
    for dtype, figures in results:
        (ours, theirs), (our_cpu, their_cpu) = figures['rates'], figures['cpu_ms']
        lines.append('  %-6s %16.2f %13.2f %7.2fx %19.1f %13.1f %9.2fx' % (
            dtype, float(np.median(ours)), float(np.median(theirs)),
            median_ratio(ours, theirs), float(np.median(our_cpu)),
            float(np.median(their_cpu)), median_ratio(their_cpu, our_cpu)))
    lines.append('  (medians of %d turns of %d steps a side, the first side alternating; '
                 'ratio = median per-turn ratio of images/s, train.py / Keras; CPU ratio '
                 '= the same of CPU time an image, Keras / train.py: the fairer one when '
                 'other jobs share the cores)' % (args.keras_turns, args.keras_steps))
    if note:
        lines.append('  ' + note)
    return lines


def main(args):
    """--versus_keras: the side-by-side table on stdout; 0, or 2 for a depth Keras lacks."""
    if args.resnet_size not in KERAS_MODELS:
        sys.stderr.write('%s: error: --resnet_size=%d: Keras has ResNet-V2 only at depths '
                         '%s; give one of them with --versus_keras\n' % (
                             PROG, args.resnet_size, ', '.join(map(str, KERAS_MODELS))))
        return 2
    compared, note = dtypes(cpu.this_cpu())
    results = [(dtype, compare(args, dtype)) for dtype in compared]
    print('\n'.join(table(args, results, note)))
    return 0


def peer_main(spec_json):
    """The Keras child: builds the model of the spec, warms up, prints one line; then for
    every line n on stdin runs n training steps and prints their wall and CPU seconds."""
    spec = json.loads(spec_json)
    import tensorflow as tf
    tf.get_logger().setLevel('ERROR')
    tf.config.threading.set_inter_op_parallelism_threads(spec['inter_op'])
    tf.config.threading.set_intra_op_parallelism_threads(spec['intra_op'])
    if spec['dtype'] == 'bf16':
        tf.keras.mixed_precision.set_global_policy('mixed_bfloat16')
    size, batch, classes = spec['image_size'], spec['batch_size'], spec['class_num']
    model = getattr(tf.keras.applications, spec['model'])(
        weights=None, input_shape=(size, size, 3), classes=classes,
        classifier_activation=None)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
    images = tf.random.uniform([batch, size, size, 3], -1.0, 1.0, seed=1)
    labels = tf.cast(tf.random.uniform([batch, classes], seed=2) < 0.01, tf.float32)
    batches = iter(tf.data.Dataset.from_tensors((images, labels)).repeat())
    train_step = model.make_train_function()

    def steps(n):
        wall, cpu_time = time.monotonic(), time.process_time()
        for _ in range(n):
            float(train_step(batches)['loss'])  # waits for the step
        return '%r %r' % (time.monotonic() - wall, time.process_time() - cpu_time)
    steps(WARMUP_STEPS)
    print('0 0', flush=True)
    for line in sys.stdin:
        print(steps(int(line)), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(peer_main(sys.argv[1]))
