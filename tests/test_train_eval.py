"""--mode=eval and --mode=train_and_eval end to end, and their bad input."""
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from helpers import CLASSES, run_train, small_run_flags, train_model, write_dataset

pytestmark = pytest.mark.slow

METRICS = {'mAP', 'precision@1', 'precision@5', 'micro_f1', 'macro_f1', 'accuracy',
           'cross_entropy'}


@pytest.fixture(scope='module')
def trained(module_dir):
    # Moving averages = the last batch's statistics, so that inference after two steps
    # is as finite as training.
    data, model_dir, result = train_model(
        module_dir('eval'), 2, '--mode=train_and_eval', '--test_interval=1', '--test_iter=1',
        '--batch_norm_decay=0', '--lr=1e-4')
    return data, model_dir, result.stderr


def eval_scalars(model_dir):
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(os.path.join(model_dir, 'eval'),
                                             size_guidance={'scalars': 0})
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()['scalars']}


def test_train_and_eval_evaluates_each_interval_naming_the_checkpoint(trained):
    data, model_dir, log = trained
    for step in (1, 2):
        assert 'evaluated %s (global step %d) on 1 val batches: ' % (
            os.path.join(model_dir, 'model.ckpt-%d' % step), step) in log
    scalars = eval_scalars(model_dir)
    assert METRICS <= set(scalars)
    assert scalars['mAP'] == [1, 2]


def test_eval_mode_on_the_whole_split_and_a_given_checkpoint(trained):
    data, model_dir, _ = trained
    result = run_train(*small_run_flags(data, model_dir, 2), '--mode=eval',
                       '--batch_norm_decay=0', '--lr=1e-4')
    assert result.returncode == 0, result.stderr[-3000:]
    line = [l for l in result.stderr.splitlines() if 'evaluated ' in l][-1]
    assert 'model.ckpt-2 (global step 2) on all val batches' in line
    for name in METRICS:
        assert '%s = ' % name in line
    # cross_entropy is per image: the 6 val images in batches of 3 give what 4 + 2 gave.
    again = run_train(*small_run_flags(data, model_dir, 2), '--mode=eval', '--batch_size=3',
                      '--batch_norm_decay=0', '--lr=1e-4')
    line3 = [l for l in again.stderr.splitlines() if 'evaluated ' in l][-1]
    assert re.search(r'cross_entropy = [0-9.]+', line3).group() == \
        re.search(r'cross_entropy = [0-9.]+', line).group()
    first = os.path.join(model_dir, 'model.ckpt-1')
    result = run_train(*small_run_flags(data, model_dir, 2), '--mode=eval',
                       '--checkpoint_path=' + first, '--batch_norm_decay=0', '--lr=1e-4')
    assert result.returncode == 0 and 'evaluated %s (global step 1)' % first in result.stderr


def overwrite_checkpoint_value(path, name, value):
    """Rewrites checkpoint `path` with variable `name` set to `value` (same shape)."""
    reader = tf.train.load_checkpoint(path)
    with tf.Graph().as_default():
        variables = {}
        for key in reader.get_variable_to_shape_map():
            tensor = reader.get_tensor(key)
            if key == name:
                tensor = np.full_like(tensor, value)
            variables[key] = tf.Variable(tensor, name='v%d' % len(variables))
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver(variables).save(session, path, write_meta_graph=False)


def test_eval_of_a_model_that_outputs_nan_says_so(trained, tmp_path):
    data, _, _ = trained
    model_dir = str(tmp_path / 'model')
    assert run_train(*small_run_flags(data, model_dir, 1)).returncode == 0
    # A model whose output is NaN by construction (a NaN logit bias), on any CPU.
    overwrite_checkpoint_value(tf.train.latest_checkpoint(model_dir), 'logits/dense/bias',
                               np.nan)
    result = run_train(*small_run_flags(data, model_dir, 1), '--mode=eval')
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and 'NaN or Inf in inference mode' in last, last


def test_eval_bad_input(trained, tmp_path):
    data, model_dir, _ = trained
    cases = [
        (['--checkpoint_path=' + str(tmp_path / 'nope')], 'does not exist'),
        (['--model_dir=' + str(tmp_path / 'empty_model')], 'no checkpoint to evaluate'),
        (['--class_num=7', '--data_dir=' + write_dataset(str(tmp_path / 'seven'),
                                                         class_num=7)],
         'has %d classes, --class_num is 7' % CLASSES),
        (['--data_dir=' + str(tmp_path)], 'val'),
    ]
    for extra, fragment in cases:
        result = run_train(*small_run_flags(data, model_dir, 2), '--mode=eval', *extra,
                           '--batch_norm_decay=0', '--lr=1e-4')
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode == 2, (extra, result.stderr[-1500:])
        assert last.startswith('train.py: error: ') and fragment in last, (extra, last)
        if 'model' in extra[0]:  # a missing model is the one line, no settings before it
            assert 'inference settings' not in result.stderr, result.stderr
    result = run_train(*small_run_flags(data, model_dir, 2), '--mode=train_and_eval')
    assert result.returncode == 2 and '--test_interval' in result.stderr.splitlines()[-1]


def test_eval_with_a_hierarchy_reports_leaf_and_inner_map(trained, tmp_path):
    data, model_dir, _ = trained
    header = 'category_index\tcategory_id\tindex_of_parent_category\tcategory name\n'
    tree = tmp_path / 'hierarchy.txt'  # leaves 2, 3, 4; inner 0, 1
    tree.write_text(header + ''.join('%d\tn%d\t%d\tc%d\n' % (i, i, p, i)
                                     for i, p in enumerate([-1, 0, 0, 1, -1])))
    result = run_train(*small_run_flags(data, model_dir, 2), '--mode=eval',
                       '--hierarchy=%s' % tree, '--batch_norm_decay=0', '--lr=1e-4')
    assert result.returncode == 0, result.stderr[-3000:]
    line = [l for l in result.stderr.splitlines() if 'evaluated ' in l][-1]
    assert 'mAP_leaf = ' in line and 'mAP_inner = ' in line, line
    assert {'mAP_leaf', 'mAP_inner'} <= set(eval_scalars(model_dir))
    bad = tmp_path / 'bad.txt'
    bad.write_text(header + '0\tn0\t1\ta\n1\tn1\t0\tb\n')
    for path, fragment in ((bad, '%s:2: class 0 is on a cycle' % bad),
                           (tmp_path / 'none.txt', 'cannot read the hierarchy file'),
                           (tree, 'has %d classes but --class_num is 7' % CLASSES)):
        extra = ['--class_num=7'] if path == tree else []
        result = run_train(*small_run_flags(data, model_dir, 2), '--mode=eval', *extra,
                           '--hierarchy=%s' % path)
        last = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len([l for l in last if 'error' in l]) == 1, last
        assert last[-1].startswith('train.py: error: --hierarchy: ') and fragment in last[-1]
