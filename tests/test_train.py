"""train.py as a user runs it: real JPEGs -> make_tfrecords -> training -> checkpoints and
TensorBoard events read back; resume; --help; every bad input of the core issue."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import flags as flags_lib
import train
from mlimages.config import cpu, flag_checks
from mlimages.model import memory
from helpers import CLASSES, ROOT, checkpoint_values, run_train, scalar_tags, \
    small_run_flags


def latest(model_dir):
    """(the latest checkpoint's path, its values: helpers.checkpoint_values)."""
    return tf.train.latest_checkpoint(model_dir), checkpoint_values(model_dir)


@pytest.mark.slow
def test_train_three_steps_then_resume_to_the_same_global_step(dataset, tmp_path):
    model_dir = str(tmp_path / 'model')
    first = run_train(*small_run_flags(dataset, model_dir, 3))
    assert first.returncode == 0, first.stderr[-3000:]
    path, values = latest(model_dir)
    assert path.endswith('model.ckpt-3')
    assert values['global_step'] == 3
    assert values['pos_count'][0] == 3  # class 0 is in every batch
    assert values['pos_count'].shape == (CLASSES,)
    # The builder's records.txt lets the log say what --max_iter means: 3 x 4 / 12 records.
    assert 'global batch 4 images a global step; --max_iter=3 steps make 1.00 epochs of the ' \
        '12 training records' in first.stderr
    # and the learning rate far off its rule (lr_rule: 0.08 x 4 / 4,096), in one line
    assert '] --lr=0.1 is 1280.0x above the pre-training rule for 4 images a global step: ' \
        '7.81' in first.stderr

    scalars = scalar_tags(model_dir)
    assert {'learning_rate', 'cross_entropy', 'train_accuracy', 'loss'} <= set(scalars)
    assert not any(tag.endswith('_1') for tag in scalars)
    assert [step for step, _ in scalars['cross_entropy']] == [1, 2, 3]
    log = first.stderr
    assert 'step 3: cross_entropy = ' in log and 'images/s' in log
    # the default decode pool, stated with the first lines
    assert 'parallel decodes AUTOTUNE (tf.data sizes them to the host, up to its ' in log
    assert os.path.getsize(os.path.join(model_dir, 'log', 'train.log')) > 0

    second = run_train(*small_run_flags(dataset, model_dir, 5))
    assert second.returncode == 0, second.stderr[-3000:]
    assert 'Restoring parameters from %s' % path in second.stderr
    path5, values5 = latest(model_dir)
    assert path5.endswith('model.ckpt-5') and values5['global_step'] == 5
    assert values5['pos_count'][0] == 5  # counters continued from the checkpoint
    assert np.any(values5['logits/dense/kernel/Momentum'] != 0)

    third = run_train(*small_run_flags(dataset, model_dir, 5))
    assert third.returncode == 0, third.stderr[-3000:]
    path_again, values_again = latest(model_dir)
    assert path_again == path5 and values_again['global_step'] == 5


def test_help_lists_every_flag_of_the_original_grouped():
    result = run_train('--help')
    assert result.returncode == 0
    original = ('mode max_to_keep data_dir batch_size num_preprocess_threads file_shuffle_buffer '
                'shuffle_buffer with_bbox class_num resnet_size data_format image_size '
                'image_channels batch_norm_decay batch_norm_epsilon mask_thres neg_select '
                'restore num_gpus optimizer opt_momentum lr lr_decay_step lr_decay_factor '
                'weight_decay warmup lr_warmup lr_warmup_decay_step lr_warmup_decay_factor '
                'max_iter test_interval test_iter prof_interval log_interval log_dir model_dir '
                'tmp_model_dir snapshot epoch_iter drop_rate random_seed pretrain_ckpt FixBlock2 '
                'visiable_gpu piclist interval start worker_num worker_id').split()
    for name in original:
        assert '  --%s (default:' % name in result.stdout, name
    for group in ('Data:', 'Model:', 'Training:', 'Logging and checkpoints:'):
        assert group in result.stdout


def test_the_published_runs_flags_are_accepted(tmp_path):
    """A launch script with the original's flags gets as far as looking for data."""
    result = run_train(
        '--data_dir=%s' % tmp_path, '--class_num=11166', '--resnet_size=101',
        '--image_size=224', '--mask_thres=0.7', '--neg_select=0.1',
        '--batch_norm_decay=0.997', '--batch_norm_epsilon=1e-5', '--lr=0.08',
        '--lr_decay_step=110000', '--weight_decay=1e-4', '--warmup=35200',
        '--lr_warmup=0.01', '--lr_warmup_decay_step=4400', '--lr_warmup_decay_factor=1.297',
        '--max_iter=440000', '--snapshot=4400', '--log_interval=100', '--with_bbox=False',
        '--num_gpus=1', '--visiable_gpu=0', '--log_dir=%s' % (tmp_path / 'log'),
        '--model_dir=%s' % (tmp_path / 'ckpt'), '--tmp_model_dir=/tmp/x', '--prof_interval=10',
        '--file_shuffle_buffer=1500', '--shuffle_buffer=2048', '--max_to_keep=200')
    assert result.returncode == 2
    assert 'train' in result.stderr and 'does not exist' in result.stderr


def bad_input_cases(data, tmp):
    empty = os.path.join(tmp, 'empty')
    os.makedirs(os.path.join(empty, 'train'))
    return [
        (['--data_dir=' + os.path.join(tmp, 'nowhere')],
         [os.path.join(tmp, 'nowhere', 'train'), 'does not exist']),
        (['--data_dir=' + empty], [os.path.join(empty, 'train'), "'*tfrecords'"]),
        (['--data_dir=' + data, '--file_pattern=*.rec'], ["'*.rec'"]),
        (['--data_dir=' + data, '--worker_num=2', '--worker_id=2'], ['--worker_id=2']),
        # (fewer files than workers is not an error: records are split, test_distribute)
        (['--data_dir=' + data, '--distribution=collective'],
         ['--distribution=collective needs a cluster: TF_CONFIG']),
        (['--data_dir=' + data, '--resnet_size=42'], ['--resnet_size=42']),
        (['--data_dir=' + data, '--warmup=100', '--lr_warmup_decay_step=0'],
         ['--warmup=100', '--lr_warmup_decay_step']),
        (['--data_dir=' + data, '--batch_size=0'], ['--batch_size must be positive']),
        (['--data_dir=' + data, '--image_size=-1'], ['--image_size must be positive']),
        (['--data_dir=' + data, '--class_num=0'], ['--class_num must be positive']),
        (['--data_dir=' + data, '--class_num=7'],
         [os.path.join(data, 'train', '0.tfrecords'), 'label has 5 classes',
          '--class_num=7']),
        (['--data_dir=' + data, '--data_format=NCHW'], ['NCHW', 'needs a GPU']),
        (['--data_dir=' + data, '--data_format=XYZ'], ['--data_format']),
    ]


@pytest.mark.slow
def test_bad_input_is_one_clear_line_and_nothing_is_written(dataset, tmp_path):
    for extra, fragments in bad_input_cases(dataset, str(tmp_path)):
        model_dir = str(tmp_path / 'model')
        result = run_train('--model_dir=' + model_dir, '--log_dir=' + model_dir + '_log',
                           '--class_num=%d' % CLASSES, '--resnet_size=50', *extra)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (extra, result.stderr[-2000:])
        assert lines and lines[-1].startswith('train.py: error: '), (extra, lines[-3:])
        # the error is the only thing the run printed on stderr after start-up noise
        assert [l for l in lines if 'error' in l.lower()] == [lines[-1]], (extra, lines)
        for fragment in fragments:
            assert fragment in lines[-1], (extra, lines[-1])
        assert not os.path.exists(model_dir), extra
        assert not os.path.exists(model_dir + '_log'), extra


def rename_counters_to_original(model_dir):
    """Rewrites the latest checkpoint as the original program names things."""
    path = tf.train.latest_checkpoint(model_dir)
    reader = tf.train.load_checkpoint(path)
    rename = {'pos_count': 'Variable', 'neg_count': 'Variable_1'}
    with tf.Graph().as_default():
        variables = [tf.Variable(reader.get_tensor(name), name=rename.get(name, name))
                     for name in reader.get_variable_to_shape_map()]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            tf.train.Saver(variables).save(sess, path)


@pytest.mark.slow
def test_a_checkpoint_of_the_original_program_continues(dataset, tmp_path):
    model_dir = str(tmp_path / 'model')
    assert run_train(*small_run_flags(dataset, model_dir, 2)).returncode == 0
    rename_counters_to_original(model_dir)
    result = run_train(*small_run_flags(dataset, model_dir, 4))
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'checkpoint of the original program' in result.stderr
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    names = reader.get_variable_to_shape_map()
    assert 'Variable' in names and 'pos_count' not in names
    assert reader.get_tensor('global_step') == 4
    assert reader.get_tensor('Variable')[0] == 4  # streak continued from 2


SYNTHETIC_CLASSES = 7


@pytest.mark.slow
def test_xla_and_synthetic_data_flags_train_with_train_py(tmp_path):
    """Also memory's line before the first step, and its warning for a GPU (of the
    environment) that holds the estimate but not the margin."""
    gpu_gb = memory.estimate(18, SYNTHETIC_CLASSES, 2, 32) / memory.GB + 0.1
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='',
               TF_XLA_FLAGS='--tf_xla_cpu_global_jit',
               **{memory.GPU_MEMORY_ENV: '%.3f' % gpu_gb})
    model_dir = str(tmp_path / 'model')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'train.py'), '--use_synthetic_data', '--xla',
         '--data_dir=' + str(tmp_path / 'nowhere'), '--model_dir=' + model_dir,
         '--log_dir=' + str(tmp_path / 'log'), '--class_num=%d' % SYNTHETIC_CLASSES,
         '--resnet_size=18', '--image_size=32', '--batch_size=2', '--max_iter=2',
         # a small step: at lr 0.1 a batch of 2 random images can diverge to NaN at step 2
         '--lr=0.001', '--log_interval=1', '--augment_on=device'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'XLA on' in result.stderr and 'synthetic data' in result.stderr
    assert 'oneDNN kernels' in result.stderr  # the CPU line (config/cpu.py's choices)
    assert 'step 2: cross_entropy' in result.stderr
    assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-2')
    line, warning = memory.preflight(18, SYNTHETIC_CLASSES, 2, 32, 'fp32', gpu_gb * memory.GB)
    assert result.stderr.index(line) < result.stderr.index(warning) < \
        result.stderr.index('step 1: ')


@pytest.mark.parametrize('name,value', [('augment_on', 'gpu'), ('dtype', 'fp64'),
                                        ('private_threads', -1)])
def test_bad_performance_flags_are_usage_errors(name, value):
    settings = flags_lib.default_settings()
    flag_checks.validate(settings)
    with pytest.raises(train.UsageError, match='--' + name):
        flag_checks.validate(flags_lib.replace(settings, **{name: value}))


def test_dtype_auto_is_resolved_for_this_machine_and_a_given_dtype_kept():
    settings = flags_lib.replace(flags_lib.default_settings(), dtype='auto')
    flag_checks.validate(settings)
    expected = cpu.resolve_dtype('auto', bool(tf.config.list_physical_devices('GPU')),
                                 cpu.this_cpu()).value
    assert train.resolve_dtype(settings).model.dtype == expected in ('fp32', 'bf16')
    given = flags_lib.replace(settings, dtype='fp16')
    assert train.resolve_dtype(given) is given


def test_a_bad_boolean_is_said_in_words():
    from absl import flags as absl_flags
    values = absl_flags.FlagValues()
    values.append_flag_values(train.FLAGS)
    values.unparse_flags()
    with pytest.raises(absl_flags.Error) as error:
        values(['train.py', '--xla=maybe'])
    assert train.flag_error_text(error.value) == \
        'flag --xla=maybe: not a boolean: give true or false (or --name / --noname)'
    with pytest.raises(absl_flags.Error) as error:
        values(['train.py', '--batch_size=x'])
    assert train.flag_error_text(error.value) == str(error.value)
