"""Which GPUs TensorFlow's CUDA runtime starts with, seen from the driver on a machine
without one: a stand-in libcuda.so.1, built here from C, first on LD_LIBRARY_PATH.

Every driver function TensorFlow can resolve returns CUDA_ERROR_NO_DEVICE (100); cuInit,
which the runtime calls once when it starts, first appends the CUDA_VISIBLE_DEVICES it
sees (or <unset>) and the process's TF_CONFIG to the file $CUDA_STANDIN_LOG, and writes
its whole environment to $CUDA_STANDIN_ENV when that is set. The process
then goes on without GPUs, as on a CPU box. The symbols are the cu* names in TensorFlow's
own libraries, so a later TensorFlow that resolves other ones still finds them all.
"""
import json
import os
import re
import shutil
import subprocess

import pytest
import tensorflow.compat.v1 as tf

from mlimages.config import gpu_env
from helpers import CLASSES, ENV, run_program, small_run_flags, train_model, write_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_DEVICE = 100
SPECIAL = ('cuInit', 'cuGetErrorName', 'cuGetErrorString')
C_HEAD = r'''#include <stdio.h>
#include <stdlib.h>
extern char **environ;
int cuInit(unsigned int flags) {
  const char *path = getenv("CUDA_STANDIN_LOG");
  const char *seen = getenv("CUDA_VISIBLE_DEVICES");
  const char *task = getenv("TF_CONFIG");
  const char *env_path = getenv("CUDA_STANDIN_ENV");
  FILE *f = path ? fopen(path, "a") : NULL;
  if (f) { fprintf(f, "%s\t%s\n", seen ? seen : "<unset>", task ? task : ""); fclose(f); }
  f = env_path ? fopen(env_path, "w") : NULL;
  if (f) { for (char **v = environ; *v; v++) fprintf(f, "%s\n", *v); fclose(f); }
  return 100;
}
int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_NO_DEVICE"; return 0; }
int cuGetErrorString(int e, const char **s) { *s = "no CUDA-capable device"; return 0; }
'''


def driver_symbols():
    """The cu* names in TensorFlow's shared libraries (what its stream executor dlsyms)."""
    lib = tf.sysconfig.get_lib()
    names = set()
    for name in os.listdir(lib):
        if name.startswith('libtensorflow') and '.so' in name:
            with open(os.path.join(lib, name), 'rb') as f:
                names.update(m.decode() for m in re.findall(
                    rb'(?<![A-Za-z0-9_])cu[A-Z][A-Za-z0-9_]{2,60}(?![A-Za-z0-9_])', f.read()))
    return sorted(names - set(SPECIAL))


@pytest.fixture(scope='module')
def standin(module_dir):
    """The directory holding the built libcuda.so.1."""
    compiler = shutil.which('cc') or shutil.which('gcc')
    if compiler is None:
        pytest.skip('no C compiler (cc/gcc) to build the stand-in libcuda.so.1')
    directory = module_dir('standin')
    symbols = driver_symbols()
    assert 'cuDeviceGetCount' in symbols and 'cuCtxCreate_v2' in symbols
    source = directory / 'standin.c'
    source.write_text(C_HEAD + ''.join('int %s(void) { return %d; }\n' % (name, NO_DEVICE)
                                       for name in symbols))
    subprocess.run([compiler, '-shared', '-fPIC', '-o', str(directory / 'libcuda.so.1'),
                    str(source)], check=True, capture_output=True)
    return str(directory)


def standin_env(standin, log, visible):
    """The environment of a process on the stand-in; visible None: CUDA_VISIBLE_DEVICES
    unset (conftest hides every GPU from the tests themselves)."""
    env = {k: v for k, v in ENV.items() if k not in ('CUDA_VISIBLE_DEVICES', 'TF_CONFIG')}
    env.update(CUDA_STANDIN_LOG=str(log), LD_LIBRARY_PATH=standin + (
        ':' + env['LD_LIBRARY_PATH'] if env.get('LD_LIBRARY_PATH') else ''))
    if visible is not None:
        env['CUDA_VISIBLE_DEVICES'] = visible
    return env


def seen(log):
    """[(CUDA_VISIBLE_DEVICES, TF_CONFIG task name or '')] of every cuInit call."""
    calls = []
    for line in log.read_text().splitlines():
        visible, config = line.split('\t')
        task = json.loads(config)['task'] if config else None
        calls.append((visible, '%s:%d' % (task['type'], task['index']) if task else ''))
    return calls


def run(program, args, env):
    return run_program(program, *args, env=env)


@pytest.fixture(scope='module')
def trained(standin, module_dir):
    """(data, model_dir): one training step of train.py --visiable_gpu=3 on the stand-in
    (it trains on the CPU, as on a box whose GPUs are missing); cuInit saw GPU 3 only."""
    root = module_dir('trained')
    log = root / 'log'
    data, model_dir, _ = train_model(root, 1, '--visiable_gpu=3',
                                     env=standin_env(standin, log, None))
    assert seen(log) == [('3', '')]
    return data, model_dir


@pytest.mark.parametrize('mode', ['train', 'eval', 'predict', 'export'])
def test_train_py_starts_cuda_with_the_chosen_gpus(standin, trained, tmp_path, mode):
    """--visiable_gpu=3 --num_gpus=2 in every mode: the runtime starts with host GPUs 3 and
    4 only (absl's after-init callbacks, which list the GPUs, run after the choice). The
    stand-in has no GPU, so training stops with --num_gpus' usage error, after cuInit."""
    data, model_dir = trained
    log = tmp_path / 'cuinit.log'
    args = small_run_flags(data, model_dir, 2) + [
        '--visiable_gpu=3', '--num_gpus=2', '--mode=' + mode, '--resnet_size=18',
        '--image_size=32', '--test_iter=1']
    args += {'predict': ['--piclist=' + os.path.join(os.path.dirname(data), 'images')],
             'export': ['--export_dir=' + str(tmp_path / 'export')]}.get(mode, [])
    result = run('train.py', args, standin_env(standin, log, None))
    if mode == 'train':
        assert result.returncode == 2 and '--num_gpus=2 but 0 GPUs are visible' in \
            result.stderr, result.stderr[-2000:]
    else:  # inference and evaluation run on the CPU
        assert result.returncode == 0, result.stderr[-2000:]
    assert seen(log) == [('3,4', '')], result.stderr[-2000:]


# What a GPU run of train.py's defaults has in force when CUDA starts (config/gpu_env.py).
GPU_SETTINGS = dict(gpu_env.SETTINGS, TF_GPU_THREAD_MODE='gpu_private', TF_GPU_THREAD_COUNT='2')


def test_a_gpu_run_starts_cuda_with_nvidias_settings_the_users_own_win(standin, tmp_path):
    """The environment cuInit sees: NVIDIA's settings that TensorFlow 2.15 still reads,
    set after flag parsing and before the runtime starts; a value of the user's (here
    TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=0, that setting's off switch) stays."""
    log, env_log = tmp_path / 'cuinit.log', tmp_path / 'cuinit.env'
    env = {k: v for k, v in standin_env(standin, log, None).items() if k not in GPU_SETTINGS}
    env.update(CUDA_STANDIN_ENV=str(env_log), TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT='0')
    run('train.py', ['--mode=eval', '--data_dir=' + str(tmp_path),
                     '--model_dir=' + str(tmp_path / 'm')], env)
    assert seen(log) == [('0', '')]
    at_start = dict(line.split('=', 1) for line in env_log.read_text().splitlines()
                    if '=' in line)
    want = dict(GPU_SETTINGS, TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT='0')
    assert {name: at_start.get(name) for name in want} == want


@pytest.mark.parametrize('visible', [None, '0,1,2,3'])
def test_visiable_gpu_minus_one_leaves_the_environment(standin, tmp_path, visible):
    log = tmp_path / 'cuinit.log'
    run('train.py', ['--visiable_gpu=-1', '--mode=eval', '--data_dir=' + str(tmp_path),
                     '--model_dir=' + str(tmp_path / 'm')], standin_env(standin, log, visible))
    assert seen(log) == [(visible or '<unset>', '')]


def test_visiable_gpu_counts_in_the_given_list(standin, tmp_path):
    log = tmp_path / 'cuinit.log'
    run('train.py', ['--visiable_gpu=1', '--num_gpus=2', '--mode=eval',
                     '--data_dir=' + str(tmp_path), '--model_dir=' + str(tmp_path / 'm')],
        standin_env(standin, log, '4,5,6,7'))
    assert seen(log) == [('5,6', '')]


@pytest.mark.parametrize('tool', ['predict.py', 'extract_features.py'])
def test_inference_tools_start_cuda_with_their_gpu(standin, trained, tmp_path, tool):
    data, model_dir = trained
    log = tmp_path / 'cuinit.log'
    args = ['--visiable_gpu=2', '--checkpoint=' + model_dir, '--image_size=32',
            os.path.join(os.path.dirname(data), 'images')]
    if tool == 'extract_features.py':
        args += ['--output', str(tmp_path / 'features.npy')]
    result = run(os.path.join('tools', tool), args, standin_env(standin, log, None))
    assert result.returncode == 0, result.stderr[-2000:]
    assert seen(log) == [('2', '')]


@pytest.mark.slow
def test_launcher_gives_each_task_its_own_gpus(standin, tmp_path):
    """A real ps cluster (chief, worker, ps) for 2 steps: the chief's runtime starts with
    GPU 0, the worker's with GPU 1, the ps task's with none."""
    data = write_dataset(str(tmp_path / 'ds'), train_lists=2, per_list=4)
    log = tmp_path / 'cuinit.log'
    model_dir = str(tmp_path / 'model')
    flags = ['--data_dir=' + data, '--model_dir=' + model_dir,
             '--log_dir=' + os.path.join(model_dir, 'log'), '--class_num=%d' % CLASSES,
             '--resnet_size=18', '--image_size=32', '--batch_size=2', '--max_iter=2',
             '--log_interval=1', '--shuffle_buffer=8', '--data_format=NHWC',
             '--num_preprocess_threads=1']
    result = run('tools/launch_local_cluster.py',
                 ['--workers', '2', '--ps', '1', '--timeout', '500', '--'] + flags,
                 standin_env(standin, log, None))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert sorted(seen(log)) == [('', 'ps:0'), ('0', 'chief:0'), ('1', 'worker:0')]


@pytest.mark.parametrize('local', [0, 1])
def test_a_slurm_task_under_gres_starts_cuda_with_its_own_gpu(standin, trained, tmp_path,
                                                               local):
    """srun -n2 --gres=gpu:2 on one node: Slurm sets CUDA_VISIBLE_DEVICES=0,1 for both
    tasks (the node's GPUs, not the task's); with --num_gpus=1 each task starts CUDA with
    its own GPU, SLURM_LOCALID's, before --visiable_gpu (0) counts in it. A missing
    --hierarchy file stops the task with a usage error after the cluster is described and
    before any server starts (no peer is needed)."""
    data, model_dir = trained
    log = tmp_path / 'cuinit.log'
    env = dict(standin_env(standin, log, '0,1'), SLURM_JOB_ID='7', SLURM_PROCID=str(local),
               SLURM_LOCALID=str(local), SLURM_STEP_NUM_TASKS='2',
               SLURM_STEP_NODELIST='127.0.0.1', SLURM_STEP_TASKS_PER_NODE='2')
    missing = str(tmp_path / 'no-hierarchy.txt')
    result = run('train.py', small_run_flags(data, str(tmp_path / 'model'), 1) + [
        '--num_gpus=1', '--hierarchy=' + missing], env)
    assert result.returncode == 2 and missing in result.stderr.strip().splitlines()[-1], \
        result.stderr[-2000:]
    assert seen(log) == [(str(local), '')], result.stderr[-2000:]
    assert 'task %d of 2, CUDA_VISIBLE_DEVICES=%d)' % (local, local) in result.stderr
