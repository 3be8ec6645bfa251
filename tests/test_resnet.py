"""Checkpoint names, shapes and parameter counts of the model against docs/original.md, Model."""
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from mlimages.model import loss as loss_lib
import resnet

tf.disable_v2_behavior()

BLOCKS = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}
BN = ['gamma', 'beta', 'moving_mean', 'moving_variance']


def spec_variables(resnet_size, class_num):
    """Name -> shape of every model variable, written out from docs/original.md, Model."""
    filters = [256, 512, 1024, 2048]
    expected = {'init/init_conv/conv2d/kernel': (7, 7, 3, 64)}
    channels = 64
    for i, blocks in enumerate(BLOCKS[resnet_size]):
        f = filters[i]
        for j in range(blocks):
            scope = 'stages_%d_block_%d/' % (i, j)
            convs = {'conv1_b2': (1, 1, channels, f // 4), 'conv2_b2': (3, 3, f // 4, f // 4),
                     'conv3_b2': (1, 1, f // 4, f)}
            bns = {'conv1_b2_bn': channels, 'conv2_b2_bn': f // 4, 'conv3_b2_bn': f // 4}
            if j == 0:
                convs['conv1_b1'] = (1, 1, channels, f)
                bns['conv1_b1_bn'] = channels
            for name, shape in convs.items():
                expected[scope + name + '/conv2d/kernel'] = shape
            for name, depth in bns.items():
                for v in BN:
                    expected[scope + name + '/batch_normalization/' + v] = (depth,)
            channels = f
    for v in BN:
        expected['global_pool/bn/batch_normalization/' + v] = (2048,)
    expected['logits/dense/kernel'] = (2048, class_num)
    expected['logits/dense/bias'] = (class_num,)
    return expected


def build(resnet_size, class_num, data_format='channels_last', image_size=64):
    graph = tf.Graph()
    with graph.as_default():
        network = resnet.ResNet(resnet_size, class_num, data_format)
        logits = network(tf.placeholder(tf.float32, [2, image_size, image_size, 3]),
                         training=True)
    return graph, network, logits


@pytest.mark.parametrize('size', [50, 101, 152])
def test_variable_names_and_shapes_follow_spec(size):
    graph, _, _ = build(size, 11166)
    with graph.as_default():
        got = {v.op.name: tuple(v.shape.as_list()) for v in tf.global_variables()}
    assert got == spec_variables(size, 11166)
    # the checkpoint-size arithmetic's shapes (run_plan, train.py's disk warning), no graph
    assert got == {k: tuple(v) for k, v in resnet.variable_shapes(size, 11166).items()}


@pytest.mark.parametrize('size,count', [(50, 25553064), (101, 44545192), (152, 60188840)])
def test_trainable_parameter_counts_of_the_original(size, count):
    graph, _, _ = build(size, 1000)
    with graph.as_default():
        n = sum(int(np.prod(v.shape.as_list())) for v in tf.trainable_variables())
    assert n == count


def test_nchw_builds_the_same_variables():
    g1, _, l1 = build(50, 10, 'NCHW')
    g2, _, l2 = build(50, 10, 'channels_last')
    with g1.as_default():
        a = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
    with g2.as_default():
        b = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
    assert a == b
    assert l1.shape.as_list() == l2.shape.as_list() == [2, 10]


@pytest.mark.parametrize('size,blocks,feature', [(18, [2, 2, 2, 2], 512), (34, [3, 4, 6, 3], 512),
                                                 (200, [3, 24, 36, 3], 2048)])
def test_other_depths(size, blocks, feature):
    graph, network, logits = build(size, 7, image_size=32)
    with graph.as_default():
        shapes = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
    assert shapes == resnet.variable_shapes(size, 7)
    names = set(shapes)
    for i, n in enumerate(blocks):
        assert 'stages_%d_block_%d/conv1_b2/conv2d/kernel' % (i, n - 1) in names
        assert 'stages_%d_block_%d/conv1_b2/conv2d/kernel' % (i, n) not in names
        assert 'stages_%d_block_0/conv1_b1/conv2d/kernel' % i in names
    assert network.features.shape.as_list() == [2, feature]
    assert logits.shape.as_list() == [2, 7]


def test_unsupported_size():
    with pytest.raises(ValueError, match='resnet_size'):
        resnet.ResNet(42, 10)


def test_no_max_pool_and_stride_two_in_every_stage():
    graph, _, _ = build(50, 10, image_size=64)
    with graph.as_default():
        ops = graph.get_operations()
        assert not [op for op in ops if 'MaxPool' in op.type]

        def conv_output(scope):
            convs = [op for op in ops if op.type == 'Conv2D' and op.name.startswith(scope)]
            return convs[0].outputs[0].shape.as_list()
        assert conv_output('stages_0_block_0/conv2_b2/')[1:3] == [16, 16]  # 64 -> 32 -> 16
        assert conv_output('stages_3_block_2/conv3_b2/')[1:] == [2, 2, 2048]


def test_training_checkpoint_has_the_original_431_entries():
    """Model variables + global_step + Momentum slots + the two loss counters."""
    with tf.Graph().as_default():
        images = tf.placeholder(tf.float32, [2, 32, 32, 3])
        labels = tf.placeholder(tf.float32, [2, 11166])
        logits = resnet.ResNet(50, 11166)(images, training=True)
        ce, _ = loss_lib.multilabel_cross_entropy(labels, logits, 0.7, 0.3, 1234)
        step = tf.train.get_or_create_global_step()
        tf.train.MomentumOptimizer(0.1, 0.9).minimize(ce, step)
        names = {v.op.name for v in tf.global_variables()}
    assert len(names) == 431
    assert {'global_step', 'pos_count', 'neg_count',
            'logits/dense/kernel/Momentum'} <= names


def backprop_input_ops(cpu_input_grad):
    """The Conv2DBackpropInput ops of a ResNet-18 training gradient."""
    with tf.Graph().as_default() as graph:
        network = resnet.ResNet(18, 3, 'channels_last', cpu_input_grad=cpu_input_grad)
        tf.gradients(tf.reduce_sum(network(tf.zeros([1, 32, 32, 3]), True)),
                     tf.trainable_variables())
        return [op for op in graph.get_operations() if op.type == 'Conv2DBackpropInput']


def test_the_cpu_input_gradient_only_when_asked():
    """Without a GPU the caller asks (training.derived_values: no GPU visible): only the 9
    strided convolutions of ResNet-18's 21 (the stem, and each stage's first 3x3 and
    projection) keep TensorFlow's input gradient; otherwise every one does."""
    assert len(backprop_input_ops(False)) == 21
    assert len(backprop_input_ops(True)) == 9


@pytest.mark.parametrize('data_format,has_gpu,dtype,want', [
    ('auto', False, 'fp32', 'channels_last'),
    ('auto', False, 'fp16', 'channels_last'),
    ('auto', True, 'fp32', 'channels_first'),  # grappler's layout pass converts to NCHW
    ('auto', True, 'fp16', 'channels_last'),   # ... and fp16/bf16 graphs to NHWC
    ('auto', True, 'bf16', 'channels_last'),
    ('NCHW', True, 'fp16', 'channels_first'),  # asked for is what is built
    ('NHWC', True, 'fp32', 'channels_last'),
])
def test_auto_layout_is_the_layout_passes_choice(data_format, has_gpu, dtype, want):
    assert resnet.resolve_data_format(data_format, has_gpu, dtype=dtype) == want


@pytest.mark.parametrize('kernel_size,channels', [(3, 8), (1, 6)])
def test_fast_input_gradient_equals_autodiff(kernel_size, channels):
    rng = np.random.default_rng(1)
    x_val = rng.normal(size=(2, 5, 5, channels)).astype(np.float32)
    w_val = rng.normal(size=(2, 5, 5, 4)).astype(np.float32)
    with tf.Graph().as_default():
        x = tf.constant(x_val)
        y = resnet.conv2d_fixed_padding(x, 'c', 4, kernel_size, 1, 'channels_last',
                                        cpu_input_grad=True)
        kernel = tf.global_variables()[0]
        reference = tf.nn.conv2d(x, kernel, 1, 'SAME')
        grads = tf.gradients(tf.reduce_sum(y * w_val), [x, kernel])
        ref_grads = tf.gradients(tf.reduce_sum(reference * w_val), [x, kernel])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got, want, out, ref = sess.run([grads, ref_grads, y, reference])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('size,strides', [(5, 1), (6, 1), (5, 2), (6, 2), (7, 3)])
def test_pointwise_matmul_equals_a_numpy_reference(size, strides):
    """cpu_pointwise: a 1x1 conv (after a strided one's subsampling) as a matrix product:
    its output and both gradients against numpy's, at odd and even sizes."""
    rng = np.random.default_rng(size * 10 + strides)
    x_val = rng.normal(size=(2, size, size, 6)).astype(np.float32)
    out_size = -(-size // strides)
    w_val = rng.normal(size=(2, out_size, out_size, 4)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.constant(x_val)
        y = resnet.conv2d_fixed_padding(x, 'c', 4, 1, strides, 'channels_last',
                                        cpu_pointwise=True)
        kernel = tf.global_variables()[0]
        grads = tf.gradients(tf.reduce_sum(y * w_val), [x, kernel])
        assert not [op for op in graph.get_operations() if op.type.startswith('Conv2D')]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            out, (dx, dk), k_val = sess.run([y, grads, kernel])
    assert y.shape.as_list() == [2, out_size, out_size, 4]
    k2 = k_val.reshape(6, 4)
    sub = x_val[:, ::strides, ::strides, :]
    want_dx = np.zeros_like(x_val)
    want_dx[:, ::strides, ::strides, :] = np.einsum('nhwd,cd->nhwc', w_val, k2)
    np.testing.assert_allclose(out, np.einsum('nhwc,cd->nhwd', sub, k2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dk.reshape(6, 4), np.einsum('nhwc,nhwd->cd', sub, w_val),
                               rtol=1e-4, atol=1e-4)


def network_outputs(resnet_size, cpu_pointwise, values=None):
    """(logits, every variable's gradient, {name: value}) of a training-mode network on a
    fixed batch; values: the variables' values to load (else their initializers')."""
    images = np.random.default_rng(3).uniform(-1, 1, size=(2, 32, 32, 3)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        network = resnet.ResNet(resnet_size, 5, 'channels_last', cpu_input_grad=True,
                                cpu_pointwise=cpu_pointwise)
        logits = network(tf.constant(images), True)
        variables = tf.global_variables()
        grads = tf.gradients(tf.reduce_sum(tf.sin(logits)), tf.trainable_variables())
        conv_ops = {op.type for op in graph.get_operations()}
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            if values:
                for v in variables:
                    v.load(values[v.op.name], sess)
            out, grad_values, var_values = sess.run([logits, grads, variables])
    return out, grad_values, {v.op.name: value for v, value in zip(variables, var_values)}, \
        conv_ops


@pytest.mark.parametrize('resnet_size', [18, 50])
def test_pointwise_network_is_the_same_network(resnet_size):
    """The same variables (names, shapes) and, on the same values, the same logits and
    gradients, with the 1x1 convolutions as matrix products or as convolutions."""
    out, grads, values, ops = network_outputs(resnet_size, False)
    out2, grads2, values2, ops2 = network_outputs(resnet_size, True, values)
    assert {k: v.shape for k, v in values.items()} == {k: v.shape for k, v in values2.items()}
    assert 'AvgPool' in ops2 and 'AvgPool' not in ops
    np.testing.assert_allclose(out2, out, rtol=1e-4, atol=1e-4)
    for g2, g in zip(grads2, grads):
        np.testing.assert_allclose(g2, g, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(g).max()))


def frozen_variables(variables, scopes):
    """The variables that live under one of `scopes`."""
    prefixes = tuple(scope + '/' for scope in scopes)
    return [v for v in variables if v.op.name.startswith(prefixes)]


# ResNet-18's scopes FixBlock2 freezes: init and the two blocks of stages 0 and 1.
FIXBLOCK2_SCOPES = ['init'] + ['stages_%d_block_%d' % (i, j) for i in range(2) for j in range(2)]


@pytest.mark.parametrize('fix_block2', [False, True])
def test_fixblock2_stages_get_no_gradient_and_inference_batch_norm(fix_block2):
    with tf.Graph().as_default():
        network = resnet.ResNet(18, 3, fix_block2=fix_block2)
        logits = network(tf.random.normal([2, 32, 32, 3]), training=True)
        scopes = FIXBLOCK2_SCOPES if fix_block2 else []
        frozen = frozen_variables(tf.trainable_variables(), scopes)
        grads = dict(zip(tf.trainable_variables(),
                         tf.gradients(tf.reduce_sum(logits), tf.trainable_variables())))
        updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    assert all(grads[v] is None for v in frozen)
    assert all(grads[v] is not None for v in grads if v not in frozen)
    # moving-average updates only for batch norms that train
    updated = {op.name.split('/')[0] for op in updates}
    assert not updated & set(scopes)
    # ResNet-18: the stem's kernel, then 3 + 2 per stage (projection in every first block)
    kernels = [v for v in frozen if 'conv2d/kernel' in v.name]
    assert len(kernels) == (1 + 5 * 2 if fix_block2 else 0)


def fine_tuning_step(frozen_bn):
    """One Momentum step of FixBlock2 fine-tuning as the original's finetune.py: var_list by
    name (trainable_under_fixblock2), batch-norm updates grouped with the step. Returns
    (trained names, frozen names, variable values before, after)."""
    rng = np.random.default_rng(5)
    images = rng.normal(size=(4, 32, 32, 3)).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[[0, 1, 2, 1]]
    with tf.Graph().as_default():
        tf.set_random_seed(3)
        network = resnet.ResNet(18, 3, fix_block2=True, frozen_bn=frozen_bn)
        logits = network(tf.constant(images), training=True)
        loss = (tf.losses.softmax_cross_entropy(labels, logits)
                + loss_lib.weight_decay_loss(tf.trainable_variables(), 1e-4, 0.1))
        trained = resnet.trainable_under_fixblock2(tf.trainable_variables())
        step = tf.train.get_or_create_global_step()
        apply = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, step, var_list=trained)
        train_op = tf.group(apply, tf.get_collection(tf.GraphKeys.UPDATE_OPS))
        frozen = frozen_variables(tf.trainable_variables(), FIXBLOCK2_SCOPES)
        values = {v.op.name: v for v in tf.global_variables()}
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            before = sess.run(values)
            sess.run(train_op)
            after = sess.run(values)
    return {v.op.name for v in trained}, {v.op.name for v in frozen}, before, after


@pytest.mark.parametrize('frozen_bn', ['train', 'inference'])
def test_fixblock2_freezes_variables_and_runs_frozen_batch_norm_as_asked(frozen_bn):
    trained, frozen, before, after = fine_tuning_step(frozen_bn)
    changed = {n for n in before if not np.array_equal(before[n], after[n])}
    frozen_part = ('init/', 'stages_0_', 'stages_1_')
    model_vars = {n for n in before if not n.endswith('/Momentum') and n != 'global_step'}
    moving = {n for n in model_vars if 'moving_' in n}
    frozen_moving = {n for n in moving if n.startswith(frozen_part)}
    # the original's name test picks exactly the unfrozen trainable variables
    assert trained and not {n for n in trained if n.startswith(frozen_part)}
    assert trained | frozen == model_vars - moving and not trained & frozen
    # kernels, gamma and beta of init and stages 0-1: bit-identical, no Momentum slot
    assert not frozen & changed
    assert {n for n in before if n.endswith('/Momentum')} == {n + '/Momentum' for n in trained}
    assert trained <= changed
    # moving statistics: the unfrozen ones always move; the frozen ones only in 'train'
    assert moving - frozen_moving <= changed
    assert len(frozen_moving) == 2 * (5 + 5)  # ResNet-18 stages 0-1: 5 BNs each, mean + var
    if frozen_bn == 'train':
        assert frozen_moving <= changed
    else:
        assert not frozen_moving & changed


def test_frozen_bn_mode_is_checked():
    with pytest.raises(ValueError, match='frozen_bn'):
        resnet.ResNet(18, 3, fix_block2=True, frozen_bn='eval')


def test_a_partitioned_head_checkpoint_restores_whole_under_the_original_names(tmp_path):
    """ps mode's head in 3 slices (class_partitioner), one Momentum step, saved: the
    checkpoint holds logits/dense/kernel, its bias and slots whole under their own names,
    and a single-device model (one slice) restores them equal."""
    from mlimages.run import model_fn
    from helpers import model_parts
    from test_model_fn import run_settings
    opts = run_settings(18, 'fp32', class_num=10)
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    labels = (rng.random((2, 10)) < 0.5).astype(np.float32)
    path = str(tmp_path / 'model.ckpt')
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        derived = model_fn.Derived(images_per_step=2, head_shards=3)
        spec = model_fn.make_model_fn(model_parts(opts), derived)(
            tf.constant(images), tf.constant(labels), tf.estimator.ModeKeys.TRAIN)
        parts = [v.op.name for v in tf.global_variables() if 'logits' in v.op.name]
        assert 'logits/dense/kernel/part_2' in parts and 'logits/dense/bias/part_2' in parts
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            session.run(spec.train_op)
            written = session.run({'kernel': tf.concat(
                [v for v in tf.global_variables() if v.op.name.startswith(
                    'logits/dense/kernel/part_') and 'Momentum' not in v.op.name], axis=1)})
            tf.train.Saver().save(session, path)
    shapes = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    assert shapes['logits/dense/kernel'] == [512, 10]
    assert shapes['logits/dense/kernel/Momentum'] == [512, 10]
    assert shapes['logits/dense/bias'] == [10]
    assert not any('part_' in name for name in shapes)
    with tf.Graph().as_default():
        derived = model_fn.Derived(images_per_step=2)
        spec = model_fn.make_model_fn(model_parts(opts), derived)(
            tf.constant(images), tf.constant(labels), tf.estimator.ModeKeys.TRAIN)
        with tf.Session() as session:
            tf.train.Saver().restore(session, path)
            kernel = [v for v in tf.global_variables() if v.op.name == 'logits/dense/kernel']
            np.testing.assert_array_equal(session.run(kernel[0]), written['kernel'])
