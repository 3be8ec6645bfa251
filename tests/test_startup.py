"""startup.py and the command line's first moments: versions checked, --help without
TensorFlow, one line and exit 2 for a flag that does not parse, a quiet log."""
import os
import re
import subprocess
import sys

import pytest

from mlimages.config import interpreter, startup
from helpers import ENV, run_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The user's environment: no TF_CPP_MIN_LOG_LEVEL of the tests' own.
USER_ENV = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
USER_ENV['CUDA_VISIBLE_DEVICES'] = ''


def train_py(*args, timeout=300):
    return run_program('train.py', *args, env=USER_ENV, timeout=timeout)


@pytest.mark.parametrize('version', [(3, 8), (3, 12), (3, 13), (2, 7)])
def test_unsupported_python_is_one_line_and_exit_2(version, capsys):
    with pytest.raises(SystemExit) as stop:
        startup.check_python('train.py', version)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'Python %d.%d is not supported' % version in err
    assert 'Python 3.9-3.11' in err


@pytest.mark.parametrize('version', [(3, 9), (3, 10), (3, 11)])
def test_supported_pythons_pass(version):
    startup.check_python('train.py', version)


@pytest.mark.parametrize('version', ['1.15.5', '2.16.1', '2.14.0'])
def test_other_tensorflow_versions_are_refused(version, capsys):
    with pytest.raises(SystemExit) as stop:
        startup.check_tensorflow('train.py', version)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert 'TensorFlow %s is not supported' % version in err and 'requirements.txt' in err
    startup.check_tensorflow('train.py', '2.15.1')


def test_help_lists_every_group_and_needs_no_tensorflow():
    result = train_py('--help')
    assert result.returncode == 0 and result.stderr == ''
    assert result.stdout.startswith('usage: train.py')
    for group in ('Data:', 'Model:', 'Training:', 'Devices:', 'Logging and checkpoints:'):
        assert group in result.stdout
    assert '--tf_gpu_thread_mode' in result.stdout and '--verbose' in result.stdout


@pytest.mark.parametrize('args,fragment', [
    (['--batchsize=32'], "Unknown command line flag 'batchsize'. Did you mean: batch_size"),
    (['--lr=abc'], 'flag --lr=abc'),
    (['--tf_gpu_thread_mode=fast'], '--tf_gpu_thread_mode must be one of off, gpu_private'),
    (['--inter_op_threads=-1'], '--inter_op_threads must be >= 0'),
])
def test_every_usage_error_is_one_line_and_exit_2(args, fragment):
    result = train_py(*args)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('train.py: error: '), lines
    assert fragment in lines[0]


@pytest.mark.slow
def test_a_run_logs_one_line_an_interval_and_no_start_up_chatter(tmp_path):
    model_dir = str(tmp_path / 'model')
    result = train_py('--use_synthetic_data', '--model_dir=' + model_dir,
                      '--log_dir=' + str(tmp_path / 'log'), '--class_num=5',
                      '--resnet_size=18', '--image_size=32', '--batch_size=2',
                      '--max_iter=4', '--log_interval=2', '--data_format=NHWC')
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    for noise in ('cuda_dnn', 'cudart_stub', 'cpu_feature_guard', 'TensorRT',
                  'is deprecated', 'Instructions for updating', 'loss = ', 'global_step/sec',
                  'Using config', 'Calling model_fn'):
        assert not [l for l in lines if noise in l], noise
    steps = [l for l in lines if re.search(r'\bstep \d+: ', l)]
    assert [re.search(r'step (\d+):', l).group(1) for l in steps] == ['2', '4']
    assert all('ETA' in l and 'images/s' in l for l in steps)
    assert len(lines) < 30, '\n'.join(lines)
    # As a user starts it: no CUDA_VISIBLE_DEVICES. The devices line is for a GPU only.
    verbose = run_program('train.py', '--use_synthetic_data', '--model_dir=' + model_dir + '2',
                          '--log_dir=' + str(tmp_path / 'log'), '--class_num=5',
                          '--resnet_size=18', '--image_size=32', '--batch_size=2',
                          '--max_iter=2', '--log_interval=1', '--data_format=NHWC',
                          '--verbose', env={k: v for k, v in USER_ENV.items()
                                            if k != 'CUDA_VISIBLE_DEVICES'})
    assert verbose.returncode == 0 and 'loss = ' in verbose.stderr
    assert not ('devices: ' in verbose.stderr and 'sees 0 GPU(s)' in verbose.stderr)


def test_tools_check_the_installed_tensorflow_without_importing_it(monkeypatch, capsys):
    assert startup.installed_tensorflow().startswith('2.15.')
    startup.check_versions('predict.py')
    monkeypatch.setattr(startup, 'installed_tensorflow', lambda: None)
    with pytest.raises(SystemExit) as stop:
        startup.check_versions('predict.py')
    assert stop.value.code == 2
    # The pip of the Python that runs it: the checkout's .venv/bin/pip for the README's set-up.
    assert capsys.readouterr().err == ('predict.py: error: TensorFlow is not installed; %s '
                                       'install -r requirements.txt (tensorflow==2.15.1)\n'
                                       % interpreter.pip_command())


def test_a_retried_session_error_is_logged_in_one_line_without_its_stack_traces():
    """MonitoredSession logs a preempted peer's error (its whole text: some 50 lines of where
    the op was built) before it creates the session anew; the quiet log keeps the cause."""
    import logging
    import tensorflow.compat.v1 as tf
    with tf.Graph().as_default():
        failing = tf.debugging.check_numerics(tf.constant([float('nan')]), 'the cause')
        with tf.Session() as session:
            with pytest.raises(tf.errors.InvalidArgumentError) as real:
                session.run(failing)
    assert 'File "' in real.value.message  # TensorFlow's text holds the stack traces

    class FailOnce(tf.train.SessionRunHook):
        calls = 0

        def before_run(self, run_context):
            FailOnce.calls += 1
            if FailOnce.calls == 1:
                raise tf.errors.UnavailableError(None, None, real.value.message)

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger('tensorflow')
    quiet = startup._Quiet()
    level = logger.level
    logger.addFilter(quiet)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with tf.Graph().as_default():
            advance = tf.assign_add(tf.train.get_or_create_global_step(), 1)
            with tf.train.MonitoredSession(hooks=[FailOnce()]) as session:
                assert session.run(advance) == 1
    finally:
        logger.setLevel(level)
        logger.removeHandler(handler)
        logger.removeFilter(quiet)
    (retried,) = [r.getMessage() for r in records if r.getMessage().startswith(
        startup.RETRY_LINE)]
    assert '\n' not in retried and 'File "' not in retried, retried
    assert retried.startswith('An error was raised. This may be due to a preemption')
    assert 'the cause : Tensor had NaN values' in retried, retried


def test_requested_dtype_reads_the_command_line_and_its_flagfiles(tmp_path):
    inner = tmp_path / 'inner.txt'
    inner.write_text('--dtype=bf16\n')
    outer = tmp_path / 'outer.txt'
    outer.write_text('--lr=0.1\n--flagfile=%s\n' % inner)
    assert startup.requested_dtype([]) == 'fp32'
    assert startup.requested_dtype(['--dtype=bf16']) == 'bf16'
    assert startup.requested_dtype(['--dtype', 'fp16', '--lr=1']) == 'fp16'
    assert startup.requested_dtype(['--flagfile=%s' % outer]) == 'bf16'
    assert startup.requested_dtype(['--flagfile=%s' % outer, '--dtype=fp32']) == 'fp32'
    # left to the real parse, which names the file
    assert startup.requested_dtype(['--flagfile=%s' % (tmp_path / 'none.txt')]) == 'fp32'


@pytest.mark.parametrize('dtype', ['fp32', 'bf16'])
def test_train_py_loads_tensorflow_with_the_kernels_it_prefers(dtype):
    """Whatever this CPU: TensorFlow in train.py's process has oneDNN on exactly when
    config/cpu.py's rule says (TensorFlow's default, or train.py's choice for fp32 on an
    AVX2/FMA CPU); a setting of the user's wins."""
    from mlimages.config import cpu
    code = ('import sys; sys.argv = ["train.py", "--dtype=%s"]; import train; '
            'from tensorflow.python.util import _pywrap_util_port as port; '
            'print(bool(port.IsMklEnabled()))' % dtype)
    env = {k: v for k, v in ENV.items() if k not in (cpu.ONEDNN_ENV, cpu.ONEDNN_CHOSEN_ENV)}
    this = cpu.this_cpu()
    want = cpu.onednn(this, {}).value or cpu.prefer_onednn(this, {}, dtype)
    for extra, expected in (({}, want), ({cpu.ONEDNN_ENV: '0'}, False)):
        result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=dict(env, **extra),
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.split()[-1] == str(expected), (extra, result.stdout)
