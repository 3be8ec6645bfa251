"""docs/fine-tuning.md's "The published ML-Images checkpoints" commands, run as written on a
checkpoint in the original program's variable layout (its loss counters named Variable
and Variable_1, Momentum slots, global_step): classify with the ML-Images dictionary (this
project's table and the original's text), extract features, and fine-tune on one's own
multi-label image lists."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

from helpers import ENV, ROOT, run_program, run_train, small_run_flags, write_dataset

pytestmark = pytest.mark.slow

CLASSES = 5
DICTIONARY = ('category_index\tcategory_id\tindex_of_parent_category\tcategory name\n'
              '0\tn00002452\t-1\tthing\n1\tn00020827\t-1\tmatter\n'
              '2\tn00002684\t-1\tobject, physical object\n3\tn11425580\t-1\tatmospheric '
              'phenomenon\n4\tn05220461\t0\tbody part\n')


def original_layout_checkpoint(root):
    """A trained checkpoint rewritten with the original's names for the loss counters."""
    data = write_dataset(os.path.join(root, 'pretrain'))
    model_dir = os.path.join(root, 'pretrained')
    result = run_train(*small_run_flags(data, model_dir, 2), '--resnet_size=18',
                       '--batch_norm_decay=0')
    assert result.returncode == 0, result.stderr[-3000:]
    path = tf.train.latest_checkpoint(model_dir)
    reader = tf.train.load_checkpoint(path)
    rename = {'pos_count': 'Variable', 'neg_count': 'Variable_1'}
    published = os.path.join(root, 'ckpt-mlimages', 'model.ckpt')
    with tf.Graph().as_default():
        variables = {rename.get(name, name): tf.Variable(reader.get_tensor(name))
                     for name in reader.get_variable_to_shape_map()}
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver(variables).save(session, published, write_meta_graph=False)
    names = tf.train.load_checkpoint(published).get_variable_to_shape_map()
    assert {'Variable', 'Variable_1', 'global_step', 'logits/dense/kernel/Momentum'} <= \
        set(names) and 'pos_count' not in names
    return published


def tool(name, *args, cwd):
    return run_program(os.path.join('tools', name), *args, cwd=cwd)


def photos(directory, count=3):
    rng = np.random.default_rng(3)
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, size in enumerate([(640, 480), (480, 640), (500, 500)][:count]):
        path = os.path.join(directory, 'photo_%d.jpg' % i)
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3)).astype(np.uint8)).save(
            path, quality=90)
        paths.append(path)
    return paths


def test_classify_extract_and_fine_tune_with_a_published_checkpoint(tmp_path):
    work = str(tmp_path)
    checkpoint = original_layout_checkpoint(work)
    (tmp_path / 'dictionary_and_semantic_hierarchy.txt').write_text(DICTIONARY)
    images = photos(os.path.join(work, 'photos'))

    # Classify: the top 5 classes with their ML-Images names.
    result = tool('predict.py', '--checkpoint', checkpoint, '--class_dict',
                  'dictionary_and_semantic_hierarchy.txt', '--top_k', 5, 'photos/', cwd=work)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split('\t') for line in result.stdout.splitlines()]
    assert rows[0][:3] == ['image', 'rank', 'class'] and len(rows) == 1 + 5 * len(images)
    names = {row[-1] for row in rows[1:]}
    assert names <= {'thing', 'matter', 'object, physical object', 'atmospheric phenomenon',
                     'body part'}

    # ... and as the original's image_classification.py wrote it.
    (tmp_path / 'list.txt').write_text(''.join('%s\t0\n' % p for p in images))
    result = tool('predict.py', '--checkpoint', checkpoint, '--dictionary',
                  'dictionary_and_semantic_hierarchy.txt', '--format', 'original',
                  '--images', 'list.txt', '--result', 'label_pred.txt', '--top_k_pred', 5,
                  cwd=work)
    assert result.returncode == 0, result.stderr[-2000:]
    text = (tmp_path / 'label_pred.txt').read_text().splitlines()
    assert text[0] == '+++ the predictions of %s is:' % images[0]
    assert len(text) == 6 * len(images)

    # Features: one 512-vector (ResNet-18; 2048 for the published ResNet-101) an image.
    result = tool('extract_features.py', '--checkpoint', checkpoint, 'photos/', '-o',
                  'features.npy', cwd=work)
    assert result.returncode == 0, result.stderr[-2000:]
    features = np.load(str(tmp_path / 'features.npy'))
    assert features.shape == (len(images), 512) and np.all(np.isfinite(features))

    # Fine-tune on one's own multi-label lists: records, then train.py from the checkpoint
    # with a new head of 3 classes.
    list_lines = ['photo_0.jpg 0:1 2:1', 'photo_1.jpg 1:1', 'photo_2.jpg 0:1 1:0.6']
    (tmp_path / 'my_train.txt').write_text('\n'.join(list_lines) + '\n')
    (tmp_path / 'my_val.txt').write_text('\n'.join(list_lines[:2]) + '\n')
    for split, listing in (('train', 'my_train.txt'), ('val', 'my_val.txt')):
        result = tool('make_tfrecords.py', '--image_root', 'photos', '--out_dir', 'my_data',
                      '--class_num', 3, '--split', split, listing, cwd=work)
        assert result.returncode == 0, result.stderr[-2000:]
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'train.py'), '--data_dir=my_data',
         '--model_dir=my_model', '--log_dir=my_model/log', '--pretrain_ckpt=' + checkpoint,
         '--class_num=3', '--resnet_size=18', '--image_size=32', '--batch_size=2',
         '--lr=0.001', '--max_iter=2', '--mode=train_and_eval', '--test_interval=2',
         '--data_format=NHWC'],
        cwd=work, env=ENV, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'fine-tuning from %s' % checkpoint in result.stderr
    assert 'new head of 3 classes (the checkpoint\'s has %d)' % CLASSES in result.stderr
    assert 'evaluated ' in result.stderr and 'mAP = ' in result.stderr
    model_dir = str(tmp_path / 'my_model')
    tuned = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    original = tf.train.load_checkpoint(checkpoint)
    assert tuned.get_tensor('logits/dense/kernel').shape == (512, 3)
    # Restored, then trained: the run's step-0 checkpoint holds the published stem and batch
    # norm statistics bit for bit; two steps later the stem has moved.
    first = tf.train.load_checkpoint(os.path.join(model_dir, 'model.ckpt-0'))
    bn = 'stages_0_block_0/conv1_b1_bn/batch_normalization/'
    for name in ('init/init_conv/conv2d/kernel', bn + 'moving_mean', bn + 'moving_variance'):
        np.testing.assert_array_equal(first.get_tensor(name), original.get_tensor(name))
    stem = 'init/init_conv/conv2d/kernel'
    assert not np.array_equal(tuned.get_tensor(stem), original.get_tensor(stem))
