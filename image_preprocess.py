"""One image in, one network input out (SPEC section 3).

Training: a random crop that covers at least `object_cover` of the image and
`area_cover`..100 % of its area, resized to the network size, flipped for half of the
images, then a per-image draw `thread_id` in {0, 1, 2} picks the extra distortions:
rotation (|angle| <= 45 deg) and colour ordering 0 for thread_id 0, colour ordering 1 for
thread_id 1, none for 2.
Evaluation: the central 80 % of the image, resized.
Both end in [-1, 1] with shape [size, size, 3]. Functions take explicit arguments.
"""
import math

import tensorflow.compat.v1 as tf

MAX_ROTATION = 45.0 * math.pi / 180.0


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
    return tf.stack([cos, -sin, x_offset, sin, cos, y_offset, zero, zero])


def rotate_image(image, angle):
    """Nearest-neighbour rotation of one [H, W, C] image about its centre, black fill."""
    shape = tf.shape(image)
    transform = rotation_transform(angle, shape[0], shape[1])
    rotated = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[tf.newaxis], transforms=transform[tf.newaxis],
        output_shape=shape[:2], fill_value=0.0,
        interpolation='NEAREST', fill_mode='CONSTANT')
    return rotated[0]


def color_ordering_0(image):
    """Brightness, saturation, hue, contrast."""
    image = tf.image.random_brightness(image, max_delta=32. / 255.)
    image = tf.image.random_saturation(image, lower=0.5, upper=1.5)
    image = tf.image.random_hue(image, max_delta=0.2)
    return tf.image.random_contrast(image, lower=0.5, upper=1.5)


def color_ordering_1(image):
    """Brightness, contrast, saturation, hue."""
    image = tf.image.random_brightness(image, max_delta=32. / 255.)
    image = tf.image.random_contrast(image, lower=0.5, upper=1.5)
    image = tf.image.random_saturation(image, lower=0.5, upper=1.5)
    return tf.image.random_hue(image, max_delta=0.2)


def distort_image(image, height, width, object_cover, area_cover):
    """Training distortion of a float [H, W, 3] image in [0, 1] (before the [-1, 1] map)."""
    with tf.name_scope('distort_image'):
        no_boxes = tf.zeros([1, 0, 4], tf.float32)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image), bounding_boxes=no_boxes,
            min_object_covered=object_cover, aspect_ratio_range=[0.75, 1.33],
            area_range=[area_cover, 1.0], max_attempts=100,
            use_image_if_no_bounding_boxes=True)
        image = tf.slice(image, begin, size)
        image = tf.image.resize(image, [height, width], method='bilinear')
        image.set_shape([height, width, 3])
        image = tf.image.random_flip_left_right(image)

        # The original's draw: maxval 3 although its comments speak of {0..3}.
        thread_id = tf.random.uniform([], minval=0, maxval=3, dtype=tf.int32, name='thread_id')
        angle = tf.random.uniform([], -MAX_ROTATION, MAX_ROTATION, name='angle')
        image = tf.cond(tf.equal(thread_id, 0), lambda: rotate_image(image, angle),
                        lambda: image)
        image = tf.cond(tf.equal(thread_id, 0), lambda: color_ordering_0(image),
                        lambda: image)
        image = tf.cond(tf.equal(thread_id, 1), lambda: color_ordering_1(image),
                        lambda: image)
        # The random_* colour ops do not clamp.
        return tf.clip_by_value(image, 0.0, 1.0)


def eval_image(image, height, width):
    """Central 80 % crop, bilinear resize to [height, width]."""
    with tf.name_scope('eval_image'):
        image = tf.image.central_crop(image, central_fraction=0.8)
        image = tf.image.resize(image, [height, width], method='bilinear')
        image.set_shape([height, width, 3])
        return image


def to_network_range(image):
    """[0, 1] -> [-1, 1]: (x - 0.5) * 2."""
    return (image - 0.5) * 2.0


def preprocess_image(image, image_size, is_training, object_cover=0.7, area_cover=0.7):
    """Float [H, W, 3] image in [0, 1] -> network input [image_size, image_size, 3] in [-1, 1]."""
    if is_training:
        image = distort_image(image, image_size, image_size, object_cover, area_cover)
    else:
        image = eval_image(image, image_size, image_size)
    return tf.reshape(to_network_range(image), [image_size, image_size, 3])
