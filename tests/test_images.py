"""Tests of tools/images.py on real image files of every kind (conftest's `images`)."""
import io

import numpy as np
import pytest
from PIL import Image

from helpers import BAD_IMAGES as BAD, GOOD_IMAGES as GOOD
from tools import images as image_files


def test_load_image_keeps_rgb_and_grey_jpeg_bytes(images):
    for name in ('rgb.jpg', 'gray.jpg', 'sub/rgb2.jpeg'):
        data, width, height = image_files.load_image(str(images / name))
        assert data == (images / name).read_bytes()
        assert (width, height) == GOOD[name]


def test_load_image_reencodes_other_images_as_rgb_jpeg(images):
    for name in ('cmyk.jpg', 'alpha.png', 'palette.gif', 'grey16.png'):
        data, width, height = image_files.load_image(str(images / name), jpeg_quality=90)
        img = Image.open(io.BytesIO(data))
        assert (img.format, img.mode, img.size) == ('JPEG', 'RGB', GOOD[name])
        assert (width, height) == GOOD[name]
    pixels = lambda n: np.asarray(
        Image.open(io.BytesIO(image_files.load_image(str(images / n))[0])), np.float64)
    np.testing.assert_allclose(pixels('cmyk.jpg')[10, 25], (255, 0, 0), atol=12)
    alpha = pixels('alpha.png')
    np.testing.assert_allclose(alpha[14, 4], (0, 0, 0), atol=12)       # transparent
    np.testing.assert_allclose(alpha[14, 28], (10, 200, 30), atol=12)  # opaque
    np.testing.assert_allclose(pixels('grey16.png')[10, 15], [40000 >> 8] * 3, atol=3)


@pytest.mark.parametrize('name', sorted(BAD))
def test_load_image_rejects_bad_files(images, name):
    with pytest.raises(image_files.BadImageError, match=BAD[name]):
        image_files.load_image(str(images / name))
    with pytest.raises(image_files.BadImageError, match='directory'):
        image_files.load_image(str(images / 'sub'))
