"""distribute.py: TF_CONFIG roles and data sharding, the record-level split of input_fn,
and --num_gpus: one device vs two replicas (two logical CPU devices) give the same loss
counters and cross_entropy for the same global batch."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

from mlimages.distributed import distribute
import file_db
from mlimages.data import input_pipeline
import train  # noqa: F401 (graph mode, as train.py runs)
from helpers import ENV, LOGICAL_CPUS, ROOT, run_train, scalar_tags, settings


def config(cluster, task_type, index):
    return json.dumps({'cluster': cluster, 'task': {'type': task_type, 'index': index}})


PS_CLUSTER = {'chief': ['h0:1'], 'worker': ['h1:1', 'h2:1'], 'ps': ['h3:1']}
COLLECTIVE_CLUSTER = {'worker': ['h0:1', 'h1:1', 'h2:1']}


def test_tf_config_roles_chief_is_worker_0():
    roles = [(t, i) for t in ('chief', 'worker') for i in range(len(PS_CLUSTER[t]))]
    tasks = [distribute.task_from_tf_config(config(PS_CLUSTER, t, i)) for t, i in roles]
    assert [(t.worker_id, t.worker_num) for t in tasks] == [(0, 3), (1, 3), (2, 3)]
    ps = distribute.task_from_tf_config(config(PS_CLUSTER, 'ps', 0))
    assert not ps.trains and ps.name == 'ps:0'
    # without a chief, worker 0 is the first
    task = distribute.task_from_tf_config(config(COLLECTIVE_CLUSTER, 'worker', 2))
    assert (task.worker_id, task.worker_num) == (2, 3)
    assert distribute.task_from_tf_config('') is None
    assert distribute.current_task({}) is None


@pytest.mark.parametrize('text,fragment', [
    ('{not json', 'not JSON'),
    ('{"cluster": {"worker": ["a:1"]}}', 'needs "cluster" and "task"'),
    (config({'worker': ['a:1']}, 'worker', 1), 'is not in the cluster'),
    (config({'chief': ['a:1', 'b:1']}, 'chief', 0), '2 chiefs'),
])
def test_bad_tf_config(text, fragment):
    with pytest.raises(distribute.ConfigError, match=fragment):
        distribute.task_from_tf_config(text)


def test_distribution_from_flags_and_tf_config():
    ps_task = distribute.task_from_tf_config(config(PS_CLUSTER, 'worker', 0))
    collective_task = distribute.task_from_tf_config(config(COLLECTIVE_CLUSTER, 'worker', 0))
    assert distribute.resolve_distribution('auto', None, 1) == 'none'
    assert distribute.resolve_distribution('auto', ps_task, 1) == 'ps'
    assert distribute.resolve_distribution('auto', collective_task, 1) == 'collective'
    assert distribute.resolve_distribution('none', None, 4) == 'none'
    for args, fragment in [
            (('ps', None, 1), 'needs a cluster: TF_CONFIG'),
            (('collective', ps_task, 1), 'must not have ps'),
            (('ps', collective_task, 1), 'needs ps tasks'),
            (('none', ps_task, 1), 'cluster of 3 workers'),
            (('ps', ps_task, 2), '--num_gpus=2 with --distribution=ps'),
            (('mpi', None, 1), 'must be one of')]:
        with pytest.raises(distribute.ConfigError, match=fragment):
            distribute.resolve_distribution(*args)


def test_plan_roles_and_images_per_step():
    env = {'TF_CONFIG': config(PS_CLUSTER, 'worker', 1)}
    plan = distribute.plan('auto', 1, 1, 0, 8, 0, env)
    assert (plan.distribution, plan.worker_num, plan.worker_id) == ('ps', 3, 2)
    assert plan.images_per_step == plan.images_per_global_step == 8
    assert plan.log_name == 'train_worker_1.log'
    env = {'TF_CONFIG': config(COLLECTIVE_CLUSTER, 'worker', 0)}
    plan = distribute.plan('collective', 1, 1, 0, 8, 0, env)
    assert (plan.images_per_step, plan.images_per_global_step) == (8, 24)
    plan = distribute.plan('auto', 1, 4, 3, 8, 0, {})
    assert (plan.distribution, plan.worker_num, plan.worker_id, plan.task) == ('none', 4, 3,
                                                                             None)
    assert plan.log_name == 'train.log'
    plan = distribute.plan('none', 2, 1, 0, 8, 2, {})
    assert (plan.replicas, plan.images_per_step, plan.images_per_global_step) == (2, 16, 16)
    ps = distribute.plan('ps', 1, 1, 0, 8, 0, {'TF_CONFIG': config(PS_CLUSTER, 'ps', 0)})
    assert not ps.trains and ps.worker_id is None
    evaluator = distribute.plan('auto', 1, 1, 0, 8, 0,
                                {'TF_CONFIG': config(PS_CLUSTER, 'evaluator', 0)})
    assert (evaluator.distribution, evaluator.trains, evaluator.evaluates) == ('ps', False,
                                                                             True)
    assert evaluator.log_name == 'train_evaluator_0.log'
    for args, fragment in [
            (('auto', 1, 2, 1, 8, 0, {'TF_CONFIG': config(PS_CLUSTER, 'chief', 0)}),
             'taken from the cluster'),
            (('auto', 1, 1, 0, 8, 0, {'TF_CONFIG': config(PS_CLUSTER, 'master', 0)}),
             'master'),
            (('none', 2, 1, 0, 8, 1, {}), '--num_gpus=2 but 1 GPU is visible'),
            (('none', 0, 1, 0, 8, 0, {}), '--num_gpus must be >= 1'),
            (('none', 1, 2, 2, 8, 0, {}), 'must be in')]:
        with pytest.raises(distribute.ConfigError, match=fragment):
            distribute.plan(*args)


@pytest.mark.parametrize('files,workers', [(10, 3), (3, 3), (7, 1), (2, 3), (1, 4)])
def test_data_share_is_disjoint_and_complete(files, workers):
    names = ['%d.tfrecords' % i for i in range(files)]
    shares = [file_db.data_share(names, workers, k) for k in range(workers)]
    if files >= workers:
        assert all(shard is None for _, shard in shares)
        got = sorted(n for share, _ in shares for n in share)
        assert got == sorted(names)  # every file once
    else:
        # every worker reads every file and takes records k, k + n, ...
        assert [shard for _, shard in shares] == [(workers, k) for k in range(workers)]
        assert all(share == names for share, _ in shares)


def write_indexed_records(path, count, class_num):
    """`count` records whose label is one-hot at the record's index (class_num > count)."""
    import io
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buffer, format='JPEG')
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(count):
            label = np.zeros(class_num, np.float32)
            label[i] = 1.0
            example = tf.train.Example(features=tf.train.Features(feature={
                'image': tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[buffer.getvalue()])),
                'label': tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[label.astype('<f4').tobytes()])),
            }))
            writer.write(example.SerializeToString())


def test_fewer_files_than_workers_split_by_record(tmp_path):
    """Two files of 5 records, 3 workers: each worker's records, one epoch, are its own
    (record k, k + 3, ... of the interleave), and together they are all 10."""
    files = []
    for f in range(2):
        path = str(tmp_path / ('%d.tfrecords' % f))
        write_indexed_records(path, 5, 12)
        files.append(path)
    seen = []
    for worker in range(3):
        share, record_shard = file_db.data_share(files, 3, worker)
        with tf.Graph().as_default():
            given = settings(batch_size=1, class_num=12, image_size=8, shuffle_buffer=4,
                             num_preprocess_threads=1, augment_on='device')
            dataset = input_pipeline.input_fn(given.data, given.model, True, share,
                                              record_shard=record_shard)
            labels = tf.data.make_one_shot_iterator(dataset).get_next()[1]
            with tf.Session() as sess:
                # 10 records: workers 0 gets 4, the others 3 a pass; one pass each
                count = 4 if worker == 0 else 3
                rows = [sess.run(labels)[0] for _ in range(count)]
        # the label's class is the record index in its file; tell the files apart by
        # the interleave order: file f's record r is element 2r + f
        seen.append(sorted(int(np.argmax(r)) for r in rows))
    assert sorted(sum(seen, [])) == sorted(list(range(5)) * 2)
    assert seen[0] == [0, 1, 3, 4]  # elements 0, 3, 6, 9: f0 r0, f1 r1, f0 r3, f1 r4


@pytest.mark.slow
def test_cluster_flag_errors_are_one_line(tmp_path):
    result = run_train('--data_dir=' + str(tmp_path), '--distribution=ps',
                       '--model_dir=' + str(tmp_path / 'm'))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        'train.py: error: --distribution=ps needs a cluster: TF_CONFIG, a Slurm step or '
        '--worker_hosts (see docs/distributed.md)')
    result = run_train('--data_dir=' + str(tmp_path), '--num_gpus=2',
                       '--model_dir=' + str(tmp_path / 'm'))
    assert result.returncode == 2
    assert '--num_gpus=2 but 0 GPUs are visible' in result.stderr.strip().splitlines()[-1]
    # a checkpoint of the original program continues on one device only
    legacy = str(tmp_path / 'legacy')
    with tf.Graph().as_default():
        variables = [tf.Variable([0.0], name='Variable'), tf.Variable([0.0], name='Variable_1')]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            tf.train.Saver(variables).save(sess, legacy + '/model.ckpt-1')
    env = dict(ENV, TF_CONFIG=config({'chief': ['127.0.0.1:1'], 'ps': ['127.0.0.1:2']},
                                     'chief', 0))
    result = subprocess.run([sys.executable, os.path.join(ROOT, 'train.py'),
                             '--data_dir=' + str(tmp_path), '--model_dir=' + legacy],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].endswith(
        'holds a checkpoint of the original program (counters Variable, Variable_1): it '
        'continues on one device only, not with --distribution=ps')


# --------------------------------------------------------------------- 1 vs 2 replicas

LOSS_CHILD = LOGICAL_CPUS + '''
import json
import numpy as np
from mlimages.model import loss as loss_lib

R, B, C, STEPS = 2, 3, 9, 6
rng = np.random.default_rng(0)
labels = (rng.random((STEPS, R * B, C)) < 0.12).astype(np.float32)
labels[:, :, 0] = 1.0            # a class in every image
labels[:, B:, 1] = (rng.random((STEPS, B)) < 0.8) * 0.9   # only in replica 1's half
labels[:, 0, 2] = -1.0           # ignored
logits = rng.normal(size=(STEPS, R * B, C)).astype(np.float32)


def run(replicas):
    with tf.Graph().as_default():
        y = tf.placeholder(tf.float32, [R * B, C])
        x = tf.placeholder(tf.float32, [R * B, C])

        def step():
            context = tf.distribute.get_replica_context()
            if replicas == 1:
                yy, xx = y, x
            else:
                k = context.replica_id_in_sync_group
                yy, xx = tf.reshape(y, [R, B, C])[k], tf.reshape(x, [R, B, C])[k]
            ce, t = loss_lib.multilabel_cross_entropy(yy, xx, 0.7, 0.3, 1234)
            return (distribute.all_reduce_mean(ce), t['pos_count'], t['neg_count'],
                    t['neg_select'], t['loss_coef'])

        if replicas == 1:
            fetch = [[v] for v in step()]
        else:
            strategy = distribute.train_distribute('none', replicas)
            with strategy.scope():
                out = strategy.extended.call_for_each_replica(step)
                fetch = [list(strategy.experimental_local_results(v)) for v in out]
        config = tf.ConfigProto(device_count={'CPU': 2})
        results = []
        with tf.Session(config=config) as sess:
            sess.run(tf.global_variables_initializer())
            for k in range(STEPS):
                results.append([[a.tolist() for a in v] for v in
                                sess.run(fetch, {y: labels[k], x: logits[k]})])
            names = sorted(v.op.name for v in tf.global_variables())
    return {'steps': results, 'variables': names}


print(json.dumps({'one': run(1), 'two': run(2)}))
'''


def run_child(code, *args, timeout=600):
    result = subprocess.run([sys.executable, '-c', code] + list(args), cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.slow
def test_loss_counters_one_device_vs_two_replicas():
    """The same global batch on 1 device and split over 2 replicas: pos_c from the whole
    batch, one negative draw, identical counters and coefficients on both replicas, and
    cross_entropy (mean over the replicas) equal to the single device's."""
    out = json.loads(run_child(LOSS_CHILD).stdout.strip().splitlines()[-1])
    one, two = out['one'], out['two']
    assert one['variables'] == two['variables'] == ['neg_count', 'pos_count']
    for step, (a, b) in enumerate(zip(one['steps'], two['steps'])):
        ce1, pos1, neg1, sel1, coef1 = a
        ce2, pos2, neg2, sel2, coef2 = b
        assert abs(ce1[0] - ce2[0]) <= 1e-5 * max(1.0, abs(ce1[0])), step
        assert ce2[0] == ce2[1]
        for single, replicas in ((pos1, pos2), (neg1, neg2), (sel1, sel2)):
            assert replicas[0] == replicas[1] == single[0], step
        np.testing.assert_allclose(coef2[0], coef1[0], rtol=1e-6)
        np.testing.assert_array_equal(coef2[0], coef2[1])
    # class 1 is positive only in replica 1's images: counted from the global batch
    assert two['steps'][-1][1][0][0] == 6
    assert two['steps'][-1][1][0][1] > 0


ESTIMATOR_CHILD = LOGICAL_CPUS + '''
import os
import numpy as np
import flags as flags_lib
import train
from mlimages.run import estimator as estimator_lib

out_dir = sys.argv[1]
B, S, C, STEPS = 2, 64, 5, 3
rng = np.random.default_rng(1)
images = rng.uniform(-1, 1, (STEPS, B, S, S, 3)).astype(np.float32)
labels = (rng.random((STEPS, B, C)) < 0.3).astype(np.float32)
labels[..., 0] = 1.0
F = flags_lib.FLAGS
F(['train.py', '--class_num=%d' % C, '--resnet_size=18', '--image_size=%d' % S,
   '--lr=0.01', '--log_interval=1', '--snapshot=1', '--max_iter=%d' % STEPS,
   '--data_format=NHWC', '--visiable_gpu=-1'])
for replicas in (1, 2):
    # One device trains on X; two replicas on X each (every element twice, one per
    # replica). Each replica then computes exactly what the single device computes, and the
    # mean of two equal gradients (each scaled by 1/2, a power of two) is exact.
    x, y = (images, labels) if replicas == 1 else (np.repeat(images, 2, axis=0),
                                                   np.repeat(labels, 2, axis=0))
    F.num_gpus, F.batch_size = replicas, B
    F.model_dir = '%s/%d' % (out_dir, replicas)
    if replicas == 2:   # the same initial weights: the single device's step-0 checkpoint
        import glob, shutil
        os.makedirs(F.model_dir)
        for path in glob.glob('%s/1/model.ckpt-0.*' % out_dir):
            shutil.copy(path, F.model_dir)
        tf.train.update_checkpoint_state(F.model_dir, F.model_dir + '/model.ckpt-0')
    plan = distribute.plan('none', replicas, 1, 0, F.batch_size, replicas, {})
    run = flags_lib.settings(F)
    run = estimator_lib.for_this_process(run)  # --data_format=NHWC, augment_on cpu
    estimator = estimator_lib.make_estimator(run, estimator_lib.derived_values(run, plan), plan)
    estimator._session_config.device_count['CPU'] = 2
    estimator.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat(),
                    max_steps=STEPS)
'''


def one_device_and_two_replicas(child, tmp_path):
    """Runs a child of ESTIMATOR_CHILD's kind; checks that cross_entropy agrees at each of
    its three steps and returns the two model directories (one device, two replicas)."""
    run_child(child, str(tmp_path))
    one, two = str(tmp_path / '1'), str(tmp_path / '2')
    ce1, ce2 = dict(scalar_tags(one)['cross_entropy']), dict(scalar_tags(two)['cross_entropy'])
    assert sorted(ce1) == sorted(ce2) == [1, 2, 3]
    for step in ce1:
        assert ce2[step] == pytest.approx(ce1[step], rel=1e-5), step
    return one, two


def first_updates(one, two, names):
    """(name, |change on one device|, |difference between the two runs' changes|) of step
    1 from the one device's step-0 checkpoint, which both runs start from."""
    r0 = tf.train.load_checkpoint(os.path.join(one, 'model.ckpt-0'))
    first = [tf.train.load_checkpoint(os.path.join(d, 'model.ckpt-1')) for d in (one, two)]
    for name in names:
        d1, d2 = [r.get_tensor(name) - r0.get_tensor(name) for r in first]
        yield name, np.linalg.norm(d1), np.linalg.norm(d1 - d2)


@pytest.mark.slow
def test_estimator_one_device_vs_two_replicas(tmp_path):
    """estimator.make_estimator with --num_gpus=2 (MirroredStrategy on two logical CPUs) vs
    one device: two replicas that each get the single device's batch compute exactly what
    it computes, and averaging their equal gradients is exact, so every step agrees --
    cross_entropy, counters, every variable and momentum slot -- to float rounding (bit
    for bit on the CPUs tried). A strategy that summed the replicas' gradients, or dropped
    one, would double or halve every update."""
    one, two = one_device_and_two_replicas(ESTIMATOR_CHILD, tmp_path)
    r1 = tf.train.load_checkpoint(tf.train.latest_checkpoint(one))
    r2 = tf.train.load_checkpoint(tf.train.latest_checkpoint(two))
    names = r1.get_variable_to_shape_map()
    assert names == r2.get_variable_to_shape_map()
    assert r2.get_tensor('global_step') == 3
    for name in ('pos_count', 'neg_count'):
        np.testing.assert_array_equal(r1.get_tensor(name), r2.get_tensor(name))
    assert r2.get_tensor('pos_count')[0] == 3
    trained = [n for n in names if n not in ('global_step', 'pos_count', 'neg_count')]
    assert 'init/init_conv/conv2d/kernel/Momentum' in trained and len(trained) > 100
    for name, change, difference in first_updates(one, two, trained):
        if 'moving_' not in name:  # weights, gamma and beta move by their gradient
            assert change > 0, name
        assert difference <= 1e-4 * change, (name, change, difference)


# The same comparison for fine-tuning as the original's finetune.py does it with towers:
# single-label softmax, FixBlock2 with training-mode batch norm in the frozen stages, the
# exponential schedule, plain gradient descent, L2 on batch norm at 0.1 x weight_decay.
FINETUNE_CHILD = ESTIMATOR_CHILD.replace(
    "labels[..., 0] = 1.0",
    "labels = np.eye(C, dtype=np.float32)[rng.integers(0, C, (STEPS, B))]").replace(
    "'--data_format=NHWC', '--visiable_gpu=-1'])",
    "'--data_format=NHWC', '--visiable_gpu=-1', '--label_type=single', '--FixBlock2', "
    "'--frozen_bn=train', '--lr_schedule=exponential', '--lr_decay_step=1', "
    "'--lr_decay_factor=0.5', '--optimizer=sgd', '--bn_weight_decay=0.1', "
    "'--weight_decay=0.01'])")


@pytest.mark.slow
def test_fine_tuning_one_device_vs_two_replicas(tmp_path):
    """--num_gpus=2 fine-tuning is finetune.py's towers: MirroredStrategy averages the two
    replicas' gradients. With the single device's batch on each replica, every step agrees:
    the trained variables' updates to float rounding, the frozen kernels and gamma stay put
    on both, and the frozen stages' moving statistics (training-mode batch norm, per
    replica as per tower) move alike."""
    assert FINETUNE_CHILD.count('--FixBlock2') == 1 and 'np.eye' in FINETUNE_CHILD
    one, two = one_device_and_two_replicas(FINETUNE_CHILD, tmp_path)
    lr1, lr2 = dict(scalar_tags(one)['learning_rate']), dict(scalar_tags(two)['learning_rate'])
    assert lr1 == lr2 and lr1[1] == pytest.approx(0.01) and lr1[3] == pytest.approx(0.0025)
    r0 = tf.train.load_checkpoint(os.path.join(one, 'model.ckpt-0'))
    first = [tf.train.load_checkpoint(os.path.join(d, 'model.ckpt-1')) for d in (one, two)]
    assert not any('Momentum' in n for n in first[1].get_variable_to_shape_map())
    names = ('logits/dense/kernel', 'stages_3_block_1/conv2_b2/conv2d/kernel',
             'stages_2_block_0/conv1_b1_bn/batch_normalization/gamma',
             'stages_0_block_0/conv1_b2_bn/batch_normalization/moving_mean',
             'stages_1_block_1/conv2_b2_bn/batch_normalization/moving_variance')
    for name, change, difference in first_updates(one, two, names):
        assert change > 0, name
        assert difference <= 1e-4 * change, (name, change, difference)
    for name in ('init/init_conv/conv2d/kernel',
                 'stages_1_block_0/conv1_b2_bn/batch_normalization/gamma'):
        for r in first:
            np.testing.assert_array_equal(r.get_tensor(name), r0.get_tensor(name))


SYNTHETIC_CHILD = LOGICAL_CPUS + '''
import flags as flags_lib
import train
from mlimages.run import estimator as estimator_lib

F = flags_lib.FLAGS
F(['train.py', '--class_num=5', '--resnet_size=18', '--image_size=32', '--lr=0.01',
   '--log_interval=2', '--snapshot=100', '--max_iter=3', '--data_format=NHWC',
   '--visiable_gpu=-1', '--use_synthetic_data', '--batch_size=2', '--num_gpus=2',
   '--model_dir=' + sys.argv[1]])
plan = distribute.plan('none', 2, 1, 0, 2, 2, {})
run = flags_lib.settings(F)
run = estimator_lib.for_this_process(run)  # --data_format=NHWC, augment_on cpu
estimator = estimator_lib.make_estimator(run, estimator_lib.derived_values(run, plan), plan)
estimator._session_config.device_count['CPU'] = 2
sys.path.insert(0, 'tests')
from helpers import RunCounter
from mlimages.run import hooks
from tensorflow.python.client import session as session_lib
counter, tracker = RunCounter(), hooks.StepTracker()
session_lib.BaseSession.run = counter.wrap(session_lib.BaseSession.run)
estimator.train(estimator_lib.training_input_fn(run.data, run.model, []), max_steps=3,
                hooks=[counter, tracker])
print(counter.per_step(), tracker.last_step)
print(estimator.get_variable_value('global_step'),
      int(estimator.get_variable_value('pos_count').sum()))
'''


def test_synthetic_data_on_two_replicas(tmp_path):
    """--use_synthetic_data with --num_gpus=2 (2 logical CPUs): the shape-only batch splits
    over the replicas, each draws its own images, and the step trains. The step tracker
    reads the global step after the step (hooks.publish_step_after, from the first
    replica's copy) from the step's own run: one session.run a step but at the log steps
    (--log_interval=2: the first; the Estimator's step-rate and summary hooks read it)."""
    lines = run_child(SYNTHETIC_CHILD, str(tmp_path / 'model')).stdout.splitlines()
    assert lines[-2] == '[3, 1] 3'
    out = lines[-1].split()
    step, positives = int(out[-2]), int(out[-1])
    assert step == 3
    assert positives > 0  # labels drawn on the replicas reached the loss counters


# --------------------------------------------------------------------- all-reduce

ALL_REDUCE_CHILD = LOGICAL_CPUS + '''
import json
import os
from mlimages.run import model_fn
from helpers import model_parts
from test_model_fn import run_settings
strategy_kind, alg, dtype, worker = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if strategy_kind == 'collective':   # worker `worker` of two (nothing is started: graph only)
    os.environ['TF_CONFIG'] = json.dumps({'cluster': {'worker': ['127.0.0.1:1', '127.0.0.1:2']},
                                          'task': {'type': 'worker', 'index': worker}})
    strategy = distribute.train_distribute('collective', 1, gpu_count=0, all_reduce_alg=alg)
else:
    strategy = distribute.train_distribute('none', 2, all_reduce_alg=alg)
opts = run_settings(18, dtype, class_num=7)
derived = model_fn.Derived(images_per_step=2)
with tf.Graph().as_default() as graph, strategy.scope():
    def step():
        images = tf.random.uniform([2, 32, 32, 3], -1, 1)
        labels = tf.cast(tf.random.uniform([2, 7]) < 0.5, tf.float32)
        return model_fn.make_model_fn(model_parts(opts), derived)(
            images, labels, tf.estimator.ModeKeys.TRAIN).train_op
    strategy.extended.call_for_each_replica(step)
    trained = sum(v.shape.num_elements() for v in tf.trainable_variables())
    ops = [op for op in graph.get_operations()
           if op.type in ('CollectiveReduceV2', 'NcclAllReduce')]

    def ancestors(op, seen):
        stack = [op]
        while stack:
            node = stack.pop()
            for parent in [t.op for t in node.inputs] + list(node.control_inputs):
                if parent.name not in seen:
                    seen.add(parent.name)
                    stack.append(parent)
        return seen
    print('REDUCE ' + json.dumps({'trained': trained, 'ops': [{
        'name': op.name, 'type': op.type, 'elements': op.inputs[0].shape.num_elements(),
        'hint': op.get_attr('communication_hint').decode()
        if op.type == 'CollectiveReduceV2' else 'nccl',
        'key': int(tf.get_static_value(op.inputs[3])) if op.type == 'CollectiveReduceV2'
        else None,
        'ancestors': sorted(ancestors(op, set()) & {o.name for o in ops})} for op in ops]}))
'''


def reductions(kind, alg, dtype='fp32', worker=0):
    out = run_child(ALL_REDUCE_CHILD.replace('sys.path.insert(0, %r)' % ROOT,
                                             'sys.path[:0] = [%r, %r]' % (
                                                 ROOT, os.path.join(ROOT, 'tests'))),
                    kind, alg, dtype, str(worker)).stdout
    return json.loads([l for l in out.splitlines() if l.startswith('REDUCE ')][-1][7:])


def test_collective_gradients_go_by_nccl_in_ordered_packs_and_the_rest_by_ring():
    """--distribution=collective --all_reduce_alg=nccl, the built graph of worker 0 of 2:
    the gradients (every trained element once) in packs of about BYTES_PER_PACK by NCCL,
    each pack after the one before (the same launch order on every host); the loss
    counters, the reported loss and the metric's counts by RING, small."""
    found = reductions('collective', 'nccl')
    packs = [op for op in found['ops'] if op['hint'] == 'nccl']
    small = [op for op in found['ops'] if op['hint'] != 'nccl']
    assert sum(op['elements'] for op in packs) == found['trained']
    assert len(packs) >= 2  # ResNet-18: 45 MB of gradients
    for op in packs:
        assert op['elements'] * 4 <= distribute.BYTES_PER_PACK + 4 * 2359296  # + largest
    for before, after in zip(packs, packs[1:]):
        assert before['name'] in after['ancestors'], (before['name'], after['name'])
    assert small and {op['hint'] for op in small} == {'ring'}
    assert max(op['elements'] for op in small) <= 7   # counters of 7 classes, scalars
    # auto on CPU workers: RING for all
    assert {op['hint'] for op in reductions('collective', 'auto')['ops']} == {'ring'}


def test_fp16_collective_reductions_are_the_same_on_every_worker():
    """--dtype=fp16 --distribution=collective --all_reduce_alg=nccl, the built graphs of
    workers 0 and 1 of 2 (built at once): the same all-reduces, in the same order (name,
    implementation, size, instance key) on both -- a worker launching another would hang
    the job at its first step. The loss-scale optimizer's is-finite reduction (one element,
    by RING: a single tensor) comes before every gradient pack (they run in the branch it
    chooses, on every worker the same), and the packs are chained as fp32's."""
    from concurrent import futures
    with futures.ThreadPoolExecutor(2) as pool:
        workers = list(pool.map(lambda k: reductions('collective', 'nccl', 'fp16', k), (0, 1)))
    seen = [[(op['name'], op['hint'], op['elements'], op['key']) for op in w['ops']]
            for w in workers]
    assert seen[0] == seen[1]
    assert len({key for _, _, _, key in seen[0]}) == len(seen[0])
    packs = [op for op in workers[0]['ops'] if op['hint'] == 'nccl']
    assert sum(op['elements'] for op in packs) == workers[0]['trained'] and len(packs) >= 2
    for before, after in zip(packs, packs[1:]):
        assert before['name'] in after['ancestors'], (before['name'], after['name'])
    first = set(packs[0]['ancestors'])
    is_finite = [op for op in workers[0]['ops']
                 if op['name'] in first and op['elements'] == 1 and op['hint'] == 'ring']
    assert len(is_finite) == 1, (first, workers[0]['ops'])
    assert all(is_finite[0]['name'] in op['ancestors'] for op in packs)


def test_mirrored_nccl_carries_only_the_gradients():
    """--num_gpus=2 --all_reduce_alg=nccl (2 logical CPUs; built, not run): one NCCL
    all-reduce per replica for all the gradients (one pack); the small per-step reductions
    go to the host without NCCL."""
    found = reductions('mirrored', 'nccl')
    assert [op['type'] for op in found['ops']] == ['NcclAllReduce'] * 2
    assert all(op['elements'] == found['trained'] for op in found['ops'])


def test_all_reduce_alg_must_fit_the_strategy():
    distribute.check_all_reduce_alg('hierarchical_copy', 'none')
    distribute.check_all_reduce_alg('ring', 'collective')
    with pytest.raises(distribute.ConfigError, match='--all_reduce_alg=ring does not go '
                       'with MirroredStrategy'):
        distribute.check_all_reduce_alg('ring', 'none')
    with pytest.raises(distribute.ConfigError, match='use one of auto, nccl, ring'):
        distribute.check_all_reduce_alg('hierarchical_copy', 'collective')


def test_a_collective_jobs_other_workers_save_beside_the_chiefs_directory():
    """Plan.own_checkpoint_dir: TensorFlow's place for the saves of a collective job's
    other workers (model_dir/tmp_<type>_<index>); the chief and every other kind of run
    save to model_dir (None)."""
    def plan_of(distribution, task_type, index):
        cluster = dict(COLLECTIVE_CLUSTER if distribution == 'collective' else PS_CLUSTER,
                       chief=['h9:1'])
        environ = {'TF_CONFIG': config(cluster, task_type, index)}
        return distribute.plan(distribution, 1, 1, 0, 2, gpu_count=0, environ=environ)
    assert plan_of('collective', 'worker', 1).own_checkpoint_dir('/m') == '/m/tmp_worker_1'
    assert plan_of('collective', 'chief', 0).own_checkpoint_dir('/m') is None
    assert plan_of('ps', 'worker', 1).own_checkpoint_dir('/m') is None
    assert distribute.plan('none', 1, 1, 0, 2, gpu_count=0, environ={}).own_checkpoint_dir(
        '/m') is None
