"""devices.py: the GPUs a process sees for --visiable_gpu/--num_gpus, the thread plan of
--tf_gpu_thread_mode, the session options every session gets, and the process's CPU share
(affinity, cgroup quota, tasks of the node) with the threads sized to it."""
import dataclasses
import json
import os

import pytest
import tensorflow.compat.v1 as tf

from mlimages.config import gpu_env
from mlimages.distributed import devices
from mlimages.distributed import distribute
from mlimages.model import precision


@pytest.mark.parametrize('visiable_gpu,num_gpus,environ,want', [
    (0, 1, {}, '0'),
    (3, 1, {}, '3'),
    (0, 8, {}, '0,1,2,3,4,5,6,7'),
    (2, 2, {}, '2,3'),
    (-1, 4, {}, None),                                  # all GPUs stay visible
    (1, 2, {'CUDA_VISIBLE_DEVICES': '4,5,6,7'}, '5,6'),  # indices into the given list
    (0, 1, {'CUDA_VISIBLE_DEVICES': ''}, None),          # no GPU stays no GPU
    (3, 2, {'CUDA_VISIBLE_DEVICES': '0,1'}, ''),         # fewer than asked: the check says so
    (0, 0, {}, '0'),
])
def test_visible_gpus(visiable_gpu, num_gpus, environ, want):
    assert devices.visible_gpus(visiable_gpu, num_gpus, environ) == want


def test_choose_sets_the_environment_once_for_every_later_session():
    environ = {}
    made, inter_op, private = devices.choose(2, 2, 'off', environ, cores=16)
    assert environ == made == dict(gpu_env.SETTINGS, CUDA_VISIBLE_DEVICES='2,3',
                                   TF_FORCE_GPU_ALLOW_GROWTH='true')
    assert (inter_op, private) == (0, 0)


def test_auto_threads_and_nvidia_settings_for_a_gpu_run_the_users_values_win():
    environ = {'TF_GPU_THREAD_COUNT': '4', 'TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT': '0'}
    made, inter_op, private = devices.choose(1, 1, 'auto', environ, cores=16)
    assert environ == {'CUDA_VISIBLE_DEVICES': '1', 'TF_FORCE_GPU_ALLOW_GROWTH': 'true',
                       'TF_GPU_THREAD_MODE': 'gpu_private', 'TF_GPU_THREAD_COUNT': '4',
                       'TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT': '0',
                       'TF_AUTOTUNE_THRESHOLD': '2', 'TF_SYNC_ON_FINISH': '0',
                       'CUDA_CACHE_MAXSIZE': '4294967296'}
    assert 'TF_GPU_THREAD_COUNT' not in made  # the log lists what the program set
    assert (inter_op, private) == (0, 0)      # TensorFlow's own pools


@pytest.mark.parametrize('visible', ['', '-1'])
def test_no_gpu_settings_when_every_gpu_is_hidden(visible):
    environ = {'CUDA_VISIBLE_DEVICES': visible}
    made, _, _ = devices.choose(0, 1, 'auto', environ, cores=16)
    assert set(made) <= {'CUDA_VISIBLE_DEVICES', 'TF_FORCE_GPU_ALLOW_GROWTH'}
    assert environ['CUDA_VISIBLE_DEVICES'] == visible


def test_gpu_private_asked_for_overrides_the_environment():
    environ = {'TF_GPU_THREAD_COUNT': '4'}
    devices.choose(0, 1, 'gpu_private', environ, cores=16)
    assert environ['TF_GPU_THREAD_COUNT'] == '2'


def test_gpu_private_thread_plan_as_tf_official():
    environ = {}
    made, inter_op, private = devices.choose(0, 8, 'gpu_private', environ, cores=96)
    assert environ['TF_GPU_THREAD_MODE'] == 'gpu_private'
    assert environ['TF_GPU_THREAD_COUNT'] == '2'
    assert inter_op == 96 - 2 * 8 and private == 96 - 2 * 8 - 2 * 8
    # Never below one thread on a small box.
    assert devices.gpu_thread_plan('gpu_private', 8, 4)[1:] == (1, 1)


def test_every_session_soft_places_and_grows():
    config = devices.session_config(inter_op_threads=3, intra_op_threads=5,
                                    device_filters=['/job:ps', '/job:worker/task:1'])
    assert config.allow_soft_placement and config.gpu_options.allow_growth
    assert (config.inter_op_parallelism_threads, config.intra_op_parallelism_threads) == (3, 5)
    assert list(config.device_filters) == ['/job:ps', '/job:worker/task:1']
    assert not config.gpu_options.visible_device_list  # chosen by the environment instead
    assert config.graph_options.optimizer_options.global_jit_level == 0
    assert devices.session_config(xla=True).graph_options.optimizer_options \
        .global_jit_level == 1


# What the program builds for GPU command lines, read on this CPU-only machine.

def cluster_env(monkeypatch, task_type='worker', index=0):
    monkeypatch.setenv('TF_CONFIG', json.dumps({
        'cluster': {'chief': ['127.0.0.1:1'], 'worker': ['127.0.0.1:2']},
        'task': {'type': task_type, 'index': index}}))


@pytest.mark.parametrize('num_gpus,host_gpus,want', [
    (2, 8, ['GPU:0', 'GPU:1']),   # exactly --num_gpus of the 8 the host reports
    (1, 8, ['GPU:0']),
    (4, 0, ['CPU:0']),            # no GPU: the worker's CPU
])
def test_collective_worker_replicates_over_exactly_num_gpus(monkeypatch, num_gpus,
                                                            host_gpus, want):
    cluster_env(monkeypatch)
    resolver = distribute.collective_resolver(num_gpus if host_gpus else 0)
    assert resolver.task_type == 'worker' and resolver.task_id == 0
    assert resolver.num_accelerators() == ({'GPU': num_gpus} if host_gpus else {})
    with tf.Graph().as_default():
        strategy = distribute.train_distribute('collective', num_gpus, gpu_count=host_gpus)
        got = [d.rsplit('device:', 1)[1] for d in strategy.extended.worker_devices]
        assert got == want
        assert all(d.startswith('/job:worker/replica:0/task:0/') for d in
                   strategy.extended.worker_devices)
        # Two workers: the global batch is both workers' replicas.
        assert strategy.num_replicas_in_sync == 2 * len(want)


from helpers import laid_out, model_parts, settings
from mlimages.run import estimator as estimator_lib


@pytest.mark.parametrize('given', [
    {}, {'xla': True}, {'dtype': 'fp16'}, {'inter_op_threads': 6, 'intra_op_threads': 4},
    {'num_gpus': 4, 'visiable_gpu': 2},
])
def test_every_session_of_training_and_evaluation_soft_places(given, tmp_path):
    run = laid_out(settings(model_dir=str(tmp_path), **given))
    estimator = estimator_lib.make_estimator(run, estimator_lib.derived_values(run))
    config = estimator.config.session_config
    assert config.allow_soft_placement and config.gpu_options.allow_growth
    assert not config.gpu_options.visible_device_list  # devices.choose decides, once
    assert config.inter_op_parallelism_threads == given.get('inter_op_threads', 0)
    assert config.intra_op_parallelism_threads == given.get('intra_op_threads', 0)
    assert (config.graph_options.optimizer_options.global_jit_level == 1) == \
        bool(given.get('xla'))
    # fp16: evaluation sessions compute in mixed precision too, as training's do.
    assert (config.graph_options.rewrite_options.auto_mixed_precision == 1) == \
        (given.get('dtype') == 'fp16')


@pytest.mark.parametrize('dtype,environ,emulated', [
    ('fp16', {'MLIMAGES_FP16_ON_CPU': '1'}, True), ('fp16', {}, False),
    ('fp16', {'MLIMAGES_FP16_ON_CPU': '0'}, False), ('fp32', {'MLIMAGES_FP16_ON_CPU': '1'}, False),
])
def test_fp16_rewrite_runs_on_a_cpu_only_when_asked(dtype, environ, emulated):
    """precision.fp16_on_cpu reads the environment; session_config takes its answer."""
    config = estimator_lib.session_config(settings().devices, dtype, (),
                                          precision.fp16_on_cpu(environ))
    assert (config.graph_options.rewrite_options.auto_mixed_precision_cpu == 1) == emulated


def session_calls(path):
    """The argument text of every tf.Session(...) call in a source file."""
    source = open(path).read()
    calls, start = [], source.find('tf.Session(')
    while start >= 0:
        depth, end = 0, start + len('tf.Session')
        for end in range(end, len(source)):
            depth += {'(': 1, ')': -1}.get(source[end], 0)
            if depth == 0:
                break
        calls.append(source[start:end + 1])
        start = source.find('tf.Session(', end)
    return calls


def test_every_session_of_the_product_has_a_config():
    """A session without one places no op softly and takes every GPU's memory at once
    (the benchmark's photo windows opened two such sessions)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bare = []
    for folder in ('mlimages', 'tools', '.'):
        for dirpath, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = [] if folder == '.' else dirs
            bare += ['%s: %s' % (os.path.relpath(os.path.join(dirpath, name), root), call)
                     for name in files if name.endswith('.py')
                     for call in session_calls(os.path.join(dirpath, name))
                     if 'config=' not in call]
    assert bare == []


def test_augmentation_is_kept_out_of_xla_clusters(tmp_path):
    from mlimages.run import model_fn
    with tf.Graph().as_default() as graph:
        images = tf.zeros([2, 32, 32, 3], tf.uint8)
        labels = tf.zeros([2, 5])
        opts = settings(model_dir=str(tmp_path), class_num=5, resnet_size=18, image_size=32)
        derived = dataclasses.replace(estimator_lib.derived_values(laid_out(opts)),
                                      images_per_step=2)
        model_fn.make_model_fn(model_parts(opts), derived)({'image': images}, labels,
                                                       tf.estimator.ModeKeys.TRAIN)
        kept_out = {op.type for op in graph.get_operations()
                    if '_XlaCompile' in op.node_def.attr and not op.get_attr('_XlaCompile')}
        # The colour jitter and the batch's partition of the device augmentation.
        assert {'RGBToHSV', 'HSVToRGB', 'DynamicPartition', 'DynamicStitch'} <= kept_out, kept_out
        convs = [op for op in graph.get_operations() if op.type == 'Conv2D']
        assert convs and not any('_XlaCompile' in op.node_def.attr for op in convs)


def test_collective_workers_may_have_several_gpus_ps_workers_one():
    environ = {'TF_CONFIG': json.dumps({
        'cluster': {'chief': ['127.0.0.1:1'], 'worker': ['127.0.0.1:2']},
        'task': {'type': 'worker', 'index': 0}})}
    plan = distribute.plan('collective', 8, 1, 0, 64, gpu_count=8, environ=environ)
    assert (plan.replicas, plan.images_per_step, plan.images_per_global_step) == (8, 512, 1024)
    assert 'MultiWorkerMirroredStrategy' in distribute.describe_devices(plan, 64)
    environ_ps = {'TF_CONFIG': json.dumps({
        'cluster': {'chief': ['127.0.0.1:1'], 'ps': ['127.0.0.1:3']},
        'task': {'type': 'chief', 'index': 0}})}
    with pytest.raises(distribute.ConfigError, match='--num_gpus=2 with --distribution=ps'):
        distribute.plan('ps', 2, 1, 0, 64, gpu_count=8, environ=environ_ps)


def map_parallelism(opts, files):
    """num_parallel_calls of the training input_fn's parallel maps (-1 = AUTOTUNE)."""
    with tf.Graph().as_default() as graph:
        run = laid_out(opts)
        estimator_lib.training_input_fn(run.data, run.model, files,
                                        estimator_lib.crop_seed(run.training))()
        values = []
        for op in graph.get_operations():
            if op.type.startswith('ParallelMapDataset'):
                calls = op.inputs[-1] if op.type == 'ParallelMapDataset' else \
                    [t for t in op.inputs if 'num_parallel_calls' in t.name][0]
                values.append(int(tf.get_static_value(calls)))
        return values


def test_decode_pool_defaults_to_autotune_and_a_flag_pins_it(shards):
    """--num_preprocess_threads: default 0 = AUTOTUNE (tf.data sizes the pool to the host)
    in every parallel map of the training pipeline; N pins it; the log line says which."""
    given = dict(class_num=7, image_size=32, batch_size=2)
    assert settings(**given).data.num_preprocess_threads == 0
    assert set(map_parallelism(settings(**given), shards)) == {-1}
    assert set(map_parallelism(settings(num_preprocess_threads=3, **given), shards)) >= {3}
    assert devices.describe_decode_threads(0, cores=64) == (
        'parallel decodes AUTOTUNE (tf.data sizes them to the host, up to its 64 cores; '
        '--num_preprocess_threads=N pins them)')
    assert devices.describe_decode_threads(6) == \
        '6 parallel decodes (--num_preprocess_threads)'


# ------------------------------------------------------------------- the CPU share

def write_cgroup(root, files):
    for name, text in files.items():
        path = os.path.join(str(root), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(text)
    return str(root)


@pytest.mark.parametrize('files,want', [
    ({'cpu.max': 'max 100000\n'}, None),
    ({'cpu.max': '250000 100000\n'}, 2.5),                     # cgroup v2
    ({'cpu/cpu.cfs_quota_us': '400000\n', 'cpu/cpu.cfs_period_us': '100000\n'}, 4.0),  # v1
    ({'cpu/cpu.cfs_quota_us': '-1\n', 'cpu/cpu.cfs_period_us': '100000\n'}, None),
    ({}, None),
])
def test_cgroup_quota(tmp_path, files, want):
    assert devices.cgroup_quota(write_cgroup(tmp_path, files)) == want


@pytest.mark.parametrize('environ,quota,want', [
    # no cluster: every CPU the process may run on
    ({}, None, (16, 1, 1, None)),
    # the launcher pinned 4 tasks to 4 CPUs each of 16: this one sees its 4
    ({'MLIMAGES_LOCAL_TASKS': '4', 'MLIMAGES_CPU_SET_TASKS': '1'}, None, (16, 4, 1,
                                                                         'the launcher')),
    # not pinned (no affinity on the OS): 4 tasks share the 16
    ({'MLIMAGES_LOCAL_TASKS': '4'}, None, (4, 4, 4, 'the launcher')),
    # a quota of 6 cores for the node's 4 tasks: 1.5 each, so 1
    ({'MLIMAGES_LOCAL_TASKS': '4', 'MLIMAGES_CPU_SET_TASKS': '1'}, 6.0, (1, 4, 1,
                                                                        'the launcher')),
    # Slurm, 8 tasks on this node (node 1 of '4,8'), not bound: 2 each
    ({'SLURM_PROCID': '5', 'SLURM_STEP_TASKS_PER_NODE': '4,8', 'SLURM_NODEID': '1'}, None,
     (2, 8, 8, 'Slurm')),
    # ... bound by srun to its own CPUs: what it sees
    ({'SLURM_PROCID': '5', 'SLURM_STEP_TASKS_PER_NODE': '8(x2)', 'SLURM_NODEID': '1',
      'SLURM_CPU_BIND_TYPE': 'mask_cpu:'}, None, (16, 8, 1, 'Slurm')),
])
def test_cpu_share(tmp_path, monkeypatch, environ, quota, want):
    root = write_cgroup(tmp_path, {'cpu.max': '%d 100000' % (quota * 100000)}
                        if quota else {})
    share = devices.cpu_share(environ, root, allowed=16)
    assert (share.cores, share.local_tasks, share.set_tasks, share.source) == want
    threads = devices.share_threads(share, 0, 3, 0)  # --intra_op_threads=3 given
    assert threads == ((share.cores, 3, share.cores) if share.cores < 16 else (0, 3, 0))


def test_the_share_line_and_the_launchers_partition():
    share = devices.Share(2, 8, 6.0, 3, 1, 'the launcher')
    assert devices.describe_share(share, 2, 2, 2) == (
        'CPU share: 2 cores of the 8 this process may run on, cgroup quota 6 cores, 3 local '
        'tasks (1 on its CPUs; from the launcher); threads: inter-op 2, intra-op 2, tf.data '
        'pool 2')
    assert devices.describe_share(devices.Share(4, 4, None, 1, 1, None), 0, 0, 0) == (
        'CPU share: 4 cores of the 4 this process may run on, 1 local task; threads: '
        'inter-op default, intra-op default, tf.data pool shared')
