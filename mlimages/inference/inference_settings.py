"""Inference runs the model as it was trained: the settings that define a checkpoint's
network input and output come from the run's flags.txt (run_settings) beside it.

For every setting an inference entry point uses (train.py --mode=eval/predict/export,
tools/predict.py, tools/extract_features.py):

    given on the command line  -> the given value; one warning line when it differs from
                                  the trained one (a class count or depth that does not
                                  fit the checkpoint stays an error, exit status 2)
    else in <dir>/flags.txt    -> the trained value (dir: the model directory, or the
                                  directory of the checkpoint prefix)
    else                       -> the default (the published checkpoints have no flags.txt)

and one first log line says which values are used and where they came from. SETTINGS are
the ones that change what the network computes or how its output is read; --data_format
is not among them: the results do not depend on the layout, and a run trained in NCHW on a
GPU must still run on a CPU (NHWC only), so the layout is chosen for the machine that runs
the inference. A SavedModel carries its own settings (built in at export) and needs none of
this. Only the entry points read flags; they pass their defaults and given values in.
"""
import os

import flags
from mlimages.config import run_settings
from mlimages.errors import UsageError

# What defines the network's input and output: its input size, depth, class count,
# batch-norm epsilon (in every normalisation), the label type (sigmoid or softmax scores;
# how eval parses the records) and the hierarchy (eval's mAP_leaf / mAP_inner).
SETTINGS = ('image_size', 'resnet_size', 'class_num', 'batch_norm_epsilon', 'label_type',
            'hierarchy')
# train.py's inference modes: which settings each one uses.
MODE_SETTINGS = {
    'eval': SETTINGS,
    'predict': ('image_size', 'resnet_size', 'class_num', 'batch_norm_epsilon'),
    'export': ('image_size', 'resnet_size', 'class_num', 'batch_norm_epsilon'),
}
FROM_CHECKPOINT = None  # a default of None: the tools read the value from the checkpoint


def flags_file(path):
    """<dir>/flags.txt of a model directory or a checkpoint prefix in one, None when the
    file does not exist."""
    directory = path if os.path.isdir(path) else os.path.dirname(path) or '.'
    candidate = os.path.join(directory, run_settings.FILE_NAME)
    return candidate if os.path.isfile(candidate) else None


def _convert(text, like, name, source):
    """The flag text of flags.txt as the type of the flag's default `like`."""
    try:
        if isinstance(like, bool):
            if text.lower() not in ('true', 'false'):
                raise ValueError(text)
            return text.lower() == 'true'
        return type(like)(text) if like is not None else int(text)
    except ValueError:
        raise UsageError('%s: --%s=%s is not a valid value of the flag; fix or remove the line'
                         % (source, name, text))


def trained(path, defaults, names=SETTINGS):
    """({name: trained value} of names found in the flags.txt beside path, source path), or
    ({}, None) without that file. defaults: {name: default}, whose types the values take."""
    source = flags_file(path)
    if source is None:
        return {}, None
    recorded = run_settings.parse(run_settings.read(os.path.dirname(source)) or [])
    return {name: _convert(recorded[name], defaults.get(name), name, source)
            for name in names if name in recorded}, source


def _text(value):
    if value is FROM_CHECKPOINT:
        return 'from the checkpoint'
    if isinstance(value, float):
        return '%g' % value
    return str(value) if value != '' else 'none'


def choose(defaults, given, trained_values, source, where, given_flags=None):
    """The rule above. defaults: {name: default} of every setting used (FROM_CHECKPOINT =
    read from the checkpoint's variables); given: {name: value} of those on the command
    line; trained_values, source: trained(); where: the checkpoint or model directory (for
    the line without flags.txt); given_flags: {name: the flag that gave it} where that is
    another flag than --name (tools/predict.py's --single_label). Returns ({name: value},
    [first log line, warnings...])."""
    values, warnings, tags = {}, [], {}
    for name, default in defaults.items():
        if name in given:
            values[name] = given[name]
            tags[name] = ' (given)'
            if name in trained_values and trained_values[name] != given[name]:
                flag = (given_flags or {}).get(name, '--%s=%s' % (name, _text(given[name])))
                warnings.append('warning: %s differs from the trained --%s=%s (%s)' % (
                    flag, name, _text(trained_values[name]), source))
        elif name in trained_values:
            values[name] = trained_values[name]
            if name == 'hierarchy' and values[name] and not os.path.isfile(values[name]):
                warnings.append('warning: the trained --hierarchy=%s (%s) does not exist here; '
                                'evaluating without it (give --hierarchy=FILE)'
                                % (values[name], source))
                values[name] = ''
        else:
            values[name] = default
            if source and default is not FROM_CHECKPOINT:
                tags[name] = ' (default: not in flags.txt)'
    line = 'inference settings: %s' % ', '.join(
        '%s %s%s' % (name, _text(values[name]), tags.get(name, '')) for name in defaults)
    line += (' (trained: %s)' % source if source else
             ' (defaults: no flags.txt beside %s)' % where)
    return values, [line] + warnings


def setting_values(settings, names=SETTINGS):
    """{name: value} of the settings `names` in Settings (flags.Settings)."""
    every = flags.flat(settings)
    return {name: every[name] for name in names}


def checkpoint_settings(current, given_names, path, names=SETTINGS):
    """train.py's inference modes: the settings `names` chosen by the rule for the
    checkpoint or model directory `path`; current: {name: value} of the command line (the
    default where not given), given_names: the flags given. Returns ({name: value}, log
    lines)."""
    defaults = {name: current[name] for name in names}
    given = {name: defaults[name] for name in names if name in given_names}
    found, source = trained(path, defaults, names)
    return choose(defaults, given, found, source, path)


def export_record(values, checkpoint):
    """The lines a SavedModel keeps as assets.extra/flags.txt: the flags.txt of the run that
    trained checkpoint, else (no such file) the settings of the export (values: {name:
    value} of at least SETTINGS, setting_values)."""
    source = flags_file(checkpoint)
    if source:
        return (['# flags.txt of the run that trained %s' % checkpoint]
                + run_settings.read(os.path.dirname(source)))
    return (['# no flags.txt beside %s: the settings it was exported with' % checkpoint]
            + run_settings.flag_lines({name: values[name] for name in SETTINGS}))
