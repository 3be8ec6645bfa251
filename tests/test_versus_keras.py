"""tools/benchmark.py --versus_keras: the table at a tiny size (no timing is asserted),
and the depths Keras has."""
import os
import subprocess
import sys

import pytest

from mlimages.bench import benchmark, versus_keras
from mlimages.config import cpu
from helpers import ROOT


def test_a_depth_without_keras_v2_is_a_usage_error(capsys):
    args = benchmark.build_parser().parse_args(['--versus_keras', '--resnet_size', '18'])
    assert versus_keras.main(args) == 2
    assert '--resnet_size=18: Keras has ResNet-V2 only at depths 50, 101, 152' in \
        capsys.readouterr().err


def test_bf16_is_compared_only_on_a_cpu_with_bfloat16():
    amx = cpu.Cpu('x', frozenset(['avx512f', 'amx_bf16']))
    assert versus_keras.dtypes(amx) == (['fp32', 'bf16'], None)
    compared, note = versus_keras.dtypes(cpu.Cpu('x', frozenset(['avx2'])))
    assert compared == ['fp32'] and note.startswith('bf16 not compared')


@pytest.mark.slow
def test_versus_keras_prints_both_sides_and_their_ratio():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES='')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'benchmark.py'), '--versus_keras',
         '--resnet_size', '50', '--keras_image_size', '32', '--keras_batch_size', '2',
         '--keras_class_num', '5', '--keras_steps', '1', '--keras_turns', '1'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == ('train.py vs Keras ResNet50V2: ResNet-50, batch 2, image 32, '
                        '5 classes')
    this = cpu.this_cpu()
    assert lines[1].startswith('CPU %s: oneDNN kernels ' % (this.model or 'unknown'))
    rows = [line.split() for line in lines if line.split()[:1] in (['fp32'], ['bf16'])
            and len(line.split()) == 7]  # not the line saying why bf16 is left out
    assert [row[0] for row in rows] == versus_keras.dtypes(this)[0]
    for row in rows:
        assert float(row[1]) > 0 and float(row[2]) > 0 and row[3].endswith('x')
        assert float(row[4]) > 0 and float(row[5]) > 0 and row[6].endswith('x')
