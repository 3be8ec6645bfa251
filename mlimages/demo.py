"""`train.py --demo`: a dataset that can be learned in minutes on a CPU, end to end.

It draws JPEG images of 1-2 coloured shapes on a noisy background; each (shape, colour)
pair is a class, so an image has 1-2 positive labels (12 classes). The images go through
the same path as real data (an image list -> make_tfrecords.build_records -> shards in
<demo_dir>/data/{train,val}), a ResNet-18 at 48x48 trains on them with train.py's code,
and the demo then reports how much it learned (report):

  mAP margin  validation mAP (evaluation.evaluate_latest) - the label-frequency
              baseline's mAP
  loss trend  mean weighted cross_entropy of the last quarter of the steps / the first
              quarter's (read back from the TensorBoard events, one value a step)
  learned     mAP margin >= MAP_MARGIN and loss trend <= LOSS_TREND

The run is deterministic (--deterministic: seeded, op determinism): the same command on
the same machine prints the same figures. train.py runs it (prepare, training.train,
report); nothing in training depends on it.
"""
import glob
import os

import numpy as np
import tensorflow.compat.v1 as tf
from PIL import Image, ImageDraw

from mlimages.config import interpreter
import flags
from mlimages.run import evaluation
from mlimages.recordkit import make_tfrecords

SHAPES = ['circle', 'square', 'triangle', 'cross']
# Red and cyan are 180 degrees of hue apart and white has none, so the training hue
# jitter (up to +-72 degrees) never turns one colour class into another.
COLOURS = {'red': (235, 35, 35), 'cyan': (30, 220, 220), 'white': (245, 245, 245)}
CLASSES = ['%s %s' % (colour, shape) for shape in SHAPES for colour in COLOURS]
IMAGE_PIXELS = 64
# The data directory under --demo_dir: the images' shards.
DATA = 'data'

# Demo training settings; any of them given on the command line wins.
SETTINGS = {
    'class_num': len(CLASSES), 'resnet_size': 18, 'image_size': 48, 'batch_size': 16,
    # The weighted loss sums over classes with positive weight 12, so a logit's gradient is
    # up to ~150x a mean sigmoid loss's: a small learning rate (the measurements behind
    # these settings are in docs/demo.md). A short run needs fast batch-norm averages
    # for its evaluation.
    'lr': 0.001, 'batch_norm_decay': 0.9, 'weight_decay': 1e-4, 'max_iter': 1200,
    # Summaries every step: the learning curve (and the first / last 10 % comparison
    # below) then averages 120 steps at each end instead of 12 noisy single steps.
    'log_interval': 50, 'summary_interval': 1, 'snapshot': 500, 'shuffle_buffer': 1000,
    'data_format': 'NHWC', 'num_preprocess_threads': 0,
    # The same figures every time: seeds, op determinism, the input in a seeded order.
    'deterministic': True,
}
# The verdict's margins (docs/demo.md): the shipped settings reach mAP +0.686 and a loss
# trend of 0.479, a run that learns nothing (--lr=1e-9) +0.014 and 0.861 -- its weighted
# loss falls too, as a class's weight drops while it recurs batch after batch.
MAP_MARGIN = 0.30
LOSS_TREND = 0.75
TRAIN_IMAGES, VAL_IMAGES = 2400, 400


def draw_shape(draw, shape, centre, radius, colour):
    x, y = centre
    r = radius
    if shape == 'circle':
        draw.ellipse([x - r, y - r, x + r, y + r], fill=colour)
    elif shape == 'square':
        draw.rectangle([x - r, y - r, x + r, y + r], fill=colour)
    elif shape == 'triangle':
        draw.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=colour)
    elif shape == 'cross':
        t = max(2, r // 3)
        draw.rectangle([x - r, y - t, x + r, y + t], fill=colour)
        draw.rectangle([x - t, y - r, x + t, y + r], fill=colour)


def make_image(rng):
    """One RGB image and the sorted class indices it shows."""
    background = rng.integers(50, 110) + rng.integers(-12, 13, size=3)  # dull, near grey
    noise = rng.integers(-20, 21, size=(IMAGE_PIXELS, IMAGE_PIXELS, 3))
    pixels = np.clip(background + noise, 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    draw = ImageDraw.Draw(image)
    classes = set()
    # One or two objects, each in its own quadrant, so they never overlap and mostly
    # survive the training crop (>= 70 % of the area).
    for cell in rng.permutation(4)[:rng.integers(1, 3)]:
        cls = int(rng.integers(len(CLASSES)))
        shape, colour = SHAPES[cls // len(COLOURS)], list(COLOURS.values())[cls % len(COLOURS)]
        cx = 16 + (cell % 2) * 32 + rng.integers(-2, 3)
        cy = 16 + (cell // 2) * 32 + rng.integers(-2, 3)
        draw_shape(draw, shape, (cx, cy), int(rng.integers(11, 15)), colour)
        classes.add(cls)
    return image, sorted(classes)


def make_dataset(demo_dir, seed=0):
    """Writes the JPEGs and image lists, then the shards, under demo_dir (made if need be);
    returns the data_dir, demo_dir/data."""
    data_dir = os.path.join(demo_dir, DATA)
    if (glob.glob(os.path.join(data_dir, 'train', '*.tfrecords'))
            and glob.glob(os.path.join(data_dir, 'val', '*.tfrecords'))):
        print('demo: using the existing dataset in %s' % data_dir)
        return data_dir
    rng = np.random.default_rng(seed)
    image_root = os.path.join(demo_dir, 'images')
    os.makedirs(image_root, exist_ok=True)
    for split, count, shards in (('train', TRAIN_IMAGES, 4), ('val', VAL_IMAGES, 1)):
        list_path = os.path.join(demo_dir, '%s_list.txt' % split)
        with open(list_path, 'w') as lines:
            for i in range(count):
                image, classes = make_image(rng)
                name = '%s_%05d.jpg' % (split, i)
                image.save(os.path.join(image_root, name), quality=90)
                lines.write('%s\t%s\n' % (name, ' '.join('%d:1' % c for c in classes)))
        print('demo: drew %d %s images, building %d shard(s)' % (count, split, shards))
        make_tfrecords.build_records(make_tfrecords.Inputs([list_path], image_root),
                                     make_tfrecords.Records(len(CLASSES)),
                                     make_tfrecords.Output(data_dir, split, shards))
    with open(os.path.join(demo_dir, 'dictionary.txt'), 'w') as f:
        f.write('category_index\tcategory_id\tindex_of_parent_category\tcategory name\n')
        for i, name in enumerate(CLASSES):
            f.write('%d\tdemo%05d\t-1\t%s\n' % (i, i, name))
    return data_dir


def scalar_series(model_dir, tag):
    """(steps, values) of a scalar tag from the TensorBoard event files in model_dir (the
    last value written for a step wins: a resumed run rewrites none)."""
    values = {}
    for path in sorted(glob.glob(os.path.join(model_dir, 'events.out.tfevents.*'))):
        for event in tf.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = value.simple_value
    steps = sorted(values)
    return np.array(steps), np.array([values[step] for step in steps])


def loss_trend(values):
    """Mean of the last quarter of a series over the mean of its first quarter."""
    k = max(1, len(values) // 4)
    return float(np.mean(values[-k:]) / np.mean(values[:k]))


def label_frequency_baseline(data_dir, threshold=0.7):
    """mAP and precision@1 of always predicting each class's frequency in val.

    A constant score ranks images at random, so each class's AP is its frequency; every
    image gets the most frequent class as its top-1.
    """
    labels = []
    for path in sorted(glob.glob(os.path.join(data_dir, 'val', '*.tfrecords'))):
        for record in tf.io.tf_record_iterator(path):
            example = tf.train.Example.FromString(record)
            labels.append(np.frombuffer(
                example.features.feature['label'].bytes_list.value[0], '<f4'))
    frequency = (np.stack(labels) >= threshold).mean(axis=0)
    return float(frequency[frequency > 0].mean()), float(frequency.max())


def demo_settings(settings, given):
    """The demo's Settings from the command line's (given: the names of the flags given on
    the command line, which win over SETTINGS): its data, model and log directories under
    --demo_dir unless given. Writes nothing (make_dataset builds the data)."""
    demo_dir = os.path.abspath(settings.task.demo_dir)
    changes = {name: value for name, value in SETTINGS.items() if name not in given}
    changes['data_dir'] = os.path.join(demo_dir, DATA)
    if 'model_dir' not in given:
        changes['model_dir'] = os.path.join(demo_dir, 'model')
    if 'log_dir' not in given:
        changes['log_dir'] = os.path.join(demo_dir, 'log')
    return flags.replace(settings, **changes)


def verdict(map_margin, trend):
    """'learned' when the mAP margin and the loss trend both clear their bars."""
    return 'learned' if map_margin >= MAP_MARGIN and trend <= LOSS_TREND else 'NOT learned'


def report(settings, estimator):
    """After training.train(settings): prints what the model learned (the module
    docstring's figures and verdict); returns (loss trend, the validation metrics)."""
    steps, ce = scalar_series(settings.output.model_dir, 'cross_entropy')
    trend = loss_trend(ce)
    result = evaluation.evaluate_latest(settings, estimator, evaluation.evaluation_files(
        settings.data, settings.model.class_num))
    base_map, base_p1 = label_frequency_baseline(settings.data.data_dir)
    margin = result['mAP'] - base_map
    print('\ndemo: validation mAP %.3f, label-frequency baseline %.3f: %+.3f (needs >= +%.2f);'
          ' precision@1 %.3f (baseline %.3f)' % (result['mAP'], base_map, margin, MAP_MARGIN,
                                                 result['precision@1'], base_p1))
    print('demo: weighted cross_entropy over %d steps, last quarter / first quarter: %.3f '
          '(needs <= %.2f)' % (len(ce), trend, LOSS_TREND))
    print('demo: %s' % verdict(margin, trend))
    print('demo: TensorBoard: %s --logdir %s' % (interpreter.script_command('tensorboard'),
                                                 settings.output.model_dir))
    return trend, result
