"""Inference speed and precision of each engine x dtype on one model (--engines).

    .venv/bin/python tools/benchmark.py --engines                  # a random ResNet-50, 224 px
    .venv/bin/python tools/benchmark.py --engines --engines_model out/checkpoint \
        --engines_images val_images/                               # + agreement with fp32

The variants: TensorFlow (serving.py's float network restored from the checkpoint, in
precision.py's fp32 or bf16) and OpenVINO (openvino_engine.py, INFERENCE_PRECISION_HINT f32
or bf16), forward passes of --engines_batch random network inputs. bf16 runs only on a CPU
with bfloat16 instructions (config.cpu.has_bf16); elsewhere its row says why not. OpenVINO
rows need openvino (requirements-openvino.txt).

Speed: in turns, each turn times --engines_batches batches of every variant once (after
two warm-up batches at the start), in rotating order; the table shows the median images/s
over --engines_turns turns and the median of the per-turn ratios to TensorFlow fp32's. The first line names the
CPU and whether it has bfloat16 instructions.

Precision (--engines_images, a directory or list of images; a trained --engines_model
makes it meaningful): every image through each variant's Predictor, as tools/predict.py and
tools/extract_features.py run it, against TensorFlow fp32: the share of images whose top-1
class is the same, the mean share of top-5 classes in common, the features' cosine (the
lowest and the mean), the largest |score difference|. The mAP difference is
train.py --mode=eval's figure, run with --dtype=fp32 and --dtype=bf16 on the val split.
"""
import importlib.util
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from mlimages.cli import lazy_tensorflow
from mlimages.config import cpu

PROG = 'benchmark.py'
VARIANTS = (('tensorflow', 'fp32'), ('openvino', 'fp32'), ('tensorflow', 'bf16'),
            ('openvino', 'bf16'))
TOP_K = 5


def add_arguments(parser):
    """benchmark.py's --engines flags."""
    group = parser.add_argument_group('inference engines (mlimages/bench/engines.py)')
    group.add_argument('--engines', action='store_true',
                       help='time inference of each engine x dtype (TensorFlow, OpenVINO; '
                            'fp32, bf16) on one model instead of the default set')
    group.add_argument('--engines_model', default='',
                       help='a checkpoint of train.py (model directory or path); default: a '
                            'ResNet of --engines_resnet_size with random weights')
    group.add_argument('--engines_resnet_size', type=int, default=50,
                       help='depth of the random model (default: 50)')
    group.add_argument('--engines_class_num', type=int, default=11166,
                       help='classes of the random model (default: 11166)')
    group.add_argument('--engines_image_size', type=int, default=224,
                       help='network input size (default: 224; a checkpoint\'s trained size '
                            'must be given here)')
    group.add_argument('--engines_batch', type=int, default=16,
                       help='images a forward pass (default: 16)')
    group.add_argument('--engines_batches', type=int, default=4,
                       help='timed batches of each variant a turn (default: 4)')
    group.add_argument('--engines_turns', type=int, default=6,
                       help='turns; the table shows medians (default: 6)')
    group.add_argument('--engines_images', default='',
                       help='a directory or list of images: also print each variant\'s '
                            'agreement with TensorFlow fp32 on them')


def skip_reason(engine, dtype):
    """Why a variant does not run here, or None."""
    if engine == 'openvino' and importlib.util.find_spec('openvino') is None:
        return 'openvino is not installed (pip install -r requirements-openvino.txt)'
    if dtype == 'bf16' and not cpu.has_bf16(cpu.this_cpu()):
        return 'this CPU has no bfloat16 instructions (AVX512_BF16 or AMX)'
    return None


def random_checkpoint(model, directory):
    """A checkpoint of the model group's network with its initial (random) weights."""
    tf = lazy_tensorflow.tensorflow()
    from mlimages.distributed import devices
    from mlimages.inference import serving
    with tf.Graph().as_default():
        serving.build_float_network(model, 'channels_last')
        with tf.Session(config=devices.session_config()) as session:
            session.run(tf.global_variables_initializer())
            return tf.train.Saver().save(session, os.path.join(directory, 'model.ckpt'))


class TensorFlowNetwork(object):
    """serving.build_float_network in `dtype`, restored: network inputs -> outputs."""

    def __init__(self, checkpoint, model, dtype):
        tf = lazy_tensorflow.tensorflow()
        from mlimages.distributed import devices
        from mlimages.inference import serving
        graph = tf.Graph()
        with graph.as_default():
            self._images, self._outputs = serving.build_float_network(
                model.replace(dtype=dtype), 'channels_last')
            self.session = tf.Session(graph=graph, config=devices.session_config())
            serving.restore(self.session, checkpoint)

    def __call__(self, images):
        return self.session.run(self._outputs, {self._images: images})

    def close(self):
        self.session.close()


class OpenVinoNetwork(object):
    def __init__(self, checkpoint, model, dtype):
        from mlimages.inference import openvino_engine
        self.predictor = openvino_engine.OpenVinoPredictor.from_checkpoint(
            checkpoint, model, dtype=dtype)

    def __call__(self, images):
        return self.predictor.network(images)

    def close(self):
        self.predictor.close()


NETWORKS = {'tensorflow': TensorFlowNetwork, 'openvino': OpenVinoNetwork}


def speed(networks, inputs, batches, turns, say):
    """{variant: [images/s of each turn]}, each turn timing `batches` forward passes of
    every network in turn (the order rotating)."""
    rates = {variant: [] for variant in networks}
    order = list(networks)
    for network in networks.values():
        for _ in range(2):
            network(inputs)
    for turn in range(turns):
        for variant in order:
            start = time.perf_counter()
            for _ in range(batches):
                networks[variant](inputs)
            rates[variant].append(batches * len(inputs) / (time.perf_counter() - start))
        say('turn %d of %d: %s' % (turn + 1, turns, ', '.join(
            '%s %s %.1f' % (variant + (rates[variant][-1],)) for variant in order)))
        order = order[1:] + order[:1]
    return rates


def agreement(checkpoint, model, variants, images, batch_size):
    """{variant: (top-1 same, top-5 overlap, min cosine, mean cosine, max |score diff|)} of
    each variant's Predictor against TensorFlow fp32's on images ((name, path) pairs)."""
    from mlimages.inference import openvino_engine, serving
    outputs = {}
    for engine, dtype in [('tensorflow', 'fp32')] + [v for v in variants
                                                      if v != ('tensorflow', 'fp32')]:
        module = openvino_engine if engine == 'openvino' else serving
        predictor = module.load_predictor(checkpoint=checkpoint, model=model, dtype=dtype,
                                          top_k=TOP_K)
        try:
            outputs[engine, dtype] = dict(serving.predict_images(
                predictor, images, batch_size, lambda name, reason: None,
                ('scores', 'features', 'top_k_classes')))
        finally:
            predictor.close()
    want = outputs['tensorflow', 'fp32']
    found = {}
    for variant, got in outputs.items():
        names = sorted(want)
        same = np.mean([got[n]['top_k_classes'][0] == want[n]['top_k_classes'][0]
                        for n in names])
        overlap = np.mean([len(set(got[n]['top_k_classes']) & set(want[n]['top_k_classes']))
                           / float(len(want[n]['top_k_classes'])) for n in names])
        cosine = [float(np.dot(got[n]['features'], want[n]['features']) / max(
            1e-30, np.linalg.norm(got[n]['features']) * np.linalg.norm(want[n]['features'])))
            for n in names]
        worst = max(float(np.max(np.abs(got[n]['scores'] - want[n]['scores']))) for n in names)
        found[variant] = (same, overlap, min(cosine), float(np.mean(cosine)), worst)
    return found, len(want)


def cpu_line():
    from mlimages.bench.pipelines import cpu_description
    found = cpu.has_bf16(cpu.this_cpu())
    return '%s; bfloat16 instructions: %s' % (cpu_description(), ', '.join(found) or 'none')


def table(model, args, rates, agreed, skipped):
    """The text of the results."""
    base = rates[('tensorflow', 'fp32')]
    lines = ['%s: engines on ResNet-%d, %d px, %d classes, batch %d, forward passes only '
             '(median of %d turns); %s' % (PROG, model.resnet_size, model.image_size,
                                          model.class_num, args.engines_batch,
                                          args.engines_turns, cpu_line()),
             '%-11s %-5s %9s %9s' % ('engine', 'dtype', 'images/s', 'x TF fp32')
             + ('  top-1 same  top-5 overlap  cosine min / mean  max |score diff|'
                if agreed else '')]
    for variant in VARIANTS:
        if variant in skipped:
            lines.append('%-11s %-5s not run: %s' % (variant + (skipped[variant],)))
            continue
        # the ratio: the median of each turn's, taken minutes apart from the next turn's
        ratio = statistics.median(a / b for a, b in zip(rates[variant], base))
        line = '%-11s %-5s %9.1f %9.2f' % (variant + (statistics.median(rates[variant]),
                                                      ratio))
        if agreed:
            same, overlap, low, mean, worst = agreed[variant]
            line += '  %9.1f%%  %12.1f%%  %8.5f / %.5f  %16.2g' % (
                100 * same, 100 * overlap, low, mean, worst)
        lines.append(line)
    return lines


def main(args):
    """tools/benchmark.py --engines; returns the exit status."""
    import flags
    from mlimages.inference import inference_io
    say = lambda text: sys.stderr.write('%s: %s\n' % (PROG, text))
    model = flags.default_settings().model.replace(
        resnet_size=args.engines_resnet_size, class_num=args.engines_class_num,
        image_size=args.engines_image_size, data_format='channels_last')
    skipped = {v: skip_reason(*v) for v in VARIANTS if skip_reason(*v)}
    if ('tensorflow', 'fp32') in skipped:
        say('error: TensorFlow fp32, the baseline, cannot run: %s'
            % skipped['tensorflow', 'fp32'])
        return 2
    variants = [v for v in VARIANTS if v not in skipped]
    with tempfile.TemporaryDirectory(prefix='engines-') as work:
        if args.engines_model:
            from mlimages.inference import serving
            checkpoint, model = serving.checkpoint_model(
                args.engines_model, 'engines_model', model, None, None, 'original')
        else:
            say('a ResNet-%d with random weights' % model.resnet_size)
            checkpoint = random_checkpoint(model, work)
        inputs = np.random.default_rng(0).uniform(
            -1, 1, [args.engines_batch, model.image_size, model.image_size, 3]
        ).astype(np.float32)
        networks = {}
        try:
            for variant in variants:
                say('loading %s %s' % variant)
                networks[variant] = NETWORKS[variant[0]](checkpoint, model, variant[1])
            rates = speed(networks, inputs, args.engines_batches, args.engines_turns, say)
        finally:
            for network in networks.values():
                network.close()
        agreed = None
        if args.engines_images:
            images = inference_io.collect_images([args.engines_images]) \
                if os.path.isdir(args.engines_images) \
                else inference_io.collect_images(list_file=args.engines_images)
            agreed, count = agreement(checkpoint, model, variants, images, args.engines_batch)
            say('agreement with TensorFlow fp32 on %d images of %s' % (count,
                                                                     args.engines_images))
    print('\n'.join(table(model, args, rates, agreed, skipped)))
    return 0
