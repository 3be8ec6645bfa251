"""The valid values of train.py's flags. One table: flag name -> check(name, value)
returning what is wrong as one line, else None (built with value_checks, the choices from
config/choices); then the rules across flags, each over the groups it reads. TensorFlow-free,
so --help and the checks run before TensorFlow starts."""
import flags
from mlimages.config import choices
from mlimages.config import value_checks as checks
from mlimages.config.cluster_hosts import host_problem, hosts
from mlimages.errors import UsageError


def _mode(name, value):
    return None if value in choices.MODES else '--mode=%s is not implemented; use one of %s' % (
        value, ', '.join(choices.MODES))


def _resnet_size(name, value):
    sizes = choices.SUPPORTED_SIZES
    return None if value in sizes else '--resnet_size=%d is not supported; use one of %s' % (
        value, ', '.join(map(str, sizes)))


def _optimizer(name, value):
    return None if value in choices.OPTIMIZERS else (
        '--optimizer=%s is not implemented; use mom (momentum) or sgd (gradient descent)' % value)


def _max_iter(name, value):
    return None if value > 0 or value == -1 else (
        '--max_iter must be positive or -1 (forever), got %d' % value)


def _area_cover(name, value):
    return checks.fraction(name, value) or (
        None if value > 0 else '--area_cover must be > 0 (the crop needs some area), got %g'
        % value)


def _image_channels(name, value):
    return None if value == 3 else ('--image_channels must be 3 (the model takes RGB), got %d'
                                    % value)


def _lr_schedule(name, value):
    return None if value in choices.SCHEDULES else '--lr_schedule must be %s, got %r' % (
        ' or '.join(choices.SCHEDULES), value)


def _augment_on(name, value):
    options = ('auto',) + choices.AUGMENT_ON
    if value in options:
        return None
    return '--augment_on must be %s or %s, got %r' % (', '.join(options[:-1]), options[-1], value)


def _preprocess(name, value):
    return None if value in choices.PREPROCESSING else (
        '--preprocess must be original (the original\'s inference) or eval (the evaluation '
        'crop), got %r' % value)


def profile_span(text):
    """(A, B) of --profile_steps=A,B, or None for ''; raises ValueError with the one line
    of what is wrong."""
    if not text:
        return None
    parts = text.split(',')
    try:
        first, last = (int(p) for p in parts)
    except ValueError:
        raise ValueError('--profile_steps must be A,B (the first and last global step to '
                         'trace, e.g. 10,12), got %r' % text)
    if not 1 <= first <= last or last - first + 1 > choices.MAX_PROFILE_STEPS:
        raise ValueError('--profile_steps=%s must be A,B with 1 <= A <= B and at most %d '
                         'steps (B - A + 1), e.g. 10,12' % (text, choices.MAX_PROFILE_STEPS))
    return first, last


def class_list(text):
    """The class indices of --pr_curve_classes ('' = none); raises ValueError."""
    try:
        return tuple(int(part) for part in text.split(',') if part.strip())
    except ValueError:
        raise ValueError('--pr_curve_classes must be class indices separated by commas '
                         '(e.g. 0,17,230), got %r' % text)


def _parsed(parse):
    """A check of a string flag: what parse(value) raises, as the one line."""
    def check(name, value):
        try:
            parse(value)
        except ValueError as e:
            return str(e)
        return None
    return check


def _pr_curves(name, value):
    return None if 0 <= value <= choices.MAX_PR_CURVES else (
        '--pr_curves must be in [0, %d] (0 = none), got %d' % (choices.MAX_PR_CURVES, value))


def pr_class_problems(text, class_num):
    """What is wrong with --pr_curve_classes for --class_num classes."""
    try:
        classes = class_list(text)
    except ValueError:
        return []  # said by its own check
    bad = [c for c in classes if not 0 <= c < class_num]
    if bad:
        return ['--pr_curve_classes: class %d is not in [0, %d) (--class_num)' % (bad[0],
                                                                                  class_num)]
    if len(classes) > choices.MAX_PR_CURVES:
        return ['--pr_curve_classes lists %d classes; at most %d'
                % (len(classes), choices.MAX_PR_CURVES)]
    return []


CHECKS = {
    'mode': _mode,
    'max_to_keep': checks.positive,
    'batch_size': checks.positive,
    'num_preprocess_threads': checks.at_least(0, '0 = AUTOTUNE'),
    'file_shuffle_buffer': checks.at_least(1, '1 = no shuffle'),
    'shuffle_buffer': checks.at_least(1, '1 = no shuffle'),
    'object_cover': checks.fraction,
    'area_cover': _area_cover,
    'class_num': checks.positive,
    'resnet_size': _resnet_size,
    'image_size': checks.positive,
    'image_channels': _image_channels,
    'batch_norm_decay': checks.fraction,
    'batch_norm_epsilon': checks.finite(0),
    'mask_thres': checks.fraction,
    'neg_select': checks.fraction,
    'drop_rate': checks.fraction,
    'num_gpus': checks.at_least(1),
    'opt_momentum': checks.finite(0, inclusive=True, high=1),
    'optimizer': _optimizer,
    'lr': checks.finite(0),
    'lr_decay_step': checks.at_least(0, '0 = no decay'),
    'lr_decay_factor': checks.finite(0),
    'weight_decay': checks.finite(0, inclusive=True),
    'warmup': checks.at_least(0, '0 = no warm-up'),
    'lr_warmup': checks.finite(0),
    'lr_warmup_decay_step': checks.at_least(0),
    'lr_warmup_decay_factor': checks.finite(0),
    'max_iter': _max_iter,
    'epoch_iter': checks.at_least(0),
    'label_type': checks.one_of(choices.LABEL_TYPES),
    'lr_schedule': _lr_schedule,
    'bn_weight_decay': checks.finite(0, inclusive=True,
                                     meaning='0 = no L2 on batch norm, 0.1 = finetune.py\'s'),
    'frozen_bn': checks.one_of(choices.FROZEN_BN_MODES,
                               '--frozen_bn must be train or inference, got %r'),
    'log_interval': checks.positive,
    'summary_interval': checks.at_least(0, '0 = --log_interval'),
    'snapshot': checks.positive,
    'augment_on': _augment_on,
    'private_threads': checks.at_least(0),
    'dtype': checks.one_of(choices.DTYPE_VALUES),
    'tf_gpu_thread_mode': checks.one_of(choices.GPU_THREAD_MODES),
    'inter_op_threads': checks.at_least(0, '0 = TensorFlow\'s choice'),
    'intra_op_threads': checks.at_least(0, '0 = TensorFlow\'s choice'),
    'test_interval': checks.at_least(0),
    'test_iter': checks.at_least(0, '0 = the whole val split'),
    'eval_throttle_secs': checks.at_least(0),
    'peer_timeout': checks.at_least(0, '0 = wait forever'),
    'top_k': checks.positive,
    'threshold': checks.fraction_or(choices.CALIBRATED),
    'preprocess': _preprocess,
    'report_classes': checks.at_least(0),
    'pr_curves': _pr_curves,
    'pr_curve_classes': _parsed(class_list),
    'profile_steps': _parsed(profile_span),
}


def _rules(s):
    """The checks across flags of the Settings s, in order: (bad, message) pairs."""
    task, schedule, cluster = s.task, s.schedule, s.cluster
    return [
        (task.mode == 'train_and_eval' and s.evaluation.test_interval <= 0,
         '--mode=train_and_eval needs --test_interval > 0, got %d' % s.evaluation.test_interval),
        (task.mode == 'predict' and not s.inference.piclist,
         '--mode=predict needs --piclist (an image list file or a directory)'),
        (task.mode == 'export' and not task.export_dir, '--mode=export needs --export_dir'),
        (bool(task.export_dir) and task.mode not in ('train', 'train_and_eval', 'export'),
         '--export_dir goes with --mode=export, train or train_and_eval, not --mode=%s'
         % task.mode),
        (schedule.warmup > 0 and schedule.lr_warmup_decay_step <= 0,
         '--warmup=%d needs --lr_warmup_decay_step > 0 (got %d)'
         % (schedule.warmup, schedule.lr_warmup_decay_step)),
        (not 0 <= cluster.worker_id < cluster.worker_num,
         '--worker_id=%d must be in [0, --worker_num=%d)' % (cluster.worker_id,
                                                             cluster.worker_num)),
        (s.finetune.restore and not s.finetune.pretrain_ckpt,
         '--restore needs --pretrain_ckpt (the checkpoint to restore)'),
        (bool(s.output.profile_steps) and not task.demo
         and task.mode not in ('train', 'train_and_eval'),
         '--profile_steps traces training: it goes with --mode=train or train_and_eval, not '
         '--mode=%s' % task.mode),
    ]


def cluster_problems(cluster):
    """What is wrong with the cluster group's host flags together (one-line messages)."""
    found = [p for p in (host_problem('worker_hosts', cluster.worker_hosts),
                         host_problem('ps_hosts', cluster.ps_hosts)) if p]
    workers, ps = hosts(cluster.worker_hosts), hosts(cluster.ps_hosts)
    if workers and len(workers) != cluster.worker_num:
        found.append('--worker_hosts lists %d address%s but --worker_num=%d: give every '
                     'worker\'s host:port, the chief (worker 0) first'
                     % (len(workers), '' if len(workers) == 1 else 'es', cluster.worker_num))
    if len(set(workers + ps)) != len(workers + ps):
        found.append('--worker_hosts/--ps_hosts name an address twice: %s'
                     % ','.join(workers + ps))
    if ps and not workers:
        found.append('--ps_hosts needs --worker_hosts (the training workers, chief first)')
    if cluster.ps_id != -1 and not 0 <= cluster.ps_id < len(ps):
        found.append('--ps_id=%d must be in [0, %d) (the --ps_hosts addresses) or -1 (not a '
                     'ps task)' % (cluster.ps_id, len(ps)))
    if cluster.ps_id >= 0 and cluster.worker_id != 0:
        found.append('--ps_id=%d is a ps task: leave out --worker_id (got %d)'
                     % (cluster.ps_id, cluster.worker_id))
    if cluster.slurm_port_base < 1 or cluster.slurm_port_base > 65000:
        found.append('--slurm_port_base must be in [1, 65000], got %d' % cluster.slurm_port_base)
    return found


def threshold_problems(threshold, mode):
    """What is wrong with --threshold=calibrated in this --mode: it names the thresholds of
    a checkpoint that --mode=eval chose (calibration.py), which training has not."""
    if threshold == choices.CALIBRATED and mode not in ('eval', 'predict', 'export'):
        return ['--threshold=calibrated goes with --mode=eval (which chooses the thresholds), '
                'predict or export, not --mode=%s' % mode]
    return []


def problems(settings):
    """What is wrong with the values of the Settings, each flag in --help order, then the
    rules across flags; an empty list when every value is valid. Reads every group."""
    found = [CHECKS[name](name, value) for name, value in flags.flat(settings).items()
             if name in CHECKS]
    return [p for p in found if p] + [message for bad, message in _rules(settings) if bad] + \
        cluster_problems(settings.cluster) + \
        pr_class_problems(settings.evaluation.pr_curve_classes, settings.model.class_num) + \
        threshold_problems(settings.inference.threshold, settings.task.mode)


def validate(settings):
    """Raises errors.UsageError with the first problem of the Settings, if any."""
    found = problems(settings)
    if found:
        raise UsageError(found[0])
