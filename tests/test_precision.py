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

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cluster_job
from mlimages.config import choices
from mlimages.config import cpu
from mlimages.model import precision
from helpers import (ENV, LOGICAL_CPUS, run_train, scalar_tags, small_run_flags, train_model,
                     write_dataset)

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


def cpuinfo(tmp_path, flags):
    path = tmp_path / 'cpuinfo'
    path.write_text('processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: %s\n\n'
                    'processor\t: 1\n' % flags)
    return str(path)


@pytest.mark.parametrize('flags,native', [('fpu avx2 avx512f', False),
                                          ('fpu avx512f avx512_bf16', True),
                                          ('fpu amx_bf16 amx_tile', True),
                                          ('fpu avx512_bf16x', False)])
def test_bf16_inference_needs_bfloat16_instructions_or_a_gpu(tmp_path, flags, native):
    machine = cpu.this_cpu(cpuinfo(tmp_path, flags))
    assert bool(cpu.has_bf16(machine)) == native
    assert machine.model == 'Some CPU 9000'
    error = precision.bf16_inference_error('bf16', False, machine=machine)
    assert (error is None) == native
    if error:
        assert error == ('--dtype=bf16: this CPU (Some CPU 9000) has no bfloat16 instructions '
                         '(AVX512_BF16 or AMX): bf16 would be emulated, no faster than fp32 '
                         'and less precise; run with --dtype=fp32')
    assert precision.bf16_inference_error('bf16', True, machine=machine) is None
    assert precision.bf16_inference_error('fp32', False, machine=machine) is None


def test_without_cpuinfo_no_cpu_has_bf16(tmp_path):
    missing = cpu.this_cpu(str(tmp_path / 'none'))
    assert not cpu.has_bf16(missing) and missing.model == ''
    assert 'this CPU (model unknown)' in precision.bf16_inference_error('bf16', False,
                                                                         machine=missing)


@pytest.mark.skipif(bool(cpu.has_bf16(cpu.this_cpu())), reason='this CPU has bfloat16 instructions: '
                    'bf16 evaluation runs instead of the error')
def test_eval_in_bf16_on_this_cpu_is_one_line(dataset, tmp_path):
    """train.py --mode=eval --dtype=bf16 stops before any graph, naming the CPU and the fix."""
    model_dir = str(tmp_path / 'model')
    os.makedirs(model_dir)
    result = run_train('--mode=eval', '--dtype=bf16', '--data_dir=' + dataset,
                       '--model_dir=' + model_dir, '--class_num=5', '--resnet_size=18',
                       '--image_size=32', '--data_format=NHWC')
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last == 'train.py: error: ' + precision.bf16_inference_error('bf16', False), last


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


# ----------------------------------------------------------- every dtype x strategy x XLA
# fp16's rewrite runs on the CPU here (precision.fp16_on_cpu: TensorFlow's float16
# emulation), so the loss-scaled, rewritten graph is the one that steps; on a CPU XLA
# compiles only with --tf_xla_cpu_global_jit.
FP16_ON_CPU = dict(ENV, **{precision.FP16_ON_CPU_ENV: '1'})
XLA_ON_CPU = {'TF_XLA_FLAGS': '--tf_xla_cpu_global_jit'}
INITIAL_LOSS_SCALE = 2.0 ** 15
# Steps the tiny runs skip at most while the loss scale drops (measured: 3-4 on one device,
# 7-8 on two replicas or collective workers, 9 by two ps workers); each skip halves it.
MAX_SKIPPED = 10

# train.py's training on two logical CPUs (MirroredStrategy, --num_gpus=2):
# argv = model_dir, data_dir, max_iter, then more train.py flags.
MIRRORED_CHILD = LOGICAL_CPUS + '''
import flags as flags_lib
import train
from mlimages.run import estimator as estimator_lib, training
model_dir, data_dir, max_iter = sys.argv[1], sys.argv[2], int(sys.argv[3])
F = flags_lib.FLAGS
F(['train.py', '--class_num=5', '--resnet_size=18', '--image_size=32', '--batch_size=2',
   '--lr=0.01', '--log_interval=1', '--snapshot=100', '--max_iter=%d' % max_iter,
   '--data_format=NHWC', '--visiable_gpu=-1', '--num_gpus=2', '--shuffle_buffer=8',
   '--data_dir=' + data_dir, '--model_dir=' + model_dir] + sys.argv[4:])
plan = distribute.plan('none', 2, 1, 0, 2, 2, {})
run = flags_lib.settings(F)
run = estimator_lib.for_this_process(run)  # --data_format=NHWC, augment_on cpu
estimator = estimator_lib.make_estimator(run, estimator_lib.derived_values(run, plan), plan)
estimator._session_config.device_count['CPU'] = 2
files, _ = training.training_files(run.data, run.model.class_num, plan)
estimator.train(estimator_lib.training_input_fn(run.data, run.model, files), max_steps=max_iter)
'''


def train_cell(root, data, strategy, max_iter, flags, env):
    """Trains a cell's run to global step max_iter; returns its model_dir."""
    model_dir = os.path.join(root, 'model')
    if strategy == 'one':
        result = run_train(*small_run_flags(data, model_dir, max_iter), *flags, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
    elif strategy == 'mirrored':
        result = subprocess.run([sys.executable, '-c', MIRRORED_CHILD, model_dir, data,
                                 str(max_iter)] + list(flags), env=env, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
    else:  # never held at a gate: the tasks run to max_iter
        job = cluster_job.Job(data, model_dir, root, max_iter, ps=int(strategy == 'ps'),
                              hold=10 ** 6, restart=False, extra=flags, env=env)
        try:
            for task in job.tasks.values():
                assert task.join(900), job.text()
        finally:
            job.kill_all()
        assert all([s for _, s in t.exits] == [0] for t in job.tasks.values()), job.text()
    return model_dir


def stepped(model_dir, dtype, max_iter, late=0):
    """Asserts the run reached global step max_iter (up to `late` more: the steps other
    asynchronous workers had begun) with a finite loss at every logged step; returns the
    steps fp16 skipped as overflowing (0 for the others)."""
    reader = tf.train.load_checkpoint(model_dir)
    assert max_iter <= reader.get_tensor('global_step') <= max_iter + late
    losses = [v for _, v in scalar_tags(model_dir)['cross_entropy']]
    assert losses and all(np.isfinite(losses)), losses
    names = reader.get_variable_to_shape_map()
    assert ('current_loss_scale' in names) == (dtype == 'fp16')
    if dtype != 'fp16':
        return 0
    skipped = int(round(np.log2(INITIAL_LOSS_SCALE / reader.get_tensor('current_loss_scale'))))
    assert 0 <= skipped <= MAX_SKIPPED, skipped
    return skipped


def matrix_cells():
    """Every --dtype x strategy x --xla that TensorFlow runs on a CPU; the suite runs none
    (fp16 on one device, the rewrite emulated, steps in
    test_a_checkpoint_of_another_dtype_continues_in_fp16). Not here: XLA in a cluster job
    (collective, ps) -- TensorFlow's CPU JIT (--tf_xla_cpu_global_jit) fails the first step
    of a task's session with "Multiple CPU devices [/job:chief/replica:0/task:0/device:
    CPU:0,/job:localhost/replica:0/task:0/device:CPU:0]" in every dtype; on GPUs the JIT
    clusters GPU ops and leaves the CPU's alone (tools/gpu_smoke.sh's to confirm)."""
    return [pytest.param(d, s, x, marks=pytest.mark.matrix,
                         id='%s-%s%s' % (d, s, '-xla' if x else ''))
            for d in choices.DTYPES for s in ('one', 'mirrored', 'collective', 'ps')
            for x in (False, True) if not (x and s in ('collective', 'ps'))]


@pytest.mark.parametrize('dtype,strategy,xla', matrix_cells())
def test_every_dtype_strategy_and_xla_steps_on_cpu(dataset, tmp_path, dtype, strategy, xla):
    """Each cell trains to global step 3 from scratch, the loss finite; fp16 skips at most
    MAX_SKIPPED steps on its way (its printed row: the steps skipped)."""
    if dtype == 'bf16' and precision.cpu_kernel_error(dtype):
        pytest.skip('this CPU has no bfloat16 convolution in oneDNN (needs AVX-512 or AMX)')
    env = dict(FP16_ON_CPU, **(XLA_ON_CPU if xla else {}))
    flags = ['--dtype=' + dtype] + (['--xla'] if xla else [])
    model_dir = train_cell(str(tmp_path), dataset, strategy, 3, flags, env)
    print('| %s | %s | %s | skipped %d |' % (dtype, strategy, 'on' if xla else 'off',
                                             stepped(model_dir, dtype, 3,
                                                     late=int(strategy == 'ps'))))


def loss_scale_line(stderr):
    return [l for l in stderr.splitlines() if 'holds no loss-scale state' in l]


def test_a_checkpoint_of_another_dtype_continues_in_fp16(dataset, tmp_path):
    """fp32 to step 1, then --dtype=fp16 (the rewrite emulated) continues to step 2: the
    weights restored, the loss-scale state started afresh with one line saying so, and the
    rewritten, loss-scaled step advances the global step."""
    data, model_dir, _ = train_model(tmp_path, 1, data=dataset)
    before = tf.train.load_checkpoint(model_dir).get_tensor('logits/dense/kernel')
    result = run_train(*small_run_flags(data, model_dir, 2), '--dtype=fp16', env=FP16_ON_CPU)
    assert result.returncode == 0, result.stderr[-3000:]
    line, = loss_scale_line(result.stderr)
    assert line.endswith('model.ckpt-1 holds no loss-scale state (it was written with '
                         'another --dtype than fp16): the loss scaling of --dtype=fp16 '
                         'starts afresh, the rest continues'), line
    assert stepped(model_dir, 'fp16', 2) >= 1  # emulated fp16 overflows at 2^15 here
    after = tf.train.load_checkpoint(os.path.join(model_dir, 'model.ckpt-1'))
    np.testing.assert_array_equal(after.get_tensor('logits/dense/kernel'), before)


@pytest.mark.matrix
@pytest.mark.parametrize('dtypes', [('fp16', 'fp32', 'fp16'), ('bf16', 'fp16', 'bf16'),
                                    ('fp32', 'bf16', 'fp32')], ids='-'.join)
def test_a_model_directory_changes_dtype_and_back(dataset, tmp_path, dtypes):
    """Each run continues the last one's checkpoint one more step in its own --dtype; only
    a switch into fp16 from a checkpoint without the loss-scale state says so."""
    model_dir = str(tmp_path / 'model')
    for step, dtype in enumerate(dtypes, 1):
        result = run_train(*small_run_flags(dataset, model_dir, step), '--dtype=' + dtype,
                           env=FP16_ON_CPU)
        assert result.returncode == 0, (dtype, result.stderr[-3000:])
        assert len(loss_scale_line(result.stderr)) == int(dtype == 'fp16' and step > 1)
        stepped(model_dir, dtype, step)
