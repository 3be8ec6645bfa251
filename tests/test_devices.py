"""devices.py: the GPUs a process sees for --visiable_gpu/--num_gpus, the thread plan of
--tf_gpu_thread_mode, and the session options every session gets."""
import pytest

import devices


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
    assert environ == made == {'CUDA_VISIBLE_DEVICES': '2,3',
                               'TF_FORCE_GPU_ALLOW_GROWTH': 'true'}
    assert (inter_op, private) == (0, 0)


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
