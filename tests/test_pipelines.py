"""mlimages/bench/pipelines.py: the benchmark's synthetic photographs and labels."""
import numpy as np

from helpers import encode_pixels as encode
from mlimages.bench import pipelines


def test_benchmark_images_are_photograph_sized_jpegs():
    pixels = pipelines.photo_like(np.random.default_rng(0))
    assert pixels.shape == (375, 500, 3) and pixels.dtype == np.uint8
    size = len(encode(pixels, quality=90))
    assert 50000 < size < 200000  # ImageNet-like bits per pixel, not noise, not flat
    tokens = pipelines.soft_labels(np.random.default_rng(1), 11166)
    assert 1 <= len(tokens) <= 9 and all(':' in t for t in tokens)
