"""The command line of the trainer: parses and validates the flags, unpacks them once
into an Options (one plain value per flag) and runs the mode. Training and evaluation are
mlimages/run/training.py's, inference mlimages/inference/serving.py's; the rest of the
data flow is docs/layout.md's

    flags -> file_db -> data (records, input_pipeline) -> image_preprocess -> resnet
          -> model (loss, lr_schedule) -> run (model_fn, training: tf.estimator)

    .venv/bin/python train.py --data_dir=/data/ml-images --class_num=11166 --resnet_size=101 ...
    .venv/bin/python train.py --demo        # builds a small dataset and trains on it on the CPU
    .venv/bin/python train.py --help        # every flag, grouped

Exit status: 0 done, 1 an error after training started (errors.TrainingError), 2 a bad
flag or input (errors.UsageError, file_db.DataError), 143 / 130 stopped by SIGTERM / SIGINT
(128 + the signal; a training run saves a checkpoint at the step it stopped at first:
rerun the same command to resume, preemption.py), 200 a task of the cluster job was lost
(peers.py: retryable, rerun every task to resume); each reported as one line.
"""
import os, runpy  # noqa: E401  first: can this Python run it? (mlimages/config/interpreter.py)
runpy.run_path(os.path.join(os.path.dirname(__file__), 'mlimages/config/interpreter.py'))
import logging
import os
import sys

from mlimages.config import startup

PROGRAM = 'train.py'
if __name__ == '__main__' and startup.wants_help():
    import flags as flags_lib  # absl only: --help prints at once
    sys.stdout.write(flags_lib.grouped_help(PROGRAM))
    sys.exit(0)
startup.before_tensorflow(PROGRAM)  # quiet start-up and the versions, before the import

# After start-up on purpose: startup quiets TensorFlow and checks its version first.
import tensorflow.compat.v1 as tf  # noqa: E402

import file_db  # noqa: E402
import flags as flags_lib  # noqa: E402
from mlimages.config import flag_checks, gpu_env, interpreter, run_settings  # noqa: E402
from mlimages.distributed import cluster_flags, devices  # noqa: E402
from mlimages.errors import (PEER_LOST_STATUS, Interrupted, PeerLost,  # noqa: E402
                             TrainingError, UsageError, stop_raises, stopped)
from mlimages.inference import (export as export_lib, inference_io,  # noqa: E402
                                inference_settings, runs, saved_models, serving)
from mlimages.model import precision  # noqa: E402
from mlimages.run import calibration, checkpoints, run_dirs, training  # noqa: E402

tf.disable_v2_behavior()

FLAGS = flags_lib.FLAGS
Options = flags_lib.Options


def settings(opts):
    """(header, flag lines) of this run for <model_dir>/flags.txt (run_settings): the
    values it runs with (the demo's settings included)."""
    return (run_settings.header(PROGRAM, tf.version.VERSION),
            run_settings.flag_lines(opts._asdict()))


def choose_devices(opts):
    """Makes the GPUs of --visiable_gpu/--num_gpus the only ones this process sees, before
    anything starts TensorFlow's GPU runtime; returns opts with the thread counts of
    --tf_gpu_thread_mode, or of this process's CPU share when it is less than the CPUs it
    sees (devices.cpu_share: several tasks on the node), filled in where the user gave none."""
    made, inter_op, private = devices.choose(opts.visiable_gpu, opts.num_gpus,
                                             opts.tf_gpu_thread_mode)
    inter_op, intra_op, private = devices.share_threads(
        devices.cpu_share(), opts.inter_op_threads or inter_op, opts.intra_op_threads,
        opts.private_threads or private)
    opts = opts._replace(inter_op_threads=inter_op, intra_op_threads=intra_op,
                         private_threads=private)
    # Without a GPU there is nothing to say (training's first lines count the GPUs seen).
    if devices.gpu_count() or opts.tf_gpu_thread_mode in ('gpu_private', 'gpu_shared'):
        tf.logging.info('devices: %s; inter-op threads %s, input private threads %s', ', '.join(
            '%s=%s' % item for item in sorted(made.items())),
            opts.inter_op_threads or 'default', opts.private_threads or 'shared')
    if devices.gpu_count():  # a GPU newer than the build's machine code: the start's cost
        line = gpu_env.compute_capability_line(
            gpu_env.build_capabilities(), gpu_env.device_capabilities(), os.environ)
        if line:
            tf.logging.warning('%s', line)
    return opts


def start_cluster(opts):
    """The cluster of TF_CONFIG, Slurm or --worker_hosts (cluster_flags.setup: TF_CONFIG
    and, under Slurm, CUDA_VISIBLE_DEVICES); an independent run of --worker_num > 1 says
    so first, and stops here if another worker's run owns its --model_dir (training.train
    claims it once the inputs are checked)."""
    source, line = cluster_flags.setup(opts)
    if line:
        tf.logging.info(line)
    if source == 'independent' and opts.mode in ('train', 'train_and_eval') and \
            not opts.demo:
        cluster_flags.claim_model_dir(opts.model_dir, opts.worker_id, opts.worker_num,
                                      create=False)


def validate(opts):
    """Checks everything that can be checked before a graph exists: every flag's value
    (flag_checks.validate), then what the values name (the hierarchy file, the export directory,
    the CPU's kernels); raises UsageError."""
    flag_checks.validate(flags_lib.grouped(opts))
    if opts.export_dir:
        saved_models.check_export_dir(opts.export_dir)
    if opts.hierarchy:
        training.leaf_mask(opts.hierarchy, opts.class_num)  # a bad file is a UsageError
    check_cpu_kernels(opts)


def check_cpu_kernels(opts):
    """--dtype on a machine without GPUs: its CPU kernels must exist; raises UsageError."""
    if opts.dtype != 'bf16' or tf.config.list_physical_devices('GPU'):
        return
    error = precision.cpu_kernel_error(opts.dtype, devices.session_config(
        opts.inter_op_threads, opts.intra_op_threads))
    if error:
        raise UsageError(
            '--dtype=bf16: this CPU has no bfloat16 convolution in TensorFlow\'s oneDNN '
            'kernels (%s); train with --dtype=fp32, or set TF_ENABLE_ONEDNN_OPTS=0 for '
            'TensorFlow\'s own bfloat16 kernels' % error)


def trained_settings(opts):
    """--mode=eval, predict and export: the network's settings (inference_settings) from
    the flags.txt beside the checkpoint unless given on the command line, logged first
    once the checkpoint is found (a missing one is the one line)."""
    if opts.mode == 'eval':
        training.evaluation_checkpoint(opts)
    else:
        inference_checkpoint(opts)
    opts, lines = inference_settings.for_options(
        opts, flags_lib.given(), opts.checkpoint_path or opts.model_dir,
        inference_settings.MODE_SETTINGS[opts.mode])
    tf.logging.info('%s', lines[0])
    for line in lines[1:]:
        tf.logging.warning('%s', line)
    return opts


def check_eval_model(opts):
    """--mode=eval: a depth or class count that does not fit the checkpoint is a
    UsageError (as predict and export check it), not a failed restore."""
    checkpoint = opts.checkpoint_path or checkpoints.latest_checkpoint(opts.model_dir)
    if checkpoint and tf.train.checkpoint_exists(checkpoint):
        checkpoints.checkpoint_model(checkpoint, opts.resnet_size, opts.class_num)


def inference_checkpoint(opts):
    """--checkpoint_path, else the latest checkpoint in --model_dir."""
    if opts.checkpoint_path:
        return checkpoints.resolve_checkpoint(opts.checkpoint_path, 'checkpoint_path')
    return checkpoints.resolve_checkpoint(opts.model_dir, 'model_dir')


def predict(opts):
    """--mode=predict: tools/predict.py's TSV for the images of --piclist, on stdout."""
    validate(opts)
    images = inference_io.collect_images(list_file=opts.piclist)
    predictor = serving.load_predictor(
        checkpoint=inference_checkpoint(opts), opts=opts, resnet_size=opts.resnet_size,
        class_num=opts.class_num, top_k=opts.top_k, preprocess=opts.preprocess)
    try:
        names = (inference_io.load_class_names(opts.class_dict, predictor.class_num)
                 if opts.class_dict else None)
        threshold, _ = thresholds(opts, predictor.checkpoint, predictor.class_num)
        processed, skipped = runs.run_predict(
            predictor, images, None, 'tsv', opts.batch_size, opts.top_k, threshold, names,
            PROGRAM)
    finally:
        predictor.close()
    if not processed:
        raise TrainingError('no image of --piclist=%s could be processed (%d skipped)'
                            % (opts.piclist, skipped))
    tf.logging.info('%d image%s classified with %s, %d skipped', processed,
                    '' if processed == 1 else 's', predictor.source,
                    skipped)


def thresholds(opts, checkpoint_path, class_num):
    """--threshold: (its number, None), or for calibrated (the per-class thresholds of
    the thresholds.txt beside the checkpoint, its path); a file chosen for another
    checkpoint is a warning."""
    if opts.threshold != calibration.CALIBRATED:
        return float(opts.threshold), None
    values, path, warnings = calibration.for_checkpoint(checkpoint_path, class_num)
    for line in warnings:
        tf.logging.warning('%s', line)
    return values, path


def export(opts, checkpoint_path=None):
    """--mode=export, or --export_dir after training: export.py's SavedModel of the
    checkpoint (default: --checkpoint_path, else the latest in --model_dir)."""
    validate(opts)
    checkpoint_path = checkpoint_path or inference_checkpoint(opts)
    checkpoints.checkpoint_model(checkpoint_path, opts.resnet_size, opts.class_num)
    threshold, calibrated = thresholds(opts, checkpoint_path, opts.class_num)
    path = export_lib.export_saved_model(
        checkpoint_path, opts.export_dir, opts, opts.top_k, opts.preprocess,
        flags_lines=inference_settings.export_record(opts, checkpoint_path),
        threshold=threshold if calibrated is None else None, calibrated=calibrated)
    tf.logging.info('exported %s as the SavedModel %s (%s; %s; positives at %s)',
                    checkpoint_path, path, export_lib.describe(path),
                    serving.preprocessing_line(opts.preprocess, opts.image_size),
                    calibrated or 'score >= %g' % threshold)
    return path


def main(argv, extra_hooks=()):
    """Runs the mode of the parsed flags; extra_hooks: more SessionRunHooks of every
    training session and of --mode=eval's evaluation (a seam for programs that wrap this
    one)."""
    del argv
    opts = flags_lib.options()
    stop_raises()
    try:
        flag_checks.validate(flags_lib.grouped(opts))
        start_cluster(opts)  # TF_CONFIG from Slurm or the host flags, before it is read
        opts = choose_devices(opts)
        if opts.demo:
            from mlimages import demo  # the record builders load for --demo only
            opts = demo.prepare(opts, flags_lib.given())
            validate(opts)
            demo.report(opts, training.train(opts, settings(opts), extra_hooks))
            if opts.export_dir:
                export(opts, checkpoints.latest_checkpoint(opts.model_dir))
        elif opts.mode == 'eval':
            opts = trained_settings(opts)
            validate(opts)
            check_eval_model(opts)
            training.evaluate(opts, run_hooks=extra_hooks)
        elif opts.mode == 'predict':
            predict(trained_settings(opts))
        elif opts.mode == 'export':
            export(trained_settings(opts))
        else:
            validate(opts)
            training.train(opts, settings(opts), extra_hooks)
            if opts.export_dir:
                export(opts, checkpoints.latest_checkpoint(opts.model_dir))
    except (UsageError, file_db.DataError, run_dirs.DirectoryError) as e:
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(2)
    except TrainingError as e:
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(1)
    except PeerLost as e:
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(PEER_LOST_STATUS)
    except Interrupted as e:
        sys.stderr.write('%s: %s\n' % (PROGRAM, e))
        # Everything is saved and closed: out now. The interpreter's teardown of a
        # ResNet-101 graph and its session takes 10 s and more, inside Kubernetes' 30 s.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + e.signum)
    except KeyboardInterrupt as e:  # errors.Stopped, or a SIGINT before main
        words, status = stopped(e)
        sys.stderr.write('%s: %s%s\n' % (
            PROGRAM, words, ' before training started; nothing was saved, rerun the same '
            'command' if opts.mode in ('train', 'train_and_eval') else '; nothing was written'))
        sys.exit(status)


def flag_error_text(error):
    """absl's message, its boolean parser's ValueError tuple ('Non-boolean argument to
    boolean flag', 'maybe') said in words."""
    cause = error.__context__
    if isinstance(cause, ValueError) and len(cause.args) == 2 and 'boolean' in cause.args[0]:
        return str(error).replace(str(cause), 'not a boolean: give true or false (or '
                                  '--name / --noname)')
    return str(error)


def run(extra_hooks=()):
    """The command line: parses sys.argv and runs main (extra_hooks: see main)."""
    import functools
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
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(2)
    devices.choose_at_start(FLAGS.visiable_gpu, FLAGS.num_gpus, FLAGS.tf_gpu_thread_mode)
    app.run(functools.partial(main, extra_hooks=extra_hooks))


if __name__ == '__main__':
    run()
