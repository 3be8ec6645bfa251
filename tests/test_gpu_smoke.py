"""tools/gpu_smoke.sh: its syntax, a bad setting, and its CPU dry run on this machine (no
GPU): the report it names holds the environment, every GPU row marked skipped, a tiny
ResNet-18 row and the one-process-a-GPU layout as a 2-task collective job (RING between
CPU processes), each row saying what its run saw."""
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


def test_script_is_shellcheck_clean():
    if shutil.which('shellcheck') is None:
        pytest.skip('no shellcheck (apt-get install shellcheck)')
    result = subprocess.run(['shellcheck', SCRIPT], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_a_bad_setting_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / 'out'
    result = subprocess.run(['bash', SCRIPT], env=dict(ENV, STEPS='forty', OUT=str(out)),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == ('gpu_smoke.sh: STEPS=forty is not a whole number; give e.g. '
                             'STEPS=1\n'), result.stderr
    assert not out.exists()


def table_rows(report):
    """{first cell: the other cells} of the report's Markdown table rows."""
    rows = {}
    for line in report.splitlines():
        if line.startswith('| ') and not line.startswith('| ---'):
            cells = [c.strip() for c in line.strip('|').split('|')]
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_cpu_dry_run_writes_the_report(tmp_path):
    env = dict(ENV, PYTHON=sys.executable, OUT=str(tmp_path), DRY_RUN='1')
    # Without CUDA_VISIBLE_DEVICES the launcher hands out GPU ids 0 and 1.
    del env['CUDA_VISIBLE_DEVICES']
    result = subprocess.run(['bash', SCRIPT], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    path = result.stdout.splitlines()[-1].split('the report: ')[1]
    assert path == str(tmp_path / 'report.md')
    report = open(path).read()
    assert re.search(r"build info: \{.*'cuda_version'", report), report
    assert re.search(r'\nPython 3[.0-9]+, TensorFlow 2[.0-9]+\n', report), report
    assert '**CPU dry run** (DRY_RUN=1)' in report
    rows = table_rows(report)
    # What each run saw: this process's devices, GPUs, replicas, global batch, speed.
    assert re.match(r'ResNet-18 \(32 px, CPU\) fp32 NHWC synthetic - unset 0 1 2 [0-9.]+ ok$',
                    ' '.join(rows.pop('cpu'))), report
    # Each task got its own GPU, saw none here, trained one replica; the job's global
    # batch is both tasks' (2 x 2).
    assert re.match(r'ResNet-18 \(32 px, CPU\) fp32 NHWC synthetic - chief:0=0,worker:0=1 '
                    r'0 1 4 [0-9.]+ ok$', ' '.join(rows.pop('processes x 2'))), report
    log = (tmp_path / 'runs' / 'processes.log').read_text()
    assert 'implementation = CommunicationImplementation.RING' in log
    # Every other row is a GPU row: cold and warm start, mirrored, the speed subset.
    gpu_rows = {name for name in rows if name != 'run'}
    assert {'cold', 'warm', 'mirrored x 2', 'speed_r50_fp16_NHWC_real_device'} <= gpu_rows
    assert all(rows[name][-1] == 'skipped (no GPU)' for name in gpu_rows), report
    for section in ('Memory at the estimated largest batch', 'AMP: nodes converted'):
        assert re.search('## %s.*\n\nskipped \\(no GPU' % section, report), report
