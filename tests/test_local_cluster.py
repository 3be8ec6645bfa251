"""Tests of mlimages/distributed/local_cluster.py without a cluster: the addresses and
TF_CONFIG of each task, its GPUs and CPUs (tests/test_launch_local_cluster.py runs whole
clusters)."""
import json
import os

from mlimages.distributed import cluster_flags
from mlimages.distributed import local_cluster


def test_cluster_layout_and_tf_config():
    cluster = local_cluster.cluster_addresses(3, 2, ports=[1, 2, 3, 4, 5])
    assert cluster == {'chief': ['127.0.0.1:1'], 'worker': ['127.0.0.1:2', '127.0.0.1:3'],
                       'ps': ['127.0.0.1:4', '127.0.0.1:5']}
    assert local_cluster.task_names(cluster) == [('chief', 0), ('worker', 0), ('worker', 1),
                                            ('ps', 0), ('ps', 1)]
    config = json.loads(cluster_flags.tf_config(cluster, 'worker', 1))
    assert config == {'cluster': cluster, 'task': {'type': 'worker', 'index': 1}}
    assert local_cluster.cluster_addresses(1, 0, ports=[7]) == {'chief': ['127.0.0.1:7']}


def test_each_training_task_gets_its_own_gpus_ps_and_evaluator_none():
    names = [('chief', 0), ('worker', 0), ('worker', 1), ('ps', 0), ('evaluator', 0)]
    assert local_cluster.task_gpus(names, 2, 1, None) == {
        'chief:0': '0,1', 'worker:0': '2,3', 'worker:1': '4,5', 'ps:0': '',
        'evaluator:0': '6'}
    # Counted in the launcher's own CUDA_VISIBLE_DEVICES; past its end: none (the task's
    # device check then says so).
    assert local_cluster.task_gpus(names, 1, 1, ['4', '5', '6']) == {
        'chief:0': '4', 'worker:0': '5', 'worker:1': '6', 'ps:0': '', 'evaluator:0': ''}
    assert local_cluster.task_gpus(names, 1, 0, []) == {name: '' for name in
                                                   ('chief:0', 'worker:0', 'worker:1',
                                                    'ps:0', 'evaluator:0')}
    assert local_cluster.task_gpus(names, 0, 0, None)['chief:0'] == ''
    assert local_cluster.gpu_list({}) is None
    assert local_cluster.gpu_list({'CUDA_VISIBLE_DEVICES': '3, 5'}) == ['3', '5']
    assert local_cluster.flag_value(['--lr=1', '--num_gpus', '4'], 'num_gpus', '1') == '4'
    assert local_cluster.flag_value(['--num_gpus=2'], 'num_gpus', '1') == '2'


def test_each_task_is_pinned_to_cpus_of_its_own_when_there_are_enough():
    own = os.sched_getaffinity(0)
    names = ['task:%d' % i for i in range(len(own))]
    cpus, env = local_cluster.cpu_plan(names)
    assert sorted(min(c) for c in cpus.values()) == sorted(own)
    assert env == {'MLIMAGES_LOCAL_TASKS': str(len(own)), 'MLIMAGES_CPU_SET_TASKS': '1'}
    cpus, env = local_cluster.cpu_plan(names + ['one:0'])  # one too many: none pinned
    assert set(cpus.values()) == {None}
    assert env == {'MLIMAGES_LOCAL_TASKS': str(len(own) + 1),
                   'MLIMAGES_CPU_SET_TASKS': str(len(own) + 1)}
    assert local_cluster.cpu_ranges({0, 1, 2, 5, 7, 8}) == '0-2,5,7-8'
    assert local_cluster.partition_cpus({0, 1, 2, 3, 4}, 2) == [{0, 1, 2}, {3, 4}]
    assert local_cluster.partition_cpus({4, 6}, 2) == [{4}, {6}]
