"""The learning rate a run's kind and batch call for, and the start-up warnings of a run
far off it or short of disk (docs/hardware.md). No TensorFlow: the docs' test uses it too.

    kind          pre-training: multi-label (--label_type=multi) without --pretrain_ckpt;
                  fine-tune: with --pretrain_ckpt, or any single-label run; the demo: exempt
                  (its settings are tuned for a 48-pixel CPU run, mlimages/demo.py)
    batch B       images a global step: --batch_size x GPUs a worker x synchronous workers;
                  asynchronous ps: one worker's --batch_size x GPUs (each worker applies
                  its own gradient, and each worker's step is a global step)
    pre-training  ML-Images' published run (train.sh and the paper) at B = 4,096: lr 0.08
                  after a warm-up from lr_warmup 0.01, x1.297 every 4,400 steps up to step
                  35,200; x0.1 every 110,000 steps; 60 epochs of 17,609,752 images.
                  At another B:  lr = 0.08 x B / 4,096,  lr_warmup = 0.01 x B / 4,096,
                  every step count (--warmup, --lr_warmup_decay_step, --lr_decay_step,
                  --max_iter, --snapshot) x 4,096 / B
    fine-tune     finetune.sh at B = 256: lr 0.1, x0.1 every 150,000 steps, 600,000 steps
                  = 120 epochs of ImageNet-1k's 1,281,167 images.
                  At another B:  lr = 0.1 x B / 256,  step counts x 256 / B
    off by        max(lr / rule, rule / lr); train.py warns above WARN_FACTOR = 2 (of
                  the rule, only the lr: tests/test_docs_commands.py holds the documented
                  runs to the warm-up and the step counts too)
    disk          kept = min(--max_to_keep, checkpoints a run saves); kept x the bytes of
                  one checkpoint (run_plan.checkpoint_bytes) against the free disk
"""

PRETRAINING, FINE_TUNE, DEMO = 'pre-training', 'fine-tune', 'demo'
PRETRAINING_LR, PRETRAINING_BATCH = 0.08, 4096
FINE_TUNE_LR, FINE_TUNE_BATCH = 0.1, 256
# The published runs' data: training images of ML-Images and of ImageNet-1k.
ML_IMAGES_TRAIN, IMAGENET_TRAIN = 17609752, 1281167
WARN_FACTOR = 2.0
GiB = 1024.0 ** 3


def run_kind(label_type, pretrain_ckpt, demo=False):
    """DEMO, FINE_TUNE (a --pretrain_ckpt, or single-label) or PRETRAINING."""
    if demo:
        return DEMO
    return FINE_TUNE if pretrain_ckpt or label_type == 'single' else PRETRAINING


def pretraining_lr(batch):
    """lr = 0.08 x B / 4,096 (ML-Images' run)."""
    return PRETRAINING_LR * batch / PRETRAINING_BATCH


def fine_tune_lr(batch):
    """lr = 0.1 x B / 256 (finetune.sh)."""
    return FINE_TUNE_LR * batch / FINE_TUNE_BATCH


def rule_lr(kind, batch):
    """The learning rate of the kind's rule at batch B; None for the demo."""
    return {PRETRAINING: pretraining_lr, FINE_TUNE: fine_tune_lr}.get(kind, lambda b: None)(
        batch)


def off_by(lr, rule):
    """How many times lr is off the rule: max(lr / rule, rule / lr) (inf for lr <= 0)."""
    return max(lr / rule, rule / lr) if lr > 0 else float('inf')


def lr_warning(kind, lr, batch, asynchronous=False):
    """The warning line of a learning rate more than WARN_FACTOR x off its rule, or None.
    asynchronous: batch is one ps worker's."""
    rule = rule_lr(kind, batch)
    if rule is None or off_by(lr, rule) <= WARN_FACTOR:
        return None
    return ('--lr=%g is %.1fx %s the %s rule for %d images a %sstep: %.4g (%s; more than '
            '%gx off warns; docs/hardware.md)' % (
                lr, off_by(lr, rule), 'above' if lr > rule else 'below', kind, batch,
                'worker\'s ' if asynchronous else 'global ', rule,
                '0.08 x B / 4,096' if kind == PRETRAINING else '0.1 x B / 256', WARN_FACTOR))


def disk_warning(max_to_keep, saves, checkpoint_bytes, free_bytes, model_dir):
    """The warning line of --max_to_keep checkpoints that will not fit the free disk, or
    None. saves: checkpoints the run saves (None: no end)."""
    kept = max_to_keep if saves is None else min(max_to_keep, saves)
    if kept * checkpoint_bytes <= free_bytes:
        return None
    return ('--max_to_keep=%d: %d checkpoints of %.2f GiB need %.1f GiB, %s has %.1f GiB '
            'free: lower --max_to_keep or free disk (docs/hardware.md)' % (
                max_to_keep, kept, checkpoint_bytes / GiB, kept * checkpoint_bytes / GiB,
                model_dir, free_bytes / GiB))
