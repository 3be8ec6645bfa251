"""The GPUs a process uses and the options every session of the process shares.

GPUs are chosen once, before anything starts TensorFlow's GPU runtime (absl's after-init
callbacks included: choose_at_start), through the environment: --visiable_gpu=k with
--num_gpus=N makes host GPUs k .. k+N-1 visible (of those CUDA_VISIBLE_DEVICES already
lists, when it is set), renumbered GPU:0 .. GPU:N-1 inside the process; -1 leaves every
GPU visible. A session's own visible_device_list cannot do this: the first session or
strategy of a process starts the runtime with every GPU mapped, and a later session asking
for GPU:0 -> CUDA k then fails ("device GPU:0 is being mapped to multiple devices"). With
the environment, every session, MirroredStrategy, MultiWorkerMirroredStrategy (which takes
every GPU its process sees as a replica) and export sees the same N devices.

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

The process's CPU share (cpu_share), C above: several processes on one node (one a GPU,
a local cluster, a Slurm step) would each size TensorFlow's pools and tf.data's AUTOTUNE to
the whole box. Of the A CPUs it may run on (sched_getaffinity), shared by the S tasks
pinned to the same set, and the cgroup's CPU quota Q (cpu.max, v2; cpu.cfs_quota_us /
cpu.cfs_period_us, v1), shared by the L tasks of the node:
  share C = max(1, floor(min(A / S, Q / L)))
S and L: MLIMAGES_CPU_SET_TASKS and MLIMAGES_LOCAL_TASKS (tools/launch_local_cluster.py
sets them, having pinned each task to CPUs of its own where there are enough); else under Slurm L =
the step's tasks on this node (SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID) and S = L, or 1
when srun binds each task to its CPUs (SLURM_CPU_BIND_TYPE other than none); else 1.
"""
import collections
import os
import re

from mlimages.config import gpu_env
from mlimages.config.choices import GPU_THREAD_MODES

GPU_ENV = 'CUDA_VISIBLE_DEVICES'
GROWTH_ENV = 'TF_FORCE_GPU_ALLOW_GROWTH'
THREAD_MODE_ENV = 'TF_GPU_THREAD_MODE'
THREAD_COUNT_ENV = 'TF_GPU_THREAD_COUNT'
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
        tf_gpu_thread_mode, num_gpus, cores or cpu_share().cores)
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
            '--num_preprocess_threads=N pins them)' % (cores or cpu_share().cores))


LOCAL_TASKS_ENV = 'MLIMAGES_LOCAL_TASKS'
CPU_SET_TASKS_ENV = 'MLIMAGES_CPU_SET_TASKS'
CGROUP_ROOT = '/sys/fs/cgroup'

# cores: the share C; allowed: A; quota: Q (None without); local_tasks: L; set_tasks: S;
# source: where L and S come from, for the log.
Share = collections.namedtuple('Share', 'cores allowed quota local_tasks set_tasks source')


def cgroup_quota(root=CGROUP_ROOT):
    """The CPU quota of the cgroup at `root` in cores (a float), None without one."""
    def read(name):
        try:
            with open(os.path.join(root, name)) as f:
                return f.read().split()
        except (OSError, ValueError):
            return None
    v2 = read('cpu.max')  # 'max 100000' or '<quota> <period>'
    pair = v2 if v2 else [(read(os.path.join('cpu', n)) or ['-1'])[0]
                          for n in ('cpu.cfs_quota_us', 'cpu.cfs_period_us')]
    try:
        quota, period = int(pair[0]), int(pair[1])
    except (ValueError, IndexError):
        return None  # 'max', or no file
    return quota / period if quota > 0 and period > 0 else None


def slurm_node_tasks(environ):
    """This Slurm step's tasks on this node (SLURM_STEP_TASKS_PER_NODE, e.g. '4(x2),3', at
    SLURM_NODEID), 0 outside a step."""
    per_node = []
    for part in environ.get('SLURM_STEP_TASKS_PER_NODE', '').split(','):
        match = re.match(r'^(\d+)(?:\(x(\d+)\))?$', part.strip())
        if match:
            per_node += [int(match.group(1))] * int(match.group(2) or 1)
    node = int(environ.get('SLURM_NODEID', '0') or 0)
    return per_node[node] if 'SLURM_PROCID' in environ and node < len(per_node) else 0


def cpu_share(environ=None, cgroup_root=CGROUP_ROOT, allowed=None):
    """This process's Share of the node's CPUs (see the module docstring)."""
    environ = os.environ if environ is None else environ
    allowed = allowed or usable_cores()
    if environ.get(LOCAL_TASKS_ENV):
        local = int(environ[LOCAL_TASKS_ENV])
        same_set = int(environ.get(CPU_SET_TASKS_ENV) or local)
        source = 'the launcher'
    elif slurm_node_tasks(environ) > 1:
        local = slurm_node_tasks(environ)
        bound = environ.get('SLURM_CPU_BIND_TYPE', 'none').split(':')[0] not in ('', 'none')
        same_set, source = (1 if bound else local), 'Slurm'
    else:
        local, same_set, source = 1, 1, None
    quota = cgroup_quota(cgroup_root)
    cores = min(allowed / max(1, same_set), quota / max(1, local) if quota else allowed)
    return Share(max(1, int(cores)), allowed, quota, local, same_set, source)


def divided(share):
    """A share below the CPUs the process sees (TensorFlow sizes its pools to those)."""
    return share.cores < share.allowed


def share_threads(share, inter_op, intra_op, private):
    """The inter-op, intra-op and tf.data private pool threads (0 = not given): those not
    given sized to a divided share (also AUTOTUNE's bound: tf.data's parallelism stays
    within its pool); else as given (TensorFlow sizes them to the CPUs it sees)."""
    if not divided(share):
        return inter_op, intra_op, private
    return inter_op or share.cores, intra_op or share.cores, private or share.cores


def describe_share(share, inter_op, intra_op, private):
    """The log's one line on the CPU share and the thread counts in force (0: TF's)."""
    tasks = '%d local task%s' % (share.local_tasks, '' if share.local_tasks == 1 else 's')
    if share.source:
        tasks += ' (%d on its CPUs; from %s)' % (share.set_tasks, share.source)
    return ('CPU share: %d core%s of the %d this process may run on%s, %s; threads: inter-op '
            '%s, intra-op %s, tf.data pool %s' % (
                share.cores, '' if share.cores == 1 else 's', share.allowed,
                ', cgroup quota %.3g cores' % share.quota if share.quota else '', tasks,
                inter_op or 'default', intra_op or 'default', private or 'shared'))
