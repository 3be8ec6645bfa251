"""training.py's own decisions, in process: what the first log lines say of the global batch
and the epochs."""
import os

import pytest

from mlimages.distributed import devices, distribute
import file_db
from mlimages.run import training
from helpers import options


def test_the_epochs_max_iter_makes(tmp_path):
    split = tmp_path / 'train'
    split.mkdir()
    for name in ('0.tfrecords', '1.tfrecords'):
        (split / name).write_bytes(b'')
    opts = options(data_dir=str(tmp_path), max_iter=300, batch_size=8)
    plan = distribute.plan('none', 1, 1, 0, 8, gpu_count=0, environ={})
    assert training.describe_epochs(opts, plan) == (
        'global batch 8 images a global step; the number of training records is unknown (%s '
        'does not list every shard; the record tools write it)'
        % os.path.join(str(tmp_path), 'train', 'records.txt'))
    file_db.write_counts(str(split), {'0.tfrecords': 1000, '1.tfrecords': 1400})
    assert training.describe_epochs(opts, plan) == (
        'global batch 8 images a global step; --max_iter=300 steps make 1.00 epochs of the '
        '2400 training records')
    forever = opts._replace(max_iter=-1)
    assert training.describe_epochs(forever, plan).endswith(
        '2400 training records, one epoch every 300 steps')


@pytest.mark.parametrize('gpus,dtype,layout,cpu_input_grad', [
    (0, 'fp32', 'channels_last', True),
    (0, 'fp16', 'channels_last', True),
    (1, 'fp32', 'channels_first', False),
    (1, 'fp16', 'channels_last', False),   # tensor cores' layout: no CPU gradient on it
    (8, 'bf16', 'channels_last', False),
])
def test_layout_and_input_gradient_for_the_gpus_seen(monkeypatch, tmp_path, gpus, dtype,
                                                     layout, cpu_input_grad):
    """What a run builds as a process seeing `gpus` GPUs (devices.gpu_count, which starts
    the runtime, stands in for them): --data_format=auto's layout and whether resnet takes
    the CPU's input gradient."""
    monkeypatch.setattr(devices, 'gpu_count', lambda: gpus)
    opts = options(data_dir=str(tmp_path), model_dir=str(tmp_path / 'model'), dtype=dtype)
    assert opts.data_format == 'auto'
    assert training.data_format(opts) == layout
    assert training.model_run(opts, layout).cpu_input_grad is cpu_input_grad
