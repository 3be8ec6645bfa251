"""The original's inference preprocessing (extract_feature.py / image_classification.py:
shorter side 256 with OpenCV's bilinear, centre crop 224, [-1, 1]) against OpenCV itself."""
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import image_preprocess as ip

tf.disable_v2_behavior()


def original_preprocess(cv2, image, image_size=224):
    """The original's preprocess(img, 'center') written out with OpenCV and numpy (the 256
    scaled by image_size / 224 as this project does), on an RGB array."""
    side = float(ip.inference_resize_side(image_size))
    raw_h, raw_w = float(image.shape[0]), float(image.shape[1])
    new_h = new_w = side
    if raw_h <= raw_w:
        new_w = (raw_w / raw_h) * new_h
    else:
        new_h = (raw_h / raw_w) * new_w
    resized = cv2.resize(image, (int(new_w), int(new_h)))
    top, left = int((new_h - image_size) / 2), int((new_w - image_size) / 2)
    crop = resized[top:top + image_size, left:left + image_size]
    return ((crop / 255.0) - 0.5) * 2.0


def sample_images(rng, height, width):
    noise = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    y, x = np.mgrid[0:height, 0:width]
    smooth = np.stack([x * 255.0 / width, y * 255.0 / height, (x + y) * 127.0 / (width + height)],
                      -1) + rng.normal(0, 3, (height, width, 3))
    return [noise, np.clip(smooth, 0, 255).astype(np.uint8)]


SHAPES = [(500, 375), (375, 500), (300, 1000), (1000, 300), (257, 256), (224, 224),
          (100, 80), (512, 512), (37, 61), (3000, 2000)]


@pytest.mark.parametrize('image_size', [224, 299, 32])
def test_network_input_equals_opencvs(image_size):
    """Within float32 rounding (7.5e-6 / 255 seen): the resized uint8 pixels are OpenCV's,
    down- and up-scaling, both orientations, exact 2x reduction, one side unchanged."""
    cv2 = pytest.importorskip('cv2')
    rng = np.random.default_rng(image_size)
    shapes = SHAPES + [tuple(rng.integers(image_size // 2, 900, 2)) for _ in range(6)]
    with tf.Graph().as_default():
        image = tf.placeholder(tf.uint8, [None, None, 3])
        network_input = ip.original_inference_image(image, image_size)
        assert network_input.shape.as_list() == [image_size, image_size, 3]
        with tf.Session() as sess:
            for height, width in shapes:
                for pixels in sample_images(rng, height, width):
                    got = sess.run(network_input, {image: pixels})
                    want = original_preprocess(cv2, pixels, image_size)
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6,
                                               err_msg='%dx%d' % (height, width))


def test_resize_side_and_crop_geometry_follow_the_original():
    assert [ip.inference_resize_side(s) for s in (224, 299, 320, 32)] == [256, 342, 366, 37]
    shapes = [(500, 375), (375, 500), (300, 1000), (257, 256), (256, 256), (333, 777)]
    with tf.Graph().as_default(), tf.Session() as sess:
        got = sess.run([ip.shorter_side_shape(h, w, 256) for h, w in shapes])
    # the original: short side 256.0, long (long / short) * 256.0, int() of both
    assert [tuple(g) for g in got] == [(341, 256), (256, 341), (256, 853), (257, 256),
                                       (256, 256), (256, 597)]


def test_uniform_image_stays_exact_and_maps_to_minus_one_one():
    with tf.Graph().as_default(), tf.Session() as sess:
        image = tf.placeholder(tf.uint8, [None, None, 3])
        out = ip.original_inference_image(image)
        for value, want in [(0, -1.0), (255, 1.0), (51, 51 / 127.5 - 1.0)]:
            got = sess.run(out, {image: np.full((90, 130, 3), value, np.uint8)})
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
