"""precision.py's kernel check and train.py's answer to a CPU without bfloat16 convolutions.

oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA, with oneDNN switched on) is such a CPU on any
x86 machine: oneDNN's bfloat16 convolutions need AVX-512 or AMX. Without the check the
Estimator's session took the kernel's AbortedError for a preempted peer and restarted the
session forever. Whether a CPU capped at AVX2 lacks the kernel depends on the oneDNN build
and the CPU (some fall back to a slower bf16 path and train): the tests ask this machine's
kernels first, in a process of their own, and expect what follows from the answer."""
import os
import subprocess
import sys

import pytest

from mlimages.model import precision
from helpers import ENV, run_train, small_run_flags, write_dataset

NO_BF16_CPU = dict(ENV, ONEDNN_MAX_CPU_ISA='AVX2', TF_ENABLE_ONEDNN_OPTS='1')

# TensorFlow 2.15's message for a convolution oneDNN cannot build, as session.run raises it
ONEDNN_ERROR = (
    "Graph execution error:\n\nDetected at node 'Conv2D' defined at (most recent call last):"
    "\n    File \"<string>\", line 6, in <module>\nNode: 'Conv2D'\nOperation received an "
    "exception:Status: 3, message: could not create a primitive descriptor for a convolution "
    "forward propagation primitive, in file tensorflow/core/kernels/mkl/mkl_conv_ops.cc:1093"
    "\n\t [[{{node Conv2D}}]]")


def test_the_kernels_own_words_are_kept():
    assert precision._kernel_message(ONEDNN_ERROR) == (
        'could not create a primitive descriptor for a convolution forward propagation '
        'primitive')
    assert precision._kernel_message('No OpKernel was registered\n\t [[{{node x}}]]') == \
        'No OpKernel was registered'


def test_float32_and_float16_need_no_check():
    assert precision.cpu_kernel_error('fp32') is None
    assert precision.cpu_kernel_error('fp16') is None


def train(tmp_path, env, *extra):
    data = write_dataset(str(tmp_path / 'ds'))
    model_dir = str(tmp_path / 'model')
    result = run_train(*small_run_flags(data, model_dir, 1), '--resnet_size=18',
                       '--dtype=bf16', *extra, env=env)
    return result, model_dir


def kernel_error(env):
    """precision.cpu_kernel_error('bf16') in a process started with `env` (oneDNN reads
    ONEDNN_MAX_CPU_ISA once, when TensorFlow starts): the reason, or '' when the kernel runs."""
    child = ('import tensorflow.compat.v1 as tf; tf.disable_v2_behavior()\n'
             'from mlimages.model import precision\n'
             'print(repr(precision.cpu_kernel_error("bf16") or ""))')
    out = subprocess.run([sys.executable, '-c', child], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return eval(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_bf16_on_a_cpu_without_bf16_convolutions_stops_at_once_naming_the_fix(tmp_path):
    reason = kernel_error(NO_BF16_CPU)
    result, model_dir = train(tmp_path, NO_BF16_CPU)
    if not reason:  # this oneDNN falls back to a bf16 path that runs: training is right
        assert result.returncode == 0, result.stderr[-3000:]
        assert os.path.exists(os.path.join(model_dir, 'model.ckpt-1.index'))
        return
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith('train.py: error: --dtype=bf16: this CPU has no bfloat16 '
                           'convolution'), last
    assert reason in last
    assert '--dtype=fp32' in last and 'TF_ENABLE_ONEDNN_OPTS=0' in last
    assert not os.path.exists(model_dir)  # nothing half-written


@pytest.mark.slow
def test_the_named_fix_trains_in_bf16_on_that_cpu(tmp_path):
    env = dict(NO_BF16_CPU, TF_ENABLE_ONEDNN_OPTS='0')
    result, model_dir = train(tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(os.path.join(model_dir, 'model.ckpt-1.index'))
