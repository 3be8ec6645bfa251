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
      var_list   every trainable variable, or under FixBlock2 those whose name contains
                 stages_2, stages_3, global_pool or logits

Summaries (training and evaluation; a prediction graph has none): images, cross_entropy,
train_accuracy, learning_rate, skipped_records and the loss's histograms; evaluation
metrics are metrics.multilabel_metrics (F1 at the number of --threshold), with the run's
leaf_mask (train.py --hierarchy) also mAP_leaf over the classes L with leaf_mask true and
mAP_inner over the others (metrics.masked_mean with M = L, then M = not L); the run's
score_hook (--threshold=calibrated) sees every evaluation batch's labels and scores, and
its class_report (class_report.py) reads the per-class values at the end.
Evaluation's cross_entropy is the mean over the val images of
loss.per_image_cross_entropy: the same at any --batch_size (training's is per batch;
its positives and selection are the batch's).

The settings come as the groups the model_fn reads (Parts: model, with --data_format
resolved, data, training, schedule, finetune, output, inference), and what is derived
from them for this process, as a Derived.
"""
import collections
import dataclasses

import tensorflow.compat.v1 as tf

from mlimages.run import calibration
from mlimages.run import checkpoints
from mlimages.distributed import distribute
from mlimages.run import hooks
import image_preprocess
from mlimages.data import input_pipeline
from mlimages.model import loss
from mlimages.model import lr_schedule
from mlimages.model import metrics
from mlimages.model import precision
from mlimages.run import preemption
import resnet

# The settings groups the model_fn reads (flags.Model with data_format resolved to
# 'channels_first' or 'channels_last', flags.Data, ...); parts(settings) picks them.
Parts = collections.namedtuple('Parts', 'model data training schedule finetune output inference')


def parts(settings, data_format):
    """The Parts of Settings, the model group's data_format the resolved one."""
    return Parts(settings.model.replace(data_format=data_format), settings.data,
                 settings.training, settings.schedule, settings.finetune, settings.output,
                 settings.inference)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Derived:
    """What the model_fn needs beyond the settings: the values derived for this process."""
    # Images a training step of this process (replicas x batch), and a global step of the job.
    images_per_step: int | None = None
    images_per_global_step: int | None = None
    max_steps: int | None = None  # the last global step (--max_iter), None = no end
    worker_name: str = 'worker'  # the log line's name of this task
    job: bool = False  # a task of a cluster: the log line adds the job's rate
    legacy_counters: bool = False  # model_dir holds the original program's counter names
    leaf_mask: tuple | None = None  # --hierarchy: class_num bools, true for a leaf; or None
    warm_start: tuple | None = None  # (checkpoint, variable names) to fine-tune from, or None
    head_shards: int = 1  # slices of the classifier head (ps mode: one a ps task)
    stop_together: bool = False  # a synchronous job: its tasks agree in each step on a stop
    score_hook: object = None  # evaluation: hook(labels, scores) -> a SessionRunHook, or None
    cpu_input_grad: bool = False  # resnet's forward-conv input gradients (config/cpu.py)
    cpu_pointwise: bool = False  # resnet's 1x1 convolutions as matrix products (config/cpu.py)
    checkpoint_dir: str | None = None  # where this task's saver writes: None = --model_dir
    class_report: object = None  # evaluation: the class_report.ClassReport, or None
    watch: object = None  # a cluster task's peers.Watch: its saves are waits on the job


NON_FINITE_LOSS = 'non-finite training loss'
# TensorFlow's own message when a histogram summary meets NaN/Inf ("Nan in summary
# histogram for: ..."): non-finite values of the model, never a record's fault.
NON_FINITE_SUMMARY = 'in summary histogram for'


def trained_variables(variables, network):
    """The variables the optimizer updates: all of them, or under the network's FixBlock2
    the original's set (resnet.trainable_under_fixblock2: names containing stages_2,
    stages_3, global_pool or logits)."""
    if network.fix_block2:
        return resnet.trainable_under_fixblock2(variables)
    return variables


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


def saver_hook(output, derived, scaffold):
    """This task's checkpoint saver (hooks.CheckpointSaverHook, every --snapshot steps): the
    chief's, which the Estimator then takes for its own; in a collective job every
    worker's, since a save runs collective ops (make_estimator leaves TensorFlow's out):
    the other workers' into derived.checkpoint_dir, without a graph nobody reads; its saves
    watched by derived.watch. output: the flags.Output group."""
    return hooks.CheckpointSaverHook(derived.checkpoint_dir or output.model_dir,
                                     watch=derived.watch, save_steps=output.snapshot,
                                     scaffold=scaffold,
                                     save_graph_def=derived.checkpoint_dir is None)


def hierarchy_masks(leaf_mask):
    """metrics.multilabel_metrics' class_masks for mAP_leaf and mAP_inner, or None."""
    if leaf_mask is None:
        return None
    leaf = [bool(x) for x in leaf_mask]
    return collections.OrderedDict([('leaf', leaf), ('inner', [not x for x in leaf])])


def make_model_fn(parts, derived):
    """The Estimator model_fn(features, labels, mode) of a run (see the module docstring):
    parts, the Parts of its settings; derived, its Derived values."""
    # Plain graph code: a strategy would run it through AutoGraph, which rewrites every
    # function the model calls, in every replica, for control flow it does not have (a
    # third of a ResNet-101 build). The Estimator reads the argument names of model_fn.
    unconverted = tf.autograph.experimental.do_not_convert(resnet_model_fn)

    def model_fn(features, labels, mode):
        return unconverted(features, labels, mode, parts, derived)
    return model_fn


def resnet_model_fn(features, labels, mode, parts, derived):
    """The EstimatorSpec of a batch (see the module docstring)."""
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    images, labels, skipped = batch_of(features, labels, parts.model.class_num)
    network, logits, own_updates = build_network(images, mode, parts, derived)
    predictions = {
        'classes': tf.argmax(logits, axis=1),
        'probabilities': tf.nn.softmax(logits),
        'scores': tf.sigmoid(logits),
        'features': network.features,
    }
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions)

    per_image, cross_entropy, total_loss, finite = losses(labels, logits, mode, parts)
    accuracy = tf.metrics.accuracy(tf.argmax(labels, axis=1), predictions['classes'])
    tf.summary.scalar('train_accuracy', accuracy[1])
    train_op, training_hooks = None, []
    if is_training:
        logged = {'cross_entropy': cross_entropy, 'train_accuracy': accuracy[1]}
        train_op, training_hooks = training_step(
            total_loss, finite, trained_variables(tf.trainable_variables(), network),
            own_updates, logged, skipped, parts, derived)
    eval_metrics, evaluation_hooks = None, []
    if mode == tf.estimator.ModeKeys.EVAL:
        eval_metrics, evaluation_hooks = evaluation_metrics_and_hooks(
            labels, predictions['scores'], per_image, parts, derived)
    scaffold = None
    # fp16: a checkpoint of another --dtype restores, its loss scaling started afresh.
    if derived.legacy_counters or (is_training and parts.model.dtype == 'fp16'):
        # Built last: the saver must see every variable, the Momentum slots included.
        scaffold = tf.train.Scaffold(saver=checkpoints.saver(parts.output.max_to_keep,
                                                             derived.legacy_counters))
    chief_hooks = []
    if is_training:
        saver = saver_hook(parts.output, derived, scaffold)
        (training_hooks if derived.stop_together else chief_hooks).append(saver)
    return tf.estimator.EstimatorSpec(
        mode=mode, predictions=predictions, loss=total_loss, train_op=train_op,
        eval_metric_ops=eval_metrics, training_hooks=training_hooks,
        training_chief_hooks=chief_hooks, evaluation_hooks=evaluation_hooks,
        scaffold=scaffold)


def batch_of(features, labels, class_num):
    """(images, labels, skipped records so far or None) of the input's batch: synthetic
    batches drawn here, the rest as input_pipeline.input_fn made them."""
    if isinstance(features, dict) and input_pipeline.SYNTHETIC in features:
        images, labels = input_pipeline.synthetic_batch(features[input_pipeline.SYNTHETIC],
                                                        class_num)
        return images, labels, None
    skipped = None
    if isinstance(features, dict):
        skipped = features.get('skipped_records')
        features = features['image']
    return features, labels, skipped


def build_network(images, mode, parts, derived):
    """Builds the network on the batch; returns (the resnet.ResNet, its float32 logits,
    this replica's batch-norm updates). Training sets the fine-tuning checkpoint's
    initializers."""
    model, finetune = parts.model, parts.finetune
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    # uint8 batches (--augment_on=device) are augmented here, on the training device.
    # Kept out of XLA clusters: the augmentation's per-step partition sizes vary, and a
    # cluster built on them would be recompiled at every new shape.
    with tf.xla.experimental.jit_scope(compile_ops=False):
        images = image_preprocess.network_input(images, is_training)
    if mode != tf.estimator.ModeKeys.PREDICT:  # no summary in an inference graph
        tf.summary.image('images', (images + 1.0) / 2.0, max_outputs=6)
    network = resnet.ResNet(model.resnet_size, model.class_num, model.data_format,
                            model.batch_norm_decay, model.batch_norm_epsilon,
                            fix_block2=finetune.FixBlock2,
                            frozen_bn=finetune.frozen_bn, head_shards=derived.head_shards,
                            cpu_input_grad=derived.cpu_input_grad,
                            cpu_pointwise=derived.cpu_pointwise)
    updates_before = len(tf.get_collection(tf.GraphKeys.UPDATE_OPS))
    with precision.model_scope(model.dtype):
        logits = precision.float32(network(precision.model_input(images, model.dtype),
                                           is_training))
    own_updates = distribute.own_update_ops(updates_before)
    network.features = precision.float32(network.features)
    if is_training and derived.warm_start:
        # Changes only the initializers: a checkpoint in model_dir still wins on restart.
        checkpoint, names = derived.warm_start
        tf.train.init_from_checkpoint(checkpoint, {name: name for name in names})
    return network, logits, own_updates


def losses(labels, logits, mode, parts):
    """(evaluation's per-image cross-entropy or None, the reported cross-entropy, the total
    loss, training's finite-loss check or None), the summaries of the loss written."""
    label_type, training = parts.data.label_type, parts.training
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    per_image = None
    if mode == tf.estimator.ModeKeys.EVAL:  # per image: the same figure at any batch size
        per_image = loss.per_image_cross_entropy_of(label_type, training, labels, logits)
        cross_entropy, stats = tf.reduce_mean(per_image), {}
    else:
        cross_entropy, stats = loss.cross_entropy_of(label_type, training, labels, logits,
                                                     update=is_training)
    # Over every trainable variable as the original: the frozen ones add only a constant.
    total_loss = cross_entropy + loss.weight_decay_of(training, tf.trainable_variables())
    # With several replicas the step's cross_entropy is the mean over their batches (the
    # loss of the global batch; the gradient comes from each replica's own), and so is the
    # loss checked below: one all-reduce for both, and every replica sees the same check.
    reported_cross_entropy, job_loss = tf.unstack(
        distribute.all_reduce_mean(tf.stack([cross_entropy, total_loss])))
    tf.summary.scalar('cross_entropy', reported_cross_entropy)
    # A NaN/Inf loss fails the step before any variable changes, so no checkpoint (not
    # even the one saved at the end) can hold the broken weights. The histograms, which
    # reject NaN themselves, wait for this check: the same failure always gets its name.
    finite = tf.debugging.check_numerics(job_loss, NON_FINITE_LOSS) if is_training else None
    with tf.control_dependencies([finite] if is_training else []):
        for name, tensor in sorted(stats.items()):
            tf.summary.histogram(name, tf.identity(tensor))
    return per_image, reported_cross_entropy, total_loss, finite


def training_step(total_loss, finite, trained, own_updates, logged, skipped, parts, derived):
    """(train_op, training hooks): the optimizer's step on the trained variables at the
    schedule's rate, this replica's batch-norm updates, and the log line's hook of the
    logged tensors (the learning rate and skipped_records added)."""
    training = parts.training
    global_step = tf.train.get_or_create_global_step()
    lr = lr_schedule.learning_rate_of(parts.schedule, global_step)
    tf.summary.scalar('learning_rate', lr)
    # This replica's batch-norm updates run in the same step beside the apply
    # (distribute.own_update_ops: no gradient waits on them).
    optimizer = make_optimizer(training.optimizer, checked(lr, finite), training.opt_momentum)
    optimizer = precision.wrap_optimizer(optimizer, parts.model.dtype)
    gradients = optimizer.compute_gradients(total_loss, var_list=trained)
    train_op = tf.group(optimizer.apply_gradients(gradients, global_step), *own_updates)
    hooks.publish_step_after(train_op)
    if derived.stop_together:
        preemption.stop_agreement()
    logged = dict(learning_rate=lr, **logged)
    if skipped is not None:
        logged['skipped_records'] = tf.reduce_max(skipped)
        tf.summary.scalar('skipped_records', logged['skipped_records'])
    return train_op, [hooks.TrainingLogHook(
        tensors=logged, images_per_step=derived.images_per_step,
        every_n=parts.output.log_interval, max_steps=derived.max_steps,
        images_per_global_step=derived.images_per_global_step,
        worker_name=derived.worker_name, job=derived.job)]


def evaluation_metrics_and_hooks(labels, scores, per_image, parts, derived):
    """(the evaluation metrics, the evaluation hooks) of a batch's scores."""
    # The histograms of mAP cannot place a NaN: say what it means instead.
    scores = tf.debugging.check_numerics(
        scores, 'the model outputs NaN or Inf in inference mode (a '
        'diverged model, or one trained too briefly for its batch-norm moving averages)')
    eval_metrics, per_class = metrics.metrics_and_classes(
        labels, scores, parts.training.mask_thres, threshold=calibration.global_threshold(
            parts.inference.threshold), class_masks=hierarchy_masks(derived.leaf_mask))
    eval_metrics['cross_entropy'] = tf.metrics.mean(per_image)
    eval_hooks = [derived.score_hook(labels, scores)] if derived.score_hook else []
    if derived.class_report:
        eval_hooks.append(derived.class_report.hook(per_class))
    return eval_metrics, eval_hooks
