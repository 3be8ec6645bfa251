"""tools/plan_run.py and mlimages/run/run_plan.py: every recipe flagfile of docs/recipes
parses, validates and plans; the figures against arithmetic done here, the curve against
the numpy learning rate, the checkpoint size against a checkpoint of the real training
graph."""
import glob
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

import flags as flags_lib
import references
from helpers import ROOT, model_parts, run_main
from mlimages.model import memory
from mlimages.run import model_fn, run_plan
from mlimages.cli import plan_run

ML_IMAGES, IMAGENET = 17609752, 1281167
RECIPES = sorted(glob.glob(os.path.join(ROOT, 'docs', 'recipes', '*.flags')))


def plan(capsys, *args):
    """{first word(s) of a line: the rest} of the plan's lines, and its text."""
    status, out, err = run_main(plan_run, capsys, *args)
    assert status == 0, err
    return dict(line.split(': ', 1) for line in out.splitlines() if ': ' in line), out


@pytest.mark.parametrize('recipe', RECIPES, ids=[os.path.basename(r) for r in RECIPES])
def test_every_recipe_plans(recipe, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # as the docs run it
    imagenet = 'imagenet' in recipe
    images = IMAGENET if imagenet else ML_IMAGES
    png = str(tmp_path / 'lr.png')
    lines, out = plan(capsys, '--flagfile=' + os.path.relpath(recipe, ROOT), '--train_images',
                      images, '--hours', 90, '--lr_png', png, '--gpu_memory', 16)
    machines, gpus = map(int, re.search(r'(\d)x(\d)\.flags$', recipe).groups())
    with open(recipe) as f:
        per_gpu = int(re.search(r'^--batch_size=(\d+)$', f.read(), re.M).group(1))
    batch = machines * gpus * per_gpu
    assert lines['job'].endswith('%d worker%s x %d GPU%s x batch %d = {:,} images a global '
                                 'step'.format(batch) % (machines, 's' if machines > 1 else '',
                                                         gpus, 's' if gpus > 1 else '',
                                                         per_gpu))
    assert lines['data'] == '{:,} training images: {:,.1f} steps an epoch'.format(
        images, images / batch)
    epochs = 120 if imagenet else 60  # finetune.sh's 600,000 x 256; the paper's 60 epochs
    max_iter = int(lines['steps'].split()[0].split('=')[1].replace(',', ''))
    assert abs(max_iter * batch / images - epochs) < 0.2, lines['steps']
    if imagenet:  # finetune.py: no warm-up, lr x 0.1 every 30 epochs
        assert 'warm-up' not in lines
        assert lines['decay'].count('; step ') == 3 and '(epoch 29.97)' in lines['decay']
    else:  # 8 stairs to 0.08 x batch / 4096, then two decays by step 258,000 x 4096 / batch
        assert lines['warm-up'].endswith('8 stairs of {:,} steps (1.02 epochs), lr {:g} x '
                                         '1.297^k: {:.4g} to {:.4g}, then {:.4g}'.format(
                                             4400 * 4096 // batch, 0.01 * batch / 4096,
                                             np.float32(0.01 * batch / 4096),  # TF's float
                                             0.01 * batch / 4096 * 1.297 ** 7,
                                             0.08 * batch / 4096))
        assert lines['decay'].count('; step ') == 2 and '(epoch 25.59)' in lines['decay']
    classes = 1000 if imagenet else 11166
    verdict, fits = memory.fit(101, classes, per_gpu, 224, 'fp32', 16 * memory.GB)
    assert lines['memory'] == ('%s (mlimages/model/memory.py); a GPU of 16 GB: %s (margin '
                               '1.3 GB for what a GPU adds), the largest --batch_size that '
                               'fits %d' % (memory.describe(101, classes, per_gpu, 224, 'fp32'),
                                            {'fits': 'fits', 'exceeds': 'does not fit'}[verdict],
                                            fits))
    needed = max_iter * batch / (90 * 3600.0)
    assert 'wall time 90 h needs %.0f images/s (%.1f a GPU)' % (
        needed, needed / (machines * gpus)) in out.splitlines()
    kept = min(10, 1 + max_iter // int(lines['checkpoints'].split()[1].replace(',', '')) + 1)
    assert ', the newest %d kept' % kept in lines['checkpoints']
    with Image.open(png) as image:
        assert image.size == (900, 420)
        assert (200, 30, 30) in {color for _, color in image.getcolors(1 << 16)}


def test_the_curve_is_the_numpy_learning_rate(monkeypatch):
    monkeypatch.chdir(ROOT)
    from absl import flags as absl_flags
    values = absl_flags.FlagValues()
    values.append_flag_values(flags_lib.FLAGS)
    values.unparse_flags()
    values(['plan', '--flagfile=docs/recipes/mlimages-resnet101-4x8.flags'])
    opts = flags_lib.settings(values).schedule
    steps = run_plan.curve_steps(opts, points=60)
    want = [references.learning_rate(s, opts.lr, opts.lr_decay_step, opts.lr_decay_factor,
                                     opts.warmup, opts.lr_warmup, opts.lr_warmup_decay_step,
                                     opts.lr_warmup_decay_factor) for s in steps]
    np.testing.assert_allclose(run_plan.learning_rates(opts, steps), want, rtol=1e-6)
    assert {35199, 35200, 110000, 110001, 220000, 220001} <= set(steps)
    assert max(steps) == opts.max_iter - 1


@pytest.mark.parametrize('extra', [[], ['--FixBlock2', '--label_type=single']],
                         ids=['multi', 'fixblock2_single'])
def test_the_checkpoint_size_is_the_saved_training_graphs(extra, tmp_path):
    """The sum of the plan against the data file of a checkpoint of model_fn's real
    training graph (ResNet-18, 5 classes)."""
    from absl import flags as absl_flags
    values = absl_flags.FlagValues()
    values.append_flag_values(flags_lib.FLAGS)
    values.unparse_flags()
    values(['plan', '--resnet_size=18', '--class_num=5', '--image_size=32'] + extra)
    opts = flags_lib.settings(values)
    with tf.Graph().as_default():
        features = tf.zeros([2, 32, 32, 3])
        labels = tf.zeros([2, 5]) if opts.data.label_type == 'multi' else tf.one_hot([0, 1], 5)
        derived = model_fn.Derived(images_per_step=2, images_per_global_step=2, max_steps=1)
        model_fn.make_model_fn(model_parts(opts), derived)(features, labels,
                                                          tf.estimator.ModeKeys.TRAIN)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            prefix = tf.train.Saver().save(session, str(tmp_path / 'model.ckpt'),
                                           write_meta_graph=False)
    assert os.path.getsize(prefix + '.data-00000-of-00001') == run_plan.run_checkpoint_bytes(opts)


def test_bad_usage_is_one_line(capsys, tmp_path):
    for args, fragment in [
            (['--resnet_size=7'], '--resnet_size=7 is not supported'),
            (['--data_dir=%s' % tmp_path], 'give --train_images N'),
            (['--max_iter=-1', '--train_images=10'], 'a run without an end has no plan'),
            (['--nonsense=1'], 'nonsense')]:
        status, out, err = run_main(plan_run, capsys, *args)
        assert status == 2 and out == '' and len(err) == 1, (args, err)
        assert err[0].startswith('plan_run.py: error: ') and fragment in err[0], err


def parsed(*args):
    """train.py's Settings of `args`, as plan_run parses them."""
    from absl import flags as absl_flags
    values = absl_flags.FlagValues()
    values.append_flag_values(flags_lib.FLAGS)
    values.unparse_flags()
    values(['plan'] + list(args))
    return flags_lib.settings(values)


def test_the_start_warnings_of_the_readmes_old_first_run():
    """train.py's start (training.train): the first run the README had -- lr 0.08 at 64
    images a step, the default 200 checkpoints of a ResNet-101 -- on a disk of 20 GiB; the
    1x1 recipe gives none; a task that writes no checkpoint checks no disk."""
    old = parsed('--class_num=11166', '--resnet_size=101', '--batch_size=64', '--lr=0.08',
                 '--max_iter=440000', '--snapshot=4400', '--model_dir=/m')
    plan, _ = run_plan.job(old.cluster, old.devices.num_gpus, old.data.batch_size, {})
    assert run_plan.start_warnings(old, plan, True, 20 * run_plan.GiB) == [
        '--lr=0.08 is 64.0x above the pre-training rule for 64 images a global step: 0.00125 '
        '(0.08 x B / 4,096; more than 2x off warns; docs/hardware.md)',
        '--max_to_keep=200: 101 checkpoints of 0.49 GiB need 49.2 GiB, /m has 20.0 GiB free: '
        'lower --max_to_keep or free disk (docs/hardware.md)']
    assert len(run_plan.start_warnings(old, plan, False, 20 * run_plan.GiB)) == 1
    recipe = parsed('--flagfile=' + os.path.join(ROOT, 'docs', 'recipes',
                                                 'mlimages-resnet101-1x1.flags'))
    plan, _ = run_plan.job(recipe.cluster, recipe.devices.num_gpus, recipe.data.batch_size,
                           {})
    assert run_plan.start_warnings(recipe, plan, True, 20 * run_plan.GiB) == []
    assert run_plan.start_warnings(recipe, plan, True, None) == []


def test_free_disk_is_of_the_nearest_existing_folder(tmp_path):
    assert run_plan.free_disk(str(tmp_path / 'not' / 'yet')) > 0
    assert run_plan.free_disk('gs://bucket/model') is None
