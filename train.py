"""The command line of the trainer: parses and validates the flags, unpacks them once
into the Settings (flags.settings: the values in groups by concern) and runs the mode.
Training is mlimages/run/training.py's, evaluation run/evaluation.py's, inference
mlimages/inference/serving.py's; the map of the code (its layers, each package's modules)
is mlimages/__init__.py's docstring.

    .venv/bin/python train.py --data_dir=/data/ml-images --class_num=11166 --resnet_size=101 ...
    .venv/bin/python train.py --demo        # builds a small dataset and trains on it on the CPU
    .venv/bin/python train.py --help        # every flag, grouped

Exit status: 0 done, 1 an error after training started (errors.TrainingError), 2 a bad
flag or input (errors.UsageError, errors.DataError), 143 / 130 stopped by SIGTERM / SIGINT
(128 + the signal; a training run saves a checkpoint at the step it stopped at first:
rerun the same command to resume, preemption.py), 200 a task of the cluster job was lost
(peers.py: retryable, rerun every task to resume); each reported as one line.
"""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), 'mlimages/config/interpreter.py'))
import atexit
import os
import sys

from mlimages.config import startup

PROGRAM = 'train.py'
if __name__ == '__main__' and startup.wants_help():
    import flags as flags_lib  # absl only: --help prints at once
    sys.stdout.write(flags_lib.grouped_help(PROGRAM))
    sys.exit(0)
# quiet start-up, the versions and the CPU's kernel library, before the import
startup.before_tensorflow(PROGRAM, choose_kernels=True)

# After start-up on purpose: startup quiets TensorFlow and checks its version first.
import tensorflow.compat.v1 as tf  # noqa: E402

import flags as flags_lib  # noqa: E402
from mlimages.config import cpu, flag_checks, gpu_env, interpreter, run_settings  # noqa: E402
from mlimages.distributed import cluster_flags, devices  # noqa: E402
from mlimages import errors  # noqa: E402
from mlimages.errors import (Interrupted, PeerLost, TrainingError,  # noqa: E402
                             UsageError, stop_raises, stopped)
from mlimages.inference import (export as export_lib, inference_io,  # noqa: E402
                                batch_outputs, inference_settings, saved_models, serving)
from mlimages.model import precision  # noqa: E402
from mlimages.run import calibration, checkpoints, estimator, evaluation, training  # noqa: E402

tf.disable_v2_behavior()

FLAGS = flags_lib.FLAGS


def flags_txt(settings):
    """(header, flag lines) of this run for <model_dir>/flags.txt (run_settings): the
    values it runs with (the demo's settings included)."""
    return (run_settings.header(PROGRAM, tf.version.VERSION),
            run_settings.flag_lines(flags_lib.flat(settings)))


def choose_devices(settings):
    """Makes the GPUs of --visiable_gpu/--num_gpus the only ones this process sees, before
    anything starts TensorFlow's GPU runtime; returns the Settings with the thread counts
    of --tf_gpu_thread_mode, or of this process's CPU share when it is less than the CPUs
    it sees (devices.cpu_share: several tasks on the node), filled in where the user gave
    none (the devices group's and the data group's private_threads)."""
    chosen = settings.devices
    made, inter_op, private = devices.choose(chosen.visiable_gpu, chosen.num_gpus,
                                             chosen.tf_gpu_thread_mode)
    inter_op, intra_op, private = devices.share_threads(
        devices.cpu_share(), chosen.inter_op_threads or inter_op, chosen.intra_op_threads,
        settings.data.private_threads or private)
    chosen = chosen.replace(inter_op_threads=inter_op, intra_op_threads=intra_op)
    # Without a GPU there is nothing to say (training's first lines count the GPUs seen).
    if devices.gpu_count() or chosen.tf_gpu_thread_mode in ('gpu_private', 'gpu_shared'):
        tf.logging.info('devices: %s; inter-op threads %s, input private threads %s', ', '.join(
            '%s=%s' % item for item in sorted(made.items())),
            chosen.inter_op_threads or 'default', private or 'shared')
    if devices.gpu_count():  # a GPU newer than the build's machine code: the start's cost
        line = gpu_env.compute_capability_line(
            gpu_env.build_capabilities(), gpu_env.device_capabilities(), os.environ)
        if line:
            tf.logging.warning('%s', line)
    return settings.replace(devices=chosen,
                             data=settings.data.replace(private_threads=private))


def resolve_dtype(settings):
    """The Settings with --dtype=auto resolved for the GPUs this process sees and its CPU
    (cpu.resolve_dtype), the choice and its reason logged."""
    choice = cpu.resolve_dtype(settings.model.dtype, devices.gpu_count() > 0, cpu.this_cpu())
    if settings.model.dtype != 'auto':
        return settings
    tf.logging.info('dtype %s (--dtype=%s)', choice.value, choice.reason)
    return settings.replace(model=settings.model.replace(dtype=choice.value))


def start_cluster(task, cluster, num_gpus, model_dir):
    """The cluster of TF_CONFIG, Slurm or --worker_hosts (cluster_flags.setup: TF_CONFIG
    and, under Slurm, CUDA_VISIBLE_DEVICES); an independent run of --worker_num > 1 says
    so first, and stops here if another worker's run owns its --model_dir (training.train
    claims it once the inputs are checked)."""
    source, line = cluster_flags.setup(cluster, num_gpus)
    if line:
        tf.logging.info(line)
    if source == 'independent' and task.mode in ('train', 'train_and_eval') and \
            not task.demo:
        cluster_flags.claim_model_dir(model_dir, cluster.worker_id, cluster.worker_num,
                                      create=False)


def check_what_they_name(settings):
    """What the checked settings name and need on this machine: the export directory,
    the hierarchy file, the CPU's bf16 kernels; raises UsageError."""
    if settings.task.export_dir:
        saved_models.check_export_dir(settings.task.export_dir)
    if settings.evaluation.hierarchy:  # a bad file is a UsageError
        estimator.leaf_mask(settings.evaluation.hierarchy, settings.model.class_num)
    check_cpu_kernels(settings.model.dtype, settings.devices)


def check_inference_dtype(dtype):
    """--mode=eval and predict: bf16 only where it is native (a GPU, or a CPU with
    bfloat16 instructions: precision.bf16_inference_error); raises UsageError."""
    error = precision.bf16_inference_error(dtype, bool(tf.config.list_physical_devices('GPU')))
    if error:
        raise UsageError(error)


def check_cpu_kernels(dtype, devices_group):
    """--dtype on a machine without GPUs: its CPU kernels must exist; raises UsageError."""
    if dtype != 'bf16' or tf.config.list_physical_devices('GPU'):
        return
    error = precision.cpu_kernel_error(dtype, devices.session_config(
        devices_group.inter_op_threads, devices_group.intra_op_threads))
    if error:
        raise UsageError(
            '--dtype=bf16: this CPU has no bfloat16 convolution in TensorFlow\'s oneDNN '
            'kernels (%s); train with --dtype=fp32, or set TF_ENABLE_ONEDNN_OPTS=0 for '
            'TensorFlow\'s own bfloat16 kernels' % error)


def trained_settings(settings):
    """--mode=eval, predict and export: the Settings with the network's settings
    (inference_settings) from the flags.txt beside the checkpoint unless given on the
    command line, logged first once the checkpoint is found. Without a checkpoint, the
    Settings as given: the mode says what is missing, once the flags are checked."""
    task, model_dir = settings.task, settings.output.model_dir
    try:
        if task.mode == 'eval':
            evaluation.evaluation_checkpoint(task.checkpoint_path, model_dir)
        else:
            inference_checkpoint(task.checkpoint_path, model_dir)
    except UsageError:
        return settings
    values, lines = inference_settings.checkpoint_settings(
        flags_lib.flat(settings), flags_lib.given(), task.checkpoint_path or model_dir,
        inference_settings.MODE_SETTINGS[task.mode])
    tf.logging.info('%s', lines[0])
    for line in lines[1:]:
        tf.logging.warning('%s', line)
    return flags_lib.replace(settings, **values)


def check_eval_model(checkpoint_path, model_dir, model):
    """--mode=eval: a depth or class count that does not fit the checkpoint is a
    UsageError (as predict and export check it), not a failed restore."""
    checkpoint = checkpoint_path or checkpoints.latest_checkpoint(model_dir)
    if checkpoint and tf.train.checkpoint_exists(checkpoint):
        checkpoints.checkpoint_model(checkpoint, model.resnet_size, model.class_num)


def inference_checkpoint(checkpoint_path, model_dir):
    """--checkpoint_path, else the latest checkpoint in --model_dir."""
    if checkpoint_path:
        return checkpoints.resolve_checkpoint(checkpoint_path, 'checkpoint_path')
    return checkpoints.resolve_checkpoint(model_dir, 'model_dir')


def predict(settings):
    """--mode=predict: tools/predict.py's TSV for the images of --piclist, on stdout."""
    inference, model = settings.inference, settings.model
    checkpoint = inference_checkpoint(settings.task.checkpoint_path, settings.output.model_dir)
    images = inference_io.collect_images(list_file=inference.piclist)
    predictor = serving.load_predictor(
        checkpoint=checkpoint, model=model, finetune=settings.finetune,
        resnet_size=model.resnet_size, class_num=model.class_num, top_k=inference.top_k,
        preprocess=inference.preprocess, dtype=model.dtype)
    try:
        names = (inference_io.load_class_names(inference.class_dict, predictor.class_num)
                 if inference.class_dict else None)
        threshold, _ = threshold_and_file(inference.threshold, predictor.checkpoint,
                                          predictor.class_num)
        processed, skipped = batch_outputs.predict_to(
            predictor, images, None, 'tsv', settings.data.batch_size, inference.top_k,
            threshold, names, PROGRAM)
    finally:
        predictor.close()
    if not processed:
        raise TrainingError('no image of --piclist=%s could be processed (%d skipped)'
                            % (inference.piclist, skipped))
    tf.logging.info('%d image%s classified with %s, %d skipped', processed,
                    '' if processed == 1 else 's', predictor.source,
                    skipped)


def threshold_and_file(threshold, checkpoint_path, class_num):
    """--threshold: (its number, None), or for calibrated (the per-class thresholds of
    the thresholds.txt beside the checkpoint, its path); a file chosen for another
    checkpoint is a warning."""
    if threshold != calibration.CALIBRATED:
        return float(threshold), None
    values, path, warnings = calibration.for_checkpoint(checkpoint_path, class_num)
    for line in warnings:
        tf.logging.warning('%s', line)
    return values, path


def export(settings, checkpoint_path=None):
    """--mode=export, or --export_dir after training: export.py's SavedModel of the
    checkpoint (default: --checkpoint_path, else the latest in --model_dir)."""
    inference, model = settings.inference, settings.model
    checkpoint_path = checkpoint_path or inference_checkpoint(settings.task.checkpoint_path,
                                                              settings.output.model_dir)
    checkpoints.checkpoint_model(checkpoint_path, model.resnet_size, model.class_num)
    threshold, calibrated = threshold_and_file(inference.threshold, checkpoint_path,
                                               model.class_num)
    path = export_lib.export_saved_model(
        checkpoint_path, settings.task.export_dir, model, inference.top_k, inference.preprocess,
        flags_lines=inference_settings.export_record(flags_lib.flat(settings), checkpoint_path),
        threshold=threshold if calibrated is None else None, calibrated=calibrated,
        finetune=settings.finetune)
    tf.logging.info('exported %s as the SavedModel %s (%s; %s; positives at %s)',
                    checkpoint_path, path, export_lib.describe(path),
                    serving.preprocessing_line(inference.preprocess, model.image_size),
                    calibrated or 'score >= %g' % threshold)
    return path


def main(argv, extra_hooks=()):
    """Runs the mode of the parsed flags and returns the exit status; extra_hooks: more
    SessionRunHooks of every training session and of --mode=eval's evaluation (a seam for
    programs that wrap this one)."""
    del argv
    settings = flags_lib.settings()
    stop_raises()
    try:
        dispatch(settings, extra_hooks)
    except (UsageError, errors.DataError, errors.DirectoryError, TrainingError, PeerLost,
            Interrupted, KeyboardInterrupt) as e:  # KeyboardInterrupt: errors.Stopped too
        if isinstance(e, Interrupted):  # training saved its checkpoint and said so
            sys.stderr.write('%s: %s\n' % (PROGRAM, e))
            exit_now(e.status)  # inside Kubernetes' 30 s after a SIGTERM
        if not isinstance(e, KeyboardInterrupt):
            return errors.report(PROGRAM, e)
        words, status = stopped(e)  # errors.Stopped, or a SIGINT before main
        sys.stderr.write('%s: %s%s\n' % (
            PROGRAM, words, ' before training started; nothing was saved, rerun the same '
            'command' if settings.task.mode in ('train', 'train_and_eval')
            else '; nothing was written'))
        return status
    return 0


def exit_now(status):
    """Ends the process with `status` once everything is written: the event files closed,
    the exit handlers run (the logs flushed, the model directory's lock released). The
    interpreter's teardown of the graph and its session is skipped: 2 s for a ResNet-18
    at the end of every run, 10 s and more for a ResNet-101."""
    tf.summary.FileWriterCache.clear()
    atexit._run_exitfuncs()  # what a normal exit runs first
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def settled(settings):
    """The Settings the mode runs with: --demo's (demo.demo_settings); --mode=eval,
    predict and export: the network's of the flags.txt beside the checkpoint
    (trained_settings); the command line's otherwise."""
    if settings.task.demo:
        from mlimages import demo  # the record builders load for --demo only
        return demo.demo_settings(settings, flags_lib.given())
    if settings.task.mode in ('eval', 'predict', 'export'):
        return trained_settings(settings)
    return settings


def dispatch(settings, extra_hooks):
    """Settles the Settings, checks them once, starts the cluster, chooses the devices
    and checks what the settings name, then runs the mode: --demo, eval, predict,
    export, or training (train, train_and_eval) and --export_dir's SavedModel after it."""
    if settings.task.mode in ('eval', 'predict') and not settings.task.demo:
        check_inference_dtype(settings.model.dtype)  # before the checkpoint is looked for
    settings = settled(settings)
    flag_checks.validate(settings)  # the one check of every flag
    # TF_CONFIG from Slurm or the host flags, before it is read
    start_cluster(settings.task, settings.cluster, settings.devices.num_gpus,
                  settings.output.model_dir)
    settings = resolve_dtype(choose_devices(settings))
    check_what_they_name(settings)
    mode = settings.task.mode
    if settings.task.demo:
        from mlimages import demo
        demo.make_dataset(os.path.abspath(settings.task.demo_dir))
        run_estimator, trained = training.train(settings, flags_txt(settings), extra_hooks)
        demo.report(trained, run_estimator)
    elif mode == 'eval':
        check_eval_model(settings.task.checkpoint_path, settings.output.model_dir,
                         settings.model)
        evaluation.evaluate(settings, run_hooks=extra_hooks)
        return
    elif mode == 'predict':
        predict(settings)
        return
    elif mode == 'export':
        export(settings)
        return
    else:
        training.train(settings, flags_txt(settings), extra_hooks)
    if settings.task.export_dir:
        export(settings, checkpoints.latest_checkpoint(settings.output.model_dir))


def flag_error_text(error):
    """absl's message, its boolean parser's ValueError tuple ('Non-boolean argument to
    boolean flag', 'maybe') said in words."""
    cause = error.__context__
    if isinstance(cause, ValueError) and len(cause.args) == 2 and 'boolean' in cause.args[0]:
        return str(error).replace(str(cause), 'not a boolean: give true or false (or '
                                  '--name / --noname)')
    return str(error)


def from_command_line(extra_hooks=()):
    """The command line: parses sys.argv and runs main (extra_hooks: see main)."""
    from absl import app
    from absl import flags as absl_flags
    try:
        FLAGS(sys.argv)
    except absl_flags.Error as e:
        # absl would say "FATAL Flags parsing error" and exit 1; a usage error is 2 here.
        sys.stderr.write('%s: error: %s (%s %s --help lists every flag)\n'
                         % (PROGRAM, flag_error_text(e), interpreter.python_command(), PROGRAM))
        sys.exit(2)
    tf.logging.set_verbosity(tf.logging.INFO)
    # absl's handler prints every line once; TensorFlow's own would print it a second time.
    tf.get_logger().handlers.clear()
    # Before app.run: its after-init callbacks start CUDA (devices.choose_at_start). A
    # Slurm task takes its own block of the node's GPUs first; --visiable_gpu counts in it.
    try:
        cluster_flags.narrow_to_slurm_task(FLAGS.num_gpus)
    except UsageError as e:
        sys.exit(errors.report(PROGRAM, e))
    devices.choose_at_start(FLAGS.visiable_gpu, FLAGS.num_gpus, FLAGS.tf_gpu_thread_mode)
    app.run(lambda argv: exit_now(main(argv, extra_hooks)))


if __name__ == '__main__':
    from_command_line()
