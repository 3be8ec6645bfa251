"""docs/original.md, Augmentation: shapes, range, evaluation determinism and geometry, rotation direction."""
import io
import math

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import image_preprocess as ip

tf.disable_v2_behavior()


def run(fn, *values):
    with tf.Graph().as_default():
        tensors = [tf.constant(v) for v in values]
        out = fn(*tensors)
        with tf.Session() as sess:
            return sess.run(out)


def legacy_bilinear(image, size):
    """Numpy bilinear resize as TF1's resize_bilinear(align_corners=False)."""
    h, w = image.shape[:2]
    ys, xs = np.arange(size) * (h / size), np.arange(size) * (w / size)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    top = image[y0][:, x0] * (1 - fx) + image[y0][:, x1] * fx
    bottom = image[y1][:, x0] * (1 - fx) + image[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy


def test_eval_is_central_80_percent_then_bilinear_and_deterministic():
    rng = np.random.default_rng(0)
    image = rng.random((50, 70, 3)).astype(np.float32)
    got = run(lambda x: ip.preprocess_image(x, 32, is_training=False), image)
    again = run(lambda x: ip.preprocess_image(x, 32, is_training=False), image)
    np.testing.assert_array_equal(got, again)
    crop = image[5:45, 7:63]  # 10 % off each side
    want = (legacy_bilinear(crop, 32) - 0.5) * 2
    np.testing.assert_allclose(got, want, atol=1e-5)


def window(side, dynamic, fraction=0.8):
    with tf.Graph().as_default():
        image = np.zeros((side, side + 20, 1), np.float32)
        if dynamic:
            image = tf.placeholder_with_default(image, [None, None, 1])
        begin, size = ip.central_window(tf.shape(image), fraction)
        crop = ip.central_crop_tf1(tf.convert_to_tensor(image), fraction)
        with tf.Session() as sess:
            b, s, c = sess.run([begin, size, tf.shape(crop)])
    assert c.tolist() == [s[0], s[1], 1]
    return b.tolist(), s.tolist()


def test_central_crop_keeps_tf1_window():
    """TF 1.x: top = int((n - n * f) / 2) with f a double; 500 -> 400 from 50 on."""
    assert window(500, dynamic=True) == ([50, 52, 0], [400, 416, -1])
    assert window(500, dynamic=False) == ([50, 52, 0], [400, 416, -1])
    assert window(50, dynamic=True) == ([5, 7, 0], [40, 56, -1])
    for n in [1, 7, 99, 224, 255, 375, 640, 999]:
        top = int((n - n * 0.8) / 2)
        assert window(n, dynamic=True)[0][0] == top
    # TF 2's own central_crop on an image of unknown shape: float32 0.8, 402 of 500
    with tf.Graph().as_default(), tf.Session() as sess:
        image = tf.placeholder_with_default(np.zeros((500, 500, 1), np.float32), [None, None, 1])
        assert sess.run(tf.shape(tf.image.central_crop(image, 0.8))).tolist() == [402, 402, 1]


def test_training_output_shape_range_and_variety():
    rng = np.random.default_rng(1)
    # Large enough that two draws of the same crop window (and flip, and no distortion)
    # are unlikely among 12 samples.
    image = rng.random((240, 180, 3)).astype(np.float32)
    with tf.Graph().as_default():
        out = ip.preprocess_image(tf.constant(image), 40, is_training=True)
        assert out.shape.as_list() == [40, 40, 3]
        with tf.Session() as sess:
            samples = [sess.run(out) for _ in range(12)]
    for s in samples:
        assert s.shape == (40, 40, 3)
        assert s.min() >= -1.0 and s.max() <= 1.0
    assert len({s.tobytes() for s in samples}) == len(samples)


def marker_image(size=21):
    image = np.zeros((size, size, 1), np.float32)
    image[2, size // 2] = 1.0  # top centre
    return image


def rotate_one(image, angle):
    return ip.rotate_images(image[tf.newaxis], tf.constant([angle], tf.float32))[0]


def test_rotation_is_counter_clockwise_about_the_centre():
    rotated = run(lambda x: rotate_one(x, math.pi / 2), marker_image())
    ys, xs = np.nonzero(rotated[..., 0])
    assert (ys.tolist(), xs.tolist()) == ([10], [2])  # top centre -> left centre


def test_rotation_nearest_neighbour_black_fill_and_identity():
    rng = np.random.default_rng(2)
    image = rng.integers(1, 255, size=(16, 24, 3)).astype(np.float32)
    same = run(lambda x: rotate_one(x, 0.0), image)
    np.testing.assert_array_equal(same, image)
    turned = run(lambda x: rotate_one(x, 0.6), image)
    assert set(np.unique(turned)) <= set(np.unique(image)) | {0.0}
    assert turned[0, 0].tolist() == [0, 0, 0]  # a corner rotated in from outside


@pytest.mark.parametrize('mode,fmt', [('RGB', 'JPEG'), ('L', 'JPEG'), ('RGBA', 'PNG')])
def test_decode_gives_three_channels_in_unit_range(mode, fmt):
    buf = io.BytesIO()
    Image.new(mode, (9, 7), color=200 if mode == 'L' else (200, 100, 50, 255)[:len(mode)]).save(
        buf, fmt)
    decoded = run(lambda b: ip.decode_image(b), np.array(buf.getvalue()))
    assert decoded.shape == (7, 9, 3)
    assert decoded.dtype == np.float32 and 0.0 <= decoded.min() <= decoded.max() <= 1.0
