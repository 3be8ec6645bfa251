"""The Estimator model_fn: ResNet on the batch, the loss, the learning-rate schedule,
Momentum, and the summaries.

    logits = resnet(network_input(images))
    loss = cross_entropy (loss.multilabel_cross_entropy, or softmax for single labels)
           + weight_decay x sum l2_loss(v), v trainable, 'bn' not in its name
           + bn_weight_decay x weight_decay x sum l2_loss(v), 'bn' in its name
             (loss.weight_decay_loss; over every trainable variable, frozen ones included
             as the original's finetune.py: they add a constant, no gradient is applied)
    train_op = group(optimizer(lr).apply_gradients(gradients of loss over var_list),
                     this replica's batch-norm updates)
      optimizer  Momentum(opt_momentum) ('mom') or GradientDescent ('sgd')
      lr         lr_schedule.learning_rate(global_step, schedule='piecewise'|'exponential')
      var_list   every trainable variable, or under FixBlock2 (frozen_stages 2) those whose
                 name contains stages_2, stages_3, global_pool or logits

Summaries (training and evaluation; a prediction graph has none): images, cross_entropy,
train_accuracy, learning_rate, skipped_records and the loss's histograms; evaluation
metrics are metrics.multilabel_metrics (F1 at the number of --threshold), with the run's
leaf_mask (train.py --hierarchy) also mAP_leaf over the classes L with leaf_mask true and
mAP_inner over the others (metrics.masked_mean with M = L, then M = not L); the run's
score_hook (--threshold=calibrated) sees every evaluation batch's labels and scores.
Evaluation's cross_entropy is the mean over the val images of
loss.per_image_cross_entropy: the same at any --batch_size (training's is per batch;
its positives and selection are the batch's).

The settings come whole, as the run's options (flags.Options: every flag's value), and
what is derived from them for this run, as a Run.
"""
import collections

import tensorflow.compat.v1 as tf

from mlimages.run import calibration
from mlimages.run import checkpoints
from mlimages.distributed import distribute
from mlimages.run import hooks
import image_preprocess
from mlimages.data import input_pipeline
from mlimages.model import loss as loss_lib
from mlimages.model import lr_schedule
from mlimages.model import metrics
from mlimages.model import precision
from mlimages.run import preemption
import resnet

# What the model_fn needs beyond the options: the values derived for this run. Inference
# needs only the data format.
Run = collections.namedtuple('Run', [
    'data_format',             # 'channels_first' or 'channels_last' (--data_format resolved)
    'images_per_step',         # images a training step of this process: replicas x batch
    'images_per_global_step',  # images a global step of the whole job
    'max_steps',               # the last global step (--max_iter), None = no end
    'worker_name',             # the log line's name of this task
    'job',                     # a task of a cluster: the log line adds the job's rate
    'legacy_counters',         # model_dir holds the original program's counter names
    'leaf_mask',               # --hierarchy: class_num bools, true for a leaf; or None
    'warm_start',              # (checkpoint, variable names) to fine-tune from, or None
    'head_shards',             # slices of the classifier head (ps mode: one a ps task)
    'stop_together',           # a synchronous job: its tasks agree in each step on a stop
    'score_hook',              # evaluation: hook(labels, scores) -> a SessionRunHook, or None
    'cpu_input_grad',          # no GPU: resnet's CPU-fast convolution input gradients
    'checkpoint_dir',          # where this task's saver writes: None = --model_dir
], defaults=(None, None, None, 'worker', False, False, None, None, 1, False, None, False,
             None))

NON_FINITE_LOSS = 'non-finite training loss'
# TensorFlow's own message when a histogram summary meets NaN/Inf ("Nan in summary
# histogram for: ..."): non-finite values of the model, never a record's fault.
NON_FINITE_SUMMARY = 'in summary histogram for'


def trained_variables(variables, model):
    """The variables the optimizer updates: all of them, or with frozen stages the
    original's FixBlock2 set (resnet.trainable_under_fixblock2: names containing stages_2,
    stages_3, global_pool or logits) -- for another frozen_stages, those outside
    model.frozen_scopes()."""
    if model.frozen_stages == 2:
        return resnet.trainable_under_fixblock2(variables)
    frozen = resnet.frozen_variables(variables, model.frozen_scopes())
    return [v for v in variables if v not in frozen]


class MomentumOptimizer(distribute.FinishOnce, tf.train.MomentumOptimizer):
    """tf.train.MomentumOptimizer (same variables and slots) whose updates on several
    devices are grouped once (distribute.FinishOnce)."""


class GradientDescentOptimizer(distribute.FinishOnce, tf.train.GradientDescentOptimizer):
    """tf.train.GradientDescentOptimizer, its updates grouped once (distribute.FinishOnce)."""


def make_optimizer(name, lr, momentum):
    """'mom': MomentumOptimizer(lr, momentum); 'sgd': GradientDescentOptimizer(lr)."""
    if name == 'sgd':
        return GradientDescentOptimizer(lr)
    if name == 'mom':
        return MomentumOptimizer(lr, momentum=momentum)
    raise ValueError('optimizer must be mom or sgd, got %r' % (name,))


def checked(lr, finite):
    """The learning rate made to wait on the finite-loss check: every variable's update
    reads it (and the global step's increment waits on them), so nothing changes before
    the check -- one control input, while the backward pass runs on (the gradients
    waiting on the check was a host round trip between the passes on a GPU). Under a
    strategy the first replica's optimizer applies every replica's update with its rate:
    the check is of the replicas' mean loss."""
    with tf.control_dependencies([finite]):
        return tf.identity(lr)


def saver_hook(opts, run, scaffold):
    """This task's checkpoint saver (hooks.CheckpointSaverHook, every --snapshot steps): the
    chief's, which the Estimator then takes for its own; in a collective job every
    worker's, since a save runs collective ops (make_estimator leaves TensorFlow's out):
    the other workers' into run.checkpoint_dir, without a graph nobody reads."""
    return hooks.CheckpointSaverHook(run.checkpoint_dir or opts.model_dir,
                                     save_steps=opts.snapshot, scaffold=scaffold,
                                     save_graph_def=run.checkpoint_dir is None)


def hierarchy_masks(leaf_mask):
    """metrics.multilabel_metrics' class_masks for mAP_leaf and mAP_inner, or None."""
    if leaf_mask is None:
        return None
    leaf = [bool(x) for x in leaf_mask]
    return collections.OrderedDict([('leaf', leaf), ('inner', [not x for x in leaf])])


def make_model_fn(opts, run):
    """The Estimator model_fn(features, labels, mode) of a run (see the module docstring):
    opts, the run's flags.Options; run, a Run."""
    # Plain graph code: a strategy would run it through AutoGraph, which rewrites every
    # function the model calls, in every replica, for control flow it does not have (a
    # third of a ResNet-101 build). The Estimator reads the argument names of model_fn.
    unconverted = tf.autograph.experimental.do_not_convert(resnet_model_fn)

    def model_fn(features, labels, mode):
        return unconverted(features, labels, mode, opts, run)
    return model_fn


def resnet_model_fn(features, labels, mode, opts, run):
    """The EstimatorSpec of a batch (see the module docstring)."""
    training = mode == tf.estimator.ModeKeys.TRAIN
    skipped = None
    if isinstance(features, dict) and input_pipeline.SYNTHETIC in features:
        features, labels = input_pipeline.synthetic_batch(features[input_pipeline.SYNTHETIC],
                                                          opts.class_num)
    elif isinstance(features, dict):
        skipped = features.get('skipped_records')
        features = features['image']
    # uint8 batches (--augment_on=device) are augmented here, on the training device.
    # Kept out of XLA clusters: the augmentation's per-step partition sizes vary, and a
    # cluster built on them would be recompiled at every new shape.
    with tf.xla.experimental.jit_scope(compile_ops=False):
        features = image_preprocess.network_input(features, training)
    if mode != tf.estimator.ModeKeys.PREDICT:  # no summary in an inference graph
        tf.summary.image('images', (features + 1.0) / 2.0, max_outputs=6)
    model = resnet.ResNet(opts.resnet_size, opts.class_num, run.data_format,
                          opts.batch_norm_decay, opts.batch_norm_epsilon,
                          2 if opts.FixBlock2 else 0, opts.frozen_bn, run.head_shards,
                          run.cpu_input_grad)
    updates_before = len(tf.get_collection(tf.GraphKeys.UPDATE_OPS))
    with precision.model_scope(opts.dtype):
        logits = precision.float32(model(precision.model_input(features, opts.dtype), training))
    own_updates = distribute.own_update_ops(updates_before)
    model.features = precision.float32(model.features)
    if training and run.warm_start:
        # Changes only the initializers: a checkpoint in model_dir still wins on restart.
        checkpoint, names = run.warm_start
        tf.train.init_from_checkpoint(checkpoint, {name: name for name in names})
    predictions = {
        'classes': tf.argmax(logits, axis=1),
        'probabilities': tf.nn.softmax(logits),
        'scores': tf.sigmoid(logits),
        'features': model.features,
    }
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions)

    if mode == tf.estimator.ModeKeys.EVAL:  # per image: the same figure at any batch size
        per_image = loss_lib.per_image_cross_entropy_of(opts, labels, logits)
        cross_entropy, stats = tf.reduce_mean(per_image), {}
    else:
        cross_entropy, stats = loss_lib.cross_entropy_of(opts, labels, logits, update=training)
    trained = trained_variables(tf.trainable_variables(), model)
    # Over every trainable variable as the original: the frozen ones add only a constant.
    loss = cross_entropy + loss_lib.weight_decay_of(opts, tf.trainable_variables())
    # With several replicas the step's cross_entropy is the mean over their batches (the
    # loss of the global batch; the gradient comes from each replica's own), and so is the
    # loss checked below: one all-reduce for both, and every replica sees the same check.
    reported_cross_entropy, job_loss = tf.unstack(
        distribute.all_reduce_mean(tf.stack([cross_entropy, loss])))
    tf.summary.scalar('cross_entropy', reported_cross_entropy)
    # A NaN/Inf loss fails the step before any variable changes, so no checkpoint (not
    # even the one saved at the end) can hold the broken weights. The histograms, which
    # reject NaN themselves, wait for this check: the same failure always gets its name.
    finite = tf.debugging.check_numerics(job_loss, NON_FINITE_LOSS) if training else None
    with tf.control_dependencies([finite] if training else []):
        for name, tensor in sorted(stats.items()):
            tf.summary.histogram(name, tf.identity(tensor))
    accuracy = tf.metrics.accuracy(tf.argmax(labels, axis=1), predictions['classes'])
    tf.summary.scalar('train_accuracy', accuracy[1])

    train_op, training_hooks = None, []
    if training:
        global_step = tf.train.get_or_create_global_step()
        lr = lr_schedule.learning_rate_of(opts, global_step)
        tf.summary.scalar('learning_rate', lr)
        # This replica's batch-norm updates run in the same step beside the apply
        # (distribute.own_update_ops: no gradient waits on them).
        optimizer = make_optimizer(opts.optimizer, checked(lr, finite), opts.opt_momentum)
        optimizer = precision.wrap_optimizer(optimizer, opts.dtype)
        gradients = optimizer.compute_gradients(loss, var_list=trained)
        train_op = tf.group(optimizer.apply_gradients(gradients, global_step), *own_updates)
        hooks.publish_step_after(train_op)
        if run.stop_together:
            preemption.stop_agreement()
        logged = {'learning_rate': lr, 'cross_entropy': reported_cross_entropy,
                  'train_accuracy': accuracy[1]}
        if skipped is not None:
            logged['skipped_records'] = tf.reduce_max(skipped)
            tf.summary.scalar('skipped_records', logged['skipped_records'])
        training_hooks.append(hooks.TrainingLogHook(
            logged, run.images_per_step, opts.log_interval, run.max_steps,
            run.images_per_global_step, run.worker_name, run.job))
    eval_metrics, evaluation_hooks = None, []
    if mode == tf.estimator.ModeKeys.EVAL:
        # The histograms of mAP cannot place a NaN: say what it means instead.
        scores = tf.debugging.check_numerics(
            predictions['scores'], 'the model outputs NaN or Inf in inference mode (a '
            'diverged model, or one trained too briefly for its batch-norm moving averages)')
        eval_metrics = metrics.multilabel_metrics(
            labels, scores, opts.mask_thres, threshold=calibration.global_threshold(
                opts.threshold), class_masks=hierarchy_masks(run.leaf_mask))
        eval_metrics['cross_entropy'] = tf.metrics.mean(per_image)
        if run.score_hook:
            evaluation_hooks.append(run.score_hook(labels, scores))
    scaffold = None
    # fp16: a checkpoint of another --dtype restores, its loss scaling started afresh.
    if run.legacy_counters or (training and opts.dtype == 'fp16'):
        # Built last: the saver must see every variable, the Momentum slots included.
        scaffold = tf.train.Scaffold(saver=checkpoints.saver(opts.max_to_keep,
                                                             run.legacy_counters))
    chief_hooks = []
    if training:
        saver = saver_hook(opts, run, scaffold)
        (training_hooks if run.stop_together else chief_hooks).append(saver)
    return tf.estimator.EstimatorSpec(
        mode=mode, predictions=predictions, loss=loss, train_op=train_op,
        eval_metric_ops=eval_metrics, training_hooks=training_hooks,
        training_chief_hooks=chief_hooks, evaluation_hooks=evaluation_hooks,
        scaffold=scaffold)

