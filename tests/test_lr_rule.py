"""mlimages/run/lr_rule.py: the rules give the published runs' figures, and the warning
lines of a learning rate far off its rule and of checkpoints that do not fit the disk."""
import pytest

from mlimages.run import lr_rule


def test_the_rules_give_the_published_runs():
    """train.sh at 4,096 images a step; the recipes' 1x8 (1,024) and 1x1 (64) scalings;
    finetune.sh at 256 and the 4x8 fine-tune at 1,024."""
    assert lr_rule.pretraining_lr(4096) == pytest.approx(0.08)
    assert lr_rule.pretraining_lr(1024) == pytest.approx(0.02)
    assert lr_rule.pretraining_lr(64) == pytest.approx(0.00125)
    assert lr_rule.fine_tune_lr(256) == pytest.approx(0.1)
    assert lr_rule.fine_tune_lr(1024) == pytest.approx(0.4)


def test_the_kind_of_a_run():
    assert lr_rule.run_kind('multi', '') == lr_rule.PRETRAINING
    assert lr_rule.run_kind('multi', '/ckpt') == lr_rule.FINE_TUNE
    assert lr_rule.run_kind('single', '') == lr_rule.FINE_TUNE
    assert lr_rule.run_kind('multi', '', demo=True) == lr_rule.DEMO
    assert lr_rule.rule_lr(lr_rule.DEMO, 16) is None


def test_the_lr_warning_above_twice_the_rule():
    at = lambda lr, **kw: lr_rule.lr_warning(lr_rule.PRETRAINING, lr, 64, **kw)
    assert at(0.0025) is None and at(0.000625) is None  # 2x either way: no warning
    assert at(0.08) == ('--lr=0.08 is 64.0x above the pre-training rule for 64 images a '
                        'global step: 0.00125 (0.08 x B / 4,096; more than 2x off warns; '
                        'docs/hardware.md)')
    assert at(0.0001, asynchronous=True) == (
        '--lr=0.0001 is 12.5x below the pre-training rule for 64 images a worker\'s step: '
        '0.00125 (0.08 x B / 4,096; more than 2x off warns; docs/hardware.md)')
    assert lr_rule.lr_warning(lr_rule.FINE_TUNE, 0.1, 64).endswith(
        'rule for 64 images a global step: 0.025 (0.1 x B / 256; more than 2x off warns; '
        'docs/hardware.md)')
    assert lr_rule.lr_warning(lr_rule.DEMO, 5.0, 16) is None


def test_the_disk_warning_when_the_kept_checkpoints_do_not_fit():
    gib = int(lr_rule.GiB)
    assert lr_rule.disk_warning(10, 61, gib // 2, 5 * gib, '/m') is None
    assert lr_rule.disk_warning(200, 3, gib, 3 * gib, '/m') is None  # only 3 are saved
    assert lr_rule.disk_warning(200, None, gib // 2, 20 * gib, '/m') == (
        '--max_to_keep=200: 200 checkpoints of 0.50 GiB need 100.0 GiB, /m has 20.0 GiB '
        'free: lower --max_to_keep or free disk (docs/hardware.md)')
