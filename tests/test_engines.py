"""tools/benchmark.py --engines (mlimages/bench/engines.py): a whole run on a small random
ResNet-18 and real JPEGs; the table's rows and columns, no timing asserted."""
import importlib.util
import os
import subprocess
import sys

from PIL import Image

from mlimages.config import cpu
from helpers import ENV, ROOT, smooth_pixels


def test_engines_prints_each_engine_and_dtype_with_its_agreement(tmp_path):
    images = tmp_path / 'images'
    images.mkdir()
    for i in range(3):
        Image.fromarray(smooth_pixels(40 + 9 * i, 50, i)).save(str(images / ('%d.jpg' % i)))
    (images / 'bad.jpg').write_text('not a JPEG\n')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'benchmark.py'), '--engines',
         '--engines_resnet_size', '18', '--engines_class_num', '7', '--engines_image_size',
         '32', '--engines_batch', '2', '--engines_batches', '1', '--engines_turns', '2',
         '--engines_images', str(images)],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith('benchmark.py: engines on ResNet-18, 32 px, 7 classes, batch 2')
    assert 'bfloat16 instructions: %s' % ('none' if not cpu.has_bf16(cpu.this_cpu()) else '') \
        in lines[0]
    assert lines[1].split()[:4] == ['engine', 'dtype', 'images/s', 'x']
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in lines[2:]}
    assert set(rows) == {(e, d) for e in ('tensorflow', 'openvino') for d in ('fp32', 'bf16')}
    # the baseline against itself: ratio 1, the same classes, cosine 1, no difference
    assert rows['tensorflow', 'fp32'][1:] == ['1.00', '100.0%', '100.0%', '1.00000', '/',
                                              '1.00000', '0']
    runs = [('openvino', 'fp32')] if importlib.util.find_spec('openvino') else []
    for variant in rows:
        if variant in runs:
            assert float(rows[variant][4]) > 0.999  # the lowest cosine
        elif variant != ('tensorflow', 'fp32'):
            assert rows[variant][:2] == ['not', 'run:'] or cpu.has_bf16(cpu.this_cpu())
    assert 'agreement with TensorFlow fp32 on 3 images' in result.stderr
