"""Evaluation with tf.estimator on --test_iter batches of val (0 = all): --mode=eval's of a
checkpoint with an Estimator of its own (evaluate), train_and_eval's and the demo's of the
latest with the run's (evaluate_latest), and an evaluator task's spec; with
--threshold=calibrated the per-class thresholds chosen on the way (calibration.py); each
writes its per-class report (class_report.py, through model_fn.Derived.class_report).
Errors: errors.UsageError before a graph exists, errors.TrainingError (one line) after.
"""
import dataclasses
import os

import tensorflow.compat.v1 as tf

import file_db
from mlimages.data import records
from mlimages.errors import TrainingError, UsageError, op_error_text
from mlimages.run import calibration
from mlimages.run import checkpoints
from mlimages.run import estimator


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
        estimator.eval_input_fn(settings.data, settings.model, val_files,
                                estimator.crop_seed(settings.training)),
        steps=estimator.evaluation_batches(evaluation.test_iter),
        start_delay_secs=0, throttle_secs=evaluation.eval_throttle_secs)


def format_metrics(results):
    """The log line's metrics: 'name = value' by name, the global step left out."""
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
    table waits for the calibrated thresholds). settings: for_this_process's."""
    derived, collector = estimator.derived_values(settings), None
    if settings.inference.threshold == calibration.CALIBRATED:
        collector = calibration.ScoreCollector(settings.training.mask_thres)
        derived = dataclasses.replace(derived, score_hook=collector.hook)
        derived.class_report.deferred = True
    return estimator.make_estimator(settings, derived), collector, derived.class_report


def evaluate(settings, run_hooks=()):
    """--mode=eval: evaluates --checkpoint_path, else the latest checkpoint of --model_dir,
    with an Estimator of its own (evaluate_checkpoint); with --threshold=calibrated also
    chooses the thresholds per class on these batches (calibrate_and_report). Returns the
    metrics. settings: the run's Settings (the data, model, training, output, evaluation
    and inference groups); run_hooks: more SessionRunHooks of the evaluation."""
    settings = estimator.for_this_process(settings)
    data, model, output = settings.data, settings.model, settings.output
    checkpoint_path = evaluation_checkpoint(settings.task.checkpoint_path, output.model_dir)
    files = evaluation_files(data, model.class_num)
    estimator.log_to_file(output.log_dir)
    eval_estimator, collector, report = evaluation_estimator(settings)
    results = evaluate_checkpoint(settings, eval_estimator, checkpoint_path, files, run_hooks)
    if collector is not None:
        results.update(calibrate_and_report(settings, collector, report, checkpoint_path))
    return results


def evaluate_latest(settings, run_estimator, files, run_hooks=()):
    """Evaluates the latest checkpoint of --model_dir with the run's Estimator on `files`
    (train_and_eval's evaluations, the demo's); returns the metrics."""
    return evaluate_checkpoint(settings, run_estimator,
                               checkpoints.latest_checkpoint(settings.output.model_dir),
                               files, run_hooks)


def evaluate_checkpoint(settings, run_estimator, checkpoint_path, files, run_hooks=()):
    """Evaluates checkpoint_path with the Estimator on --test_iter batches of `files`
    (0 = all) and logs the metrics; returns them. Raises errors.TrainingError (one line)
    for a TensorFlow error."""
    data, model, test_iter = settings.data, settings.model, settings.evaluation.test_iter
    checkpoints.check_checkpoint_head(checkpoint_path, model.class_num)
    try:
        results = run_estimator.evaluate(
            estimator.eval_input_fn(data, model, files, estimator.crop_seed(settings.training)),
            steps=estimator.evaluation_batches(test_iter),
            checkpoint_path=checkpoint_path, hooks=run_hooks)
    except tf.errors.OpError as e:
        raise TrainingError('evaluating %s: %s' % (checkpoint_path, op_error_text(e)))
    tf.logging.info('evaluated %s (global step %d) on %s val batches: %s', checkpoint_path,
                    results['global_step'], test_iter or 'all', format_metrics(results))
    return results


def calibrate_and_report(settings, collector, report, checkpoint_path):
    """--threshold=calibrated after an evaluation of checkpoint_path: the per-class
    thresholds chosen on the collector's scores (calibration.calibrate: thresholds.txt
    beside the checkpoint), its lines logged, the deferred per-class report written at
    them. Returns the metrics it adds (F1 global vs calibrated)."""
    test_iter = settings.evaluation.test_iter
    found, _, lines, (chosen, counts) = calibration.calibrate(
        collector, checkpoint_path, settings.inference.threshold,
        '%s val batches of %s (%s)' % (test_iter or 'all', settings.data.data_dir,
                                      os.path.basename(checkpoint_path)))
    for line in lines:
        tf.logging.info('%s', line)
    report.write(chosen, counts)
    return found
