"""Per-class thresholds: chosen on the validation split by `train.py --mode=eval
--threshold=calibrated`, kept beside the checkpoint as thresholds.txt, used by prediction
(`--threshold=calibrated`) and built into the SavedModel's `positives` output.

    evaluation  every batch's sigmoid scores (float32) and labels, as int8 codes: 1
                positive (label >= mask_thres), 0 negative, -1 ignored, collected
                (ScoreCollector, through model_fn.Derived.score_hook: N x C x 5 bytes, 2.8 GB for
                50,000 images of 11,166 classes, twice that while they are joined), then per
                class c the threshold t_c that maximizes its F1 on
                them (metrics.f1_optimal_thresholds; classes without a positive keep the
                global --threshold), micro / macro F1 at the global threshold and at t
                (metrics.micro_f1 / macro_f1 over the collected arrays)
    thresholds.txt
                comment lines (what, the checkpoint, the images, the F1 before and after),
                then `class <TAB> threshold <TAB> F1 <TAB> positives` per class, the
                threshold as the float32 it is ('%.9g' reads back exactly)

--threshold is a number (every class the same) or 'calibrated'; eval's F1 metrics use the
number (0.5 with 'calibrated', metrics.F1_THRESHOLD).
"""
import os

import numpy as np
import tensorflow.compat.v1 as tf

from mlimages import files
from mlimages.config.choices import CALIBRATED
from mlimages.distributed import devices
from mlimages.errors import UsageError
from mlimages.model import metrics

FILE_NAME = 'thresholds.txt'
CHECKPOINT_LINE = '# checkpoint: '


def global_threshold(text):
    """The one threshold of --threshold: its number, or metrics.F1_THRESHOLD for
    'calibrated' (what classes without a calibrated threshold keep)."""
    return metrics.F1_THRESHOLD if text == CALIBRATED else float(text)


# The mask_thres of the label codes: 1 >= it > 0.
CODE_THRES = 0.5


class ScoreCollector(object):
    """The label codes and scores of every evaluation batch (module docstring), as numpy
    arrays; `hook` is model_fn.Derived.score_hook (called with the batch's labels and scores
    tensors)."""

    def __init__(self, mask_thres):
        self.mask_thres = np.float32(mask_thres)
        self.codes, self.scores = [], []

    def hook(self, labels, scores):
        return _CollectHook(self, labels, scores)

    def add(self, labels, scores):
        self.codes.append(np.where(labels == -1.0, -1, labels >= self.mask_thres)
                          .astype(np.int8))
        self.scores.append(np.asarray(scores, np.float32))

    def arrays(self):
        """(label codes [N, C] int8, scores [N, C] float32) of the batches so far; the
        batches themselves are let go."""
        codes, scores = np.concatenate(self.codes), np.concatenate(self.scores)
        self.codes, self.scores = [], []
        return codes, scores


class _CollectHook(tf.train.SessionRunHook):
    def __init__(self, collector, labels, scores):
        self._collector = collector
        self._fetches = (labels, scores)

    def before_run(self, run_context):
        return tf.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        self._collector.add(*run_values.results)


def f1_scores(labels, scores, thresholds, mask_thres, batch=4096):
    """{'micro_f1', 'macro_f1'} of metrics.micro_f1 / macro_f1 at `thresholds` (a number
    or one per class) over numpy labels (or codes) and scores [N, C], fed in batches."""
    with tf.Graph().as_default():
        y = tf.placeholder(tf.float32, [None, labels.shape[1]])
        s = tf.placeholder(tf.float32, [None, labels.shape[1]])
        t = tf.constant(thresholds, tf.float32)
        found = {'micro_f1': metrics.micro_f1(y, s, mask_thres, t),
                 'macro_f1': metrics.macro_f1(y, s, mask_thres, t)}
        with tf.Session(config=devices.session_config()) as session:
            session.run(tf.local_variables_initializer())
            for start in range(0, len(labels), batch):
                session.run([update for _, update in found.values()],
                            {y: labels[start:start + batch], s: scores[start:start + batch]})
            return session.run({key: value for key, (value, _) in found.items()})


def class_counts(codes, scores, thresholds, batch=4096):
    """(TP, FP, FN) [C] float64 of label codes and scores [N, C] at per-class thresholds
    (metrics.f1_counts' definitions), in batches of rows."""
    counts = np.zeros((3, codes.shape[1]))
    for start in range(0, len(codes), batch):
        code, score = codes[start:start + batch], scores[start:start + batch]
        pos = code == 1
        pred = (code != -1) & (score >= thresholds)
        counts += [np.sum(pos & pred, 0), np.sum(pred & ~pos, 0), np.sum(pos & ~pred, 0)]
    return tuple(counts)


def calibrate(collector, checkpoint_path, threshold, what):
    """Chooses the thresholds of the collected batches, writes them as thresholds.txt
    beside checkpoint_path and returns ({'micro_f1_calibrated', 'macro_f1_calibrated',
    'micro_f1_global', 'macro_f1_global'}, path, the log lines, (thresholds [C], the TP,
    FP, FN [C] at them)). what: the images, in words, for the file's header."""
    codes, scores = collector.arrays()
    default = global_threshold(threshold)
    chosen, f1, positives = metrics.f1_optimal_thresholds(codes, scores, CODE_THRES, default)
    counts = class_counts(codes, scores, chosen)
    before = f1_scores(codes, scores, default, CODE_THRES)
    after = f1_scores(codes, scores, chosen, CODE_THRES)
    results = {}
    for key in ('micro_f1', 'macro_f1'):
        results[key + '_global'] = before[key]
        results[key + '_calibrated'] = after[key]
    calibrated = int(np.sum(positives > 0))
    summary = ('micro F1 %.4f -> %.4f, macro F1 %.4f -> %.4f (global %g -> calibrated; on the '
               '%d images they were chosen on)' % (
                   before['micro_f1'], after['micro_f1'], before['macro_f1'],
                   after['macro_f1'], default, len(codes)))
    header = [
        'per-class thresholds of train.py --mode=eval --threshold=calibrated: each class\'s '
        'threshold maximizes its F1 on %s' % what,
        '%d of %d classes calibrated; %d without a positive keep the global %g (mask_thres %g)'
        % (calibrated, len(chosen), len(chosen) - calibrated, default, collector.mask_thres),
        summary]
    path = os.path.join(os.path.dirname(checkpoint_path), FILE_NAME)
    write(path, chosen, f1, positives, os.path.basename(checkpoint_path), header)
    lines = ['thresholds per class: %d of %d classes calibrated on %d images, written to %s'
             % (calibrated, len(chosen), len(codes), path),
             'F1 at the global vs the calibrated thresholds: ' + summary]
    return results, path, lines, (chosen, counts)


def write(path, thresholds, f1, positives, checkpoint, header):
    """thresholds.txt (module docstring), written under a temporary name and renamed."""
    lines = ['# ' + line for line in header] + [CHECKPOINT_LINE + checkpoint,
                                                '# class\tthreshold\tf1\tpositives']
    lines += ['%d\t%.9g\t%.6f\t%d' % (c, t, f, p)
              for c, (t, f, p) in enumerate(zip(thresholds, f1, positives))]
    with files.atomic_output(path) as out:
        out.write('\n'.join(lines) + '\n')


def read(path, class_num=None):
    """(thresholds [C] float32, the checkpoint they were chosen for or None) of a
    thresholds.txt; UsageError naming the file and line when it is not one, or holds
    another number of classes than class_num."""
    values, checkpoint = [], None
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.startswith(CHECKPOINT_LINE):
                checkpoint = line[len(CHECKPOINT_LINE):].strip()
            if line.startswith('#') or not line.strip():
                continue
            fields = line.split('\t')
            try:
                index, value = int(fields[0]), float(fields[1])
            except (ValueError, IndexError):
                raise UsageError('%s:%d: expected "class<TAB>threshold...", got %r'
                                 % (path, number, line.strip()))
            if index != len(values) or not 0.0 <= value <= 1.0:
                raise UsageError('%s:%d: expected class %d with a threshold in [0, 1], got %r'
                                 % (path, number, len(values), line.strip()))
            values.append(value)
    if class_num is not None and len(values) != class_num:
        raise UsageError('%s holds thresholds of %d classes, the model has %d'
                         % (path, len(values), class_num))
    return np.array(values, np.float32), checkpoint


def beside(path):
    """thresholds.txt of a model directory or beside a checkpoint prefix, or None."""
    directory = path if os.path.isdir(path) else os.path.dirname(path) or '.'
    candidate = os.path.join(directory, FILE_NAME)
    return candidate if os.path.isfile(candidate) else None


def for_checkpoint(checkpoint_path, class_num, flag='--threshold=calibrated'):
    """(thresholds [C] float32, its file, warning lines) for a checkpoint: the
    thresholds.txt beside it; UsageError without one. A file chosen for another checkpoint
    of the directory is used with one warning line."""
    path = beside(checkpoint_path)
    if path is None:
        raise UsageError(
            '%s: no %s beside %s; choose them on the validation split first: python train.py '
            '--mode=eval --threshold=calibrated --checkpoint_path=%s --data_dir=DIR (the '
            'records with val/)' % (
                flag, FILE_NAME, checkpoint_path, checkpoint_path))
    values, chosen_for = read(path, class_num)
    warnings = []
    if chosen_for and os.path.basename(checkpoint_path) != chosen_for:
        warnings.append('warning: %s holds the thresholds chosen for %s, not %s (rerun '
                        '--mode=eval --threshold=calibrated to choose them again)'
                        % (path, chosen_for, os.path.basename(checkpoint_path)))
    return values, path, warnings
