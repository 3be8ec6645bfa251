"""Training and evaluation with tf.estimator, from the run's options (train.py's flags as
plain values, one attribute each: opts.batch_size, opts.model_dir, ...; see
train.Options).

train: this worker's shard files (file_db) -> input_pipeline.input_fn -> the Estimator of
model_fn.resnet_model_fn, to global step max_iter, evaluating every test_interval steps in
train_and_eval mode; in a TF_CONFIG cluster tf.estimator.train_and_evaluate. evaluate: a
checkpoint on test_iter batches of val. Errors: errors.UsageError before a graph exists,
errors.TrainingError (one line with what to do) after.
"""
import contextlib
import functools
import logging
import os
import signal

import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.framework import config as tf_config

from mlimages.run import calibration
from mlimages.run import checkpoints
from mlimages.distributed import cluster_flags
from mlimages.distributed import devices
from mlimages.distributed import distribute
from mlimages.distributed import peers
from mlimages.distributed import ps_server
from mlimages.run import failures
import file_db
import flags
from mlimages.data import hierarchy
from mlimages.run import hooks
from mlimages.data import input_pipeline
from mlimages.model import memory
from mlimages.run import model_fn
from mlimages.model import precision
from mlimages.run import preemption
from mlimages.data import records
import resnet
from mlimages.run import run_dirs
from mlimages.run import run_plan
from mlimages.config import interpreter, run_settings
from mlimages.errors import PeerLost, TrainingError, UsageError, op_error_text

PROGRAM = 'train.py'  # the prefix of the line a second signal writes


def training_steps(opts):
    """--max_iter as the Estimator's max_steps: None (no end) for -1."""
    return opts.max_iter if opts.max_iter > 0 else None


def evaluation_batches(opts):
    """--test_iter as the Estimator's evaluation steps: None (the whole val split) for 0."""
    return opts.test_iter if opts.test_iter > 0 else None


def data_format(opts, cpu_fallback=False):
    """--data_format for the GPUs this process sees and --dtype (resnet.resolve_data_format)."""
    return resnet.resolve_data_format(opts.data_format, devices.gpu_count() > 0, cpu_fallback,
                                      opts.dtype)


def augment_on(opts):
    """--augment_on for the GPUs this process sees (input_pipeline.resolve_augment_on)."""
    return input_pipeline.resolve_augment_on(opts.augment_on, devices.gpu_count() > 0)


def derived_values(opts, plan=None, warm_start=None):
    """The model_fn.Derived of this process: plan, the distribute.Plan of a training run
    (images a step of this process and of the job, the task); warm_start, (checkpoint,
    names)."""
    run = model_fn.Derived(
        cpu_input_grad=devices.gpu_count() == 0,
        max_steps=training_steps(opts),
        legacy_counters=checkpoints.has_legacy_counters(opts.model_dir),
        leaf_mask=leaf_mask(opts.hierarchy, opts.class_num) if opts.hierarchy else None,
        warm_start=warm_start)
    if plan is None:
        return run
    return run._replace(images_per_step=plan.images_per_step,
                        images_per_global_step=plan.images_per_global_step,
                        worker_name=plan.task.label if plan.task else 'worker',
                        job=plan.task is not None, head_shards=plan.head_shards,
                        stop_together=plan.distribution == 'collective',
                        checkpoint_dir=plan.own_checkpoint_dir(opts.model_dir))


@functools.lru_cache(maxsize=2)
def leaf_mask(path, class_num):
    """--hierarchy: a tuple of class_num bools, true for the classes without children
    (hierarchy.split_leaf_inner); raises UsageError (one line) for a bad file or another
    class count."""
    try:
        tree = hierarchy.load(path)
    except hierarchy.HierarchyError as e:
        raise UsageError('--hierarchy: %s' % e)
    if len(tree) != class_num:
        raise UsageError('--hierarchy: ' + hierarchy.class_num_mismatch(tree, class_num))
    return tuple(bool(x) for x in hierarchy.split_leaf_inner(tree)[0])


def cluster_plan(opts):
    """distribute.plan from the options and TF_CONFIG; raises UsageError."""
    if opts.mode == 'train_and_eval' and distribute.current_task() is not None:
        raise UsageError('--mode=train_and_eval in a TF_CONFIG cluster is not implemented: '
                         'train with --mode=train and evaluate the checkpoints with '
                         '--mode=eval')
    try:
        # The process sees the GPUs devices.choose left visible (--visiable_gpu).
        plan = distribute.plan(opts.distribution, opts.num_gpus, opts.worker_num,
                               opts.worker_id, opts.batch_size, devices.gpu_count())
        distribute.check_all_reduce_alg(opts.all_reduce_alg, plan.distribution)
    except distribute.ConfigError as e:
        raise UsageError(str(e))
    if (plan.replicas > 1 or plan.distribution != 'none') and \
            checkpoints.has_legacy_counters(opts.model_dir):
        raise UsageError('%s holds a checkpoint of the original program (counters Variable, '
                         'Variable_1): it continues on one device only, not with %s' % (
                             opts.model_dir, '--num_gpus=%d' % opts.num_gpus
                             if plan.replicas > 1
                             else '--distribution=%s' % plan.distribution))
    return plan


def training_files(opts, plan):
    """This worker's shard files, checked, and the record-level split (None, or
    (workers, index) when there are fewer files than workers); raises
    file_db.DataError / UsageError."""
    files = file_db.list_shards(opts.data_dir, 'train', opts.file_pattern)
    share, record_shard = file_db.data_share(files, plan.worker_num, plan.worker_id)
    records.check_label_length(share, opts.class_num, opts.label_type)
    records.check_not_empty(files, os.path.join(opts.data_dir, 'train'))
    return share, record_shard


def evaluation_files(opts):
    """All val shard files, checked like the training ones."""
    files = file_db.list_shards(opts.data_dir, 'val', opts.file_pattern)
    records.check_label_length(files, opts.class_num, opts.label_type)
    records.check_not_empty(files, os.path.join(opts.data_dir, 'val'))
    return files


def session_config(opts, device_filters=(), fp16_on_cpu=False):
    """The session options of training and evaluation (devices.session_config); with
    --dtype=fp16 every session, evaluation's included, computes in mixed precision -- on
    a CPU too with fp16_on_cpu (precision.fp16_on_cpu: TensorFlow's float16 emulation)."""
    config = devices.session_config(opts.inter_op_threads, opts.intra_op_threads, opts.xla,
                                    device_filters)
    if opts.dtype == 'fp16':
        rewrite = config.graph_options.rewrite_options
        rewrite.auto_mixed_precision = rewriter_config_pb2.RewriterConfig.ON
        if fp16_on_cpu:
            rewrite.auto_mixed_precision_cpu = rewriter_config_pb2.RewriterConfig.ON
    return config


def make_estimator(opts, layout, derived, plan=None):
    """The Estimator of this run: opts, the run's options; layout, its resolved
    --data_format; derived, its model_fn.Derived; plan, the distribute.Plan of a training
    run (its strategy and cluster role)."""
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
        tf_random_seed=opts.random_seed if opts.deterministic else None,
        save_checkpoints_steps=None if collective else opts.snapshot,
        save_checkpoints_secs=None, keep_checkpoint_max=opts.max_to_keep,
        save_summary_steps=opts.summary_interval or opts.log_interval,
        log_step_count_steps=opts.log_interval,
        session_config=session_config(opts, filters, precision.fp16_on_cpu()),
        train_distribute=distribute.train_distribute(
            plan.distribution, opts.num_gpus, gpu_count=devices.gpu_count(),
            all_reduce_alg=opts.all_reduce_alg)
        if cluster_member else None)
    parts = model_fn.parts(flags.grouped(opts), layout)
    return tf.estimator.Estimator(model_fn=model_fn.make_model_fn(parts, derived),
                                  model_dir=opts.model_dir, config=run_config)


def resume_point(model_dir):
    """The chief's start in its model directory: the leftovers of a killed run removed, the
    checkpoint to resume from made the latest (checkpoints.recover: a broken state file or
    a damaged newest checkpoint never makes a run start over)."""
    left = run_dirs.remove_leftovers(model_dir)
    if left:
        tf.logging.info('removed what an earlier run left unfinished in %s: %s', model_dir,
                        ', '.join(left))
    checkpoints.recover(model_dir)


def log_to_file(log_dir, name='train.log'):
    """Copies TensorFlow's log (ours and the Estimator's) to <log_dir>/<name>."""
    run_dirs.check_directory(log_dir, 'log_dir')
    handler = logging.FileHandler(os.path.join(log_dir, name))
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s'))
    logging.getLogger('tensorflow').addHandler(handler)


def pipeline_input_fn(opts, is_training, files, record_shard=None):
    """input_pipeline.input_fn of the run's data and model groups, --augment_on resolved."""
    settings = flags.grouped(opts)
    data = settings.data._replace(augment_on=augment_on(opts))
    crop_seed = opts.random_seed if opts.deterministic else None
    return lambda: input_pipeline.input_fn(data, settings.model, is_training, files,
                                           crop_seed, record_shard)


def eval_input_fn(opts, files):
    return pipeline_input_fn(opts, False, files)


def training_input_fn(opts, files, record_shard=None):
    """The training input_fn; under a strategy it is called once per worker and every
    replica takes its own batch of --batch_size from it."""
    return pipeline_input_fn(opts, True, files, record_shard)


def cluster_eval_spec(opts, val_files):
    """The EvalSpec an evaluator task follows: every new checkpoint of --model_dir, at most
    one each --eval_throttle_secs, on --test_iter batches of val (0 = all); it stops after
    the checkpoint of global step --max_iter."""
    return tf.estimator.EvalSpec(eval_input_fn(opts, val_files),
                                 steps=evaluation_batches(opts),
                                 start_delay_secs=0, throttle_secs=opts.eval_throttle_secs)


def format_metrics(results):
    return ', '.join('%s = %.4f' % (k, v) for k, v in sorted(results.items())
                     if k != 'global_step')


def evaluation_checkpoint(opts):
    """--checkpoint_path, else the latest checkpoint of --model_dir; raises UsageError."""
    if opts.checkpoint_path:
        return checkpoints.resolve_checkpoint(opts.checkpoint_path, 'checkpoint_path')
    if not checkpoints.latest_checkpoint(opts.model_dir):
        raise UsageError('no checkpoint to evaluate in --model_dir=%s (give '
                         '--checkpoint_path)' % opts.model_dir)
    return checkpoints.resolve_checkpoint(opts.model_dir, 'model_dir')


def evaluate(opts, estimator=None, checkpoint_path=None, files=None, run_hooks=()):
    """Evaluates a checkpoint on --test_iter batches of val (0 = all); returns the metrics.
    Without an estimator: --checkpoint_path, else the latest in --model_dir; with
    --threshold=calibrated also chooses the thresholds per class on these batches
    (calibration.calibrate: thresholds.txt beside the checkpoint, F1 global vs calibrated
    in the metrics)."""
    collector = None
    if estimator is None:
        files = evaluation_files(opts)
        checkpoint_path = evaluation_checkpoint(opts)
        log_to_file(opts.log_dir)
        derived = derived_values(opts)
        if opts.threshold == calibration.CALIBRATED:
            collector = calibration.ScoreCollector(opts.mask_thres)
            derived = derived._replace(score_hook=collector.hook)
        estimator = make_estimator(opts, data_format(opts), derived)
    checkpoint_path = checkpoint_path or checkpoints.latest_checkpoint(opts.model_dir)
    checkpoints.check_checkpoint_head(checkpoint_path, opts.class_num)
    try:
        results = estimator.evaluate(eval_input_fn(opts, files),
                                     steps=evaluation_batches(opts),
                                     checkpoint_path=checkpoint_path, hooks=run_hooks)
    except tf.errors.OpError as e:
        raise TrainingError('evaluating %s: %s' % (checkpoint_path, op_error_text(e)))
    tf.logging.info('evaluated %s (global step %d) on %s val batches: %s', checkpoint_path,
                    results['global_step'], opts.test_iter or 'all', format_metrics(results))
    if collector is not None:
        found, _, lines = calibration.calibrate(
            collector, checkpoint_path, opts.threshold,
            '%s val batches of %s (%s)' % (opts.test_iter or 'all', opts.data_dir,
                                          os.path.basename(checkpoint_path)))
        results.update(found)
        for line in lines:
            tf.logging.info('%s', line)
    return results


def remember_settings(model_dir, settings):
    """Writes the run's flags to <model_dir>/flags.txt (run_settings); a run that resumes
    with other flags than the saved ones says which. settings: (header lines, flag
    lines)."""
    header, lines = settings
    saved = run_settings.read(model_dir)
    if saved and checkpoints.latest_checkpoint(model_dir):
        changed = run_settings.changes(saved, lines)
        if changed:
            tf.logging.warning('resuming %s with other flags than its last run (before -> '
                               'now): %s', model_dir, ', '.join(changed))
    path = run_settings.save(model_dir, header, lines)
    tf.logging.info('flags of this run in %s (rerun: %s train.py --flagfile=%s)',
                    path, interpreter.python_command(), path)


def train(opts, settings=None, extra_hooks=()):
    """Trains to global step --max_iter (evaluating every --test_interval steps in
    train_and_eval mode); the options are validated (train.validate). settings: (header
    lines, flag lines) the chief writes to <model_dir>/flags.txt; extra_hooks: more
    SessionRunHooks of every training session. Returns the Estimator."""
    plan = cluster_plan(opts)
    # ps tasks and an evaluator share the workers' flags but have no GPU: NHWC for them.
    layout = data_format(opts, cpu_fallback=not plan.trains)
    files, record_shard = ([], None) if opts.use_synthetic_data or not plan.trains else \
        training_files(opts, plan)
    val_files = (evaluation_files(opts) if opts.mode == 'train_and_eval' or plan.evaluates
                 else None)
    warm_start = pretrained_variables(opts, layout)
    memory_line = memory_warning = None
    if plan.trains:  # before anything is written: a replica that cannot fit is a usage error
        memory_line, memory_warning = memory.preflight(
            opts.resnet_size, opts.class_num, opts.batch_size, opts.image_size, opts.dtype,
            memory.gpu_memory(devices.gpu_count() > 0), opts.memory_check)
    chief = plan.trains and (plan.task is None or plan.task.type == 'chief')
    run_dirs.check_directory(opts.log_dir, 'log_dir')
    if chief:  # one trainer a model directory; evaluators and other tasks only read it
        run_dirs.check_directory(opts.model_dir, 'model_dir')
        run_dirs.hold_lock(opts.model_dir, 'trainer')
    log_to_file(opts.log_dir, plan.log_name)
    if chief:
        resume_point(opts.model_dir)
    tf.logging.info('%s; %s; this process sees %d GPU(s)', plan.role,
                    distribute.describe_devices(plan, opts.batch_size), devices.gpu_count())
    if plan.trains:
        tf.logging.info(run_plan.describe_epochs(opts, plan))
        for line in run_plan.start_warnings(opts, plan, chief, run_plan.free_disk(opts.model_dir)):
            tf.logging.warning(line)
    if plan.task is None and plan.worker_num > 1:  # an independent run: its own model_dir
        cluster_flags.claim_model_dir(opts.model_dir, plan.worker_id, plan.worker_num)
    if settings and plan.trains and (plan.task is None or plan.task.type == 'chief'):
        remember_settings(opts.model_dir, settings)
    if plan.trains and record_shard:
        tf.logging.info('fewer shard files (%d) than workers (%d): split by record -- '
                        'worker %d reads every file and takes records %d, %d + %d, ... of '
                        'their interleave', len(files), plan.worker_num, plan.worker_id,
                        plan.worker_id, plan.worker_id, plan.worker_num)
    if plan.trains:
        # Every name: the log shows which files each worker read.
        tf.logging.info('worker %d/%d reads %d shard files: %s', plan.worker_id,
                        plan.worker_num, len(files),
                        ', '.join(os.path.basename(p) for p in files))
    if plan.evaluates:
        tf.logging.info('evaluator: every new checkpoint of %s (at most one each %d s) on %s '
                        'of the %d val shard files, until global step %s', opts.model_dir,
                        opts.eval_throttle_secs, '%d batches' % opts.test_iter
                        if opts.test_iter else 'all', len(val_files),
                        opts.max_iter if opts.max_iter > 0 else 'infinity (never stops)')
    tf.logging.info('data_format %s, ResNet-%d, %d classes, batch %d, image %d',
                    layout, opts.resnet_size, opts.class_num, opts.batch_size,
                    opts.image_size)
    tf.logging.info('augmentation on %s, %s, dtype %s, XLA %s%s%s',
                    augment_on(opts), devices.describe_decode_threads(opts.num_preprocess_threads),
                    opts.dtype, 'on' if opts.xla else 'off',
                    ', synthetic data (no file is read)' if opts.use_synthetic_data else '',
                    ', deterministic (seed %d)' % opts.random_seed if opts.deterministic else '')
    if memory_line:
        tf.logging.info('%s', memory_line)
    if memory_warning:
        tf.logging.warning('%s', memory_warning)
    tf.logging.info(devices.describe_share(devices.cpu_share(), opts.inter_op_threads,
                                           opts.intra_op_threads, opts.private_threads))
    if opts.lr_decay_step == 0:
        tf.logging.info('lr_decay_step = 0: no learning-rate decay (lr stays %g after '
                        'warm-up)', opts.lr)
    checkpoints.check_checkpoint_head(checkpoints.latest_checkpoint(opts.model_dir),
                                      opts.class_num)
    run = derived_values(opts, plan, log_fine_tuning(opts, warm_start))
    estimator = make_estimator(opts, layout, run, plan)
    tracker = hooks.StepTracker()
    preempt = preemption.Preemption(PROGRAM)
    stop_hook = preemption.StopHook(preempt)
    watch = peers.for_task(plan, opts.peer_timeout, PROGRAM, tf.logging.info,
                           tf.logging.warning)
    run_hooks = [tracker] + ([hooks.PeerWatchHook(watch, tracker)] if watch else []) + [
        hooks.RestartLimitHook(), stop_hook] + list(extra_hooks)
    if plan.distribution == 'ps' and opts.max_iter > 0:
        run_hooks.append(hooks.StopAtGlobalStepHook(opts.max_iter))
    if run.legacy_counters:
        tf.logging.info('%s holds a checkpoint of the original program: its loss counters '
                        'are read and written as %s', opts.model_dir,
                        ' and '.join(sorted(checkpoints.LEGACY_COUNTER_NAMES.values())))
    tf.logging.info('training to global step %s; checkpoints and TensorBoard events in %s',
                    opts.max_iter if opts.max_iter > 0 else 'infinity', opts.model_dir)
    try:
        with preempt if plan.trains else contextlib.nullcontext(), \
                op_determinism(opts.deterministic):
            if plan.task is not None and plan.task.type == 'ps':
                serve_ps(estimator, plan, watch)
                return estimator
            train_all(estimator, opts, plan, files, record_shard, val_files, run_hooks,
                      stop_hook, preempt.requested)
    except tf.errors.OpError as e:
        if chief:  # a failed save's model.ckpt-N_temp/
            run_dirs.remove_leftovers(opts.model_dir)
        if failures.peer_failure(e, plan.distribution):
            raise PeerLost(failures.describe_peer_failure(e, tracker.last_step))
        raise TrainingError(failures.describe_failure(
            e, opts, tracker.failed_step, memory_note=failures.out_of_memory_note(opts, e)))
    except hooks.RestartLoop as e:
        raise TrainingError(failures.describe_restart_loop(e.restarts, opts, tracker.failed_step))
    except UnicodeDecodeError:
        # TF quotes the raw bytes of an unparseable record in its error, which then fails
        # to decode as text: all that is left to say is which kind of problem it was.
        raise TrainingError(
            'a record is not a tf.train.Example%s; find it with tools/check_tfrecords.py, '
            'or train on with --skip_bad_records' % (
                ' (step %d)' % tracker.failed_step if tracker.failed_step else ''))
    if preempt.requested():
        raise failures.interrupted(preempt, opts, plan, tracker.last_step)
    if plan.distribution == 'ps' and plan.trains:  # the ps end once the trainers are done
        ps_server.report_done(plan.task.cluster, plan.worker_id, tf.logging.warning)
    tf.logging.info('done; TensorBoard: %s --logdir %s', interpreter.script_command(
        'tensorboard'), opts.model_dir)
    return estimator


@contextlib.contextmanager
def op_determinism(enabled):
    """--deterministic: TensorFlow's op determinism while training (process-wide; as
    tf.config.experimental.enable_op_determinism, which compat.v1 does not name, and off
    again after: graphs built later, an export's, have no graph seed). make_estimator's
    graph seed seeds every random op, input_fn the crop's."""
    if not enabled:
        yield
        return
    tf_config.enable_op_determinism()
    try:
        yield
    finally:
        tf_config.disable_op_determinism()


def serve_ps(estimator, plan, watch):
    """A ps task: TensorFlow's server (as train_and_evaluate starts it) until the chief and
    the workers are done (ps_server.serve)."""
    # Nothing of a ps task is saved: a signal ends it at once (the default action).
    for signum in preemption.SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    config = estimator.config
    server = tf.distribute.Server(
        config.cluster_spec, job_name=config.task_type, task_index=config.task_id,
        config=tf.ConfigProto(gpu_options=config.session_config.gpu_options),
        protocol=config.protocol)
    ps_server.serve(server, plan.task.cluster, plan.task.index, watch, tf.logging.info)


def train_all(estimator, opts, plan, files, record_shard, val_files, run_hooks, stop_hook,
              stop):
    """The training of the mode: to --max_iter, or in train_and_eval mode in pieces of
    --test_interval steps with an evaluation after each, until stop() (a signal)."""
    if plan.distribution in ('ps', 'collective'):
        tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(
            training_input_fn(opts, files, record_shard),
            max_steps=training_steps(opts), hooks=run_hooks),
            cluster_eval_spec(opts, val_files))
    elif opts.mode == 'train_and_eval':
        step = checkpoints.estimator_step(opts.model_dir)
        last = opts.max_iter if opts.max_iter > 0 else float('inf')
        while step < last and not stop():
            step = min(last, (step // opts.test_interval + 1) * opts.test_interval)
            train_on(estimator, opts, files, run_hooks, step, record_shard)
            if not stop():
                evaluate(opts, estimator, files=val_files, run_hooks=[stop_hook])
    else:
        train_on(estimator, opts, files, run_hooks, training_steps(opts), record_shard)


def pretrained_variables(opts, data_format):
    """Checks --pretrain_ckpt against the model; (checkpoint, names to warm-start) or None."""
    if not opts.pretrain_ckpt:
        return None
    checkpoint = checkpoints.resolve_checkpoint(opts.pretrain_ckpt, 'pretrain_ckpt')
    shapes = checkpoints.model_variable_shapes(opts.resnet_size, opts.class_num,
                                               opts.image_size, data_format)
    return checkpoint, checkpoints.warm_start_names(checkpoint, shapes, opts.resnet_size)


def log_fine_tuning(opts, warm_start):
    """Says what --pretrain_ckpt / --FixBlock2 do in this run; returns warm_start or None
    when model_dir's own checkpoint takes precedence (a restart)."""
    if opts.FixBlock2:
        tf.logging.info('FixBlock2: init and stages 0-1 are frozen (not trained, batch norm '
                        'in %s mode)%s', opts.frozen_bn, '' if opts.pretrain_ckpt else
                        ' -- without --pretrain_ckpt they keep their random initialisation')
    if not warm_start:
        return None
    if checkpoints.latest_checkpoint(opts.model_dir):
        tf.logging.info('--pretrain_ckpt is not used: %s already holds a checkpoint, training '
                        'resumes from it', opts.model_dir)
        return None
    checkpoint, names = warm_start
    head = dict(tf.train.list_variables(checkpoint)).get('logits/dense/bias')
    tf.logging.info('fine-tuning from %s: %d variables restored (%d batch-norm moving '
                    'statistics); new head of %d classes%s', checkpoint, len(names),
                    sum('moving_' in n for n in names), opts.class_num,
                    ' (the checkpoint\'s has %d)' % head[0] if head else '')
    return warm_start


def train_on(estimator, opts, files, run_hooks, max_steps, record_shard=None):
    estimator.train(input_fn=training_input_fn(opts, files, record_shard),
                    max_steps=max_steps, hooks=run_hooks)
