"""docs/original.md, Augmentation: shapes, range, evaluation determinism and geometry, rotation direction."""
import io
import math

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import image_preprocess as ip
from helpers import encode_pixels as encode, run_session, smooth_pixels
from mlimages.bench import pipelines

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
    got = run(lambda x: ip.eval_network_input(x, 32), image)
    again = run(lambda x: ip.eval_network_input(x, 32), image)
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
        out = ip.to_network_range(pipelines.distort_image(tf.constant(image), 40, 40, 0.7, 0.7))
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


# ------------------------------------------- crop-window decoding, batched augmentation

def test_jpeg_window_decode_matches_full_decode_sliced():
    data = encode(smooth_pixels(60, 80), quality=95)
    with tf.Graph().as_default():
        window = lambda shape: (tf.constant([16, 24, 0]), tf.constant([24, 32, -1]))
        cropped = ip.decode_window(tf.constant(data), window)
        full = tf.image.decode_jpeg(data, channels=3)[16:40, 24:56]
        got, want = run_session([cropped, full])
    assert got.shape == (24, 32, 3) and got.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 2  # chroma at the edges


@pytest.mark.parametrize('fmt,mode', [('PNG', 'RGB'), ('PNG', 'RGBA'), ('GIF', 'P'),
                                      ('BMP', 'RGB'), ('JPEG', 'L'), ('JPEG', 'CMYK')])
def test_other_formats_and_modes_fall_back_and_give_rgb(fmt, mode):
    pixels = smooth_pixels(30, 40)
    image = Image.fromarray(pixels).convert(mode)
    buf = io.BytesIO()
    image.save(buf, fmt)
    with tf.Graph().as_default():
        encoded = tf.constant(buf.getvalue())
        train_image = ip.decode_crop_resize(encoded, 16, True, 0.7, 0.7)
        small_crop = ip.decode_crop_resize(encoded, 16, True, 0.0, 0.05)  # window decode
        eval_image = ip.decode_crop_resize(encoded, 16, False, 0.7, 0.7)
        got = run_session([train_image, small_crop, eval_image])
    for image in got:
        assert image.shape == (16, 16, 3)
        assert 0.0 <= image.min() and image.max() <= 255.0


def test_eval_window_is_tf1_central_crop_and_matches_the_float_path():
    data = encode(smooth_pixels(50, 70), quality=95)
    with tf.Graph().as_default():
        new = ip.preprocess_encoded(tf.constant(data), 32, False, 0.7, 0.7)  # crop unused
        old = ip.eval_network_input(ip.decode_image(tf.constant(data)), 32)
        begin, size = ip.central_window(tf.constant([50, 70, 3]))
        decoded = tf.placeholder_with_default(np.zeros((50, 70, 1), np.float32),
                                              [None, None, 1])
        want_shape = tf.shape(tf.image.central_crop(decoded, 0.8))
        got_new, got_old, b, s, want = run_session([new, old, begin, size, want_shape])
    # TF 1.x's window (double fraction: 5), not TF 2's central_crop on a decoded image (4)
    assert b.tolist() == [5, 7, 0] and s.tolist() == [40, 56, -1]
    assert want.tolist() == [42, 58, 1]
    # the window decode differs from the full one by a level or two at the window edges
    np.testing.assert_allclose(got_new, got_old, atol=0.01)
    assert np.abs(got_new - got_old).mean() < 1e-3


def test_training_crop_window_distribution():
    """The window is drawn from the shape alone with the original's (docs/original.md, Augmentation) bounds."""
    with tf.Graph().as_default():
        begin, size = ip.crop_window(tf.constant([375, 500, 3]), 0.7, 0.7)
        with tf.Session() as sess:
            draws = [sess.run([begin, size]) for _ in range(200)]
    areas = [s[0] * s[1] / (375.0 * 500) for _, s in draws]
    aspects = [s[1] / float(s[0]) for _, s in draws]
    assert min(areas) >= 0.69 and max(areas) <= 1.0
    assert min(aspects) >= 0.74 and max(aspects) <= 1.34
    for b, s in draws:
        assert b[0] + s[0] <= 375 and b[1] + s[1] <= 500 and b[2] == 0 and s[2] == -1
    assert len({tuple(b) + tuple(s) for b, s in draws}) > 100


def test_batched_colour_ops_equal_tensorflows_per_image_ops():
    rng = np.random.default_rng(3)
    images = rng.random((3, 9, 11, 3)).astype(np.float32)
    saturation, hue, contrast = [1.4, 0.6, 1.0], [0.15, -0.2, 0.0], [0.5, 1.5, 1.2]
    with tf.Graph().as_default():
        got = [ip.adjust_saturation_hue_batch(images, saturation, hue),
               ip.adjust_contrast_batch(images, contrast)]
        want = [tf.stack([tf.image.adjust_hue(tf.image.adjust_saturation(images[i],
                                                                         saturation[i]),
                                              hue[i]) for i in range(3)]),
                tf.stack([tf.image.adjust_contrast(images[i], contrast[i])
                          for i in range(3)])]
        got, want = run_session([got, want])
    np.testing.assert_allclose(got[0], want[0], atol=2e-5)
    np.testing.assert_allclose(got[1], want[1], atol=2e-5)


@pytest.mark.parametrize('height,width,dtype', [(16, 24, np.float32), (31, 20, np.uint8),
                                                (224, 224, np.float32)])
def test_rotation_gathers_the_projective_transform_kernels_pixels(height, width, dtype):
    rng = np.random.default_rng(height)
    images = rng.integers(1, 255, (40, height, width, 3)).astype(dtype)
    angles = rng.uniform(-ip.MAX_ROTATION, ip.MAX_ROTATION, 40).astype(np.float32)
    angles[:3] = [0.0, math.pi / 4, -math.pi / 4]
    with tf.Graph().as_default():
        got, want = run_session([ip.rotate_images(tf.constant(images), tf.constant(angles)),
                         pipelines.contrib_rotate_images(tf.constant(images),
                                                  tf.constant(angles))])
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[0], images[0])  # angle 0: the image as it is
    assert (got == 0).all(-1).sum() > (images == 0).all(-1).sum()  # black corners


def test_augment_batch_draws_spec_distribution_per_image():
    """300 copies of one image: about half flipped; a third untouched (thread_id 2), a
    third rotated (black corners: thread_id 0), a third only recoloured (thread_id 1)."""
    n = 300
    image = smooth_pixels(20, 20).astype(np.float32) / 255.0 * 0.8 + 0.1
    with tf.Graph().as_default():
        tf.set_random_seed(5)
        out = ip.augment_batch(tf.constant(np.repeat(image[None], n, 0)))
        got = run_session(out)
    assert got.shape == (n, 20, 20, 3) and got.min() >= 0.0 and got.max() <= 1.0
    same = np.array([np.allclose(g, image, atol=1e-6) for g in got])
    mirrored = np.array([np.allclose(g, image[:, ::-1], atol=1e-6) for g in got])
    untouched = same | mirrored
    # Rotated: four identical corners (black fill, then the same colour ops).
    corners = lambda g: np.stack([g[0, 0], g[0, -1], g[-1, 0], g[-1, -1]])
    rotated = np.array([np.ptp(corners(g), axis=0).max() < 1e-6 for g in got])
    coloured = ~untouched & ~rotated
    # (a rotation by less than ~4 degrees fills no corner of a 20-pixel image)
    for share in (untouched.mean(), rotated.mean(), coloured.mean()):
        assert 0.22 < share < 0.45, (untouched.mean(), rotated.mean(), coloured.mean())
    flipped = [np.abs(g - image[:, ::-1]).mean() < np.abs(g - image).mean()
               for g in got[untouched]]
    assert 0.3 < np.mean(flipped) < 0.7


def test_network_input_finishes_uint8_batches_and_passes_float_ones():
    images = np.random.default_rng(6).integers(0, 256, (4, 8, 8, 3)).astype(np.uint8)
    with tf.Graph().as_default():
        evaluated = ip.network_input(tf.constant(images), training=False)
        trained = ip.network_input(tf.constant(images), training=True)
        assert trained.shape.as_list() == [4, 8, 8, 3]  # static, as the model wants
        floats = tf.constant(np.zeros((2, 8, 8, 3), np.float32))
        assert ip.network_input(floats, True) is floats
        evaluated, trained = run_session([evaluated, trained])
    np.testing.assert_allclose(evaluated, images / 255.0 * 2 - 1, atol=1e-6)
    assert trained.dtype == np.float32 and -1 <= trained.min() and trained.max() <= 1


def rotate_images_int32(images, angles):
    """rotate_images as it was, with its index arithmetic in int32 (the reference)."""
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    t = ip.rotation_transform(angles, height, width)[:, :, tf.newaxis, tf.newaxis]
    y, x = tf.meshgrid(tf.range(height, dtype=tf.float32), tf.range(width, dtype=tf.float32),
                       indexing='ij')
    x_in = tf.cast(ip._round_half_away(t[:, 0] * x + t[:, 1] * y + t[:, 2]), tf.int32)
    y_in = tf.cast(ip._round_half_away(t[:, 3] * x + t[:, 4] * y + t[:, 5]), tf.int32)
    inside = (x_in >= 0) & (x_in < width) & (y_in >= 0) & (y_in < height)
    offsets = tf.range(batch)[:, tf.newaxis, tf.newaxis] * height * width
    source = tf.where(inside, offsets + y_in * width + x_in,
                      tf.fill(tf.shape(x_in), batch * height * width))
    pixels = tf.reshape(images, [-1, 3])
    pixels = tf.concat([pixels, tf.zeros([1, 3], images.dtype)], axis=0)
    return tf.reshape(tf.gather(pixels, source), shape)


@pytest.mark.parametrize('batch,height,width', [(40, 16, 24), (3, 224, 224), (2, 301, 97)])
def test_float32_index_rotation_gives_the_int32_versions_pixels(batch, height, width):
    rng = np.random.default_rng(width)
    images = rng.integers(1, 255, (batch, height, width, 3)).astype(np.float32)
    angles = rng.uniform(-math.pi, math.pi, batch).astype(np.float32)
    with tf.Graph().as_default():
        got, want = run_session([ip.rotate_images(tf.constant(images), tf.constant(angles)),
                                 rotate_images_int32(tf.constant(images),
                                                     tf.constant(angles))])
    np.testing.assert_array_equal(got, want)


# int32 ops of rank >= 3 whose GPU kernels keep int32 in device memory: the one Cast that
# makes the gather's indices, and the gather that reads them.
DEVICE_INT32 = ('Cast', 'GatherNd')


def test_device_augmentation_keeps_no_large_int32_tensor_on_host_memory_kernels():
    """augment_batch's graph (the batched flip, rotation, colour of --augment_on=device):
    every int32 tensor of rank >= 3 (or unknown rank) is made and read by Cast and
    GatherNd only -- none by the int32 AddV2/Mul/GreaterEqual/Fill/Select that TensorFlow's
    GPU kernels run on host memory."""
    with tf.Graph().as_default() as graph:
        ip.augment_batch(tf.placeholder(tf.float32, [None, 64, 64, 3]))
        found = []
        for op in graph.get_operations():
            for tensor in list(op.inputs) + list(op.outputs):
                rank = tensor.shape.ndims
                if tensor.dtype == tf.int32 and (rank is None or rank >= 3):
                    found.append((op.type, op.name, rank))
    assert found and {t for t, _, _ in found} <= set(DEVICE_INT32), found
