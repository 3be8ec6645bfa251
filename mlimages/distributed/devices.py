"""The GPUs a process uses and the options every session of the process shares.

GPUs are chosen once, before anything starts TensorFlow's GPU runtime (absl's after-init
callbacks included: choose_at_start), through the environment: --visiable_gpu=k with --num_gpus=N makes host GPUs k .. k+N-1 visible (of
those CUDA_VISIBLE_DEVICES already lists, when it is set), renumbered GPU:0 .. GPU:N-1
inside the process; -1 leaves every GPU visible. A session's own visible_device_list cannot
do this: the first session or strategy of a process starts the runtime with every GPU
mapped, and a later session asking for GPU:0 -> CUDA k then fails ("device GPU:0 is being
mapped to multiple devices"). With the environment, every session, MirroredStrategy,
MultiWorkerMirroredStrategy (which takes every GPU its process sees as a replica) and
export sees the same N devices.

Every session gets allow_soft_placement (summaries, string constants and the like have
CPU kernels only; a replica's device scope would otherwise fail to place them) and memory
growth (TF_FORCE_GPU_ALLOW_GROWTH also covers sessions this program does not configure,
such as the SavedModel export's).

--tf_gpu_thread_mode=gpu_private (TF official's GPU thread-pool setting): every GPU gets
`per_gpu` private threads to launch its kernels (TF_GPU_THREAD_MODE, TF_GPU_THREAD_COUNT,
read when the runtime starts); of the C cores the rest are shared out:
  inter_op threads       = C - per_gpu x N
  input private threads  = C - per_gpu x N - 2 x N   (2 per GPU kept for monitoring)
auto (train.py's default) sets the same two variables for a process that may use a GPU,
unless the environment has them, and leaves the pools to TensorFlow; off sets neither.

In every mode a process that may use a GPU also gets NVIDIA's other environment settings
that TensorFlow 2.15 still reads (config/gpu_env.py: each, its source and its off switch);
a variable the environment already has keeps its value.
"""
import os

from mlimages.config import gpu_env

GPU_ENV = 'CUDA_VISIBLE_DEVICES'
GROWTH_ENV = 'TF_FORCE_GPU_ALLOW_GROWTH'
THREAD_MODE_ENV = 'TF_GPU_THREAD_MODE'
THREAD_COUNT_ENV = 'TF_GPU_THREAD_COUNT'
GPU_THREAD_MODES = ('off', 'gpu_private', 'gpu_shared', 'auto')
PER_GPU_THREADS = 2


def visible_gpus(visiable_gpu, num_gpus, environ):
    """The CUDA_VISIBLE_DEVICES value for --visiable_gpu/--num_gpus, None to leave it.

    An already empty CUDA_VISIBLE_DEVICES (no GPU) stays empty. When fewer GPUs exist than
    asked for, fewer are listed: the device check of the run then names the shortfall.
    """
    if visiable_gpu < 0:
        return None
    count = max(1, num_gpus)
    current = environ.get(GPU_ENV)
    if current is None:
        return ','.join(str(visiable_gpu + i) for i in range(count))
    listed = [d.strip() for d in current.split(',') if d.strip()]
    if not listed:
        return None
    return ','.join(listed[visiable_gpu:visiable_gpu + count])


def gpu_thread_plan(mode, num_gpus, cores, per_gpu=PER_GPU_THREADS):
    """(environment, inter_op threads, input pipeline private threads) of a thread mode;
    ({}, 0, 0) -- TensorFlow's defaults -- when mode is 'off'; for 'auto' gpu_private's
    environment with TensorFlow's pools."""
    if mode == 'off':
        return {}, 0, 0
    if mode == 'auto':
        return {THREAD_MODE_ENV: 'gpu_private', THREAD_COUNT_ENV: str(per_gpu)}, 0, 0
    gpus = max(1, num_gpus)
    environ = {THREAD_MODE_ENV: mode, THREAD_COUNT_ENV: str(per_gpu)}
    inter_op = max(1, cores - per_gpu * gpus)
    private = max(1, cores - per_gpu * gpus - 2 * gpus)
    return environ, inter_op, private


# The choice made for this process's own environment: (arguments, result).
_chosen = None


def choose(visiable_gpu, num_gpus, tf_gpu_thread_mode='off', environ=None, cores=None):
    """Sets this process's GPU environment; call before TensorFlow starts its runtime
    (before the first session, strategy or device query). Returns (the settings made, as
    name -> value for the log, inter_op threads, input private threads).

    For the process's own environment (environ None) the choice is made once: a second call
    with the same arguments returns the first one's result (CUDA_VISIBLE_DEVICES already
    lists only the chosen GPUs, and counting in it again would pick others), one with
    other arguments raises ValueError."""
    global _chosen
    key = (visiable_gpu, num_gpus, tf_gpu_thread_mode, cores)
    if environ is None and _chosen is not None:
        if _chosen[0] != key:
            raise ValueError('devices.choose: this process already chose its GPUs for %r, '
                             'not %r' % (_chosen[0], key))
        return _chosen[1]
    if tf_gpu_thread_mode not in GPU_THREAD_MODES:
        raise ValueError('tf_gpu_thread_mode must be one of %s, got %r'
                         % (', '.join(GPU_THREAD_MODES), tf_gpu_thread_mode))
    own = environ is None
    environ = os.environ if environ is None else environ
    made = {}
    gpus = visible_gpus(visiable_gpu, num_gpus, environ)
    if gpus is not None:
        made[GPU_ENV] = gpus
    made[GROWTH_ENV] = 'true'
    thread_env, inter_op, private = gpu_thread_plan(
        tf_gpu_thread_mode, num_gpus, cores or usable_cores())
    settings = dict(gpu_env.SETTINGS)
    if tf_gpu_thread_mode == 'auto':  # a default: the environment's own values win
        settings.update(thread_env)
    else:  # asked for by the flag
        made.update(thread_env)
    made.update(gpu_env.defaults(dict(environ, **made), settings))
    environ.update(made)
    if own:
        _chosen = (key, (made, inter_op, private))
    return made, inter_op, private


def choose_at_start(visiable_gpu, num_gpus, tf_gpu_thread_mode):
    """choose() for an entry point right after its flags are parsed, before absl's app.run:
    app.run calls the after-init callbacks that modules register on import, and plain
    `import tensorflow` registers one that lists the physical GPUs -- which starts the CUDA
    runtime with every GPU CUDA_VISIBLE_DEVICES then allows. A bad thread mode is left for
    the entry point's own flag check to report."""
    if tf_gpu_thread_mode in GPU_THREAD_MODES:
        choose(visiable_gpu, num_gpus, tf_gpu_thread_mode)


def usable_cores():
    """Cores this process may run on (honours CPU pinning)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def gpu_count():
    """The GPUs this process sees (after choose)."""
    import tensorflow.compat.v1 as tf
    return len(tf.config.list_physical_devices('GPU'))


def session_config(inter_op_threads=0, intra_op_threads=0, xla=False, device_filters=()):
    """The ConfigProto of every session of the process (0 threads = TensorFlow's choice).
    TensorFlow is imported here, not with the module: choose() runs before it may be."""
    import tensorflow.compat.v1 as tf
    config = tf.ConfigProto(allow_soft_placement=True,
                            inter_op_parallelism_threads=inter_op_threads,
                            intra_op_parallelism_threads=intra_op_threads)
    config.gpu_options.allow_growth = True
    config.device_filters.extend(device_filters)
    if xla:
        config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
    return config


def describe_decode_threads(num_preprocess_threads, cores=None):
    """--num_preprocess_threads for the log: N pinned, or 0 = tf.data's AUTOTUNE, which
    sizes the parallel decodes to the host (at most its cores)."""
    if num_preprocess_threads > 0:
        return '%d parallel decodes (--num_preprocess_threads)' % num_preprocess_threads
    return ('parallel decodes AUTOTUNE (tf.data sizes them to the host, up to its %d cores; '
            '--num_preprocess_threads=N pins them)' % (cores or usable_cores()))
