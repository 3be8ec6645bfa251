"""tools/gpu_smoke.sh: its syntax, and one real run on this CPU-only machine (one config,
ResNet-18, tiny images): the summary line names what the run saw."""
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


@pytest.mark.slow
def test_one_cpu_run_prints_what_it_saw(tmp_path):
    env = dict(ENV, NUM_GPUS='1', DTYPES='fp32', RESNET_SIZE='18', BATCH_SIZE='2',
               IMAGE_SIZE='32', VISIABLE_GPU='-1', PYTHON=sys.executable,
               OUT=str(tmp_path))
    result = subprocess.run(['bash', SCRIPT], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    line = [l for l in result.stdout.splitlines() if l.startswith('gpus=')]
    assert len(line) == 1, result.stdout
    assert re.match(r'gpus=1 dtype=fp32  cuda_visible=none  sees=0  replicas=1  '
                    r'global_batch=2  images/s=[0-9.]+  status=ok$', line[0]), line[0]
    assert os.path.isfile(os.path.join(str(tmp_path), 'gpus1_fp32.log'))
