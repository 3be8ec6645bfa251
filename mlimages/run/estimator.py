"""The Estimator of a run and its inputs, from the run's settings groups (flags.Settings):
the values resolved for this process (--data_format, --augment_on), the model_fn's
Derived values, the session options, the input functions. training.py trains with them,
evaluation.py evaluates.
"""
import dataclasses
import functools
import logging
import os

import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from mlimages.config import cpu, value_checks
from mlimages.data import hierarchy
from mlimages.data import input_pipeline
from mlimages.distributed import devices
from mlimages.distributed import distribute
from mlimages.errors import HierarchyError, UsageError
from mlimages.model import precision
from mlimages.run import calibration
from mlimages.run import checkpoints
from mlimages.run import class_report
from mlimages.run import model_fn
from mlimages.run import run_dirs
import resnet


def training_steps(max_iter):
    """--max_iter as the Estimator's max_steps: None (no end) for -1."""
    return max_iter if max_iter > 0 else None


def evaluation_batches(test_iter):
    """--test_iter as the Estimator's evaluation steps: None (the whole val split) for 0."""
    return test_iter if test_iter > 0 else None


def data_format(model, cpu_fallback=False):
    """The model group's --data_format for the GPUs this process sees and --dtype
    (resnet.resolve_data_format)."""
    return resnet.resolve_data_format(model.data_format, devices.gpu_count() > 0, cpu_fallback,
                                      model.dtype)


def augment_on(data):
    """The data group's --augment_on for the GPUs this process sees
    (input_pipeline.resolve_augment_on)."""
    return input_pipeline.resolve_augment_on(data.augment_on, devices.gpu_count() > 0)


def for_this_process(settings, cpu_fallback=False):
    """The Settings with the values derived for this process in their groups: the model's
    --data_format and the data's --augment_on resolved for the GPUs it sees."""
    return settings.replace(
        model=settings.model.replace(data_format=data_format(settings.model, cpu_fallback)),
        data=settings.data.replace(augment_on=augment_on(settings.data)))


def crop_seed(training):
    """The training crop's op seed: --random_seed with --deterministic, else None."""
    return training.random_seed if training.deterministic else None


@functools.lru_cache(maxsize=2)
def leaf_mask(path, class_num):
    """--hierarchy: a tuple of class_num bools, true for the classes without children
    (hierarchy.split_leaf_inner); raises UsageError (one line) for a bad file or another
    class count."""
    try:
        tree = hierarchy.load(path)
    except HierarchyError as e:
        raise UsageError('--hierarchy: %s' % e)
    if len(tree) != class_num:
        raise UsageError('--hierarchy: ' + hierarchy.class_num_mismatch(tree, class_num))
    return tuple(bool(x) for x in hierarchy.split_leaf_inner(tree)[0])


def conv_forms():
    """cpu.ConvForms of this process: whether its stride-1 convolutions take resnet's
    forward-convolution input gradient and whether its 1x1 convolutions are matrix
    products, each a cpu.Choice with its reason."""
    return cpu.conv_forms(devices.gpu_count() > 0, cpu.onednn(cpu.this_cpu(), os.environ))


def derived_values(settings, plan=None, warm_start=None):
    """The model_fn.Derived of this process (from --max_iter, --model_dir, --hierarchy and
    --class_num): plan, the distribute.Plan of a training run (images a step of this
    process and of the job, the task); warm_start, (checkpoint, names)."""
    model_dir, hierarchy_path = settings.output.model_dir, settings.evaluation.hierarchy
    leaves = leaf_mask(hierarchy_path, settings.model.class_num) if hierarchy_path else None
    evaluates = settings.task.demo or settings.task.mode in ('eval', 'train_and_eval') or (
        plan is not None and plan.evaluates)
    forms = conv_forms()
    derived = model_fn.Derived(
        cpu_input_grad=forms.input_grad.value, cpu_pointwise=forms.pointwise.value,
        max_steps=training_steps(settings.schedule.max_iter),
        legacy_counters=checkpoints.has_legacy_counters(model_dir),
        leaf_mask=leaves, warm_start=warm_start,
        class_report=class_report_of(settings, leaves) if evaluates else None)
    if plan is None:
        return derived
    return dataclasses.replace(derived, images_per_step=plan.images_per_step,
                               images_per_global_step=plan.images_per_global_step,
                               worker_name=plan.task.label if plan.task else 'worker',
                               job=plan.task is not None, head_shards=plan.head_shards,
                               stop_together=plan.distribution == 'collective',
                               checkpoint_dir=plan.own_checkpoint_dir(model_dir))


def class_report_of(settings, leaves):
    """The class_report.ClassReport of this run's evaluations (in the Estimator's
    <model_dir>/eval), its class names from class_report.class_dictionary (a passed-over
    file logged as a warning)."""
    evaluation = settings.evaluation
    names, source, warning = class_report.class_dictionary(
        settings.inference.class_dict, evaluation.hierarchy, settings.data.data_dir,
        settings.model.class_num)
    if warning:
        tf.logging.warning('%s', warning)
    tf.logging.info('class names of the per-class report: %s', source or 'none (the name '
                    'column stays empty; give --class_dict)')
    return class_report.ClassReport(
        os.path.join(settings.output.model_dir, 'eval'), names, leaves,
        calibration.global_threshold(settings.inference.threshold), evaluation.pr_curves,
        value_checks.class_list(evaluation.pr_curve_classes), evaluation.report_classes)


def session_config(devices_group, dtype, device_filters=(), fp16_on_cpu=False):
    """The session options of training and evaluation (devices.session_config of the
    flags.Devices group); with --dtype=fp16 every session, evaluation's included, computes
    in mixed precision -- on a CPU too with fp16_on_cpu (precision.fp16_on_cpu:
    TensorFlow's float16 emulation)."""
    config = devices.session_config(devices_group.inter_op_threads,
                                    devices_group.intra_op_threads, devices_group.xla,
                                    device_filters)
    if dtype == 'fp16':
        rewrite = config.graph_options.rewrite_options
        rewrite.auto_mixed_precision = rewriter_config_pb2.RewriterConfig.ON
        if fp16_on_cpu:
            rewrite.auto_mixed_precision_cpu = rewriter_config_pb2.RewriterConfig.ON
    return config


def make_estimator(settings, derived, plan=None):
    """The Estimator of this run: settings, its Settings (for_this_process: the model
    group's data_format resolved; every group the model_fn, the RunConfig and the
    strategy read); derived, its model_fn.Derived; plan, the distribute.Plan of a
    training run (its strategy and cluster role)."""
    output, devices_group = settings.output, settings.devices
    # An evaluator is not a member of the cluster: a local session, no strategy.
    cluster_member = plan is not None and not plan.evaluates
    # What RunConfig does when it makes the session config: a ps-mode task sees only the
    # ps tasks and itself, so it neither waits for nor depends on the other workers.
    filters = (['/job:ps', '/job:%s/task:%d' % (plan.task.type, plan.task.index)]
               if cluster_member and plan.distribution == 'ps' else [])
    # A collective job's workers each run model_fn's saver (model_fn.saver_hook): none of
    # TensorFlow's, which would read the global step again after every step.
    collective = cluster_member and plan.distribution == 'collective'
    run_config = tf.estimator.RunConfig(
        tf_random_seed=crop_seed(settings.training),
        save_checkpoints_steps=None if collective else output.snapshot,
        save_checkpoints_secs=None, keep_checkpoint_max=output.max_to_keep,
        save_summary_steps=output.summary_interval or output.log_interval,
        log_step_count_steps=output.log_interval,
        session_config=session_config(devices_group, settings.model.dtype, filters,
                                      precision.fp16_on_cpu()),
        train_distribute=distribute.train_distribute(
            plan.distribution, devices_group.num_gpus, gpu_count=devices.gpu_count(),
            all_reduce_alg=settings.cluster.all_reduce_alg)
        if cluster_member else None)
    parts = model_fn.parts(settings, settings.model.data_format)
    return tf.estimator.Estimator(model_fn=model_fn.make_model_fn(parts, derived),
                                  model_dir=output.model_dir, config=run_config)


def log_to_file(log_dir, name='train.log'):
    """Copies TensorFlow's log (ours and the Estimator's) to <log_dir>/<name>."""
    run_dirs.check_directory(log_dir, 'log_dir')
    handler = logging.FileHandler(os.path.join(log_dir, name))
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s'))
    logging.getLogger('tensorflow').addHandler(handler)


def pipeline_input_fn(data, model, seed, is_training, files, record_shard=None):
    """input_pipeline.input_fn of the data and model groups (for_this_process's: their
    --augment_on resolved)."""
    return lambda: input_pipeline.input_fn(data, model, is_training, files, seed,
                                           record_shard)


def eval_input_fn(data, model, files, seed=None):
    """The evaluation input_fn over `files` (data, model: the flags.Data and flags.Model
    groups; seed: crop_seed)."""
    return pipeline_input_fn(data, model, seed, False, files)


def training_input_fn(data, model, files, seed=None, record_shard=None):
    """The training input_fn; under a strategy it is called once per worker and every
    replica takes its own batch of --batch_size from it."""
    return pipeline_input_fn(data, model, seed, True, files, record_shard)
