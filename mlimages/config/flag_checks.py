"""The rules across train.py's flags, and the check of a run's settings: each flag's own
rule (given where flags.py defines it), then each rule here over the groups it reads; run
once, on the settings the run will use. TensorFlow-free, so the checks run before
TensorFlow starts."""
import flags
from mlimages.config import choices
from mlimages.config import value_checks as checks
from mlimages.config.cluster_hosts import host_problem, hosts
from mlimages.errors import UsageError


def pr_class_problems(text, class_num):
    """What is wrong with --pr_curve_classes for --class_num classes."""
    try:
        classes = checks.class_list(text)
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
    return found


def threshold_problems(threshold, mode):
    """What is wrong with --threshold=calibrated in this --mode: it names the thresholds of
    a checkpoint that --mode=eval chose (calibration.py), which training has not."""
    if threshold == choices.CALIBRATED and mode not in ('eval', 'predict', 'export'):
        return ['--threshold=calibrated goes with --mode=eval (which chooses the thresholds), '
                'predict or export, not --mode=%s' % mode]
    return []


def problems(settings):
    """What is wrong with the values of the Settings, each flag's own check in flags.ORDER,
    then the rules across flags; an empty list when every value is valid. Reads every
    group."""
    found = [flags.CHECKS[name](name, value) for name, value in flags.flat(settings).items()
             if name in flags.CHECKS]
    return [p for p in found if p] + [message for bad, message in _rules(settings) if bad] + \
        cluster_problems(settings.cluster) + \
        pr_class_problems(settings.evaluation.pr_curve_classes, settings.model.class_num) + \
        threshold_problems(settings.inference.threshold, settings.task.mode)


def validate(settings):
    """Raises errors.UsageError with the first problem of the Settings, if any."""
    found = problems(settings)
    if found:
        raise UsageError(found[0])
