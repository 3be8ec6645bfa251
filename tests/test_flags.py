"""flags.py: every flag in one group (a field of its dataclass, a --help section), the
Settings from parsed flags, their defaults, given(), each flag's check and the rules across
flags (config/flag_checks.py), and the grouped --help text."""
import re

import pytest
from absl import flags as absl_flags

import flags as flags_lib
from mlimages.config import flag_checks


def parsed(*argv):
    """A fresh FlagValues holding train.py's flags, parsed from argv (the global FLAGS
    stays untouched)."""
    values = absl_flags.FlagValues()
    for name in flags_lib.ORDER:
        values[name] = flags_lib.FLAGS[name]
    values.unparse_flags()
    values(['train.py'] + list(argv))
    return values


def test_every_flag_is_in_exactly_one_group_and_in_the_settings():
    grouped = [name for _, names in flags_lib.help_groups() for name in names]
    assert len(grouped) == len(set(grouped))
    assert list(flags_lib.flat(flags_lib.default_settings())) == flags_lib.ORDER
    assert sorted(flags_lib.ORDER) == sorted(grouped)


def test_defaults_are_the_definitions_defaults():
    defaults = flags_lib.flat(flags_lib.default_settings())
    for name in defaults:
        assert defaults[name] == flags_lib.FLAGS[name].default, name
    # the original's values where they work (docs/original.md)
    assert defaults['mode'] == 'train' and defaults['resnet_size'] == 101
    assert defaults['data_format'] == 'auto' and defaults['max_to_keep'] == 200


def test_settings_and_given_follow_the_command_line():
    values = parsed('--batch_size=7', '--mode=eval', '--lr=0.5')
    settings = flags_lib.settings(values)
    assert (settings.data.batch_size, settings.task.mode, settings.schedule.lr) == (7, 'eval', 0.5)
    assert flags_lib.given(values) == {'batch_size', 'mode', 'lr'}
    back = flags_lib.replace(settings, batch_size=512, mode='train', lr=0.1)
    assert back == flags_lib.default_settings()
    untouched = flags_lib.settings(parsed())
    assert untouched == flags_lib.default_settings() and flags_lib.given(parsed()) == set()


def test_the_defaults_pass_every_check():
    assert flag_checks.problems(flags_lib.default_settings()) == []


def test_every_check_names_a_flag_and_rejects_a_bad_value():
    defaults = flags_lib.flat(flags_lib.default_settings())
    assert set(flags_lib.CHECKS) <= set(defaults)
    bad = {int: -5, float: float('nan'), str: 'no-such-value'}
    for name, check in flags_lib.CHECKS.items():
        default = defaults[name]
        assert check(name, default) is None, name
        message = check(name, bad[type(default)])
        if message is None and isinstance(default, (int, float)):
            message = check(name, -10 ** 9)
        assert message and '--' + name in message, (name, message)


@pytest.mark.parametrize('changes, words', [
    ({'mode': 'predict'}, '--mode=predict needs --piclist'),
    ({'mode': 'export'}, '--mode=export needs --export_dir'),
    ({'warmup': 3, 'lr_warmup_decay_step': 0}, '--warmup=3 needs --lr_warmup_decay_step > 0'),
    ({'worker_id': 2, 'worker_num': 2}, '--worker_id=2 must be in [0, --worker_num=2)'),
    ({'restore': True}, '--restore needs --pretrain_ckpt'),
    ({'resnet_size': 77}, '--resnet_size'),
    ({'threshold': '1.5'}, '--threshold must be in [0, 1], got 1.5'),
    ({'threshold': 'best'}, "--threshold must be a number in [0, 1] or calibrated, got 'best'"),
    ({'threshold': 'calibrated'}, '--threshold=calibrated goes with --mode=eval (which '
                                  'chooses the thresholds), predict or export, not --mode=train'),
    ({'profile_steps': '5'}, '--profile_steps must be A,B (the first and last global step'),
    ({'profile_steps': '10,40'}, '--profile_steps=10,40 must be A,B with 1 <= A <= B and at '
                                 'most 20 steps'),
    ({'profile_steps': '3,2'}, '--profile_steps=3,2 must be A,B with 1 <= A <= B'),
    ({'profile_steps': '2,3', 'mode': 'eval'}, '--profile_steps traces training: it goes with '
                                               '--mode=train or train_and_eval, not --mode=eval'),
    ({'pr_curves': 101}, '--pr_curves must be in [0, 100]'),
    ({'pr_curve_classes': '1,x'}, "--pr_curve_classes must be class indices separated by "
                                  "commas (e.g. 0,17,230), got '1,x'"),
    ({'pr_curve_classes': '3,1000'}, '--pr_curve_classes: class 1000 is not in [0, 1000)'),
])
def test_the_first_problem_is_one_usage_error_line(changes, words):
    from mlimages.errors import UsageError
    with pytest.raises(UsageError) as raised:
        flag_checks.validate(flags_lib.replace(flags_lib.default_settings(), **changes))
    assert words in str(raised.value) and '\n' not in str(raised.value)


def test_help_lists_every_flag_under_its_group_in_order():
    text = flags_lib.grouped_help('train.py')
    headings = [line[:-1] for line in text.splitlines() if re.match(r'^\S.*:$', line)]
    assert headings == [title for title, _ in flags_lib.help_groups()]
    for group, names in flags_lib.help_groups():
        section = text.split('\n' + group + ':\n')[1].split('\n\n')[0]
        listed = re.findall(r'^  --(\w+) \(default: ', section, re.M)
        assert listed == names, group
    assert "--batch_size (default: " in text and text.startswith('usage: train.py')
