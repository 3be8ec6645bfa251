"""A training run's plan without running it (tools/plan_run.py): what train.py's flags
imply for the job, from the same code the run uses.

    global batch  B = --batch_size x GPUs a worker x synchronous workers
                  (distribute.plan after cluster_flags.setup: --worker_hosts, TF_CONFIG, Slurm)
    epoch         N / B steps, N the training images (--train_images, else the records.txt
                  of <data_dir>/train)
    learning rate lr_schedule.learning_rate_of at every step: the warm-up stairs, then the
                  decays (piecewise: after lr_decay_step x 1..4; exponential: every
                  lr_decay_step); the curve as a PNG
    checkpoints   one at step 0, every --snapshot steps and at --max_iter, the newest
                  --max_to_keep kept; each holds 4 bytes a value of the model's variables,
                  one Momentum slot a trained variable, the loss counters (2 x class_num,
                  multi-label) and the int64 step
    wall time     B x max_iter images at a given images/s, or the images/s a wall time needs
    memory        the GPU memory a replica needs (memory.estimate); with a GPU's memory,
                  whether it fits with the margin of what a GPU adds, and the largest
                  --batch_size that does
    warnings      train.py's start: lr_rule's, on the free disk of --model_dir
"""
import math
import os
import shutil

import numpy as np
import tensorflow.compat.v1 as tf

import file_db
import resnet
from mlimages.distributed import cluster_flags, devices, distribute
from mlimages import errors
from mlimages.errors import UsageError
from mlimages.model import lr_schedule, memory
from mlimages.run import lr_rule

GiB = 1024.0 ** 3


def job(cluster, num_gpus, batch_size, environ):
    """(distribute.Plan of the job as worker --worker_id sees it, GPUs a worker): the
    cluster from the cluster group's flags or `environ` (a copy: it is written to), GPUs
    as --num_gpus asks (none are needed here); raises UsageError."""
    cluster_flags.setup(cluster, num_gpus, environ)
    try:
        plan = distribute.plan(cluster.distribution, num_gpus, cluster.worker_num,
                               cluster.worker_id, batch_size, num_gpus, environ)
        distribute.check_all_reduce_alg(cluster.all_reduce_alg, plan.distribution)
    except errors.ConfigError as e:
        raise UsageError(str(e))
    return plan, plan.replicas


def training_images(data, given=None):
    """N: `given` (--train_images), else the records.txt count of <data_dir>/train (data:
    the flags.Data group)."""
    if given:
        return given
    try:
        count = file_db.record_count(file_db.list_shards(data.data_dir, 'train',
                                                         data.file_pattern))
    except errors.DataError:
        count = None
    if not count:
        raise UsageError('how many training images? give --train_images N (--data_dir=%s '
                         'has no train/ shards listed in records.txt)' % data.data_dir)
    return count


def learning_rates(schedule, steps):
    """The run's learning rate (lr_schedule.learning_rate_of of the flags.Schedule group)
    at each of `steps`."""
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        lr = lr_schedule.learning_rate_of(schedule, step)
        with tf.Session(config=devices.session_config()) as session:
            return np.array([session.run(lr, {step: s}) for s in steps], np.float64)


def change_steps(schedule):
    """The steps at which the learning rate changes, before --max_iter (a step trains with
    the rate of the global step it starts at: 0 to max_iter - 1); schedule: flags.Schedule."""
    changes = []
    if schedule.warmup > 0:
        changes += list(range(schedule.lr_warmup_decay_step, schedule.warmup,
                              schedule.lr_warmup_decay_step)) + [schedule.warmup]
    if schedule.lr_decay_step:
        if schedule.lr_schedule == 'exponential':
            decays = range(schedule.lr_decay_step, schedule.max_iter + 1, schedule.lr_decay_step)
        else:  # piecewise: the new rate from the step after each boundary
            decays = [b + 1 for b in lr_schedule.decay_boundaries(schedule.lr_decay_step)]
        changes += [s for s in decays if s > schedule.warmup]
    return sorted(s for s in set(changes) if 0 < s < schedule.max_iter)


def model_values(resnet_size, class_num):
    """{variable name: values} of the model's variables (resnet.variable_shapes)."""
    return {name: int(np.prod(shape))
            for name, shape in resnet.variable_shapes(resnet_size, class_num).items()}


def checkpoint_bytes(resnet_size, class_num, fix_block2, optimizer, label_type):
    """Bytes of one checkpoint's data (the module docstring's sum)."""
    values = model_values(resnet_size, class_num)
    trained = [name for name in values if 'moving_' not in name and (
        not fix_block2 or any(part in name for part in resnet.FIXBLOCK2_TRAINED))]
    slots = sum(values[name] for name in trained) if optimizer == 'mom' else 0
    counters = 2 * class_num if label_type == 'multi' else 0
    return 4 * (sum(values.values()) + slots + counters) + 8


def run_checkpoint_bytes(settings):
    """checkpoint_bytes of the run's model, --FixBlock2, --optimizer and --label_type."""
    return checkpoint_bytes(settings.model.resnet_size, settings.model.class_num,
                            settings.finetune.FixBlock2, settings.training.optimizer,
                            settings.data.label_type)


def checkpoint_saves(max_iter, snapshot):
    """Checkpoints a run from step 0 saves: at 0, every --snapshot steps, at --max_iter."""
    return 1 + max_iter // snapshot + (1 if max_iter % snapshot else 0)


def memory_line(model, batch_size, gpu_gb=None):
    """The memory line: the estimate of a replica (model: the flags.Model group); with
    gpu_gb (a GPU's memory in GB) whether it fits and the largest --batch_size that does."""
    args = (model.resnet_size, model.class_num, batch_size, model.image_size, model.dtype)
    line = 'memory: %s (mlimages/model/memory.py)' % memory.describe(*args)
    if not gpu_gb:
        return line
    gpu_bytes = gpu_gb * memory.GB
    verdict, batch = memory.fit(*(args + (gpu_bytes,)))
    return line + '; a GPU of %g GB: %s (margin %.1f GB for what a GPU adds), the largest ' \
        '--batch_size that fits %d' % (gpu_gb, {
            'fits': 'fits', 'margin': 'fits only without the margin',
            'exceeds': 'does not fit'}[verdict], memory.margin(gpu_bytes) / memory.GB, batch)


def plan_lines(settings, plan, gpus, images, hours=None, images_per_sec=None, gpu_gb=None):
    """The plan as text lines (train.py's Settings, reading the data, model, schedule,
    output, training and finetune groups; job() -> plan, gpus; gpu_gb: a GPU's memory in
    GB for the memory line)."""
    schedule, output, model = settings.schedule, settings.output, settings.model
    if schedule.max_iter <= 0:
        raise UsageError('--max_iter=%d: a run without an end has no plan' % schedule.max_iter)
    batch = plan.images_per_global_step
    per_epoch = images / float(batch)
    epochs = lambda steps: steps / per_epoch
    workers = plan.worker_num if plan.distribution != 'none' else 1
    lines = ['job: %s, %d worker%s x %d GPU%s x batch %d = %s images a global step' % (
        plan.distribution if plan.distribution != 'none' else 'one process', workers,
        's' if workers > 1 else '', gpus, 's' if gpus > 1 else '', settings.data.batch_size,
        '{:,}'.format(batch))
        + (' (asynchronous: each worker\'s step is a global step)'
           if plan.distribution == 'ps' else '')]
    lines.append('data: {:,} training images: {:,.1f} steps an epoch'.format(images, per_epoch))
    lines.append('steps: --max_iter={:,} = {:.2f} epochs, {:,} images'.format(
        schedule.max_iter, epochs(schedule.max_iter), schedule.max_iter * batch))
    changes = change_steps(schedule)
    after_warmup = max(schedule.warmup, 0)
    steps = sorted({0, max(schedule.warmup - 1, 0), after_warmup} | set(changes))
    rate = dict(zip(steps, learning_rates(schedule, steps)))  # one graph for every rate shown
    if schedule.warmup > 0:
        stairs = math.ceil(schedule.warmup / float(schedule.lr_warmup_decay_step))
        lines.append('warm-up: steps 0-%s (%.2f epochs), %d stairs of %s steps (%.2f epochs), '
                     'lr %g x %g^k: %.4g to %.4g, then %.4g' % (
                         '{:,}'.format(schedule.warmup - 1), epochs(schedule.warmup), stairs,
                         '{:,}'.format(schedule.lr_warmup_decay_step),
                         epochs(schedule.lr_warmup_decay_step),
                         schedule.lr_warmup, schedule.lr_warmup_decay_factor, rate[0],
                         rate[schedule.warmup - 1], rate[schedule.warmup]))
    decays = [s for s in changes if s > schedule.warmup or not schedule.warmup]
    lines.append('decay: %s, lr %.4g%s' % (schedule.lr_schedule, rate[after_warmup], ''.join(
        '; step {:,} (epoch {:.2f}): {:.4g}'.format(s, epochs(s), rate[s]) for s in decays) or
        ' throughout (no decay before --max_iter)'))
    size = run_checkpoint_bytes(settings)
    saves = checkpoint_saves(schedule.max_iter, output.snapshot)
    kept = min(saves, output.max_to_keep)
    lines.append('checkpoints: every %s steps (%.2f epochs), %d saved, the newest %d kept '
                 '(--max_to_keep): %.2f GiB each (ResNet-%d, %d classes), %.1f GiB on disk '
                 'at the end (+ a graph .meta each)' % (
                     '{:,}'.format(output.snapshot), epochs(output.snapshot), saves, kept,
                     size / GiB, model.resnet_size, model.class_num, kept * size / GiB))
    lines.append(memory_line(model, settings.data.batch_size, gpu_gb))
    total = schedule.max_iter * batch
    if hours:
        needed = total / (hours * 3600.0)
        lines.append('wall time %g h needs %.0f images/s (%.1f a GPU)' % (
            hours, needed, needed / (workers * gpus)))
    if images_per_sec:
        lines.append('at %g images/s: %.1f h (%.1f days)' % (
            images_per_sec, total / images_per_sec / 3600.0,
            total / images_per_sec / 86400.0))
    return lines


def curve_steps(schedule, points=800):
    """The steps trained (0 to max_iter - 1) to draw the learning rate at: evenly spread,
    and both sides of every change (schedule: the flags.Schedule group)."""
    steps = set(np.linspace(0, schedule.max_iter - 1, points).astype(int).tolist())
    for s in change_steps(schedule):
        steps.update((s - 1, s))
    return sorted(s for s in steps if 0 <= s < schedule.max_iter)


def draw_curve(path, steps, rates, per_epoch, title):
    """The learning rate against the epoch (log scale) as a PNG at `path` (Pillow)."""
    from PIL import Image, ImageDraw
    width, height, left, right, top, bottom = 900, 420, 80, 30, 40, 50
    image = Image.new('RGB', (width, height), 'white')
    draw = ImageDraw.Draw(image)
    epochs = np.asarray(steps) / per_epoch
    low, high = math.log10(min(rates)) - 0.1, math.log10(max(rates)) + 0.1
    x = lambda e: left + (width - left - right) * e / max(epochs[-1], 1e-9)
    y = lambda r: top + (height - top - bottom) * (high - math.log10(r)) / (high - low)
    draw.rectangle([left, top, width - right, height - bottom], outline='black')
    for power in range(math.floor(low), math.ceil(high) + 1):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0 ** power
            if low <= math.log10(value) <= high:
                draw.line([left, y(value), width - right, y(value)], fill=(225, 225, 225))
                draw.text((5, y(value) - 6), '%g' % value, fill='black')
    tick = next(t for t in (m * 10 ** k for k in range(-1, 6) for m in (1, 2, 5))
                if epochs[-1] / t <= 12)
    for e in np.arange(0, epochs[-1] + 1e-9, tick):
        draw.line([x(e), height - bottom, x(e), height - bottom + 5], fill='black')
        draw.text((x(e) - 8, height - bottom + 8), '%g' % e, fill='black')
    draw.text((width / 2 - 30, height - 20), 'epoch', fill='black')
    draw.text((left, 12), title, fill='black')
    corners = []  # a staircase: each rate holds until the next step drawn
    for e, next_e, r in zip(epochs, list(epochs[1:]) + [epochs[-1]], rates):
        corners += [(x(e), y(r)), (x(next_e), y(r))]
    draw.line(corners, fill=(200, 30, 30), width=2)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    image.save(path)


def free_disk(path):
    """Free bytes of the file system of `path` (its nearest existing parent); None for a
    remote file system (a URL)."""
    if '://' in path:
        return None
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def start_warnings(settings, plan, chief, free_bytes):
    """train.py's start-up warnings (lr_rule): a learning rate more than 2x off its rule
    for the batch, and, for the chief (it writes the checkpoints), --max_to_keep
    checkpoints that need more than free_bytes (None: not checked). settings: the run's
    Settings (data, finetune, task, schedule, output and model groups)."""
    schedule, output = settings.schedule, settings.output
    kind = lr_rule.run_kind(settings.data.label_type, settings.finetune.pretrain_ckpt,
                            settings.task.demo)
    lines = [lr_rule.lr_warning(kind, schedule.lr, plan.images_per_global_step,
                                plan.distribution == 'ps')]
    if chief and free_bytes is not None:
        saves = (checkpoint_saves(schedule.max_iter, output.snapshot)
                 if schedule.max_iter > 0 else None)
        lines.append(lr_rule.disk_warning(output.max_to_keep, saves,
                                          run_checkpoint_bytes(settings), free_bytes,
                                          output.model_dir))
    return [line for line in lines if line]


def describe_epochs(data, max_iter, plan):
    """The global batch and what --max_iter steps make of the training records:
    epochs = max_iter x images a global step / records (records from records.txt; data:
    the flags.Data group)."""
    line = 'global batch %d images a global step' % plan.images_per_global_step
    if data.use_synthetic_data:
        return line
    records = file_db.record_count(file_db.list_shards(data.data_dir, 'train',
                                                       data.file_pattern))
    if records is None:
        return line + ('; the number of training records is unknown (%s does not list '
                       'every shard; the record tools write it)' % os.path.join(
                           data.data_dir, 'train', file_db.COUNTS_FILE))
    if max_iter < 0:
        return line + '; %d training records, one epoch every %.0f steps' % (
            records, records / plan.images_per_global_step)
    return line + '; --max_iter=%d steps make %.2f epochs of the %d training records' % (
        max_iter, max_iter * plan.images_per_global_step / records, records)
