"""mlimages/bench/photos.py: the crop coverage against closed forms and a numpy model of
sample_distorted_bounding_box, and the photo shard helpers (no timings are asserted)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT
from mlimages.bench import photos
from mlimages.distributed import devices


def numpy_crop_sizes(height, width, samples, area=(0.7, 1.0), aspect=(0.75, 1.33),
                     attempts=100, seed=0):
    """(h, w) of training windows as sample_distorted_bounding_box draws them without
    boxes: an aspect r uniform in the range, h uniform between the heights whose area
    is the least and the most allowed (clipped to the image), w = rint(h r), the draw
    retried when the window misses the area range or the image, the whole image after
    `attempts` misses."""
    rng = np.random.default_rng(seed)
    total = float(height * width)
    out = []
    for _ in range(samples):
        size = (height, width)
        for _ in range(attempts):
            r = rng.uniform(*aspect)
            lo = int(np.rint(np.sqrt(area[0] * total / r)))
            hi = int(np.rint(np.sqrt(area[1] * total / r)))
            if np.rint(hi * r) > width:
                hi = int((width + 0.5 - 1e-7) / r)
            hi = min(hi, height)
            lo = min(lo, hi)
            h = lo + int(rng.integers(0, hi - lo + 1))
            w = int(np.rint(h * r))
            if w * h < area[0] * total:
                h += 1
                w = int(np.rint(h * r))
            if area[0] * total <= w * h <= area[1] * total and 0 < w <= width \
                    and 0 < h <= height:
                size = (h, w)
                break
        out.append(size)
    return np.array(out)


def test_training_crop_shares_match_the_closed_form_and_a_numpy_model():
    windows = photos.train_windows(1000, 1000, 3000)
    # A square's crops: area >= 0.7, aspect <= 4/3, so min(h, w) >= sqrt(0.7 * 3/4) * 1000.
    assert windows.min() >= int(np.sqrt(0.7 * 0.75) * 1000) - 1
    assert windows.max() <= 1000
    assert photos.upsampled_share(windows, 720) == 0.0
    assert photos.upsampled_share(windows, 1001) == 1.0
    for shape in ((1000, 1000), (750, 1000), (562, 1000)):
        tf_windows = windows if shape == (1000, 1000) else photos.train_windows(
            shape[0], shape[1], 3000)
        reference = numpy_crop_sizes(shape[0], shape[1], 3000)
        for s in (min(shape) * 0.78, min(shape) * 0.85, min(shape) * 0.95):
            assert photos.upsampled_share(tf_windows, s) == pytest.approx(
                photos.upsampled_share(reference, s), abs=0.04), (shape, s)


def test_eval_and_inference_windows_closed_form():
    for height, width in ((320, 427), (375, 500), (288, 512)):
        top, left = int((height - height * 0.8) / 2), int((width - width * 0.8) / 2)
        assert photos.eval_window(height, width) == (height - 2 * top, width - 2 * left)
    rows = {(s, n): (ev, infer) for s, n, _, ev, infer in
            photos.coverage_rows(short_sides=(256, 288, 342, 384), samples=50)}
    assert rows[(224, 256)] == (1.0, 0.0)   # 0.8 * 256 = 204 < 224; 256 >= 256
    assert rows[(224, 288)] == (0.0, 0.0)   # 230 >= 224
    assert rows[(299, 342)] == (1.0, 0.0)   # round(256 * 299 / 224) = 342
    assert rows[(320, 342)] == (1.0, 1.0)   # 366 > 342
    assert rows[(320, 384)] == (1.0, 0.0)   # 307 < 320
    assert rows[(224, 0)] == (0.0, 0.0)


def test_the_per_process_layout_gets_the_box_over_the_gpus_and_needs_rate_per_core():
    class Measured(object):
        name, rates, cores = 'cpu photos', [300.0], [2.0]  # 150 images/s a core
    share = devices.Share(4, 16, 8.0, 1, 1, None)  # 16 CPUs, a quota of 8 cores
    one, eight = photos.process_layout([Measured()], 1500.0, share)
    assert one == ('  one process a GPU, 1 on this box: each gets 8.00 cores (8 / 1); each '
                   'needs: cpu photos 10.0 (short 1.2x)')
    assert eight.startswith('  one process a GPU, 8 on this box: each gets 1.00 cores '
                            '(8 / 8); each needs: cpu photos 10.0 (short 10.0x)')


def test_stored_shapes_keep_the_aspect_with_short_side_n():
    for name, aspect in photos.ASPECTS:
        for n in (224, 320, 640):
            h, w = photos.stored_shape(aspect, n)
            assert h == n and abs(w / h - aspect) < 1.0 / n
        assert min(photos.stored_shape(aspect, 0)) == photos.BIG


def test_coverage_cli_prints_the_table():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'benchmark.py'), '--coverage',
         '--coverage_samples', '20'], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith('crop coverage') and 'train 16:9' in lines[1]
    assert len([l for l in lines if l.strip().startswith(('224 ', '299 ', '320 '))]) == \
        3 * (1 + len(photos.SHORT_SIDES))


@pytest.mark.slow
def test_photos_benchmark_runs_end_to_end(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'benchmark.py'), '--photos',
         '--shard_dir', str(tmp_path), '--num_photos', '4', '--num_images', '8',
         '--class_num', '50', '--batch_size', '2', '--shuffle_buffer', '4', '--seconds',
         '0.2', '--repeats', '1', '--warmup_batches', '1', '--short_side', '300'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for text in ('cpu photos@300', 'device imagenet@300', 'images/s/core',
                 'cores needed to feed 1 and 8 GPUs at 2375', 'photos / photos@300',
                 'one process a GPU, 8 on this box: each gets '):
        assert text in result.stdout, (text, result.stdout)
    assert os.path.isdir(str(tmp_path / 'photos_short300' / 'train'))
