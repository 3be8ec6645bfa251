"""inference_settings.py: the trained settings read from the flags.txt beside a checkpoint,
and the rule given > trained > default with its log line and warnings. The end-to-end
check that inference reproduces evaluation is test_inference_matches_eval below."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import flags
import inference_settings
from errors import UsageError
from helpers import ROOT, run_train, write_lines

DEFAULTS = flags.defaults()._asdict()
TRAINED = ['# train.py run started ...', '--image_size=48', '--resnet_size=18',
           '--class_num=12', '--batch_norm_epsilon=0.001', '--label_type=multi',
           '--hierarchy=', '--lr=0.001']


def model_dir_with(tmp_path, lines=TRAINED):
    directory = tmp_path / 'model'
    directory.mkdir()
    write_lines(directory / 'flags.txt', lines)
    return str(directory)


def test_trained_settings_of_a_model_dir_or_a_checkpoint_in_it_take_the_flags_types(
        tmp_path):
    model_dir = model_dir_with(tmp_path)
    want = {'image_size': 48, 'resnet_size': 18, 'class_num': 12,
            'batch_norm_epsilon': 0.001, 'label_type': 'multi', 'hierarchy': ''}
    for path in (model_dir, os.path.join(model_dir, 'model.ckpt-1200')):
        values, source = inference_settings.trained(path, DEFAULTS)
        assert values == want and type(values['batch_norm_epsilon']) is float
        assert source == os.path.join(model_dir, 'flags.txt')
    assert inference_settings.trained(str(tmp_path / 'published' / 'model.ckpt'),
                                      DEFAULTS) == ({}, None)


def test_a_bad_value_in_flags_txt_is_one_line_naming_the_file(tmp_path):
    model_dir = model_dir_with(tmp_path, ['--image_size=large'])
    with pytest.raises(UsageError, match=r'flags.txt: --image_size=large is not a valid'):
        inference_settings.trained(model_dir, DEFAULTS)


def test_given_wins_with_a_warning_trained_else_default(tmp_path):
    model_dir = model_dir_with(tmp_path, TRAINED[:2] + TRAINED[3:4])  # no resnet_size
    source = os.path.join(model_dir, 'flags.txt')
    opts, lines = inference_settings.for_options(
        flags.defaults(), {'image_size'}, model_dir, ('image_size', 'class_num', 'resnet_size'))
    assert (opts.image_size, opts.class_num, opts.resnet_size) == (224, 12, 101)
    assert lines == [
        'inference settings: image_size 224 (given), class_num 12, resnet_size 101 '
        '(default: not in flags.txt) (trained: %s)' % source,
        'warning: --image_size=224 differs from the trained --image_size=48 (%s)' % source]
    # The same given value as the trained one: no warning.
    opts, lines = inference_settings.for_options(
        flags.defaults()._replace(image_size=48), {'image_size'}, model_dir, ('image_size',))
    assert opts.image_size == 48 and len(lines) == 1
    # No flags.txt: the defaults, and the line says so.
    opts, lines = inference_settings.for_options(flags.defaults(), set(), str(tmp_path),
                                                 ('image_size', 'class_num'))
    assert opts == flags.defaults()
    assert lines == ['inference settings: image_size 224, class_num 1000 (defaults: no '
                     'flags.txt beside %s)' % tmp_path]


def test_a_trained_hierarchy_that_is_gone_is_a_warning_and_left_out(tmp_path):
    tree = tmp_path / 'tree.txt'
    tree.write_text('x')
    model_dir = model_dir_with(tmp_path, ['--hierarchy=%s' % tree])
    opts, lines = inference_settings.for_options(flags.defaults(), set(), model_dir,
                                                 ('hierarchy',))
    assert opts.hierarchy == str(tree) and len(lines) == 1
    tree.unlink()
    opts, lines = inference_settings.for_options(flags.defaults(), set(), model_dir,
                                                 ('hierarchy',))
    assert opts.hierarchy == ''
    assert lines[1].startswith('warning: the trained --hierarchy=%s (' % tree)


def test_a_saved_model_records_the_training_run_or_the_exports_settings(tmp_path):
    model_dir = model_dir_with(tmp_path)
    record = inference_settings.export_record(flags.defaults(),
                                              os.path.join(model_dir, 'model.ckpt-3'))
    assert record[1:] == TRAINED and record[0].startswith('# flags.txt of the run')
    record = inference_settings.export_record(flags.defaults(), str(tmp_path / 'model.ckpt'))
    assert '--image_size=224' in record and record[0].startswith('# no flags.txt beside')
