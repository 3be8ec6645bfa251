"""mlimages/bench/ps_placement.py (tools/ps_placement.py): the bytes of variables on each
ps task of the chief's real training graph."""
import pytest

import flags
from mlimages.bench import ps_placement
import train  # noqa: F401 (graph mode, as train.py runs)


@pytest.mark.parametrize('ps_tasks', [2, 4, 8])
def test_ps_tasks_hold_even_shares_of_the_variables(ps_tasks):
    """The chief's real graph (make_estimator for a chief + worker + K ps cluster, model_fn
    under the Estimator's replica_device_setter), ResNet-101 with 11,166 classes: no ps
    task holds more than 1.5 x the mean bytes. Whole, the head (91 MB) and its Momentum
    slot sat on one task: 232 MB there against 35-62 MB on the others with 8 tasks."""
    settings = flags.replace(flags.default_settings(), resnet_size=101, class_num=11166,
                             image_size=32, batch_size=2, visiable_gpu=-1)
    per_task, placed = ps_placement.placement(ps_tasks, settings)
    assert max(per_task) <= 1.5 * sum(per_task) / ps_tasks, per_task
    # every task holds one slice of the head's kernel, and the slot sits beside its slice
    kernels = sorted(d for n, d in placed.items() if n.startswith('logits/dense/kernel/part_')
                     and 'Momentum' not in n)
    assert kernels == ['/job:ps/task:%d' % k for k in range(ps_tasks)]
    for name, device in placed.items():
        if name.startswith('logits/dense/kernel/part_') and name.endswith('/Momentum'):
            assert placed[name[:-len('/Momentum')]] == device
