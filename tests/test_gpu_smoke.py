"""tools/gpu_smoke.sh: its syntax, and real runs on this CPU-only machine (ResNet-18, tiny
images): one process on one device, and the one-process-a-GPU mode as a local collective
job of 2 tasks (RING between CPU processes); the summary line names what each run saw."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import ENV, ROOT

SCRIPT = os.path.join(ROOT, 'tools', 'gpu_smoke.sh')


def test_script_parses():
    if shutil.which('bash') is None:
        pytest.skip('no bash')
    subprocess.run(['bash', '-n', SCRIPT], check=True)


def smoke_line(tmp_path, **settings):
    """The one summary line of a tiny ResNet-18 smoke run with these settings."""
    env = dict(ENV, DTYPES='fp32', RESNET_SIZE='18', BATCH_SIZE='2', IMAGE_SIZE='32',
               PYTHON=sys.executable, OUT=str(tmp_path), **settings)
    env = {k: v for k, v in env.items() if v is not None}
    result = subprocess.run(['bash', SCRIPT], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    line = [l for l in result.stdout.splitlines() if l.startswith('gpus=')]
    assert len(line) == 1, result.stdout
    return line


@pytest.mark.slow
def test_one_cpu_run_prints_what_it_saw(tmp_path):
    line = smoke_line(tmp_path, NUM_GPUS='1', VISIABLE_GPU='-1')
    assert re.match(r'gpus=1 mode=mirrored dtype=fp32  cuda_visible=none  sees=0  replicas=1  '
                    r'global_batch=2  images/s=[0-9.]+  estimate=[0-9.]+GB  gpu_used=\?  '
                    r'status=ok$', line[0]), line[0]
    assert os.path.isfile(os.path.join(str(tmp_path), 'gpus1_mirrored_fp32.log'))


@pytest.mark.slow
def test_one_process_a_gpu_runs_as_a_collective_job_on_cpus(tmp_path):
    # Without CUDA_VISIBLE_DEVICES the launcher hands out GPU ids 0 and 1.
    line = smoke_line(tmp_path, NUM_GPUS='2', MODES='processes', CUDA_VISIBLE_DEVICES=None)
    # Each task got its own GPU, saw none here, trained one replica; the job's global
    # batch is both tasks' (2 x 2).
    assert re.match(r'gpus=2 mode=processes dtype=fp32  cuda_visible=chief:0=0,worker:0=1  '
                    r'sees=0  replicas=1  global_batch=4  images/s=[0-9.]+  estimate=[0-9.]+GB  '
                    r'gpu_used=\?  status=ok$',
                    line[0]), line[0]
    log = open(os.path.join(str(tmp_path), 'gpus2_processes_fp32.log')).read()
    assert 'implementation = CommunicationImplementation.RING' in log
    # The worker saves its checkpoints too, but no graph.pbtxt or meta graph: the chief's.
    model_dir = os.path.join(str(tmp_path), 'gpus2_processes_fp32', 'model')
    chief, worker = os.listdir(model_dir), os.listdir(os.path.join(model_dir, 'tmp_worker_0'))
    assert 'graph.pbtxt' in chief and any(n.endswith('.meta') for n in chief), chief
    assert any(n.endswith('.index') for n in worker), worker
    assert not [n for n in worker if n == 'graph.pbtxt' or n.endswith('.meta')], worker
