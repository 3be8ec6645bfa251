"""Where this process's cluster comes from: TF_CONFIG, Slurm, or the host flags.

Why this module exists: distribute.py runs a TF_CONFIG cluster. Users also launch one
process per host by hand (`--worker_num=N --worker_id=k --worker_hosts=h0:p,h1:p,...`,
TF1's convention, plus `--ps_hosts` / `--ps_id` for asynchronous training) or through
Slurm's `srun`. Both are turned here into the TF_CONFIG JSON tools/launch_local_cluster.py
writes and put into the environment before anything reads it, so that one code path
(distribute.plan, the Estimator's RunConfig) runs every cluster:

    cluster = {chief: [worker_hosts[0]], worker: worker_hosts[1:], ps: ps_hosts}
    task    = chief:0 for --worker_id=0, worker:(k - 1) for --worker_id=k, ps:k for --ps_id=k

Precedence (one rule): TF_CONFIG, then Slurm (a step of more than one task), then the host
flags; a second source that also describes a cluster is a one-line error. Under Slurm the
tasks come from TensorFlow's SlurmClusterResolver (SLURM_PROCID, SLURM_STEP_NUM_TASKS,
SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE; task rank r on a node gets port
--slurm_port_base + its rank on that node); rank 0 is the chief, rank r worker r - 1
(collective). Its GPUs: the block SLURM_LOCALID x --num_gpus of the node's GPUs (of the
CUDA_VISIBLE_DEVICES Slurm set, when it lists the GPUs of every task on the node).

Without any of them, --worker_num > 1 means N independent runs on disjoint shares of the
shards; each must have a --model_dir of its own (`claim_model_dir`).
"""
import json
import os

from mlimages.config.cluster_hosts import hosts
from mlimages.errors import UsageError

MARKER = 'independent_worker.txt'


def tf_config(cluster, task_type, index):
    """The TF_CONFIG text (JSON) of task `task_type`:`index` of `cluster`, as train.py
    and tools/launch_local_cluster.py's tasks read it."""
    return json.dumps({'cluster': cluster, 'task': {'type': task_type, 'index': index}})


def from_host_flags(worker_hosts, ps_hosts, worker_id, ps_id):
    """The TF_CONFIG of --worker_hosts/--ps_hosts for --worker_id (or --ps_id >= 0)."""
    workers, ps = hosts(worker_hosts), hosts(ps_hosts)
    cluster = {'chief': workers[:1]}
    if workers[1:]:
        cluster['worker'] = workers[1:]
    if ps:
        cluster['ps'] = ps
    if ps_id >= 0:
        return tf_config(cluster, 'ps', ps_id)
    return tf_config(cluster, 'chief', 0) if worker_id == 0 else tf_config(
        cluster, 'worker', worker_id - 1)


def slurm_tasks(environ):
    """The number of tasks of this Slurm step (0 outside a step)."""
    try:
        return int(environ.get('SLURM_STEP_NUM_TASKS', '0')) if 'SLURM_PROCID' in environ \
            else 0
    except ValueError:
        raise UsageError('SLURM_STEP_NUM_TASKS=%r is not a number'
                         % environ['SLURM_STEP_NUM_TASKS'])


def from_slurm(environ, port_base):
    """The TF_CONFIG of this Slurm step (SlurmClusterResolver's hosts, ports and ranks;
    rank 0 the chief); raises UsageError."""
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm
    saved = dict(os.environ)
    os.environ.update(environ)  # the resolver reads os.environ
    try:
        per_node = max(slurm.expand_tasks_per_node(environ['SLURM_STEP_TASKS_PER_NODE']))
        # GPUs are chosen by slurm_gpus below; the resolver's GPU arithmetic only serves
        # to give each task of a node its own port.
        resolver = slurm.SlurmClusterResolver(
            jobs={'chief': 1, 'worker': slurm_tasks(environ) - 1}, port_base=port_base,
            gpus_per_node=per_node, gpus_per_task=1, auto_set_gpu=False)
        spec = resolver.cluster_spec().as_dict()
        task_type, index = resolver.get_task_info()
    except (KeyError, RuntimeError, ValueError) as e:
        raise UsageError('this Slurm step\'s environment does not describe its tasks '
                         '(%s): run train.py through srun' % (e,))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    cluster = {job: list(spec[job]) for job in ('chief', 'worker') if spec.get(job)}
    return tf_config(cluster, task_type, index)


def slurm_gpus(environ, num_gpus):
    """This Slurm task's CUDA_VISIBLE_DEVICES: its block SLURM_LOCALID x num_gpus of the
    node's GPUs (of CUDA_VISIBLE_DEVICES when Slurm lists every task's GPUs there); the
    value as is when it already lists just this task's (or no) GPUs."""
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm
    local = int(environ.get('SLURM_LOCALID', '0'))
    per_node = max(slurm.expand_tasks_per_node(environ['SLURM_STEP_TASKS_PER_NODE']))
    value = environ.get('CUDA_VISIBLE_DEVICES')
    if value is not None:
        gpus = [g.strip() for g in value.split(',') if g.strip()]
        if len(gpus) <= num_gpus:
            return value
        if len(gpus) < per_node * num_gpus:
            raise UsageError('Slurm gave this task the GPUs CUDA_VISIBLE_DEVICES=%s: fewer '
                             'than --num_gpus=%d for each of the %d tasks of the node (ask '
                             'srun for --gpus-per-task=%d)' % (value, num_gpus, per_node,
                                                              num_gpus))
    else:
        gpus = [str(i) for i in range(per_node * num_gpus)]
    return ','.join(gpus[local * num_gpus:(local + 1) * num_gpus])


def narrow_to_slurm_task(num_gpus, environ=None):
    """Under a Slurm step of several tasks (and no TF_CONFIG), this task's own GPU block
    (slurm_gpus) as its CUDA_VISIBLE_DEVICES -- called before --visiable_gpu narrows it
    (devices.choose): Slurm's --gres=gpu:N lists all N of the node's GPUs for every task,
    and GPU 0 of that list would be every task's. Returns the value set, else None; raises
    UsageError."""
    environ = os.environ if environ is None else environ
    if environ.get('TF_CONFIG', '').strip() or slurm_tasks(environ) <= 1:
        return None
    environ['CUDA_VISIBLE_DEVICES'] = slurm_gpus(environ, num_gpus)
    return environ['CUDA_VISIBLE_DEVICES']


def setup(cluster, num_gpus, environ=None):
    """Puts the TF_CONFIG of Slurm or of the host flags (cluster: the flags.Cluster group)
    into `environ` (os.environ), by the precedence rule, before anything reads it; under
    Slurm also this task's CUDA_VISIBLE_DEVICES (its block of --num_gpus). Returns (source,
    line for the log); raises UsageError."""
    environ = os.environ if environ is None else environ
    flagged = [name for name, given in (('--worker_hosts', cluster.worker_hosts),
                                        ('--ps_hosts', cluster.ps_hosts),
                                        ('--ps_id', cluster.ps_id >= 0)) if given]
    tasks = slurm_tasks(environ)
    if environ.get('TF_CONFIG', '').strip():
        if flagged:
            raise UsageError('TF_CONFIG is set and so is %s: the cluster comes from TF_CONFIG '
                             '(then Slurm, then the host flags); give one of them'
                             % '/'.join(flagged))
        if tasks > 1:
            try:
                config = json.loads(environ['TF_CONFIG'])
            except ValueError:
                config = {}  # distribute.py reports it
            count = sum(len(a) for a in (config.get('cluster') or {}).values())
            if count and count != tasks:
                raise UsageError('TF_CONFIG describes %d tasks but this Slurm step has %d '
                                 '(SLURM_STEP_NUM_TASKS): unset TF_CONFIG to let Slurm '
                                 'describe the cluster' % (count, tasks))
        return 'TF_CONFIG', 'cluster from TF_CONFIG'
    if tasks > 1:
        if flagged:
            raise UsageError('this is a Slurm step of %d tasks and %s is given: the cluster '
                             'comes from Slurm; leave the host flags out' % (tasks,
                                                                              '/'.join(flagged)))
        environ['CUDA_VISIBLE_DEVICES'] = slurm_gpus(environ, num_gpus)
        environ['TF_CONFIG'] = from_slurm(environ, cluster.slurm_port_base)
        return 'Slurm', 'cluster from Slurm (task %s of %d, CUDA_VISIBLE_DEVICES=%s): ' \
            'TF_CONFIG=%s' % (environ.get('SLURM_PROCID'), tasks,
                              environ['CUDA_VISIBLE_DEVICES'], environ['TF_CONFIG'])
    if cluster.worker_hosts:
        environ['TF_CONFIG'] = from_host_flags(cluster.worker_hosts, cluster.ps_hosts,
                                               cluster.worker_id, cluster.ps_id)
        return 'flags', 'cluster from --worker_hosts%s: TF_CONFIG=%s' % (
            '/--ps_hosts' if cluster.ps_hosts else '', environ['TF_CONFIG'])
    if cluster.worker_num > 1:
        return 'independent', (
            'independent run %d of %d on its share of the shards; no cluster (give '
            '--worker_hosts to train one model together)' % (cluster.worker_id, cluster.worker_num))
    return None, None


def claim_model_dir(model_dir, worker_id, worker_num, create=True):
    """An independent run's --model_dir is its own: the first run writes
    <model_dir>/independent_worker.txt ("worker k of N"), atomically (a link that fails
    when the file exists); a run of another worker (at the same time or later) is refused
    with a UsageError. create=False: only the check, writing nothing (at start, before
    the inputs are checked)."""
    import tensorflow.compat.v1 as tf
    mine = 'worker %d of %d\n' % (worker_id, worker_num)
    path = os.path.join(model_dir, MARKER)
    if not create:
        if not tf.io.gfile.exists(path):
            return
    elif '://' in model_dir:  # a remote file system: no atomic link, check then write
        if not tf.io.gfile.exists(path):
            tf.io.gfile.makedirs(model_dir)
            with tf.io.gfile.GFile(path, 'w') as f:
                f.write(mine)
    else:
        os.makedirs(model_dir, exist_ok=True)
        temporary = '%s.%d.tmp' % (path, os.getpid())
        with open(temporary, 'w') as f:
            f.write(mine)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            os.remove(temporary)
    with tf.io.gfile.GFile(path) as f:
        owner = f.read()
    if owner != mine:
        raise UsageError('--model_dir=%s belongs to independent run %s (%s), not to worker %d '
                         'of %d: give each independent worker its own --model_dir, or '
                         '--worker_hosts to train one model together'
                         % (model_dir, owner.strip(), path, worker_id, worker_num))
