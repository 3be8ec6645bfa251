"""Bytes of variables each ps task holds in --distribution=ps, measured on this machine.

    .venv/bin/python tools/ps_placement.py                         # ResNet-101, 11,166 classes
    .venv/bin/python tools/ps_placement.py --resnet_size 50 --ps_tasks 2 4 --class_num 1000

For each count of ps tasks this builds the chief's real training graph (training.
make_estimator for a TF_CONFIG cluster of a chief, one worker and K ps tasks -- no server
is started -- then model_fn under the Estimator's own device function, its
replica_device_setter) and sums the bytes of the variables (weights, Momentum slots,
counters) placed on each /job:ps/task:k:

    per task   bytes on task k
    max/mean   the busiest task against the mean (1.0 = even)

The classifier head (logits/dense, class_num x features weights and their slot) is the
largest variable by far; distribute.Plan.head_shards splits it over the ps tasks.
"""
import argparse
import collections
import contextlib
import json
import os

from mlimages.cli import entry

PROG = 'ps_placement.py'
PS_TASK = '/job:ps/task:'


def fake_cluster(ps_tasks):
    """A TF_CONFIG value for the chief of a cluster with one worker and ps_tasks ps tasks
    (addresses that nothing listens on: only the graph is built)."""
    return json.dumps({
        'cluster': {'chief': ['127.0.0.1:1'], 'worker': ['127.0.0.1:2'],
                    'ps': ['127.0.0.1:%d' % (10 + k) for k in range(ps_tasks)]},
        'task': {'type': 'chief', 'index': 0}})


@contextlib.contextmanager
def environment(**values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def variable_bytes(graph):
    """{device: bytes} of the graph's variables."""
    import numpy as np
    import tensorflow.compat.v1 as tf
    placed = collections.Counter()
    for op in graph.get_operations():
        if op.type in ('VariableV2', 'VarHandleOp'):
            shape = tf.TensorShape(op.get_attr('shape'))
            size = tf.as_dtype(op.get_attr('dtype')).size
            placed[op.device] += int(np.prod(shape.as_list())) * size
    return placed


def placement(ps_tasks, settings):
    """[bytes on ps task k for k in range(ps_tasks)] and {variable name: task} of the
    chief's training graph; settings: train.py's (flags.Settings: the whole training
    graph reads them)."""
    import tensorflow.compat.v1 as tf
    from mlimages.config import startup
    from mlimages.distributed import distribute
    from mlimages.run import estimator as estimator_lib
    from mlimages.run import model_fn
    startup.before_tensorflow(PROG, [])  # quiet, as train.py (this once imported it)
    settings = settings.replace(model=settings.model.replace(data_format='channels_last'))
    batch, model = settings.data.batch_size, settings.model
    config = fake_cluster(ps_tasks)
    plan = distribute.plan('ps', 1, 1, 0, batch, 0, {'TF_CONFIG': config})
    derived = estimator_lib.derived_values(settings, plan)
    with environment(TF_CONFIG=config):
        estimator = estimator_lib.make_estimator(settings, derived, plan)
    with tf.Graph().as_default() as graph, graph.device(estimator._device_fn):
        images = tf.zeros([batch, model.image_size, model.image_size, 3])
        labels = tf.zeros([batch, model.class_num])
        model_fn.make_model_fn(model_fn.parts(settings, model.data_format), derived)(
            images, labels, tf.estimator.ModeKeys.TRAIN)
        placed = variable_bytes(graph)
        tasks = {v.op.name: v.device for v in tf.global_variables()}
    unplaced = [d for d in placed if not d.startswith(PS_TASK)]
    if unplaced:
        raise RuntimeError('variables outside the ps tasks: %s' % unplaced)
    per_task = [placed.get('%s%d' % (PS_TASK, k), 0) for k in range(ps_tasks)]
    return per_task, tasks


def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--resnet_size', type=int, default=101)
    parser.add_argument('--class_num', type=int, default=11166)
    parser.add_argument('--ps_tasks', type=int, nargs='+', default=[2, 4, 8])
    return parser


def main(argv=None):
    """Command-line entry point: the table of the module docstring on stdout; returns the
    exit status (0)."""
    return entry.run(PROG, lambda: build_parser().parse_args(argv), print_placement)


def print_placement(args):
    """Prints the MB of variables on each ps task for each --ps_tasks; returns the exit
    status (0)."""
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    import flags as flags_lib
    print('ResNet-%d, %d classes: MB of variables on each ps task' % (args.resnet_size,
                                                                      args.class_num))
    settings = flags_lib.replace(flags_lib.default_settings(), resnet_size=args.resnet_size,
                                 class_num=args.class_num, image_size=32, batch_size=2,
                                 visiable_gpu=-1)
    for k in args.ps_tasks:
        per_task, _ = placement(k, settings)
        mean = sum(per_task) / float(k)
        print('%d ps: %s  max/mean %.2f' % (
            k, ' '.join('%.1f' % (b / 1e6) for b in per_task), max(per_task) / mean))
    return 0
