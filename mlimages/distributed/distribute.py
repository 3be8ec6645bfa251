"""Scale-out: several devices in one process and several processes in a TF_CONFIG cluster.

Why this module exists: train.py trains on one device by default; everything that changes
when a run is one task of a TensorFlow cluster, or spans several GPUs, is decided here from
explicit arguments (only train.py reads the flags):

* TF_CONFIG parsing (`task_from_tf_config`): the cluster, this task's type and index
  (cluster_flags.py writes TF_CONFIG from Slurm or --worker_hosts when it is not set).
* Cluster roles: which training workers exist and which of them this task is (the chief
  counts as worker 0, `worker` i as i + 1 when a chief exists); file_db.data_share splits
  the shard files among them.
* Strategies (`train_distribute`): `--num_gpus N` -> MirroredStrategy over N devices of
  this process; `--distribution collective` -> MultiWorkerMirroredStrategy (synchronous
  all-reduce across the cluster's workers); `--distribution ps` -> no strategy object:
  the Estimator's own between-graph replication with the variables on the `ps` tasks
  (asynchronous), run through tf.estimator.train_and_evaluate.
* `plan`: all of the above for this process (a `Plan`: mode, role, worker id, images a
  step of this process and of the whole job, the name of its text log).
* Replica context helpers used by loss.py's counters (`all_reduce_max`, `from_first_replica`)
  so that the loss counters (loss.py) mean the same for a global batch whatever the number
  of replicas, and by the model for the reported cross_entropy (`all_reduce_mean`).

Batch size: `--batch_size` is per replica (per GPU, as in the original's launch scripts):
one synchronous step consumes batch_size x num_gpus images, or batch_size x num_gpus x
workers with collective (each worker replicates over exactly its --num_gpus GPUs; a
ps-mode worker trains on one device).
"""
import json
import os

import tensorflow.compat.v1 as tf

import file_db
from mlimages.errors import ConfigError

DISTRIBUTIONS = ('auto', 'none', 'ps', 'collective')
# Task types that train (and so read training data), in the order of their worker ids.
TRAINING_TASKS = ('chief', 'worker')
# The optional task that evaluates the chief's checkpoints as they appear (not a member of
# the cluster: it only reads model_dir).
EVALUATOR = 'evaluator'


class Task(object):
    """This process's place in a cluster: cluster {job: [addresses]}, type, index."""

    def __init__(self, cluster, task_type, index):
        self.cluster, self.type, self.index = cluster, task_type, index

    @property
    def name(self):
        return '%s:%d' % (self.type, self.index)

    @property
    def label(self):
        """The name for the log: TensorFlow's, and where its index is not the worker id
        (--worker_id, the chief being 0) that too: 'worker:0 (worker id 1)'."""
        return self.label_of(self.name)

    def label_of(self, name):
        """The label of the task `name` ('worker:0') of this task's cluster."""
        task_type, index = name.split(':')
        if task_type != 'worker' or not self.cluster.get('chief'):
            return name
        return '%s (worker id %d)' % (name, Task(self.cluster, task_type, int(index)).worker_id)

    @property
    def trains(self):
        return self.type in TRAINING_TASKS

    @property
    def worker_num(self):
        """Number of training workers: the chief (if any) and every `worker` task."""
        return sum(len(self.cluster.get(t, [])) for t in TRAINING_TASKS)

    @property
    def worker_id(self):
        """chief -> 0; worker i -> i + 1 with a chief, i without."""
        if self.type == 'chief':
            return 0
        return self.index + (1 if self.cluster.get('chief') else 0)


def task_from_tf_config(text):
    """Parses a TF_CONFIG value; None for an empty one. Raises ConfigError."""
    if not text or not text.strip():
        return None
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ConfigError('TF_CONFIG is not JSON (%s)' % e)
    cluster = config.get('cluster') or {}
    task = config.get('task') or {}
    task_type, index = task.get('type'), task.get('index', 0)
    if not cluster or not task_type:
        raise ConfigError('TF_CONFIG needs "cluster" and "task": {"type", "index"}, got %s'
                          % text.strip())
    if not isinstance(index, int) or index < 0:
        raise ConfigError('TF_CONFIG task index must be an integer >= 0, got %r' % (index,))
    if task_type != EVALUATOR and index >= len(cluster.get(task_type, [])):
        raise ConfigError('TF_CONFIG task %s:%d is not in the cluster %s'
                          % (task_type, index, json.dumps(cluster)))
    if len(cluster.get('chief', [])) > 1:
        raise ConfigError('TF_CONFIG cluster has %d chiefs, at most 1 is allowed'
                          % len(cluster['chief']))
    return Task(cluster, task_type, index)


def current_task(environ=None):
    """The Task of the TF_CONFIG environment variable, None without one."""
    return task_from_tf_config((os.environ if environ is None else environ).get('TF_CONFIG'))


def resolve_distribution(distribution, task, num_gpus):
    """--distribution with TF_CONFIG -> 'none', 'ps' or 'collective'; raises ConfigError.

    auto: 'ps' when the cluster has ps tasks, 'collective' for a cluster without,
    'none' without TF_CONFIG.
    """
    if distribution not in DISTRIBUTIONS:
        raise ConfigError('--distribution must be one of %s, got %r'
                          % (', '.join(DISTRIBUTIONS), distribution))
    if distribution == 'auto':
        if task is None:
            distribution = 'none'
        else:
            distribution = 'ps' if task.cluster.get('ps') else 'collective'
    if distribution == 'none':
        if task is not None and task.worker_num > 1:
            raise ConfigError('TF_CONFIG describes a cluster of %d workers but '
                              '--distribution=none: use ps or collective (or unset TF_CONFIG)'
                              % task.worker_num)
        return 'none'
    if task is None:
        raise ConfigError('--distribution=%s needs a cluster: TF_CONFIG, a Slurm step or '
                          '--worker_hosts (see docs/distributed.md)' % distribution)
    if distribution == 'ps' and not task.cluster.get('ps'):
        raise ConfigError('--distribution=ps needs ps tasks in TF_CONFIG\'s cluster')
    if distribution == 'ps' and not task.cluster.get('chief'):
        raise ConfigError('--distribution=ps needs a chief task in TF_CONFIG\'s cluster')
    if distribution == 'collective' and task.cluster.get('ps'):
        raise ConfigError('--distribution=collective: TF_CONFIG\'s cluster must not have ps '
                          'tasks')
    if distribution == 'collective' and task.type == 'ps':
        raise ConfigError('--distribution=collective has no ps tasks')
    if num_gpus != 1 and distribution == 'ps':
        # The Estimator's parameter-server training takes no strategy inside a worker.
        raise ConfigError('--num_gpus=%d with --distribution=ps is not implemented: a ps-mode '
                          'worker trains on one device (use --distribution=collective for '
                          'several GPUs a worker, or one worker a GPU)' % num_gpus)
    return distribution


def check_num_gpus(num_gpus, gpu_count):
    """--num_gpus must be >= 1 and not more than the GPUs visible; raises ConfigError."""
    if num_gpus < 1:
        raise ConfigError('--num_gpus must be >= 1, got %d' % num_gpus)
    if num_gpus > 1 and gpu_count < num_gpus:
        raise ConfigError('--num_gpus=%d but %d GPU%s visible (see --visiable_gpu: -1 makes '
                          'every GPU visible)' % (num_gpus, gpu_count,
                                                   ' is' if gpu_count == 1 else 's are'))


class Plan(object):
    """What this process does in the run, from the flags and TF_CONFIG.

    distribution: 'none', 'ps' or 'collective'; task: the TF_CONFIG Task or None;
    worker_num / worker_id: the training workers sharing the data and this one's index
    (None for a ps task); replicas: devices this process trains on (num_gpus);
    images_per_step: images one training step of this process consumes;
    images_per_global_step: images the job consumes while global_step advances by one.
    """

    def __init__(self, distribution, task, worker_num, worker_id, replicas, batch_size):
        self.distribution, self.task = distribution, task
        self.worker_num, self.worker_id, self.replicas = worker_num, worker_id, replicas
        self.images_per_step = batch_size * replicas
        if distribution == 'collective':
            # One synchronous step of every worker advances global_step once.
            self.images_per_global_step = self.images_per_step * worker_num
        else:
            # ps: every worker's step advances it (asynchronous); none: one process.
            self.images_per_global_step = self.images_per_step

    @property
    def trains(self):
        return self.task is None or self.task.trains

    @property
    def head_shards(self):
        """Slices of the classifier head (resnet.class_partitioner): one per ps task in ps
        mode, where each variable sits whole on one task (round robin), so the head and
        its slot would load one task with most of the model's bytes; else 1 (the
        evaluator too: not a cluster member, it restores the slices whole)."""
        if self.distribution != 'ps' or not self.trains:
            return 1
        return max(1, len(self.task.cluster.get('ps', [])))

    @property
    def evaluates(self):
        """An evaluator task: evaluates the chief's checkpoints as they appear."""
        return self.task is not None and self.task.type == EVALUATOR

    @property
    def role(self):
        """'task chief:0 (worker 0 of 3)' or 'single process', for the log."""
        if self.task is None:
            return 'single process (worker %d of %d)' % (self.worker_id, self.worker_num)
        if not self.trains:
            return 'task %s of a %s cluster' % (self.task.name, self.distribution)
        return 'task %s of a %s cluster (worker %d of %d)' % (
            self.task.name, self.distribution, self.worker_id, self.worker_num)

    def own_checkpoint_dir(self, model_dir):
        """Where a collective job's other workers save (their saves run the chief's
        collective ops; TensorFlow's own name for the place, model_dir/tmp_<type>_<index>);
        None for every other task: it saves to model_dir, or not at all."""
        if self.distribution != 'collective' or self.task is None or not self.worker_id:
            return None
        return os.path.join(model_dir, 'tmp_%s_%d' % (self.task.type, self.task.index))

    @property
    def log_name(self):
        """The text log's file name: train.log, or train_<type>_<index>.log in a cluster."""
        return 'train.log' if self.task is None else 'train_%s_%d.log' % (
            self.task.type, self.task.index)


def plan(distribution, num_gpus, worker_num, worker_id, batch_size, gpu_count,
         environ=None):
    """The Plan of this process; raises ConfigError.

    With TF_CONFIG the worker count and index come from it (worker_num / worker_id must
    then be left at 1 / 0, or say the same: cluster_flags builds TF_CONFIG from them);
    without, from worker_num / worker_id.
    """
    task = current_task(environ)
    distribution = resolve_distribution(distribution, task, num_gpus)
    check_num_gpus(num_gpus, gpu_count)
    if task is not None:
        same = (task.worker_num, task.worker_id if task.trains else 0)
        if (worker_num, worker_id) not in ((1, 0), same):
            raise ConfigError('--worker_num/--worker_id are taken from the cluster (task %s '
                              'is worker %s of %d); leave them out or give the same, got %d/%d'
                              % (task.name, same[1] if task.trains else '-', same[0],
                                 worker_num, worker_id))
        if task.type not in TRAINING_TASKS + ('ps', EVALUATOR):
            raise ConfigError('TF_CONFIG task type %r is not supported (chief, worker, ps, '
                              'evaluator)' % task.type)
        if task.trains:
            worker_num, worker_id = task.worker_num, task.worker_id
        else:
            worker_num, worker_id = task.worker_num, None
    else:
        try:
            file_db.check_worker(worker_num, worker_id)
        except ValueError as e:
            raise ConfigError(str(e))
    return Plan(distribution, task, worker_num, worker_id, num_gpus, batch_size)


def mirrored_devices(num_gpus):
    """The devices of --num_gpus: the first num_gpus GPUs (of those --visiable_gpu leaves
    visible). Tests replace this with logical CPU devices."""
    return ['/device:GPU:%d' % i for i in range(num_gpus)]


def collective_resolver(local_gpus):
    """TF_CONFIG's cluster and task with exactly `local_gpus` GPUs of this worker as its
    replicas (0: its CPU). Given TF_CONFIG's own resolver, MultiWorkerMirroredStrategy
    would take every GPU the process sees, whatever --num_gpus says."""
    resolvers = tf.distribute.cluster_resolver
    base = resolvers.TFConfigClusterResolver()
    return resolvers.SimpleClusterResolver(
        base.cluster_spec(), task_type=base.task_type, task_id=base.task_id,
        num_accelerators={'GPU': local_gpus} if local_gpus else {},
        rpc_layer=base.rpc_layer or 'grpc')


# --all_reduce_alg (TF official's flag): the gradient all-reduce of each strategy.
MIRRORED_ALGS = ('auto', 'nccl', 'hierarchical_copy', 'one_device')
COLLECTIVE_ALGS = ('auto', 'nccl', 'ring')
# Gradients go in packs of about this many bytes: the first pack's all-reduce starts while
# the backward pass still computes the rest (TF packs the gradients last-computed first).
BYTES_PER_PACK = 32 * 1024 * 1024


def check_all_reduce_alg(alg, distribution):
    """--all_reduce_alg against the run's strategy; raises ConfigError."""
    allowed = COLLECTIVE_ALGS if distribution == 'collective' else MIRRORED_ALGS
    if alg not in allowed:
        raise ConfigError('--all_reduce_alg=%s does not go with %s; use one of %s' % (
            alg, '--distribution=collective' if distribution == 'collective'
            else 'MirroredStrategy (--num_gpus)', ', '.join(allowed)))


def cross_device_ops(alg):
    """MirroredStrategy's cross_device_ops for --all_reduce_alg (None: TensorFlow's choice,
    NCCL between the GPUs of one machine where it can). One process launches every NCCL
    call itself, so their order is the same on every GPU."""
    ops = tf.distribute
    return {'auto': None, 'nccl': ops.NcclAllReduce(num_packs=1),
            'hierarchical_copy': ops.HierarchicalCopyAllReduce(num_packs=1),
            'one_device': ops.ReductionToOneDevice()}[alg]


def communication_options(alg, gpu_count):
    """MultiWorkerMirroredStrategy's options: auto = NCCL between GPU workers, RING (over
    gRPC) between CPU ones; the gradients in BYTES_PER_PACK packs. NCCL is safe in TF1
    graph mode only for the gradients: TensorFlow chains their packs by control edges (the
    same order on every host) and sends every single-tensor all-reduce by RING; the small
    per-step reductions ask for RING themselves (HOST_REDUCTION)."""
    implementation = tf.distribute.experimental.CommunicationImplementation
    chosen = {'nccl': implementation.NCCL, 'ring': implementation.RING,
              'auto': implementation.NCCL if gpu_count else implementation.RING}[alg]
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=BYTES_PER_PACK, implementation=chosen)


def multi_worker_strategy(resolver, options):
    """TF1's MultiWorkerMirroredStrategy with whole CommunicationOptions: its constructor
    takes only the implementation (no bytes_per_pack), the strategy's extended object
    (TensorFlow 2.15's CollectiveAllReduceExtended) all of them."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as collective
    strategy_class = tf.distribute.experimental.MultiWorkerMirroredStrategy
    strategy = strategy_class.__new__(strategy_class)
    tf.distribute.Strategy.__init__(strategy, collective.CollectiveAllReduceExtended(
        strategy, cluster_resolver=resolver, communication_options=options))
    return strategy


def train_distribute(distribution, num_gpus, devices=None, gpu_count=0, all_reduce_alg='auto'):
    """The tf.distribute strategy for RunConfig(train_distribute=...), None for none / ps.

    devices: MirroredStrategy's devices (default mirrored_devices(num_gpus)).
    gpu_count: the GPUs this process sees; a collective worker replicates over num_gpus of
    them, or over its CPU when it sees none. all_reduce_alg: check_all_reduce_alg's.
    """
    check_all_reduce_alg(all_reduce_alg, distribution)
    if distribution == 'collective':
        return multi_worker_strategy(collective_resolver(num_gpus if gpu_count else 0),
                                     communication_options(all_reduce_alg, gpu_count))
    if num_gpus > 1 or devices:
        return tf.distribute.MirroredStrategy(devices=devices or mirrored_devices(num_gpus),
                                              cross_device_ops=cross_device_ops(all_reduce_alg))
    return None


def _replica_context():
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    return context


# The small per-step reductions (loss counters, the reported loss): RING, never NCCL,
# whatever the gradients use -- hosts need not launch them in the same order.
HOST_REDUCTION = tf.distribute.experimental.CommunicationOptions(
    implementation=tf.distribute.experimental.CommunicationImplementation.RING)


def _all_reduce(context, reduce_op, value):
    """ReplicaContext.all_reduce without its gradient wrapper (which fails in graph mode
    on values that depend on mirrored variables); the values reduced here need none. The
    result goes to the host (MirroredStrategy reduces there, off NCCL), by RING between
    workers (HOST_REDUCTION)."""
    def merge(strategy, per_replica):
        return strategy.extended.reduce_to(reduce_op, per_replica, '/device:CPU:0',
                                           options=HOST_REDUCTION)
    return tf.identity(context.merge_call(merge, args=(tf.stop_gradient(value),)))


def all_reduce_max(value):
    """Elementwise max of the 0/1 indicators `value` over the replicas of a synchronous
    step (as is without a strategy)."""
    context = _replica_context()
    if context is None:
        return value
    # A SUM > 0 is the max of indicators, and every cross-device implementation has SUM.
    return tf.cast(_all_reduce(context, tf.distribute.ReduceOp.SUM, value) > 0, value.dtype)


def all_reduce_mean(value):
    """Mean of `value` over the replicas of a synchronous step (as is without), for
    logging: no gradient flows through it."""
    context = _replica_context()
    if context is None:
        return value
    return _all_reduce(context, tf.distribute.ReduceOp.MEAN, value)


def from_first_replica(value):
    """Replica 0's `value`, on every replica (as is without a strategy)."""
    context = _replica_context()
    if context is None:
        return value
    first = tf.cast(tf.equal(context.replica_id_in_sync_group, 0), value.dtype)
    return _all_reduce(context, tf.distribute.ReduceOp.SUM, value * first)


def own_update_ops(start):
    """The UPDATE_OPS (batch-norm moving averages) added since the collection held `start`
    entries: with the model built in between, this replica's own. Under a strategy the
    collection is the graph's, so it also holds every replica's updates built before this
    one; a train op that waited on all of them would make each replica's gradient ops
    depend on every other replica's updates (graph size quadratic in the replicas). A
    replica's model is built without a merge_call, so no other replica adds entries
    meanwhile."""
    return tf.get_collection(tf.GraphKeys.UPDATE_OPS)[start:]


class FinishOnce(object):
    """Optimizer mixin: the variable updates of every device grouped once. Under
    MirroredStrategy TensorFlow's Optimizer._distributed_apply calls _finish once per
    device, each time with the updates of all devices, and the default groups them anew
    each time: R x R x variables control inputs (20,160 of a ResNet-101's 35,353 at 8
    replicas), and each device's global-step increment waits on all R groups. Here the
    first call groups them and every device's finish is that one group: R x variables
    control inputs, and R of the increments."""

    def _finish(self, update_ops, name_scope):
        key = tuple(update_ops)
        if getattr(self, '_grouped_updates', (None,))[0] != key:
            self._grouped_updates = (key, tf.group(*update_ops, name=name_scope))
        return self._grouped_updates[1]


def synchronized_variable_args():
    """get_variable arguments for state every replica updates identically: one copy per
    device, written from the first replica, checkpointed once."""
    return {'synchronization': tf.VariableSynchronization.ON_WRITE,
            'aggregation': tf.VariableAggregation.ONLY_FIRST_REPLICA}


def describe_devices(plan, batch_size):
    """One line on devices and batch sizes, for the log."""
    strategy = ('MultiWorkerMirroredStrategy' if plan.distribution == 'collective'
                else 'MirroredStrategy')
    line = '%d device%s, batch %d per replica, %d images a step of this process' % (
        plan.replicas, '' if plan.replicas == 1 else 's (%s)' % strategy, batch_size,
        plan.images_per_step)
    if plan.distribution == 'collective':
        line += ', %d a synchronous step of the %d workers' % (plan.images_per_global_step,
                                                                plan.worker_num)
    elif plan.distribution == 'ps':
        line += ' (asynchronous: each worker step advances the global step)'
    return line
