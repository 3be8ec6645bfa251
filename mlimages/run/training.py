"""Training with tf.estimator, from the run's settings (flags.Settings: train.py's flags
in groups by concern; each helper takes the groups it reads).

train: this worker's shard files (file_db) -> input_pipeline.input_fn -> the Estimator of
model_fn.resnet_model_fn (estimator.py), to global step max_iter, evaluating every
test_interval steps in train_and_eval mode (evaluation.py); in a TF_CONFIG cluster
tf.estimator.train_and_evaluate. Errors: errors.UsageError before a graph exists,
errors.TrainingError (one line with what to do) after.
"""
import contextlib
import dataclasses
import os
import signal

import tensorflow.compat.v1 as tf
from tensorflow.python.framework import config as tf_config

import file_db
from mlimages import errors
from mlimages.config import cpu
from mlimages.config import interpreter, run_settings, value_checks
from mlimages.data import records
from mlimages.distributed import cluster_flags
from mlimages.distributed import devices
from mlimages.distributed import distribute
from mlimages.distributed import peers
from mlimages.distributed import ps_server
from mlimages.errors import PeerLost, TrainingError, UsageError
from mlimages.model import memory
from mlimages.run import checkpoints
from mlimages.run import estimator
from mlimages.run import evaluation
from mlimages.run import failures
from mlimages.run import hooks
from mlimages.run import preemption
from mlimages.run import run_dirs
from mlimages.run import run_plan

PROGRAM = 'train.py'  # the prefix of the line a second signal writes


def cluster_plan(mode, cluster, num_gpus, batch_size, model_dir):
    """distribute.plan from the cluster group, --num_gpus, --batch_size and TF_CONFIG;
    raises UsageError."""
    if mode == 'train_and_eval' and distribute.current_task() is not None:
        raise UsageError('--mode=train_and_eval in a TF_CONFIG cluster is not implemented: '
                         'train with --mode=train and evaluate the checkpoints with '
                         '--mode=eval')
    try:
        # The process sees the GPUs devices.choose left visible (--visiable_gpu).
        plan = distribute.plan(cluster.distribution, num_gpus, cluster.worker_num,
                               cluster.worker_id, batch_size, devices.gpu_count())
        distribute.check_all_reduce_alg(cluster.all_reduce_alg, plan.distribution)
    except errors.ConfigError as e:
        raise UsageError(str(e))
    if (plan.replicas > 1 or plan.distribution != 'none') and \
            checkpoints.has_legacy_counters(model_dir):
        raise UsageError('%s holds a checkpoint of the original program (counters Variable, '
                         'Variable_1): it continues on one device only, not with %s' % (
                             model_dir, '--num_gpus=%d' % num_gpus
                             if plan.replicas > 1
                             else '--distribution=%s' % plan.distribution))
    return plan


def training_files(data, class_num, plan):
    """This worker's shard files of the data group's --data_dir, checked, and the
    record-level split (None, or (workers, index) when there are fewer files than
    workers); raises errors.DataError / UsageError."""
    files = file_db.list_shards(data.data_dir, 'train', data.file_pattern)
    share, record_shard = file_db.data_share(files, plan.worker_num, plan.worker_id)
    records.check_label_length(share, class_num, data.label_type)
    records.check_not_empty(files, os.path.join(data.data_dir, 'train'))
    return share, record_shard


def make_resumable(model_dir):
    """Readies the chief's model directory for a resume: removes the leftovers of a killed
    run and makes the checkpoint to resume from the latest (checkpoints.recover: a broken
    state file or a damaged newest checkpoint never makes a run start over)."""
    left = run_dirs.remove_leftovers(model_dir)
    if left:
        tf.logging.info('removed what an earlier run left unfinished in %s: %s', model_dir,
                        ', '.join(left))
    checkpoints.recover(model_dir)


def write_flags_txt(model_dir, flags_txt):
    """Writes the run's flags to <model_dir>/flags.txt (run_settings) and logs where; a run
    that resumes with other flags than the saved ones says which. flags_txt: (header
    lines, flag lines)."""
    header, lines = flags_txt
    saved = run_settings.read(model_dir)
    if saved and checkpoints.latest_checkpoint(model_dir):
        changed = run_settings.changes(saved, lines)
        if changed:
            tf.logging.warning('resuming %s with other flags than its last run (before -> '
                               'now): %s', model_dir, ', '.join(changed))
    path = run_settings.save(model_dir, header, lines)
    tf.logging.info('flags of this run in %s (rerun: %s train.py --flagfile=%s)',
                    path, interpreter.python_command(), path)


def train(settings, flags_txt=None, extra_hooks=()):
    """Trains to global step --max_iter (evaluating every --test_interval steps in
    train_and_eval mode); the settings are checked (train.py). flags_txt: (header lines,
    flag lines) the chief writes to <model_dir>/flags.txt; extra_hooks: more
    SessionRunHooks of every training session. Returns (the Estimator, the Settings of
    this process: estimator.for_this_process's, what the demo's evaluation reads)."""
    plan = cluster_plan(settings.task.mode, settings.cluster, settings.devices.num_gpus,
                        settings.data.batch_size, settings.output.model_dir)
    # ps tasks and an evaluator share the workers' flags but have no GPU: NHWC for them.
    settings = estimator.for_this_process(settings, cpu_fallback=not plan.trains)
    files, record_shard, val_files = input_files(settings.data, settings.model.class_num,
                                                 settings.task.mode, plan)
    pretrained = pretrained_variables(settings.finetune, settings.model)
    memory_lines = (None, None)
    if plan.trains:  # before anything is written: a replica that cannot fit is a usage error
        memory_lines = memory.preflight(
            settings.model.resnet_size, settings.model.class_num, settings.data.batch_size,
            settings.model.image_size, settings.model.dtype,
            memory.gpu_memory(devices.gpu_count() > 0), settings.devices.memory_check)
    chief = plan.trains and (plan.task is None or plan.task.type == 'chief')
    open_directories(settings.output, plan, chief)
    log_role(settings, plan, chief)
    claim_and_record(settings.output, plan, chief, flags_txt)
    log_inputs(plan, (files, record_shard, val_files), settings.evaluation,
               settings.schedule.max_iter, settings.output.model_dir)
    log_model(settings, memory_lines)
    checkpoints.check_checkpoint_head(
        checkpoints.latest_checkpoint(settings.output.model_dir), settings.model.class_num)
    log_fix_block2(settings.finetune)
    derived = estimator.derived_values(
        settings, plan, warm_start_unless_resuming(pretrained, settings.output.model_dir,
                                                   settings.model.class_num))
    derived = dataclasses.replace(derived, watch=peers.for_task(
        plan, settings.cluster.peer_timeout, PROGRAM, tf.logging.info, tf.logging.warning))
    run_estimator = estimator.make_estimator(settings, derived, plan)
    train_with_hooks(run_estimator, settings, plan, chief, derived,
                     (files, record_shard, val_files), extra_hooks)
    return run_estimator, settings


def input_files(data, class_num, mode, plan):
    """(this worker's training files, the record-level split, the val files) of the
    task: no training files without training or with synthetic data, val files for
    train_and_eval (mode) and an evaluator."""
    files, record_shard = ([], None) if data.use_synthetic_data or not plan.trains else \
        training_files(data, class_num, plan)
    val_files = (evaluation.evaluation_files(data, class_num)
                 if mode == 'train_and_eval' or plan.evaluates else None)
    return files, record_shard, val_files


def open_directories(output, plan, chief):
    """The log and model directories checked, the model directory locked by its one
    trainer (the chief) and left as a resumable start, the log copied to a file."""
    run_dirs.check_directory(output.log_dir, 'log_dir')
    if chief:  # one trainer a model directory; evaluators and other tasks only read it
        run_dirs.check_directory(output.model_dir, 'model_dir')
        run_dirs.hold_lock(output.model_dir, 'trainer')
    estimator.log_to_file(output.log_dir, plan.log_name)
    if chief:
        make_resumable(output.model_dir)


def log_role(settings, plan, chief):
    """Logs the task's role and devices, and for a trainer its epochs and start warnings
    (run_plan.start_warnings: the chief's include the checkpoints' disk)."""
    model_dir = settings.output.model_dir
    tf.logging.info('%s; %s; this process sees %d GPU(s)', plan.role,
                    distribute.describe_devices(plan, settings.data.batch_size),
                    devices.gpu_count())
    if plan.trains:
        tf.logging.info(run_plan.describe_epochs(settings.data, settings.schedule.max_iter,
                                                 plan))
        for line in run_plan.start_warnings(settings, plan, chief,
                                            run_plan.free_disk(model_dir)):
            tf.logging.warning(line)


def claim_and_record(output, plan, chief, flags_txt):
    """Claims --model_dir for an independent run (cluster_flags.claim_model_dir: a worker's
    own), and the chief records the run's flags there (write_flags_txt; flags_txt: (header
    lines, flag lines), or None: nothing written)."""
    if plan.task is None and plan.worker_num > 1:
        cluster_flags.claim_model_dir(output.model_dir, plan.worker_id, plan.worker_num)
    if flags_txt and chief:
        write_flags_txt(output.model_dir, flags_txt)


def log_inputs(plan, inputs, evaluation_group, max_iter, model_dir):
    """Which files each worker reads (and how they are split), what an evaluator follows.
    inputs: (training files, record-level split, val files)."""
    files, record_shard, val_files = inputs
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
        test_iter = evaluation_group.test_iter
        tf.logging.info('evaluator: every new checkpoint of %s (at most one each %d s) on %s '
                        'of the %d val shard files, until global step %s',
                        model_dir, evaluation_group.eval_throttle_secs,
                        '%d batches' % test_iter if test_iter else 'all', len(val_files),
                        max_iter if max_iter > 0 else 'infinity (never stops)')


def cpu_line():
    """The log's line on the CPU and the kernel choices made from it (config/cpu.py)."""
    this_cpu = cpu.this_cpu()
    onednn = cpu.onednn(this_cpu, os.environ)
    grad, pointwise = estimator.conv_forms()
    return ('CPU %s: oneDNN kernels %s (%s); stride-1 convolution input gradients %s (%s); '
            '1x1 convolutions %s (%s)' % (
                this_cpu.model or 'unknown', 'on' if onednn.value else 'off', onednn.reason,
                'as forward convolutions' if grad.value else 'the kernels\' own', grad.reason,
                'as matrix products' if pointwise.value else 'as convolutions',
                pointwise.reason))


def log_model(settings, memory_lines):
    """The model, input and precision lines, the memory estimate, the CPU share and the
    learning-rate decay."""
    model, data, training, devices_group = (settings.model, settings.data, settings.training,
                                            settings.devices)
    tf.logging.info('data_format %s, ResNet-%d, %d classes, batch %d, image %d',
                    model.data_format, model.resnet_size, model.class_num, data.batch_size,
                    model.image_size)
    tf.logging.info('augmentation on %s, %s, dtype %s, XLA %s%s%s',
                    data.augment_on, devices.describe_decode_threads(data.num_preprocess_threads),
                    model.dtype, 'on' if devices_group.xla else 'off',
                    ', synthetic data (no file is read)' if data.use_synthetic_data else '',
                    ', deterministic (seed %d)' % training.random_seed
                    if training.deterministic else '')
    memory_line, memory_warning = memory_lines
    if memory_line:
        tf.logging.info('%s', memory_line)
    if memory_warning:
        tf.logging.warning('%s', memory_warning)
    tf.logging.info(devices.describe_share(devices.cpu_share(), devices_group.inter_op_threads,
                                           devices_group.intra_op_threads,
                                           data.private_threads))
    tf.logging.info('%s', cpu_line())
    if settings.schedule.lr_decay_step == 0:
        tf.logging.info('lr_decay_step = 0: no learning-rate decay (lr stays %g after '
                        'warm-up)', settings.schedule.lr)


def train_with_hooks(run_estimator, settings, plan, chief, derived, inputs, extra_hooks):
    """Trains with the session hooks of the task (training_session_hooks), a failure said
    in one line (failure_error); a ps task serves instead. derived: the model_fn.Derived
    of the Estimator (its peer watch, stopped once training returns)."""
    output, max_iter, watch = settings.output, settings.schedule.max_iter, derived.watch
    tracker = hooks.StepTracker()
    preempt = preemption.Preemption(PROGRAM)
    stop_hook = preemption.StopHook(preempt)
    run_hooks = training_session_hooks(plan, max_iter, tracker, watch, stop_hook, extra_hooks)
    span = value_checks.profile_span(output.profile_steps)
    if span and chief:  # one trace of the job: the chief's steps
        run_hooks.append(hooks.ProfileHook(output.model_dir, *span, log=tf.logging.info))
    if derived.legacy_counters:
        tf.logging.info('%s holds a checkpoint of the original program: its loss counters '
                        'are read and written as %s', output.model_dir,
                        ' and '.join(sorted(checkpoints.LEGACY_COUNTER_NAMES.values())))
    tf.logging.info('training to global step %s; checkpoints and TensorBoard events in %s',
                    max_iter if max_iter > 0 else 'infinity', output.model_dir)
    try:
        with preempt if plan.trains else contextlib.nullcontext(), \
                op_determinism(settings.training.deterministic):
            if plan.task is not None and plan.task.type == 'ps':
                serve_ps(run_estimator, plan, watch)
                return
            try:
                train_all(run_estimator, settings, plan, inputs, run_hooks, stop_hook,
                          preempt.requested)
            finally:
                if watch:  # after the session's end and its last save: no wait is left
                    watch.stop()
    except (tf.errors.OpError, errors.RestartLoop, UnicodeDecodeError) as e:
        if chief and isinstance(e, tf.errors.OpError):  # a failed save's model.ckpt-N_temp/
            run_dirs.remove_leftovers(output.model_dir)
        raise failure_error(e, settings, plan, tracker)
    if preempt.requested():
        raise failures.interrupted(preempt, output.model_dir, plan, tracker.last_step)
    if plan.distribution == 'ps' and plan.trains:  # the ps end once the trainers are done
        ps_server.report_done(plan.task.cluster, plan.worker_id, tf.logging.warning)
    tf.logging.info('done; TensorBoard: %s --logdir %s', interpreter.script_command(
        'tensorboard'), output.model_dir)


def training_session_hooks(plan, max_iter, tracker, watch, stop_hook, extra_hooks):
    """The SessionRunHooks of every training session: the step tracker, the peer watch,
    the restart limit, the stop on a signal, the extra ones, a ps job's stop at
    --max_iter."""
    ps_last = max_iter if plan.distribution == 'ps' and max_iter > 0 else None
    watching = [hooks.PeerWatchHook(watch, tracker, ps_last)] if watch else []
    run_hooks = [tracker] + watching + [hooks.RestartLimitHook(), stop_hook] + list(
        extra_hooks)
    if ps_last:
        run_hooks.append(hooks.StopAtGlobalStepHook(ps_last))
    return run_hooks


def failure_error(error, settings, plan, tracker):
    """The errors.PeerLost or errors.TrainingError (one line) of an error that stopped
    training: a TensorFlow op's, a restart loop's, an undecodable record's."""
    if isinstance(error, errors.RestartLoop):
        return TrainingError(failures.describe_restart_loop(
            error.restarts, settings.output.model_dir, tracker.failed_step))
    if isinstance(error, UnicodeDecodeError):
        # TF quotes the raw bytes of an unparseable record in its error, which then fails
        # to decode as text: all that is left to say is which kind of problem it was.
        return TrainingError(
            'a record is not a tf.train.Example%s; find it with tools/check_tfrecords.py, '
            'or train on with --skip_bad_records' % (
                ' (step %d)' % tracker.failed_step if tracker.failed_step else ''))
    if failures.peer_failure(error, plan.distribution):
        return PeerLost(failures.describe_peer_failure(error, tracker.last_step))
    data, model = settings.data, settings.model
    return TrainingError(failures.describe_failure(
        error, tracker.failed_step, settings.output.model_dir, data, settings.devices, model,
        memory_note=failures.out_of_memory_note(model, data.batch_size, error)))


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


def serve_ps(run_estimator, plan, watch):
    """A ps task: TensorFlow's server (as train_and_evaluate starts it) until the chief and
    the workers are done (ps_server.serve)."""
    # Nothing of a ps task is saved: a signal ends it at once (the default action).
    for signum in preemption.SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    config = run_estimator.config
    server = tf.distribute.Server(
        config.cluster_spec, job_name=config.task_type, task_index=config.task_id,
        config=tf.ConfigProto(gpu_options=config.session_config.gpu_options),
        protocol=config.protocol)
    ps_server.serve(server, plan.task.cluster, plan.task.index, watch, tf.logging.info)


def train_all(run_estimator, settings, plan, inputs, run_hooks, stop_hook, stop):
    """The training of the mode: to --max_iter, or in train_and_eval mode in pieces of
    --test_interval steps with an evaluation after each, until stop() (a signal).
    inputs: (training files, record-level split, val files)."""
    files, record_shard, val_files = inputs
    max_iter, model_dir = settings.schedule.max_iter, settings.output.model_dir
    input_fn = estimator.training_input_fn(
        settings.data, settings.model, files, estimator.crop_seed(settings.training),
        record_shard)
    if plan.distribution in ('ps', 'collective'):
        tf.estimator.train_and_evaluate(run_estimator, tf.estimator.TrainSpec(
            input_fn, max_steps=estimator.training_steps(max_iter), hooks=run_hooks),
            evaluation.cluster_eval_spec(settings, val_files))
    elif settings.task.mode == 'train_and_eval':
        test_interval = settings.evaluation.test_interval
        step = checkpoints.estimator_step(model_dir)
        last = max_iter if max_iter > 0 else float('inf')
        while step < last and not stop():
            step = min(last, (step // test_interval + 1) * test_interval)
            run_estimator.train(input_fn=input_fn, max_steps=step, hooks=run_hooks)
            if not stop():
                evaluation.evaluate_latest(settings, run_estimator, val_files, [stop_hook])
    else:
        run_estimator.train(input_fn=input_fn, max_steps=estimator.training_steps(max_iter),
                            hooks=run_hooks)


def pretrained_variables(finetune, model):
    """Checks --pretrain_ckpt against the model (the flags.Model group, data_format
    resolved); (checkpoint, names to warm-start) or None."""
    if not finetune.pretrain_ckpt:
        return None
    checkpoint = checkpoints.resolve_checkpoint(finetune.pretrain_ckpt, 'pretrain_ckpt')
    shapes = checkpoints.model_variable_shapes(model.resnet_size, model.class_num,
                                               model.image_size, model.data_format)
    return checkpoint, checkpoints.warm_start_names(checkpoint, shapes, model.resnet_size)


def log_fix_block2(finetune):
    """Logs what --FixBlock2 freezes in this run, if it is on (finetune: the flags.Finetune
    group)."""
    if finetune.FixBlock2:
        tf.logging.info('FixBlock2: init and stages 0-1 are frozen (not trained, batch norm '
                        'in %s mode)%s', finetune.frozen_bn, '' if finetune.pretrain_ckpt else
                        ' -- without --pretrain_ckpt they keep their random initialisation')


def warm_start_unless_resuming(pretrained, model_dir, class_num):
    """The run's warm start: pretrained ((checkpoint, names) of --pretrain_ckpt, or None),
    or None when model_dir's own checkpoint takes precedence (a restart); logs which."""
    if not pretrained:
        return None
    if checkpoints.latest_checkpoint(model_dir):
        tf.logging.info('--pretrain_ckpt is not used: %s already holds a checkpoint, training '
                        'resumes from it', model_dir)
        return None
    checkpoint, names = pretrained
    head = dict(tf.train.list_variables(checkpoint)).get('logits/dense/bias')
    tf.logging.info('fine-tuning from %s: %d variables restored (%d batch-norm moving '
                    'statistics); new head of %d classes%s', checkpoint, len(names),
                    sum('moving_' in n for n in names), class_num,
                    ' (the checkpoint\'s has %d)' % head[0] if head else '')
    return pretrained
