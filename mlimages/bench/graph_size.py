"""Size of the training graph against the number of replicas, measured on this machine.

    .venv/bin/python tools/graph_size.py                                # ResNet-18, 1/2/4 replicas
    .venv/bin/python tools/graph_size.py --resnet_size 101 --replicas 1 4 --class_num 11166

For each replica count R a fresh child process splits its CPU into R logical devices and
builds train.py's real training graph there (estimator.make_estimator: MirroredStrategy
over the R devices, model_fn, the optimizer, synthetic data), up to the moment the first
session would start; a hook then reports

    bytes      len(graph_def.SerializeToString()) (protobuf stops at 2 GB)
    control    control inputs over all nodes (the '^name' inputs): linear in R
               (TensorFlow's own optimizer under MirroredStrategy grouped every device's
               updates again for each device, R x R x variables of them, until
               distribute.FinishOnce)
    gradient_control  those of the gradient ops (scope gradients/, replica_k/gradients/)
    nodes      nodes of the graph
    build_s    seconds from estimator.train() to the hook (graph construction)

and the child exits without training. One replica is measured twice: as train.py
--num_gpus=1 builds it (no strategy) and under MirroredStrategy over one device. A graph
that grows linearly has bytes(R) close to R x bytes(1), bytes(1) the one-device
MirroredStrategy graph's (a strategy's variables are resource variables with per-device
copies, a fixed cost per replica); the table's last column is bytes(R) / (R x bytes(1)). GPU graphs are the same
ops on other devices, so their size follows the same law.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from mlimages.cli import entry

PROG = 'graph_size.py'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r'''
import json, os, re, sys, time
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
R = int(sys.argv[1])
cpu = tf.config.list_physical_devices('CPU')[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * R)
from mlimages.distributed import distribute
distribute.mirrored_devices = lambda k: ['/device:CPU:%d' % i for i in range(k)]
if sys.argv[7] == 'mirrored':  # MirroredStrategy even over one device
    plain = distribute.train_distribute
    distribute.train_distribute = lambda d, n, devices=None, gpu_count=0, **kw: plain(
        d, n, distribute.mirrored_devices(n), gpu_count, **kw)
import flags as flags_lib
import train
from mlimages.run import estimator as estimator_lib

class Measured(Exception):
    pass

class Probe(tf.train.SessionRunHook):
    def begin(self):
        graph_def = tf.get_default_graph().as_graph_def()
        nodes = graph_def.node
        raise Measured(json.dumps({
            'replicas': R, 'strategy': sys.argv[7], 'bytes': len(graph_def.SerializeToString()), 'nodes': len(nodes),
            'control': sum(1 for n in nodes for i in n.input if i.startswith('^')),
            'gradient_control': sum(1 for n in nodes for i in n.input if i.startswith('^')
                                    and re.match(r'(replica_[0-9]+/)?gradients/', n.name)),
            'build_s': round(time.time() - START, 1)}))

F = flags_lib.FLAGS
F(['train.py', '--resnet_size=%s' % sys.argv[2], '--class_num=%s' % sys.argv[3],
   '--image_size=%s' % sys.argv[4], '--batch_size=2', '--num_gpus=%d' % R,
   '--use_synthetic_data', '--data_format=NHWC', '--visiable_gpu=-1', '--max_iter=1',
   '--model_dir=' + sys.argv[5], '--dtype=' + sys.argv[6]] + sys.argv[8:])
settings = flags_lib.settings(F)
settings = estimator_lib.for_this_process(settings)  # --data_format=NHWC, no GPU
plan = distribute.plan('none', R, 1, 0, 2, R, {})
estimator = estimator_lib.make_estimator(
    settings, estimator_lib.derived_values(settings, plan), plan)
estimator._session_config.device_count['CPU'] = R
START = time.time()
try:
    estimator.train(estimator_lib.training_input_fn(settings.data, settings.model, []),
                    hooks=[Probe()], max_steps=1)
except Measured as e:
    print('GRAPH ' + str(e))
'''


def measure(replicas, resnet_size, class_num, image_size, dtype='fp32', extra=(),
            mirrored=True, timeout=3600):
    """One child's figures (a dict, see the module docstring). mirrored: MirroredStrategy
    also for one replica (train.py --num_gpus=1 builds no strategy)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES='', TF_CPP_MIN_LOG_LEVEL='3')
    with tempfile.TemporaryDirectory() as model_dir:
        result = subprocess.run(
            [sys.executable, '-c', CHILD, str(replicas), str(resnet_size),
             str(class_num), str(image_size), model_dir, dtype,
             'mirrored' if mirrored or replicas > 1 else 'none'] + list(extra),
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in result.stdout.splitlines() if l.startswith('GRAPH ')]
    if result.returncode != 0 or not lines:
        raise RuntimeError('graph of %d replicas: exit %d\n%s' % (
            replicas, result.returncode, result.stderr[-3000:]))
    return json.loads(lines[-1][len('GRAPH '):])


def linear_ratios(rows):
    """bytes(R) / (R x bytes(1)) of each MirroredStrategy row, bytes(1) the one-device
    MirroredStrategy graph's."""
    base = [r['bytes'] for r in rows if r['replicas'] == 1 and r['strategy'] == 'mirrored']
    return [r['bytes'] / (base[0] * r['replicas']) if base and r['strategy'] == 'mirrored'
            else float('nan') for r in rows]


def table(rows):
    out = ['replicas  strategy       bytes      nodes   control  grad_ctl  build_s  '
           'bytes/linear']
    for r, ratio in zip(rows, linear_ratios(rows)):
        out.append('%8d  %-8s %10d %10d %9d %9d %8.1f %13.2f' % (
            r['replicas'], r['strategy'], r['bytes'], r['nodes'], r['control'],
            r['gradient_control'], r['build_s'], ratio))
    return '\n'.join(out)


def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--resnet_size', type=int, default=18)
    parser.add_argument('--class_num', type=int, default=11166)
    parser.add_argument('--image_size', type=int, default=64,
                        help='does not change the graph size (shapes are attributes)')
    parser.add_argument('--replicas', type=int, nargs='+', default=[1, 2, 4])
    parser.add_argument('--dtype', default='fp32', choices=('fp32', 'fp16', 'bf16'))
    parser.add_argument('--json', action='store_true', help='one JSON line per count')
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (0)."""
    return entry.run(PROG, lambda: build_parser().parse_args(argv), print_sizes)


def print_sizes(args):
    """Measures the graph at each --replicas and prints the rows (--json: one JSON line
    each) or the table; returns the exit status (0)."""
    rows = []
    # One replica twice: as train.py --num_gpus=1 builds it (no strategy), and under
    # MirroredStrategy, the base of the linear law.
    variants = [(r, m) for r in args.replicas for m in ((False, True) if r == 1 else (True,))]
    for replicas, mirrored in variants:
        sys.stderr.write('%s: ResNet-%d, %d classes, %d replica(s) ...\n' % (
            PROG, args.resnet_size, args.class_num, replicas))
        rows.append(measure(replicas, args.resnet_size, args.class_num, args.image_size,
                            args.dtype, mirrored=mirrored))
        if args.json:
            print(json.dumps(rows[-1]))
    if not args.json:
        print('ResNet-%d, %d classes, %s' % (args.resnet_size, args.class_num, args.dtype))
        print(table(rows))
    return 0
