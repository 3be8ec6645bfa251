"""The numeric ranges of each flag's check (flags.CHECKS, built with value_checks): every default
passes, a value out of range is one message naming the flag and the value."""
import pytest

import flags as flags_lib
from mlimages.config import flag_checks

NAN, INF = float('nan'), float('inf')


def test_the_defaults_pass():
    assert flag_checks.problems(flags_lib.default_settings()) == []


@pytest.mark.parametrize('name,value,message', [
    ('lr', NAN, '--lr must be > 0 and finite, got nan'),
    ('lr', INF, '--lr must be > 0 and finite, got inf'),
    ('lr', -1.0, '--lr must be > 0 and finite, got -1'),
    ('lr', 0.0, '--lr must be > 0 and finite, got 0'),
    ('lr_warmup', NAN, '--lr_warmup must be > 0 and finite, got nan'),
    ('lr_decay_factor', 0.0, '--lr_decay_factor must be > 0 and finite, got 0'),
    ('weight_decay', -1e-4, '--weight_decay must be >= 0 and finite, got -0.0001'),
    ('weight_decay', INF, '--weight_decay must be >= 0 and finite, got inf'),
    ('opt_momentum', 1.0, '--opt_momentum must be in [0, 1) and finite, got 1'),
    ('mask_thres', 1.5, '--mask_thres must be in [0, 1], got 1.5'),
    ('batch_norm_decay', NAN, '--batch_norm_decay must be in [0, 1], got nan'),
    ('batch_norm_epsilon', 0.0, '--batch_norm_epsilon must be > 0 and finite, got 0'),
    ('shuffle_buffer', 0, '--shuffle_buffer must be >= 1 (1 = no shuffle), got 0'),
    ('num_preprocess_threads', -1, '--num_preprocess_threads must be >= 0 (0 = AUTOTUNE), '
                                   'got -1'),
    ('warmup', -5, '--warmup must be >= 0 (0 = no warm-up), got -5'),
    ('test_interval', -1, '--test_interval must be >= 0, got -1'),
])
def test_a_value_out_of_range_is_named(name, value, message):
    assert flag_checks.problems(flags_lib.replace(flags_lib.default_settings(),
                                                   **{name: value})) == [message]


def test_the_choices_are_the_values_their_users_act_on():
    import resnet
    from mlimages.config import choices
    from mlimages.inference import serving
    from mlimages.model import lr_schedule
    assert tuple(serving.PREPROCESSING) == choices.PREPROCESSING
    assert tuple(lr_schedule.SCHEDULES) == choices.SCHEDULES
    assert resnet.SUPPORTED_SIZES == choices.SUPPORTED_SIZES
