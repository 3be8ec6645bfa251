"""--dtype: what the model computes in; the variables always stay float32.

fp32: everything float32.
fp16: TensorFlow's automatic mixed precision (a graph rewrite of the training step to
      float16 where it is safe) with dynamic loss scaling on the optimizer. The rewrite
      runs on a GPU; on a CPU the graph stays float32 unless MLIMAGES_FP16_ON_CPU=1 is in
      the environment (TensorFlow's float16 emulation of the rewritten graph: slow, for
      trying an fp16 run's graph -- its loss scaling, its all-reduces -- without a GPU).
bf16: the model is built in bfloat16 (the input cast, the variables read through a cast);
      bfloat16 has float32's range, so no loss scaling. Logits come back as float32 for
      the loss. On a CPU, TensorFlow's oneDNN kernels have bfloat16 convolutions only with
      AVX-512 or AMX; TensorFlow's own kernels (TF_ENABLE_ONEDNN_OPTS=0) have them
      everywhere. Inference (predict, extract_features, --mode=eval) in bf16 needs
      bfloat16 instructions (config.cpu.has_bf16: AVX512_BF16 or AMX) or a GPU: elsewhere bf16 is
      emulated (measured on an AVX2 EPYC: TensorFlow's bf16 1.04 x fp32's speed, features'
      cosine 0.99999), and bf16_inference_error says so in one line.
"""
import contextlib
import os
import re

import numpy as np

import tensorflow.compat.v1 as tf

from mlimages.config import cpu

FP16_ON_CPU_ENV = 'MLIMAGES_FP16_ON_CPU'


def fp16_on_cpu(environ=os.environ):
    """Whether --dtype=fp16 rewrites the graph on a CPU too (see the module docstring)."""
    return environ.get(FP16_ON_CPU_ENV) == '1'


def bf16_inference_error(dtype, gpu_visible, flag='--dtype', machine=None):
    """None when inference in `dtype` runs natively here (fp32; bf16 on a visible GPU or
    a CPU with bfloat16 instructions), else the one-line reason and its fix. machine: a
    config.cpu.Cpu, this one's by default."""
    machine = machine or cpu.this_cpu()
    if dtype != 'bf16' or gpu_visible or cpu.has_bf16(machine):
        return None
    return ('%s=bf16: this CPU (%s) has no bfloat16 instructions (AVX512_BF16 or AMX): '
            'bf16 would be emulated, no faster than fp32 and less precise; run with %s=fp32'
            % (flag, machine.model or 'model unknown', flag))


def _float32_variables(getter, name, shape=None, dtype=None, *args, **kwargs):
    """Custom getter: a variable asked for in a 16-bit type is stored as float32 and read
    through a cast, so checkpoints and optimizer slots stay float32."""
    storage = tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype
    variable = getter(name, shape, storage, *args, **kwargs)
    return tf.cast(variable, dtype) if storage != dtype else variable


@contextlib.contextmanager
def model_scope(dtype):
    """Build the model inside this; for bf16 its variables are float32 read as bf16."""
    if dtype != 'bf16':
        yield
        return
    with tf.variable_scope(tf.get_variable_scope(), custom_getter=_float32_variables,
                           auxiliary_name_scope=False):
        yield


def model_input(images, dtype):
    """The network input in the dtype the model computes in."""
    return tf.cast(images, tf.bfloat16) if dtype == 'bf16' else images


def float32(tensor):
    return tf.cast(tensor, tf.float32) if tensor.dtype != tf.float32 else tensor


def wrap_optimizer(optimizer, dtype):
    """fp16: mixed-precision graph rewrite plus dynamic loss scaling (a step whose
    gradients overflow is skipped and the scale lowered)."""
    if dtype == 'fp16':
        return tf.mixed_precision.enable_mixed_precision_graph_rewrite(optimizer, 'dynamic')
    return optimizer


def cpu_kernel_error(dtype, config=None):
    """None when this machine's CPU kernels run a convolution and its gradients in `dtype`,
    else TensorFlow's reason. To be asked before training: the Estimator's
    session takes a kernel's AbortedError for a preempted peer and restarts, forever."""
    if dtype != 'bf16':
        return None
    with tf.Graph().as_default():
        with tf.device('/cpu:0'):
            # fed, not constant: constant folding would run the graph on other kernels
            images = tf.placeholder(tf.bfloat16, [1, 16, 16, 3])
            kernel = tf.placeholder(tf.bfloat16, [7, 7, 3, 8])
            out = tf.nn.conv2d(images, kernel, strides=2, padding='SAME')
            grads = tf.gradients(tf.reduce_sum(out), [images, kernel])
        try:
            with tf.Session(config=config) as session:
                session.run(grads, {images: np.ones([1, 16, 16, 3]),
                                    kernel: np.ones([7, 7, 3, 8])})
        except tf.errors.OpError as e:
            return _kernel_message(e.message)
    return None


def _kernel_message(message):
    """The kernel's own words from a graph execution error: the line after "Node: ...",
    without oneDNN's "Operation received an exception: Status: N, message:" wrapper and
    source location."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    after_node = [lines[i + 1] for i in range(len(lines) - 1) if lines[i].startswith('Node: ')]
    text = (after_node or lines or [''])[0]
    return re.sub(r'^.*message: (.*?)(, in file .*)?$', r'\1', text)
