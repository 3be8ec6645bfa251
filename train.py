"""The command line of the trainer: parses and validates the flags, unpacks them once
into an Options (one plain value per flag) and runs the mode. Training and evaluation are
training.py's, inference serving.py's; the rest of the data flow is

    flags -> file_db -> records / input_pipeline -> image_preprocess -> resnet
          -> loss / lr_schedule -> model_fn -> tf.estimator (training.py)

    python train.py --data_dir=/data/ml-images --class_num=11166 --resnet_size=101 ...
    python train.py --demo        # builds a small dataset and trains on it on the CPU
    python train.py --help        # every flag, grouped

Exit status: 0 done, 1 an error after training started (errors.TrainingError), 2 a bad
flag or input (errors.UsageError, file_db.DataError); each reported as one line.
"""
import collections
import sys

import startup

PROGRAM = 'train.py'
if __name__ == '__main__' and startup.wants_help():
    import flags as flags_lib  # absl only: --help prints at once
    sys.stdout.write(flags_lib.grouped_help(PROGRAM))
    sys.exit(0)
startup.before_tensorflow(PROGRAM)  # quiet start-up and the versions, before the import

import tensorflow.compat.v1 as tf  # noqa: E402

import checkpoints
import demo
import devices
import file_db
import flags as flags_lib
import inference_io
import input_pipeline
import lr_schedule
import precision
import records
import resnet
import run_settings
import serving
import training
from errors import TrainingError, UsageError

tf.disable_v2_behavior()

FLAGS = flags_lib.FLAGS
MODES = ('train', 'eval', 'train_and_eval', 'predict', 'export')

# Every flag of flags.py as a plain value, in --help order.
Options = collections.namedtuple(
    'Options', [name for names in flags_lib.GROUPS.values() for name in names])


def options(flag_values=FLAGS):
    """The parsed flags as an Options."""
    return Options(**{name: flag_values[name].value for name in Options._fields})


def settings(opts):
    """(header, flag lines) of this run for <model_dir>/flags.txt (run_settings): the
    values it runs with (the demo's settings included)."""
    return (run_settings.header(PROGRAM, tf.version.VERSION),
            run_settings.flag_lines(opts._asdict()))


def given_flags(flag_values=FLAGS):
    """The names of the flags given on the command line."""
    return {name for name in Options._fields if flag_values[name].present}


def check_performance_flags(augment_on, dtype, private_threads):
    """The Performance group's values; raises UsageError."""
    if augment_on not in ('auto',) + input_pipeline.AUGMENT_ON:
        raise UsageError('--augment_on must be auto, cpu or device, got %r' % augment_on)
    if dtype not in precision.DTYPES:
        raise UsageError('--dtype must be one of %s, got %r'
                         % (', '.join(precision.DTYPES), dtype))
    if private_threads < 0:
        raise UsageError('--private_threads must be >= 0, got %d' % private_threads)


def check_device_flags(opts):
    """The Devices group's values; raises UsageError."""
    if opts.tf_gpu_thread_mode not in devices.GPU_THREAD_MODES:
        raise UsageError('--tf_gpu_thread_mode must be one of %s, got %r' % (
            ', '.join(devices.GPU_THREAD_MODES), opts.tf_gpu_thread_mode))
    for name in ('inter_op_threads', 'intra_op_threads'):
        if getattr(opts, name) < 0:
            raise UsageError('--%s must be >= 0 (0 = TensorFlow\'s choice), got %d'
                             % (name, getattr(opts, name)))


def choose_devices(opts):
    """Makes the GPUs of --visiable_gpu/--num_gpus the only ones this process sees, before
    anything starts TensorFlow's GPU runtime; returns opts with the thread counts of
    --tf_gpu_thread_mode filled in where the user gave none."""
    made, inter_op, private = devices.choose(opts.visiable_gpu, opts.num_gpus,
                                             opts.tf_gpu_thread_mode)
    opts = opts._replace(inter_op_threads=opts.inter_op_threads or inter_op,
                         private_threads=opts.private_threads or private)
    if devices.GPU_ENV in made or opts.tf_gpu_thread_mode != 'off':
        tf.logging.info('devices: %s; inter-op threads %s, input private threads %s', ', '.join(
            '%s=%s' % item for item in sorted(made.items())),
            opts.inter_op_threads or 'default', opts.private_threads or 'shared')
    return opts


def validate(opts):
    """Checks everything that can be checked before a graph exists; raises UsageError."""
    if opts.mode not in MODES:
        raise UsageError('--mode=%s is not implemented; use one of %s'
                         % (opts.mode, ', '.join(MODES)))
    if opts.mode == 'train_and_eval' and opts.test_interval <= 0:
        raise UsageError('--mode=train_and_eval needs --test_interval > 0, got %d'
                         % opts.test_interval)
    check_inference_flags(opts)
    if opts.test_iter < 0:
        raise UsageError('--test_iter must be >= 0 (0 = the whole val split), got %d'
                         % opts.test_iter)
    if opts.eval_throttle_secs < 0:
        raise UsageError('--eval_throttle_secs must be >= 0, got %d' % opts.eval_throttle_secs)
    if opts.summary_interval < 0:
        raise UsageError('--summary_interval must be >= 0 (0 = --log_interval), got %d'
                         % opts.summary_interval)
    for name in ('batch_size', 'image_size', 'class_num', 'log_interval', 'snapshot',
                 'max_to_keep'):
        if getattr(opts, name) <= 0:
            raise UsageError('--%s must be positive, got %d' % (name, getattr(opts, name)))
    if opts.image_channels != 3:
        raise UsageError('--image_channels must be 3 (the model takes RGB), got %d'
                         % opts.image_channels)
    if opts.resnet_size not in resnet.SUPPORTED_SIZES:
        raise UsageError('--resnet_size=%d is not supported; use one of %s' % (
            opts.resnet_size, ', '.join(map(str, resnet.SUPPORTED_SIZES))))
    if opts.lr_decay_step < 0:
        raise UsageError('--lr_decay_step must be >= 0 (0 = no decay), got %d'
                         % opts.lr_decay_step)
    if opts.warmup > 0 and opts.lr_warmup_decay_step <= 0:
        raise UsageError('--warmup=%d needs --lr_warmup_decay_step > 0 (got %d)'
                         % (opts.warmup, opts.lr_warmup_decay_step))
    if opts.max_iter < -1 or opts.max_iter == 0:
        raise UsageError('--max_iter must be positive or -1 (forever), got %d' % opts.max_iter)
    try:
        file_db.check_worker(opts.worker_num, opts.worker_id)
    except ValueError as e:
        raise UsageError(str(e))
    for name in ('object_cover', 'area_cover'):
        if not 0.0 <= getattr(opts, name) <= 1.0:
            raise UsageError('--%s must be in [0, 1], got %g' % (name, getattr(opts, name)))
    if opts.area_cover <= 0.0:
        raise UsageError('--area_cover must be > 0 (the crop needs some area), got %g'
                         % opts.area_cover)
    check_performance_flags(opts.augment_on, opts.dtype, opts.private_threads)
    if not 0.0 <= opts.neg_select <= 1.0:
        raise UsageError('--neg_select must be in [0, 1], got %g' % opts.neg_select)
    if opts.num_gpus < 1:
        raise UsageError('--num_gpus must be >= 1, got %d' % opts.num_gpus)
    check_fine_tuning_flags(opts)
    if opts.restore and not opts.pretrain_ckpt:
        raise UsageError('--restore needs --pretrain_ckpt (the checkpoint to restore)')
    if opts.label_type not in records.LABEL_TYPES:
        raise UsageError('--label_type must be one of %s, got %r'
                         % (', '.join(records.LABEL_TYPES), opts.label_type))
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


OPTIMIZERS = ('mom', 'sgd')


def check_fine_tuning_flags(opts):
    """--optimizer, --lr_schedule, --bn_weight_decay and --frozen_bn; raises UsageError."""
    if opts.optimizer not in OPTIMIZERS:
        raise UsageError('--optimizer=%s is not implemented; use mom (momentum) or sgd '
                         '(gradient descent)' % opts.optimizer)
    if opts.lr_schedule not in lr_schedule.SCHEDULES:
        raise UsageError('--lr_schedule must be piecewise or exponential, got %r'
                         % opts.lr_schedule)
    if opts.bn_weight_decay < 0:
        raise UsageError('--bn_weight_decay must be >= 0 (0 = no L2 on batch norm, 0.1 = '
                         'finetune.py\'s), got %g' % opts.bn_weight_decay)
    if opts.frozen_bn not in resnet.FROZEN_BN_MODES:
        raise UsageError('--frozen_bn must be train or inference, got %r' % opts.frozen_bn)


def check_inference_flags(opts):
    """The flags of --mode=predict and --mode=export, and --export_dir; raises UsageError."""
    if opts.mode == 'predict' and not opts.piclist:
        raise UsageError('--mode=predict needs --piclist (an image list file or a directory)')
    if opts.mode == 'export' and not opts.export_dir:
        raise UsageError('--mode=export needs --export_dir')
    if opts.export_dir and opts.mode not in ('train', 'train_and_eval', 'export'):
        raise UsageError('--export_dir goes with --mode=export, train or train_and_eval, not '
                         '--mode=%s' % opts.mode)
    if opts.top_k <= 0:
        raise UsageError('--top_k must be positive, got %d' % opts.top_k)
    if not 0.0 <= opts.threshold <= 1.0:
        raise UsageError('--threshold must be in [0, 1], got %g' % opts.threshold)
    try:
        serving.check_preprocess(opts.preprocess)
    except UsageError:
        raise UsageError('--preprocess must be original (the original\'s inference) or eval '
                         '(the evaluation crop), got %r' % opts.preprocess)
    if opts.export_dir:
        serving.check_export_dir(opts.export_dir)


def inference_checkpoint(opts):
    """--checkpoint_path, else the latest checkpoint in --model_dir."""
    if opts.checkpoint_path:
        return checkpoints.resolve_checkpoint(opts.checkpoint_path, 'checkpoint_path')
    return checkpoints.resolve_checkpoint(opts.model_dir, 'model_dir')


def predict(opts):
    """--mode=predict: tools/predict.py's TSV for the images of --piclist, on stdout."""
    validate(opts)
    data_format = training.resolve_data_format(opts.data_format, training.gpu_count() > 0)
    images = inference_io.collect_images(list_file=opts.piclist)
    predictor = serving.load_predictor(
        checkpoint=inference_checkpoint(opts), image_size=opts.image_size,
        resnet_size=opts.resnet_size, class_num=opts.class_num, top_k=opts.top_k,
        params=training.model_params(opts, data_format), preprocess=opts.preprocess)
    try:
        names = (inference_io.load_class_names(opts.class_dict, predictor.class_num)
                 if opts.class_dict else None)
        processed, skipped = serving.run_predict(
            predictor, images, None, 'tsv', opts.batch_size, opts.top_k, opts.threshold, names,
            PROGRAM)
    finally:
        predictor.close()
    if not processed:
        raise TrainingError('no image of --piclist=%s could be processed (%d skipped)'
                            % (opts.piclist, skipped))
    tf.logging.info('%d images classified with %s, %d skipped', processed, predictor.source,
                    skipped)


def export(opts, checkpoint_path=None):
    """--mode=export, or --export_dir after training: serving.py's SavedModel of the
    checkpoint (default: --checkpoint_path, else the latest in --model_dir)."""
    validate(opts)
    checkpoint_path = checkpoint_path or inference_checkpoint(opts)
    checkpoints.checkpoint_model(checkpoint_path, opts.resnet_size, opts.class_num)
    # NHWC runs on CPUs and GPUs alike; the variables do not depend on the layout.
    params = training.model_params(opts, 'channels_last')
    path = serving.export_saved_model(checkpoint_path, opts.export_dir, params,
                                      opts.image_size, opts.top_k, opts.preprocess)
    tf.logging.info('exported %s as the SavedModel %s (signature %s: %s -> %s; %s)',
                    checkpoint_path, path, serving.SIGNATURE_KEY, serving.INPUT_KEY,
                    ', '.join(serving.OUTPUT_KEYS),
                    serving.preprocessing_line(opts.preprocess, opts.image_size))
    return path


def main(argv):
    del argv
    opts = options()
    try:
        check_device_flags(opts)
        opts = choose_devices(opts)
        if opts.demo:
            opts = demo.prepare(opts, given_flags())
            validate(opts)
            demo.report(opts, training.train(opts, settings(opts)))
            if opts.export_dir:
                export(opts, checkpoints.latest_checkpoint(opts.model_dir))
        elif opts.mode == 'eval':
            validate(opts)
            training.evaluate(opts)
        elif opts.mode == 'predict':
            predict(opts)
        elif opts.mode == 'export':
            export(opts)
        else:
            validate(opts)
            training.train(opts, settings(opts))
            if opts.export_dir:
                export(opts, checkpoints.latest_checkpoint(opts.model_dir))
    except (UsageError, file_db.DataError) as e:
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(2)
    except TrainingError as e:
        sys.stderr.write('%s: error: %s\n' % (PROGRAM, e))
        sys.exit(1)


def run():
    from absl import app
    from absl import flags as absl_flags
    try:
        FLAGS(sys.argv)
    except absl_flags.Error as e:
        # absl would say "FATAL Flags parsing error" and exit 1; a usage error is 2 here.
        sys.stderr.write('%s: error: %s (python %s --help lists every flag)\n'
                         % (PROGRAM, e, PROGRAM))
        sys.exit(2)
    tf.logging.set_verbosity(tf.logging.INFO)
    # absl's handler prints every line once; TensorFlow's own would print it a second time.
    tf.get_logger().handlers.clear()
    # Before app.run: its after-init callbacks start CUDA (devices.choose_at_start).
    devices.choose_at_start(FLAGS.visiable_gpu, FLAGS.num_gpus, FLAGS.tf_gpu_thread_mode)
    app.run(main)


if __name__ == '__main__':
    run()
