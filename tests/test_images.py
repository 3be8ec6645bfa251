"""Tests of mlimages/recordkit/images.py on real image files of every kind (conftest's `images`)."""
import io

import numpy as np
import pytest
from PIL import Image

from helpers import BAD_IMAGES as BAD, GOOD_IMAGES as GOOD
from mlimages import errors
from mlimages.recordkit import images as image_files


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
    with pytest.raises(errors.BadImageError, match=BAD[name]):
        image_files.load_image(str(images / name))
    with pytest.raises(errors.BadImageError, match='directory'):
        image_files.load_image(str(images / 'sub'))


# ------------------------------------------------------------------------ downscaling

def _jpeg(width, height, quality=90, mode='RGB'):
    from helpers import smooth_pixels
    pixels = smooth_pixels(height, width)
    if mode == 'L':
        pixels = pixels[:, :, 0]
    buf = io.BytesIO()
    Image.fromarray(pixels, mode).save(buf, 'JPEG', quality=quality)
    return buf.getvalue()


@pytest.mark.parametrize('width,height,short_side,expected', [
    (1600, 1200, 320, (427, 320)),    # 4:3 landscape
    (1067, 1600, 320, (320, 480)),    # 2:3 portrait: 479.85 -> 480
    (1920, 1080, 256, (455, 256)),    # 16:9
    (900, 900, 300, (300, 300)),
])
def test_downscale_keeps_aspect_and_short_side_is_n(width, height, short_side, expected):
    data, w, h, downscaled = image_files.downscale(_jpeg(width, height), short_side, 90)
    img = Image.open(io.BytesIO(data))
    assert downscaled and (w, h) == img.size == expected
    assert min(w, h) == short_side and img.format == 'JPEG' and img.mode == 'RGB'
    assert abs(w / h - width / height) <= 0.5 / short_side * max(w / h, h / w) + 1e-9
    assert image_files.downscaled_size(width, height, short_side) == expected


def test_downscale_keeps_small_images_byte_for_byte():
    for data in (_jpeg(500, 375), _jpeg(320, 700), _jpeg(40, 30, mode='L')):
        out, w, h, downscaled = image_files.downscale(data, 375, 90)
        assert out == data and not downscaled
        assert (w, h) == Image.open(io.BytesIO(data)).size


def test_downscale_is_lanczos_from_the_full_image_within_jpeg_noise():
    """The scaled decode (draft) + Lanczos against Lanczos on the fully decoded image."""
    from mlimages.bench.pipelines import photo_like
    pixels = photo_like(np.random.default_rng(3), 960, 1280)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, 'JPEG', quality=95)
    data, w, h, _ = image_files.downscale(buf.getvalue(), 240, 95)
    full = Image.open(io.BytesIO(buf.getvalue())).resize((w, h), Image.LANCZOS)
    got = np.asarray(Image.open(io.BytesIO(data)), np.float64)
    diff = got - np.asarray(full, np.float64)
    assert abs(diff.mean()) < 1.0 and np.sqrt((diff ** 2).mean()) < 6.0


def test_downscale_grey_stays_grey_and_non_jpeg_becomes_rgb_jpeg(images):
    data, w, h, _ = image_files.downscale(_jpeg(400, 300, mode='L'), 150)
    assert Image.open(io.BytesIO(data)).mode == 'L' and (w, h) == (200, 150)
    png = (images / 'alpha.png').read_bytes()          # 32 x 28, transparency
    data, w, h, downscaled = image_files.downscale(png, 14)
    img = Image.open(io.BytesIO(data))
    assert downscaled and (img.format, img.mode, img.size) == ('JPEG', 'RGB', (16, 14))


def test_downscale_rejects_undecodable_bytes(images):
    for name in ('trunc.jpg', 'text.jpg', 'empty.jpg'):
        with pytest.raises(errors.BadImageError):
            image_files.downscale((images / name).read_bytes(), 10)


def test_load_image_short_side_describes_what_is_stored(tmp_path):
    path = tmp_path / 'big.jpg'
    path.write_bytes(_jpeg(1000, 750))
    data, w, h = image_files.load_image(str(path), 90, short_side=300)
    assert (w, h) == Image.open(io.BytesIO(data)).size == (400, 300)
    assert image_files.load_image(str(path), 90, short_side=750)[0] == path.read_bytes()
    assert image_files.load_image(str(path), 90)[0] == path.read_bytes()
