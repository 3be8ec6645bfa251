"""Evaluation with tf.estimator: a checkpoint on --test_iter batches of val (0 = all),
train_and_eval's evaluations and an evaluator task's spec; with --threshold=calibrated
the per-class thresholds chosen on the way (calibration.py); each writes its per-class
report (class_report.py, through model_fn.Derived.class_report). Errors: errors.UsageError
before a graph exists, errors.TrainingError (one line) after.
"""
import dataclasses
import os

import tensorflow.compat.v1 as tf

import file_db
from mlimages.data import records
from mlimages.errors import TrainingError, UsageError, op_error_text
from mlimages.run import calibration
from mlimages.run import checkpoints
from mlimages.run import estimator as estimator_lib


def evaluation_files(data, class_num):
    """All val shard files of the data group's --data_dir, checked like the training ones."""
    files = file_db.list_shards(data.data_dir, 'val', data.file_pattern)
    records.check_label_length(files, class_num, data.label_type)
    records.check_not_empty(files, os.path.join(data.data_dir, 'val'))
    return files


def cluster_eval_spec(settings, val_files):
    """The EvalSpec an evaluator task follows: every new checkpoint of --model_dir, at most
    one each --eval_throttle_secs, on --test_iter batches of val (0 = all); it stops after
    the checkpoint of global step --max_iter."""
    evaluation = settings.evaluation
    return tf.estimator.EvalSpec(
        estimator_lib.eval_input_fn(settings.data, settings.model, val_files,
                                    estimator_lib.crop_seed(settings.training)),
        steps=estimator_lib.evaluation_batches(evaluation.test_iter),
        start_delay_secs=0, throttle_secs=evaluation.eval_throttle_secs)


def format_metrics(results):
    return ', '.join('%s = %.4f' % (k, v) for k, v in sorted(results.items())
                     if k != 'global_step')


def evaluation_checkpoint(checkpoint_path, model_dir):
    """--checkpoint_path, else the latest checkpoint of --model_dir; raises UsageError."""
    if checkpoint_path:
        return checkpoints.resolve_checkpoint(checkpoint_path, 'checkpoint_path')
    if not checkpoints.latest_checkpoint(model_dir):
        raise UsageError('no checkpoint to evaluate in --model_dir=%s (give '
                         '--checkpoint_path)' % model_dir)
    return checkpoints.resolve_checkpoint(model_dir, 'model_dir')


def evaluation_estimator(settings):
    """(the Estimator of --mode=eval, the calibration.ScoreCollector of
    --threshold=calibrated or None, the class_report.ClassReport: with a collector its
    table waits for the calibrated thresholds)."""
    settings = estimator_lib.for_this_process(settings)
    derived, collector = estimator_lib.derived_values(settings), None
    if settings.inference.threshold == calibration.CALIBRATED:
        collector = calibration.ScoreCollector(settings.training.mask_thres)
        derived = dataclasses.replace(derived, score_hook=collector.hook)
        derived.class_report.deferred = True
    return estimator_lib.make_estimator(settings, derived), collector, derived.class_report


def evaluate(settings, estimator=None, checkpoint_path=None, files=None, run_hooks=()):
    """Evaluates a checkpoint on --test_iter batches of val (0 = all); returns the metrics.
    Without an estimator: --checkpoint_path, else the latest in --model_dir; with
    --threshold=calibrated also chooses the thresholds per class on these batches
    (calibration.calibrate: thresholds.txt beside the checkpoint, F1 global vs calibrated
    in the metrics). settings: the run's Settings (the data, model, training, output,
    evaluation and inference groups)."""
    data, model, output = settings.data, settings.model, settings.output
    test_iter = settings.evaluation.test_iter
    collector = None
    if estimator is None:
        files = evaluation_files(data, model.class_num)
        checkpoint_path = evaluation_checkpoint(settings.task.checkpoint_path, output.model_dir)
        estimator_lib.log_to_file(output.log_dir)
        estimator, collector, report = evaluation_estimator(settings)
    checkpoint_path = checkpoint_path or checkpoints.latest_checkpoint(output.model_dir)
    checkpoints.check_checkpoint_head(checkpoint_path, model.class_num)
    try:
        results = estimator.evaluate(
            estimator_lib.eval_input_fn(data, model, files,
                                        estimator_lib.crop_seed(settings.training)),
            steps=estimator_lib.evaluation_batches(test_iter),
            checkpoint_path=checkpoint_path, hooks=run_hooks)
    except tf.errors.OpError as e:
        raise TrainingError('evaluating %s: %s' % (checkpoint_path, op_error_text(e)))
    tf.logging.info('evaluated %s (global step %d) on %s val batches: %s', checkpoint_path,
                    results['global_step'], test_iter or 'all', format_metrics(results))
    if collector is not None:
        found, _, lines, (chosen, counts) = calibration.calibrate(
            collector, checkpoint_path, settings.inference.threshold,
            '%s val batches of %s (%s)' % (test_iter or 'all', data.data_dir,
                                          os.path.basename(checkpoint_path)))
        results.update(found)
        for line in lines:
            tf.logging.info('%s', line)
        report.write(chosen, counts)
    return results
