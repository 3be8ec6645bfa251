"""Where mlimages/model/memory.py's constants come from, and how close its estimate comes
to the memory a training step takes, measured on this machine's CPU.

    .venv/bin/python tools/memory_peak.py --table                 # ARCHITECTURE, from the graph
    .venv/bin/python tools/memory_peak.py --measure 18:4:64 50:8:112 --class_num 1000
    .venv/bin/python tools/memory_peak.py --measure 18:4:64 18:16:64 > points.jsonl
    .venv/bin/python tools/memory_peak.py --fit points.jsonl more_points.jsonl

--table builds resnet.py's forward graph of each depth (batch 7 at 224 px, nothing runs)
and prints memory.ARCHITECTURE: the body's parameters, the features into the head, and R,
the elements an image of the outputs of every Conv2D, Relu, Pad and AddV2 (what the
backward pass reads: a convolution's input, a batch norm's -- a convolution's output or a
residual sum --, a ReLU's output).

--measure DEPTH:BATCH:IMAGE ... trains with model_fn's real training step (synthetic
batches, Momentum, the loss, --dtype) under TensorFlow's BFC allocator on the CPU
(TF_CPU_ALLOCATOR_USE_BFC=true, set here before TensorFlow starts: the allocator a GPU
uses): two steps to warm up, the peak statistics reset, one step; the allocator's peak
(tf.config.experimental.get_memory_info) is the step's with the variables it keeps. One
JSON line a point, with memory.estimate and estimate / peak. --fit FILE ...:
PARAM_BYTES and ACTIVATION_FACTOR from the points of such lines and of this run (fit()).
"""
import argparse
import collections
import json
import os

from mlimages.cli import entry

PROG = 'memory_peak.py'
MARKER_BATCH = 7  # a batch no other dimension of the graph has: marks the activations
RETAINED_OPS = ('Conv2D', 'Relu', 'Pad', 'AddV2')


def build_parser():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split('\n\n')[0])
    parser.add_argument('--table', action='store_true',
                        help='print memory.ARCHITECTURE from the graph of every depth')
    parser.add_argument('--measure', nargs='+', default=[], metavar='DEPTH:BATCH:IMAGE',
                        help='measure the peak of a training step at these points')
    parser.add_argument('--class_num', type=int, default=1000)
    parser.add_argument('--dtype', default='fp32', choices=('fp32', 'bf16'),
                        help='fp16\'s rewrite runs only on a GPU: not measurable here')
    parser.add_argument('--fit', nargs='*', metavar='FILE',
                        help='fit PARAM_BYTES and ACTIVATION_FACTOR to the points of these '
                             'files (the JSON lines of --measure) and of this run')
    return parser


def architecture(tf, resnet, depth):
    """(body parameters, features, R) of one depth, from its forward graph."""
    import numpy as np
    with tf.Graph().as_default() as graph:
        model = resnet.ResNet(depth, 1)
        model(tf.zeros([MARKER_BATCH, 224, 224, 3]), True)
        retained = collections.Counter()
        for op in graph.get_operations():
            for tensor in op.outputs:
                shape = tensor.shape.as_list() if tensor.shape.rank == 4 else None
                if op.type in RETAINED_OPS and shape and shape[0] == MARKER_BATCH:
                    retained[op.type] += int(np.prod(shape)) // MARKER_BATCH
        body = sum(int(np.prod(v.shape.as_list())) for v in tf.global_variables()
                   if not v.op.name.startswith('logits/'))
        return body, model.features.shape.as_list()[1], sum(retained.values())


def measure(tf, depth, batch, image, class_num, dtype):
    """The BFC allocator's peak bytes over one training step (the module docstring)."""
    import flags as flags_lib
    from mlimages.data import input_pipeline
    from mlimages.distributed import devices
    from mlimages.run import model_fn
    settings = flags_lib.replace(
        flags_lib.default_settings(), resnet_size=depth, batch_size=batch, image_size=image,
        class_num=class_num, dtype=dtype, use_synthetic_data=True)
    derived = model_fn.Derived(
        images_per_step=batch, images_per_global_step=batch, max_steps=None,
        worker_name='worker', job=False, legacy_counters=False, leaf_mask=None,
        warm_start=None, head_shards=1, stop_together=False, score_hook=None)
    with tf.Graph().as_default():
        features = {input_pipeline.SYNTHETIC: tf.zeros([batch, image, image, 0], tf.uint8)}
        spec = model_fn.resnet_model_fn(features, tf.zeros([batch, 0]),
                                        tf.estimator.ModeKeys.TRAIN,
                                        model_fn.parts(settings, 'channels_last'), derived)
        with tf.Session(config=devices.session_config()) as session:
            session.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            session.run(spec.train_op)
            session.run(spec.train_op)
            tf.config.experimental.reset_memory_stats('CPU:0')
            session.run(spec.train_op)
            return tf.config.experimental.get_memory_info('CPU:0')['peak']


def fit(points):
    """ACTIVATION_FACTOR from what the batch adds: over every pair of points that differ
    only in the batch, the peak's growth over what the formula's activations grow (pooled:
    the larger the growth, the more it weighs); then PARAM_BYTES, the median over the
    points of what is left of the peak a parameter. LOGIT_BYTES is held: at sizes a CPU
    measures, the head's per-image tensors are below the peak's noise."""
    import numpy as np
    from mlimages.model import memory
    groups = collections.defaultdict(list)
    for p in points:
        groups[p['depth'], p['image'], p['class_num'], p['dtype']].append(p)
    grown = activations = 0.0
    for (depth, image, class_num, dtype), group in groups.items():
        low, high = min(group, key=lambda p: p['batch']), max(group, key=lambda p: p['batch'])
        more = high['batch'] - low['batch']
        grown += high['peak'] - low['peak'] - more * memory.LOGIT_BYTES * class_num
        activations += more * memory.per_image(depth, 0, image, dtype) / \
            memory.ACTIVATION_FACTOR
    factor = grown / activations
    left = [(p['peak'] - p['batch'] * (factor / memory.ACTIVATION_FACTOR * memory.per_image(
        p['depth'], 0, p['image'], p['dtype']) + memory.LOGIT_BYTES * p['class_num'])) /
        memory.parameters(p['depth'], p['class_num']) for p in points]
    return {'PARAM_BYTES': round(float(np.median(left)), 2),
            'ACTIVATION_FACTOR': round(factor, 3)}


def main(argv=None):
    """Command-line entry point; returns the exit status (0)."""
    return entry.run(PROG, lambda: build_parser().parse_args(argv), measure_and_fit)


def measure_and_fit(args):
    """Prints the --table of architectures, the --measure points and the --fit of them;
    returns the exit status (0)."""
    os.environ['TF_CPU_ALLOCATOR_USE_BFC'] = 'true'  # before TensorFlow makes its allocator
    from mlimages.config import startup
    startup.before_tensorflow(PROG, [])
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    tf.get_logger().setLevel('ERROR')
    import resnet
    if args.table:
        for depth in resnet.SUPPORTED_SIZES:
            print('    %d: (%d, %d, %d),' % ((depth,) + architecture(tf, resnet, depth)))
    points = measured_points(tf, args.measure, args.class_num, args.dtype)
    if args.fit is not None:
        for path in args.fit:
            with open(path) as lines:
                points += [json.loads(line) for line in lines if line.startswith('{"depth"')]
        print(json.dumps(fit(points)))
    return 0


def measured_points(tf, texts, class_num, dtype):
    """The points of --measure DEPTH:BATCH:IMAGE ... (measure against memory.estimate),
    each printed as its JSON line once measured."""
    from mlimages.model import memory
    points = []
    for text in texts:
        depth, batch, image = (int(v) for v in text.split(':'))
        peak = measure(tf, depth, batch, image, class_num, dtype)
        estimate = memory.estimate(depth, class_num, batch, image, dtype)
        points.append(dict(depth=depth, batch=batch, image=image, class_num=class_num,
                           dtype=dtype, peak=peak, estimate=int(estimate),
                           ratio=round(estimate / peak, 3)))
        print(json.dumps(points[-1]), flush=True)
    return points
