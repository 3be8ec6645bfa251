"""NVIDIA's GPU environment settings that TensorFlow 2.15.1 still reads, and what a GPU's
start costs when the TensorFlow build has no machine code for it.

The settings of NVIDIA's TF1 ConvNets (DeepLearningExamples, ConvNets/runtime/runner.py)
were each checked against TensorFlow 2.15.1's libraries (the variable name in
libtensorflow_framework / libtensorflow_cc) and its sources. Kept, set by devices.choose
before TensorFlow starts its GPU runtime, for a process that may use a GPU (not when
CUDA_VISIBLE_DEVICES hides every GPU); a variable already in the environment is left as it
is, so the user's own value is the off switch of each:

  TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1  training batch norm in cuDNN's persistent
      spatial mode (cuda_dnn.cc; TF's default 0); faster for NHWC fp16. cuDNN notes its
      integer reduction can overflow to NaN/Inf on inputs of a very large range: the
      finite-loss check then stops the step. Off: =0.
  TF_AUTOTUNE_THRESHOLD=2  a convolution's autotuned algorithm is kept only once two
      autotune runs agree on it (kernels/gpu_utils.h AutotuneMap; TF's default 1: the
      first pick), so one noisy timing does not fix a slow algorithm for the run; up to
      20 autotuned steps a shape instead of 10. Off: =1.
  TF_SYNC_ON_FINISH=0  session.run returns without waiting for every GPU stream to
      drain (direct_session.cc, graph_mgr.cc; TF's default 1); fetched values are copied
      to the host either way. Off: =1.
  CUDA_CACHE_MAXSIZE=4294967296  the driver's JIT cache may hold 4 GiB (the CUDA
      programming guide's maximum; its default, 1 GiB, can be too small for TensorFlow's
      PTX compiled for Ampere and Hopper, see below). Off: any smaller size, or
      CUDA_CACHE_DISABLE=1.
  TF_GPU_THREAD_MODE=gpu_private, TF_GPU_THREAD_COUNT=2  (gpu_device.cc) two private
      kernel-launch threads a GPU: train.py's --tf_gpu_thread_mode=auto (devices.py).
      Off: --tf_gpu_thread_mode=off, or the variables.

Left out: TF_ENABLE_WINOGRAD_NONFUSED=1 (cuda_dnn.cc: already TensorFlow's default since
cuDNN 5.1), TF_ADJUST_HUE_FUSED, TF_ADJUST_SATURATION_FUSED and TF_DISABLE_NVTX_RANGES (no
TensorFlow 2.15.1 library reads them), CUDA_CACHE_DISABLE=0 (the driver's default).

TensorFlow 2.15.1's wheel carries machine code for sm_50 .. sm_75 and PTX for
compute_80 (tf.sysconfig.get_build_info()); a GPU of a newer compute capability (A100 8.0,
H100 9.0) has the driver compile that PTX when the runtime starts -- minutes, paid again
at every start unless the compiled code fits the JIT cache (CUDA_CACHE_MAXSIZE) in a
directory that outlives the process (CUDA_CACHE_PATH: a per-node volume in the container,
docs/kubernetes). compute_capability_line says so in the log.
"""

VISIBLE_ENV = 'CUDA_VISIBLE_DEVICES'
CACHE_SIZE_ENV = 'CUDA_CACHE_MAXSIZE'
CACHE_PATH_ENV = 'CUDA_CACHE_PATH'
CACHE_BYTES = 4 * 1024 ** 3
SETTINGS = {
    'TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT': '1',
    'TF_AUTOTUNE_THRESHOLD': '2',
    'TF_SYNC_ON_FINISH': '0',
    CACHE_SIZE_ENV: str(CACHE_BYTES),
}
DEFAULT_CACHE_PATH = '~/.nv/ComputeCache'


def may_use_gpu(environ):
    """False when CUDA_VISIBLE_DEVICES hides every GPU (empty, or a list starting with an
    invalid index such as -1)."""
    visible = environ.get(VISIBLE_ENV)
    if visible is None:
        return True
    first = visible.split(',')[0].strip()
    return bool(first) and not first.startswith('-')


def defaults(environ, settings=None):
    """name -> value of `settings` (SETTINGS) that environ does not set yet; {} when the
    process can see no GPU."""
    if not may_use_gpu(environ):
        return {}
    settings = SETTINGS if settings is None else settings
    return {name: value for name, value in settings.items() if name not in environ}


def _capability(name):
    """'sm_75' / 'compute_80' -> (7, 5) / (8, 0)."""
    digits = name.split('_')[-1]
    return int(digits[:-1]), int(digits[-1])


def compute_capability_line(built, devices, environ):
    """One log line when a GPU of `devices` ((major, minor) each) has no machine code among
    the build's `built` capabilities (['sm_50', ..., 'compute_80']), else None."""
    machine = {_capability(name) for name in built if name.startswith('sm_')}
    ptx = sorted(_capability(name) for name in built if name.startswith('compute_'))
    missing = sorted({tuple(d) for d in devices} - machine)
    if not missing:
        return None
    usable = [p for p in ptx if p <= missing[0]]
    how = ('the driver JIT-compiles TensorFlow\'s compute_%d%d PTX for it at every start '
           '(minutes), unless the compiled code fits the CUDA compile cache: %s=%s in %s=%s'
           % (usable[-1] + (CACHE_SIZE_ENV, environ.get(CACHE_SIZE_ENV, 'the driver\'s '
                                                       'default'),
                            CACHE_PATH_ENV, environ.get(CACHE_PATH_ENV, DEFAULT_CACHE_PATH)))
           if usable else 'TensorFlow has no kernels for it')
    return ('GPU compute capability %s, this TensorFlow build has machine code for %s: %s'
            % (', '.join('%d.%d' % d for d in missing),
               ', '.join('%d.%d' % c for c in sorted(machine)), how))


def device_capabilities():
    """(major, minor) of each GPU this process sees (starts the runtime: after choose)."""
    import tensorflow.compat.v1 as tf
    return [tf.config.experimental.get_device_details(gpu).get('compute_capability', (0, 0))
            for gpu in tf.config.list_physical_devices('GPU')]


def build_capabilities():
    """The CUDA compute capabilities TensorFlow was built for (['sm_50', ..., 'compute_80'])."""
    import tensorflow.compat.v1 as tf
    return list(tf.sysconfig.get_build_info().get('cuda_compute_capabilities', []))
