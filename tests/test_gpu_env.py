"""config/gpu_env.py: NVIDIA's GPU environment settings a process that may use a GPU gets
(the user's values win, none without a visible GPU) and the start-up line of a GPU the
TensorFlow build has no machine code for."""
import pytest

from mlimages.config import gpu_env

# TensorFlow 2.15.1's wheel (tf.sysconfig.get_build_info()).
BUILT = ['sm_50', 'sm_60', 'sm_70', 'sm_75', 'compute_80']


@pytest.mark.parametrize('visible,may', [
    (None, True), ('0', True), ('3,4', True), ('GPU-8932f937', True),
    ('', False), ('-1', False), (' -1,0', False),
])
def test_may_use_gpu(visible, may):
    environ = {} if visible is None else {'CUDA_VISIBLE_DEVICES': visible}
    assert gpu_env.may_use_gpu(environ) is may


def test_defaults_leave_the_users_values_and_hidden_gpus_alone():
    assert gpu_env.defaults({}) == gpu_env.SETTINGS
    assert gpu_env.defaults({'TF_SYNC_ON_FINISH': '1', 'CUDA_CACHE_MAXSIZE': '1'}) == {
        'TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT': '1', 'TF_AUTOTUNE_THRESHOLD': '2'}
    assert gpu_env.defaults({'CUDA_VISIBLE_DEVICES': ''}) == {}


def test_only_settings_tensorflow_still_reads():
    """The dead or default-valued ones of NVIDIA's list stay out (the module docstring)."""
    assert not set(gpu_env.SETTINGS) & {
        'TF_ENABLE_WINOGRAD_NONFUSED', 'TF_ADJUST_HUE_FUSED', 'TF_ADJUST_SATURATION_FUSED',
        'TF_DISABLE_NVTX_RANGES', 'CUDA_CACHE_DISABLE'}
    assert int(gpu_env.SETTINGS['CUDA_CACHE_MAXSIZE']) == 4 * 1024 ** 3


@pytest.mark.parametrize('devices', [[(7, 5)], [(7, 0), (7, 5)], []])
def test_no_line_when_the_build_has_machine_code(devices):
    assert gpu_env.compute_capability_line(BUILT, devices, {}) is None


@pytest.mark.parametrize('capability', [(8, 0), (8, 6), (9, 0)])
def test_ampere_and_hopper_start_by_compiling_ptx(capability):
    line = gpu_env.compute_capability_line(
        BUILT, [capability, capability], {'CUDA_CACHE_MAXSIZE': '4294967296',
                                          'CUDA_CACHE_PATH': '/var/cache/cuda'})
    assert line.startswith('GPU compute capability %d.%d, this TensorFlow build has machine '
                           'code for 5.0, 6.0, 7.0, 7.5: ' % capability)
    assert 'compute_80 PTX' in line and 'every start' in line
    assert 'CUDA_CACHE_MAXSIZE=4294967296 in CUDA_CACHE_PATH=/var/cache/cuda' in line
    assert '\n' not in line


def test_a_gpu_older_than_every_kernel():
    line = gpu_env.compute_capability_line(BUILT, [(3, 5)], {})
    assert line.endswith('TensorFlow has no kernels for it')


def test_the_installed_build_is_the_one_described():
    assert gpu_env.build_capabilities() == BUILT
