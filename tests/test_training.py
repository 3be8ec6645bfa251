"""training.py's (and estimator.py's) own decisions, in process: what the first log lines say of the global batch
and the epochs; and a real run's session.run calls a step."""
import json
import os

import pytest

from mlimages.config import cpu
from mlimages.distributed import devices, distribute
import file_db
from mlimages.run import estimator, run_plan
from helpers import ENV, run_program, settings


def test_the_epochs_max_iter_makes(tmp_path):
    split = tmp_path / 'train'
    split.mkdir()
    for name in ('0.tfrecords', '1.tfrecords'):
        (split / name).write_bytes(b'')
    data = settings(data_dir=str(tmp_path), batch_size=8).data
    plan = distribute.plan('none', 1, 1, 0, 8, gpu_count=0, environ={})
    assert run_plan.describe_epochs(data, 300, plan) == (
        'global batch 8 images a global step; the number of training records is unknown (%s '
        'does not list every shard; the record tools write it)'
        % os.path.join(str(tmp_path), 'train', 'records.txt'))
    file_db.write_counts(str(split), {'0.tfrecords': 1000, '1.tfrecords': 1400})
    assert run_plan.describe_epochs(data, 300, plan) == (
        'global batch 8 images a global step; --max_iter=300 steps make 1.00 epochs of the '
        '2400 training records')
    assert run_plan.describe_epochs(data, -1, plan).endswith(
        '2400 training records, one epoch every 300 steps')


@pytest.mark.parametrize('gpus,dtype,layout,onednn,cpu_input_grad', [
    (0, 'fp32', 'channels_last', '0', True),
    (0, 'fp16', 'channels_last', '0', True),
    (0, 'fp32', 'channels_last', '1', False),  # oneDNN's own input gradient
    (1, 'fp32', 'channels_first', '0', False),
    (1, 'fp16', 'channels_last', '0', False),   # tensor cores' layout: no CPU gradient on it
    (8, 'bf16', 'channels_last', '1', False),
])
def test_layout_and_input_gradient_for_the_gpus_seen(monkeypatch, tmp_path, gpus, dtype,
                                                     layout, onednn, cpu_input_grad):
    """What a run builds as a process seeing `gpus` GPUs (devices.gpu_count, which starts
    the runtime, stands in for them) with TensorFlow's oneDNN kernels off or on (the
    environment variable; config/cpu.py): --data_format=auto's layout and whether resnet
    takes the forward-convolution input gradient."""
    monkeypatch.setattr(devices, 'gpu_count', lambda: gpus)
    monkeypatch.setenv(cpu.ONEDNN_ENV, onednn)
    given = settings(data_dir=str(tmp_path), model_dir=str(tmp_path / 'model'), dtype=dtype)
    assert given.model.data_format == 'auto'
    assert estimator.data_format(given.model) == layout
    assert estimator.derived_values(given).cpu_input_grad is cpu_input_grad


def test_a_training_step_is_one_session_run(tmp_path):
    """A real run (train.py's hooks, the Estimator's MonitoredSession, --log_interval=2):
    from each step's start to the next's the process makes one tf.Session.run, three at the
    steps where the Estimator's summary and step-rate hooks (every 2 steps from the first)
    read the global step themselves. The step tracker's read and TensorFlow's checkpoint
    saver's after every step (and the log line's) made them 5, 4, 5, 4, 5."""
    runs = str(tmp_path / 'runs.json')
    model_dir = str(tmp_path / 'model')
    result = run_program('tests/gated_train.py', '--use_synthetic_data', '--class_num=5',
                         '--resnet_size=18', '--image_size=32', '--batch_size=2',
                         '--max_iter=6', '--log_interval=2', '--snapshot=100',
                         '--data_format=NHWC', '--model_dir=' + model_dir,
                         '--log_dir=' + os.path.join(model_dir, 'log'),
                         env=dict(ENV, TRAIN_TEST_RUNS=runs))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(runs) as f:
        assert json.load(f) == [3, 1, 3, 1, 3]
    assert 'Saving checkpoints for 6 into' in result.stderr  # the end's checkpoint
