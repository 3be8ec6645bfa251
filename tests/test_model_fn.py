"""Tests of model_fn.py: the graph of every --dtype builds and trains, and a non-finite loss
fails its step before the apply, the gradients not waiting on the check (conftest's
`shards`: 7 classes)."""
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from mlimages.data import input_pipeline
from mlimages.run import model_fn
from mlimages.model import precision
from helpers import model_parts, settings

tf.disable_v2_behavior()

CLASSES = 7


def run_settings(resnet_size, dtype, **given):
    """train.py's defaults but the model of this test (a short run's batch-norm decay)."""
    return settings(**dict(dict(
        resnet_size=resnet_size, class_num=CLASSES, image_size=32, batch_size=2,
        batch_norm_decay=0.9, random_seed=1, lr=0.01, shuffle_buffer=8, log_interval=1,
        dtype=dtype), **given))


@pytest.mark.parametrize('resnet_size,dtype,augment_on', [
    (18, 'fp32', 'device'), (18, 'fp16', 'cpu'), (18, 'bf16', 'cpu'),
    pytest.param(50, 'fp32', 'cpu', marks=pytest.mark.slow)])
def test_dtype_graphs_build_and_train_two_steps_on_cpu(shards, resnet_size, dtype,
                                                      augment_on):
    if dtype == 'bf16' and precision.cpu_kernel_error(dtype):
        pytest.skip('this CPU has no bfloat16 convolution in oneDNN (needs AVX-512 or AMX)')
    try:
        dtype_graph_trains(shards, resnet_size, dtype, augment_on)
    finally:
        if dtype == 'fp16':  # the rewrite is switched on process-wide
            tf.mixed_precision.disable_mixed_precision_graph_rewrite()


def dtype_graph_trains(shards, resnet_size, dtype, augment_on):
    with tf.Graph().as_default():
        given = run_settings(resnet_size, dtype)
        dataset = input_pipeline.input_fn(given.data.replace(augment_on=augment_on),
                                          given.model, True, shards)
        features, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        derived = model_fn.Derived(images_per_step=2)
        spec = model_fn.make_model_fn(model_parts(given), derived)(features, labels,
                                                                 tf.estimator.ModeKeys.TRAIN)
        variables = tf.global_variables()
        assert all(v.dtype.base_dtype in (tf.float32, tf.int64) for v in variables)
        names = {v.op.name for v in variables}
        assert ('current_loss_scale' in names) == (dtype == 'fp16')  # dynamic loss scaling
        assert spec.predictions['scores'].dtype == tf.float32
        step = tf.train.get_global_step()
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            before = sess.run('logits/dense/kernel:0')
            losses = [sess.run([spec.train_op, spec.loss])[1] for _ in range(2)]
            assert sess.run(step) == 2
            assert np.all(np.isfinite(losses))
            assert np.any(sess.run('logits/dense/kernel:0') != before)
            check_gates_the_apply_only(sess, spec.train_op, step)


def check_gates_the_apply_only(sess, train_op, step):
    """A non-finite loss (fed to the finite check) fails the step with model_fn's
    diagnosis before any variable changes, while no gradient waits on the check."""
    check, = [op for op in tf.get_default_graph().get_operations()
              if op.type == 'CheckNumerics' and
              op.get_attr('message').decode() == model_fn.NON_FINITE_LOSS]
    waiting = set()
    todo = [check]
    while todo:
        op = todo.pop()
        for after in [c for t in op.outputs for c in t.consumers()] + op._control_outputs:
            if after not in waiting:
                waiting.add(after)
                todo.append(after)
    assert not [op.name for op in waiting if op.name.startswith('gradients/')]
    assert any('Apply' in op.type for op in waiting)
    kernel, at = sess.run(['logits/dense/kernel:0', step])
    with pytest.raises(tf.errors.InvalidArgumentError, match=model_fn.NON_FINITE_LOSS):
        sess.run(train_op, {check.inputs[0]: float('nan')})
    np.testing.assert_array_equal(sess.run('logits/dense/kernel:0'), kernel)
    assert sess.run(step) == at
