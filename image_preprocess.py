"""One image in, one network input out (docs/original.md, Augmentation).

Training: a random crop that covers at least `object_cover` of the image and
`area_cover`..100 % of its area, resized to the network size, flipped for half of the
images, then a per-image draw `thread_id` in {0, 1, 2} picks the extra distortions:
rotation (|angle| <= 45 deg) and colour ordering 0 for thread_id 0, colour ordering 1 for
thread_id 1, none for 2.
Evaluation: the central 80 % of the image, resized. The window is TF 1.x's central_crop,
which took the fraction as a double: top = int((H - H * 0.8) / 2), height H - 2 * top
(a 500-pixel side keeps 400 from 50 on; TF 2's float32 fraction keeps 402).
Both end in [-1, 1] with shape [size, size, 3]. Functions take explicit arguments.

What the input pipeline runs (preprocess_encoded), cheapest first: the crop window is
drawn from the image's shape, the window is cut from the uint8 pixels (only the window
decoded when it may be small, see WINDOW_DECODE_BELOW) and resized on them; the float
conversion comes after the resize. Then either the rest of the original's augmentation per image
(augment_image, on the CPU), or uint8 batches go to the model, which finishes them
batched on the training device (network_input -> augment_batch: the same distribution,
every image drawing its own parameters). The original's float-first order itself is the
benchmark's reference pipeline (mlimages/bench/pipelines.py), which the tests also compare with.

Inference as the original's extract_feature.py / image_classification.py (preprocess(img,
'center'), OpenCV), for a network size S (224 there; other sizes scale the 256):
  side    = round(256 * S / 224)
  resized = cv2.resize to shorter side `side`, longer int(long / short * side), INTER_LINEAR
            on uint8: half-pixel centres, no antialiasing, OpenCV's fixed-point weights and
            rounding (opencv_resize_window), so the result is uint8 like OpenCV's
  crop    = S x S at top = (newH - S) // 2, left = (newW - S) // 2
  input   = (crop / 255 - 0.5) * 2
"""
import math

import tensorflow.compat.v1 as tf

MAX_ROTATION = 45.0 * math.pi / 180.0
ASPECT_RATIO_RANGE = (0.75, 1.33)
MAX_ATTEMPTS = 100
BRIGHTNESS_DELTA = 32. / 255.
SATURATION_RANGE = (0.5, 1.5)
HUE_DELTA = 0.2
CONTRAST_RANGE = (0.5, 1.5)
CENTRAL_FRACTION = 0.8


def decode_image(encoded, channels=3):
    """Encoded JPEG/PNG/GIF/BMP bytes -> float32 [H, W, channels] in [0, 1]."""
    image = tf.image.decode_image(encoded, channels=channels, expand_animations=False)
    return tf.image.convert_image_dtype(image, tf.float32)


def rotation_transform(angle, height, width):
    """The projective transform that rotates an image by `angle` radians about its centre.

    Maps an output pixel (x, y) to the input pixel it is read from:
      x_in = cos(a) x - sin(a) y + x_off,   y_in = sin(a) x + cos(a) y + y_off,
    with the offsets chosen so that the centre ((w-1)/2, (h-1)/2) stays put. With y
    pointing down, a positive angle turns the picture counter-clockwise on screen, as
    tf.contrib.image.rotate did.
    """
    w = tf.cast(width, tf.float32) - 1.0
    h = tf.cast(height, tf.float32) - 1.0
    cos, sin = tf.cos(angle), tf.sin(angle)
    x_offset = (w - (cos * w - sin * h)) / 2.0
    y_offset = (h - (sin * w + cos * h)) / 2.0
    zero = tf.zeros_like(angle)
    # angle [] -> [8]; angles [B] -> [B, 8]
    return tf.stack([cos, -sin, x_offset, sin, cos, y_offset, zero, zero], axis=-1)


def _round_half_away(x):
    """std::round, which the projective-transform kernel's nearest neighbour uses (tf.round
    rounds half to even)."""
    return tf.sign(x) * tf.floor(tf.abs(x) + 0.5)


def rotate_images(images, angles):
    """Nearest-neighbour rotation of a batch [B, H, W, C] about each centre by per-image
    angles [B] (radians; 0 leaves an image exactly as it is), black fill.

    The same pixels as tf.raw_ops.ImageProjectiveTransformV3 with rotation_transform,
    NEAREST, fill 0 (tf.contrib.image.rotate), computed as one gather: the source pixel of
    every output pixel from the transform, out-of-image sources reading a black pixel
    appended to each image (images of fewer than 2^24 pixels). The projective-transform kernel redoes the projection for every channel and
    costs about twice as much CPU (2.0 against 1.0 ms for a 224 x 224 image), which counts
    where the input pipeline rotates.
    """
    images = tf.convert_to_tensor(images)
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    t = rotation_transform(angles, height, width)[:, :, tf.newaxis, tf.newaxis]  # [B, 8, 1, 1]
    y, x = tf.meshgrid(tf.range(height, dtype=tf.float32), tf.range(width, dtype=tf.float32),
                       indexing='ij')
    # The kernel's arithmetic, in its order: in_x = t0 x + t1 y + t2, in_y = t3 x + t4 y + t5.
    x_in = _round_half_away(t[:, 0] * x + t[:, 1] * y + t[:, 2])
    y_in = _round_half_away(t[:, 3] * x + t[:, 4] * y + t[:, 5])
    # Index arithmetic in float32 (exact: every value is an integer below 2^24): on a GPU,
    # int32 AddV2/Mul/GreaterEqual/Fill keep their tensors in host memory, and [B, H, W]
    # of them would go to the host and back every step. One Cast makes the indices.
    h, w = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    inside = (x_in >= 0.0) & (x_in < w) & (y_in >= 0.0) & (y_in < h)
    pixel = tf.where(inside, y_in * w + x_in, tf.zeros_like(x_in) + h * w)  # H*W: black
    image_index = tf.zeros_like(x_in) + tf.range(tf.cast(batch, tf.float32))[
        :, tf.newaxis, tf.newaxis]
    source = tf.cast(tf.stack([image_index, pixel], axis=-1), tf.int32)   # [B, H, W, 2]
    channels = images.shape[-1] if images.shape[-1] is not None else shape[3]
    pixels = tf.reshape(images, [batch, -1, channels])
    pixels = tf.concat([pixels, tf.zeros([batch, 1, channels], images.dtype)], axis=1)
    rotated = tf.reshape(tf.gather_nd(pixels, source), shape)
    rotated.set_shape(images.shape)
    return rotated


def color_ordering_0(image):
    """Brightness, saturation, hue, contrast."""
    image = tf.image.random_brightness(image, max_delta=BRIGHTNESS_DELTA)
    image = tf.image.random_saturation(image, *SATURATION_RANGE)
    image = tf.image.random_hue(image, max_delta=HUE_DELTA)
    return tf.image.random_contrast(image, *CONTRAST_RANGE)


def color_ordering_1(image):
    """Brightness, contrast, saturation, hue."""
    image = tf.image.random_brightness(image, max_delta=BRIGHTNESS_DELTA)
    image = tf.image.random_contrast(image, *CONTRAST_RANGE)
    image = tf.image.random_saturation(image, *SATURATION_RANGE)
    return tf.image.random_hue(image, max_delta=HUE_DELTA)


def crop_window(image_shape, object_cover, area_cover, seed=None):
    """The original's random training crop, drawn from the image *shape* [H, W, C] alone.

    Returns (begin [y, x, 0], size [h, w, -1]): a window covering at least object_cover of
    the image and area_cover..100 % of its area, aspect ratio 3:4..4:3. The op ignores the
    graph seed; a non-zero `seed` makes the sequence of windows repeatable.
    """
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        image_shape, bounding_boxes=tf.zeros([1, 0, 4], tf.float32), seed=seed,
        min_object_covered=object_cover, aspect_ratio_range=list(ASPECT_RATIO_RANGE),
        area_range=[area_cover, 1.0], max_attempts=MAX_ATTEMPTS,
        use_image_if_no_bounding_boxes=True)
    return begin, size


def central_window(image_shape, fraction=CENTRAL_FRACTION):
    """(begin, size) of TF 1.x's central_crop(image, fraction) from the shape [H, W, C]:
    top = int((H - H * fraction) / 2) in double precision, height H - 2 * top (likewise
    for the width). TF 2 casts a fraction given as a Python float to float32 for images of
    unknown shape: 80 % of a 500-pixel side then starts at 49 and keeps 402 pixels, of a
    50-pixel side at 4 keeping 42, where TF 1.x (the original's evaluation) keeps 400, 40."""
    fraction = tf.constant(fraction, tf.float64)
    height, width = tf.cast(image_shape[0], tf.float64), tf.cast(image_shape[1], tf.float64)
    top = tf.cast((height - height * fraction) / 2, tf.int32)
    left = tf.cast((width - width * fraction) / 2, tf.int32)
    begin = tf.stack([top, left, 0])
    size = tf.stack([tf.cast(image_shape[0], tf.int32) - 2 * top,
                     tf.cast(image_shape[1], tf.int32) - 2 * left, -1])
    return begin, size


def central_crop_tf1(image, fraction):
    """The central `fraction` of an [H, W, C] image with TF 1.x's window (central_window)."""
    begin, size = central_window(tf.shape(image), fraction)
    return tf.slice(image, begin, size)


def decode_window(encoded, window_fn):
    """uint8 [h, w, 3]: the window `window_fn(shape) -> (begin, size)` of an encoded image,
    a JPEG decoded only inside the window (decode_and_crop_jpeg, the window chosen from
    extract_jpeg_shape before anything is decoded), PNG, GIF, BMP decoded whole and sliced.
    Grayscale and CMYK JPEGs come out as RGB like decode_image's. A JPEG truncated after
    the window decodes (the window's pixels are intact).
    """
    def jpeg():
        begin, size = window_fn(tf.image.extract_jpeg_shape(encoded))
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, lambda: decode_sliced(encoded, window_fn))
    image.set_shape([None, None, 3])
    return image


def decode_sliced(encoded, window_fn):
    """decode_window's result by decoding the whole image (any format, one op) and slicing."""
    image = tf.image.decode_image(encoded, channels=3, expand_animations=False)
    begin, size = window_fn(tf.shape(image))
    return tf.slice(image, begin, size)


# Decoding only the crop window pays when the window is small: measured on 500x375 JPEGs
# (tools/benchmark.py's), a window of 85 % of the area decodes no faster than the whole
# image, 50 % about 15 % faster, and the JPEG test around it costs its own share. So the
# window is decoded alone only for training crops that may be small (area_cover below
# this, e.g. the fine-tuning crop's 0.05); the 0.7 default and the evaluation crop (64 %)
# decode the whole image and slice.
WINDOW_DECODE_BELOW = 0.5


def decode_crop_resize(encoded, image_size, is_training, object_cover, area_cover,
                       crop_seed=None):
    """Encoded image -> float32 [S, S, 3] in [0, 255]: the training crop (random window,
    drawn from the image's shape; crop_seed: crop_window's seed) or the evaluation crop
    (central 80 %), resized bilinearly on the uint8 pixels. The conversion to [0, 1] comes
    after this (the original converts first: the values are the same, the work is on
    224 x 224 pixels instead of the whole image)."""
    if is_training:
        window_fn = lambda shape: crop_window(shape, object_cover, area_cover, crop_seed)
    else:
        window_fn = central_window
    if is_training and area_cover < WINDOW_DECODE_BELOW:
        image = decode_window(encoded, window_fn)
    else:
        image = decode_sliced(encoded, window_fn)
    image = tf.image.resize(image, [image_size, image_size], method='bilinear')
    image.set_shape([image_size, image_size, 3])
    return image


def augment_image(image, rotate=rotate_images):
    """The original's augmentation after the crop, on one resized float [S, S, 3] image in [0, 1]: random
    flip, then the per-image draw thread_id in {0, 1, 2}: 0 = rotation and colour ordering
    0, 1 = colour ordering 1, 2 = nothing; then clip to [0, 1]. `rotate` is a batch
    rotation like rotate_images (the benchmark's literal pipeline passes the original's
    projective-transform kernel)."""
    image = tf.image.random_flip_left_right(image)
    # The original's draw: maxval 3 although its comments speak of {0..3}.
    thread_id = tf.random.uniform([], minval=0, maxval=3, dtype=tf.int32, name='thread_id')
    angle = tf.random.uniform([], -MAX_ROTATION, MAX_ROTATION, name='angle')
    image = tf.cond(tf.equal(thread_id, 0),
                    lambda: rotate(image[tf.newaxis], angle[tf.newaxis])[0], lambda: image)
    image = tf.cond(tf.equal(thread_id, 0), lambda: color_ordering_0(image),
                    lambda: image)
    image = tf.cond(tf.equal(thread_id, 1), lambda: color_ordering_1(image),
                    lambda: image)
    # The random_* colour ops do not clamp.
    return tf.clip_by_value(image, 0.0, 1.0)


def eval_image(image, height, width):
    """Central 80 % crop (TF 1.x's window), bilinear resize to [height, width]."""
    with tf.name_scope('eval_image'):
        image = central_crop_tf1(image, CENTRAL_FRACTION)
        image = tf.image.resize(image, [height, width], method='bilinear')
        image.set_shape([height, width, 3])
        return image


def to_network_range(image):
    """[0, 1] -> [-1, 1]: (x - 0.5) * 2."""
    return (image - 0.5) * 2.0


def eval_network_input(image, image_size):
    """Float [H, W, 3] image in [0, 1] -> the evaluation crop as network input
    [image_size, image_size, 3] in [-1, 1] (inference's --preprocess=eval)."""
    image = eval_image(image, image_size, image_size)
    return tf.reshape(to_network_range(image), [image_size, image_size, 3])


# ------------------------------------------------------ the original's inference (OpenCV)

INFERENCE_SIZE = 224
INFERENCE_SIDE = 256
# OpenCV's INTER_LINEAR on uint8 works with weights in units of 1/2048.
_CV_WEIGHT_ONE = 2048.0


def inference_resize_side(image_size):
    """round(256 * image_size / 224): 256 for 224 (8 S / 7 is never a half-integer)."""
    return int(round(INFERENCE_SIDE * image_size / float(INFERENCE_SIZE)))


def shorter_side_shape(height, width, side):
    """(newH, newW) with the shorter side `side` and the longer int(long / short * side),
    in double precision as the original's Python floats (a square gets side x side)."""
    h, w = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
    side_f = tf.constant(float(side), tf.float64)
    new_h = tf.where(h <= w, side_f, h / w * side_f)
    new_w = tf.where(h <= w, w / h * side_f, side_f)
    return tf.cast(new_h, tf.int32), tf.cast(new_w, tf.int32)


def _cv_linear_taps(src, dst, start, count, clamp_weights):
    """Source indices and integer weights of output pixels start .. start + count - 1 of a
    src -> dst INTER_LINEAR resize along one axis, as OpenCV computes them:
      f = float32((d + 0.5) * (1 / (dst / src)) - 0.5) (double, then float),
      i = floor(f), t = f - i (float32),
      weights round((1 - t) * 2048), round(t * 2048) (half to even),
      taps i, i + 1 clamped to [0, src - 1].
    Horizontally (clamp_weights) a tap outside the image also sets t = 0 and i to the edge;
    vertically OpenCV keeps t, so both taps read the edge row with the weights split.
    """
    src_f, dst_f = tf.cast(src, tf.float64), tf.cast(dst, tf.float64)
    d = tf.cast(tf.range(start, start + count), tf.float64)
    f = tf.cast((d + 0.5) * (1.0 / (dst_f / src_f)) - 0.5, tf.float32)
    i = tf.floor(f)
    t = f - i
    i = tf.cast(i, tf.int32)
    if clamp_weights:
        outside = (i < 0) | (i >= src - 1)
        t = tf.where(outside, tf.zeros_like(t), t)
        i = tf.where(i < 0, tf.zeros_like(i), i)
    w0 = tf.cast(tf.round((1.0 - t) * _CV_WEIGHT_ONE), tf.int32)
    w1 = tf.cast(tf.round(t * _CV_WEIGHT_ONE), tf.int32)
    return (tf.clip_by_value(i, 0, src - 1), tf.clip_by_value(i + 1, 0, src - 1), w0, w1)


def opencv_resize_window(image, new_height, new_width, top, left, size):
    """The size x size window at (top, left) of cv2.resize(image, (new_width, new_height))
    with the default INTER_LINEAR, for a uint8 [H, W, C] image; uint8 like OpenCV's.

    OpenCV's fixed-point arithmetic: a row pass sums exactly in int32,
      r = p[x0] * a0 + p[x1] * a1,
    then the column pass as its SIMD code does (dropping low bits at each shift):
      out = (((r0 >> 4) * b0 >> 16) + ((r1 >> 4) * b1 >> 16) + 2) >> 2, saturated to uint8.
    Only the window's output pixels are computed. (An exact 2x reduction, which OpenCV
    hands to INTER_AREA, averages 2 x 2 pixels with the same result.)
    """
    shape = tf.shape(image)
    y0, y1, b0, b1 = _cv_linear_taps(shape[0], new_height, top, size, clamp_weights=False)
    x0, x1, a0, a1 = _cv_linear_taps(shape[1], new_width, left, size, clamp_weights=True)
    a0, a1 = a0[tf.newaxis, :, tf.newaxis], a1[tf.newaxis, :, tf.newaxis]
    b0, b1 = b0[:, tf.newaxis, tf.newaxis], b1[:, tf.newaxis, tf.newaxis]

    def row_pass(rows):
        rows = tf.cast(tf.gather(image, rows), tf.int32)
        return tf.gather(rows, x0, axis=1) * a0 + tf.gather(rows, x1, axis=1) * a1

    shift = tf.bitwise.right_shift
    r0, r1 = shift(row_pass(y0), 4), shift(row_pass(y1), 4)
    out = shift(shift(r0 * b0, 16) + shift(r1 * b1, 16) + 2, 2)
    return tf.cast(tf.clip_by_value(out, 0, 255), tf.uint8)


def decode_uint8_like_opencv(encoded):
    """Encoded image -> uint8 RGB [H, W, 3] with the pixels cv2.imread gives (in RGB order):
    a JPEG through the accurate integer IDCT (dct_method INTEGER_ACCURATE, libjpeg's
    default, which OpenCV uses; TensorFlow's default fast IDCT is off by up to 9 levels),
    other formats by decode_image. EXIF orientation is not applied (cv2.imread applies it)."""
    def jpeg():
        return tf.io.decode_jpeg(encoded, channels=3, dct_method='INTEGER_ACCURATE')

    def other():
        return tf.image.decode_image(encoded, channels=3, expand_animations=False)

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    image.set_shape([None, None, 3])
    return image


def original_inference_image(image, image_size=INFERENCE_SIZE):
    """Decoded uint8 RGB [H, W, 3] (any size) -> float32 [S, S, 3] in [-1, 1], the original's
    inference preprocessing (module docstring): shorter side resized to
    inference_resize_side(S) with OpenCV's bilinear, the central S x S, (x / 255 - 0.5) * 2
    (in double, as the original's numpy, then float32)."""
    with tf.name_scope('original_inference_image'):
        shape = tf.shape(image)
        new_h, new_w = shorter_side_shape(shape[0], shape[1], inference_resize_side(image_size))
        # = the original's int((newH - S) / 2) on the unrounded newH, as floor(x / 2)
        # = floor(floor(x) / 2) for x >= 0
        top, left = (new_h - image_size) // 2, (new_w - image_size) // 2
        crop = opencv_resize_window(image, new_h, new_w, top, left, image_size)
        crop = tf.cast(crop, tf.float64) / 255.0
        crop = tf.cast((crop - 0.5) * 2.0, tf.float32)
        crop.set_shape([image_size, image_size, 3])
        return crop


# ------------------------------------------------------------------ batched augmentation

def _per_image(values, rank=4):
    return tf.reshape(values, [-1] + [1] * (rank - 1))


def adjust_contrast_batch(images, factors):
    """tf.image.adjust_contrast with a factor per image: (x - mean) * f + mean, the mean
    per image and channel."""
    mean = tf.reduce_mean(images, axis=[1, 2], keepdims=True)
    return (images - mean) * _per_image(factors) + mean


def adjust_saturation_hue_batch(images, saturation, hue):
    """tf.image.adjust_saturation then tf.image.adjust_hue with per-image factors, in one
    HSV round trip: s <- clip(s * saturation, 0, 1), h <- (h + hue) mod 1."""
    h, s, v = tf.unstack(tf.image.rgb_to_hsv(images), axis=-1)
    s = tf.clip_by_value(s * _per_image(saturation, 3), 0.0, 1.0)
    h = h + _per_image(hue, 3)
    h = h - tf.floor(h)
    return tf.image.hsv_to_rgb(tf.stack([h, s, v], axis=-1))


def _colour_batch(images, ordering):
    n = tf.shape(images)[0]
    brightness = tf.random.uniform([n], -BRIGHTNESS_DELTA, BRIGHTNESS_DELTA)
    saturation = tf.random.uniform([n], *SATURATION_RANGE)
    hue = tf.random.uniform([n], -HUE_DELTA, HUE_DELTA)
    contrast = tf.random.uniform([n], *CONTRAST_RANGE)
    images = images + _per_image(brightness)
    if ordering == 1:
        images = adjust_contrast_batch(images, contrast)
    images = adjust_saturation_hue_batch(images, saturation, hue)
    if ordering == 0:
        images = adjust_contrast_batch(images, contrast)
    return images


def augment_batch(images):
    """augment_image for a batch [B, S, S, 3] of float images in [0, 1]: every image draws
    its own flip, thread_id, angle and colour factors from the original's distributions;
    each transform runs only on the images that drew it."""
    with tf.name_scope('augment_batch'):
        static_shape = images.shape
        n = tf.shape(images)[0]
        flip = tf.random.uniform([n]) < 0.5
        images = tf.where(flip, tf.reverse(images, [2]), images)
        thread_id = tf.random.uniform([n], minval=0, maxval=3, dtype=tf.int32)
        parts = tf.dynamic_partition(images, thread_id, 3)
        positions = tf.dynamic_partition(tf.range(n), thread_id, 3)
        rotate = tf.random.uniform(tf.shape(parts[0])[:1], -MAX_ROTATION, MAX_ROTATION)
        parts[0] = _colour_batch(rotate_images(parts[0], rotate), 0)
        parts[1] = _colour_batch(parts[1], 1)
        images = tf.dynamic_stitch(positions, parts)
        images.set_shape(static_shape)  # static batch size for XLA and the layers
        return tf.clip_by_value(images, 0.0, 1.0)


# ------------------------------------------------------------------ encoded image -> input

def preprocess_encoded(encoded, image_size, is_training, object_cover, area_cover,
                       on_device=False, crop_seed=None):
    """Encoded image -> one network input, what the input pipeline does per record
    (crop_seed: the training crop's seed, decode_crop_resize).

    on_device False: float32 [S, S, 3] in [-1, 1], the original's augmentation in full (the crop resized
    on the uint8 pixels, then [0, 1], augment_image when training).
    on_device True: uint8 [S, S, 3], the crop resized and rounded; network_input finishes
    it batched on the training device.
    """
    image = decode_crop_resize(encoded, image_size, is_training, object_cover, area_cover,
                               crop_seed)
    if on_device:
        # Bilinear weights sum to 1, so the values stay in [0, 255]: round half up, no clip.
        return tf.cast(image + 0.5, tf.uint8)
    image = image * (1.0 / 255.0)
    if is_training:
        image = augment_image(image)
    return to_network_range(image)


def network_input(images, training):
    """A batch from the input pipeline -> the network's [B, S, S, 3] float32 in [-1, 1].

    uint8 batches (augment_on='device') get the original's flip, rotation and colour
    here, batched (augment_batch), when training; float batches are already finished.
    """
    if images.dtype != tf.uint8:
        return images
    with tf.name_scope('network_input'):
        images = tf.cast(images, tf.float32) * (1.0 / 255.0)
        if training:
            images = augment_batch(images)
        return to_network_range(images)
