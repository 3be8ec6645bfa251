"""ResNet v2 (pre-activation) as Tencent ML-Images trains it.

He et al., "Identity Mappings in Deep Residual Networks" (arXiv:1603.05027), with the
original's three changes:
  * no max-pool after the 7x7 stem: the first block of *every* stage, stage 0 included,
    has stride 2 instead;
  * the bottleneck strides in its 3x3 conv ((1x1, 1) -> (3x3, s) -> (1x1, 1));
  * a stage's projection shortcut gets its own BN-ReLU before the 1x1 conv.

Variable names match the original's checkpoints (docs/original.md, Model), e.g.
``stages_2_block_0/conv1_b1/conv2d/kernel`` and
``stages_2_block_0/conv2_b2_bn/batch_normalization/moving_mean``.

Images come in NHWC; with data_format 'channels_first' they are transposed once (what
cuDNN prefers in float32). The model takes explicit arguments and reads no flags; the
caller says which CPU forms of the same convolutions to build (mlimages/config/cpu.py):
  cpu_input_grad  a stride-1 NHWC convolution's input gradient is a forward convolution
                  with the flipped kernel (_conv_same_fast_input_grad: for TensorFlow's own
                  CPU kernels);
  cpu_pointwise   a 1x1 NHWC convolution is a matrix product, its two gradients too
                  (_pointwise_matmul); a strided one first takes every s-th pixel (a 1x1
                  average pool: the same values, the same gradient), so no CPU kernel runs
                  a strided 1x1 convolution.

In ps mode the head (logits/dense: kernel and bias, and so their optimizer slots) is cut
along the classes into one slice per ps task (head_shards, class_partitioner): whole, the
2048 x 11,166 kernel and its Momentum slot would make one ps task hold 183 MB more than
the others.

FixBlock2 (fine-tuning's freeze of init and stages 0-1, the original's only one): no
gradient flows into them, and their batch norm runs either in inference mode on the restored
statistics (frozen_bn='inference') or, as the original's finetune.py, in training mode
(frozen_bn='train': batch statistics, moving mean/variance still updated). The optimizer's
variables are the caller's choice: trainable_under_fixblock2 is the original's name test
(stages_2, stages_3, global_pool, logits).
"""
import tensorflow.compat.v1 as tf

from mlimages.config.choices import FROZEN_BN_MODES, SUPPORTED_SIZES
from mlimages.errors import UsageError

# resnet_size -> (block type, blocks per stage)
_ARCHITECTURES = {
    18: ('basic', [2, 2, 2, 2]),
    34: ('basic', [3, 4, 6, 3]),
    50: ('bottleneck', [3, 4, 6, 3]),
    101: ('bottleneck', [3, 4, 23, 3]),
    152: ('bottleneck', [3, 8, 36, 3]),
    200: ('bottleneck', [3, 24, 36, 3]),
}
assert tuple(sorted(_ARCHITECTURES)) == SUPPORTED_SIZES

# Output channels of each stage.
_STAGE_FILTERS = {'bottleneck': [256, 512, 1024, 2048], 'basic': [64, 128, 256, 512]}
_STAGE_STRIDES = [2, 2, 2, 2]

# Substrings of the names of the variables the original's finetune.py updates under FixBlock2.
FIXBLOCK2_TRAINED = ('stages_2', 'stages_3', 'global_pool', 'logits')
# The stages FixBlock2 freezes with init: 0 and 1.
FIXBLOCK2_STAGES = 2


def normalize_data_format(data_format):
    """Maps the spellings the original accepted to tf.layers' names.

    'NCHW'/'channels_first' -> 'channels_first'; 'NHWC'/'channels_last' -> 'channels_last'.
    """
    spelling = {'nchw': 'channels_first', 'channels_first': 'channels_first',
                'nhwc': 'channels_last', 'channels_last': 'channels_last'}
    try:
        return spelling[data_format.lower()]
    except (KeyError, AttributeError):
        raise ValueError('data_format must be NCHW, channels_first, NHWC or channels_last, '
                         'got %r' % (data_format,))


# --dtype values whose convolutions run in 16 bits (tensor cores' NHWC kernels).
SIXTEEN_BIT_DTYPES = ('fp16', 'bf16')


def resolve_data_format(data_format, has_gpu, cpu_fallback=False, dtype='fp32'):
    """--data_format: 'auto' -> NCHW with a GPU in float32, NHWC with a GPU in fp16/bf16
    and without a GPU; NCHW without a GPU is an error (TensorFlow's CPU convolutions are
    NHWC only), or with cpu_fallback NHWC (a cluster's ps tasks and evaluator share the
    workers' flags; the variables and results do not depend on the layout). Raises
    errors.UsageError.

    Why by dtype (TF 2.15's grappler, generic_layout_optimizer.cc, which runs after the
    fp16 rewrite): on GPUs it converts a graph's convolutions to NCHW, except when at least
    half of them are fp16 on Volta or later (or bf16 on Ampere or later); then it converts
    them to NHWC, the tensor cores' layout. 'auto' builds the graph in the layout the pass
    would choose, so it inserts no transposes."""
    if data_format.lower() == 'auto':
        return 'channels_first' if has_gpu and dtype not in SIXTEEN_BIT_DTYPES \
            else 'channels_last'
    try:
        resolved = normalize_data_format(data_format)
    except ValueError as e:
        raise UsageError('--data_format: %s' % e)
    if resolved == 'channels_first' and not has_gpu and cpu_fallback:
        return 'channels_last'
    if resolved == 'channels_first' and not has_gpu:
        raise UsageError('--data_format=%s needs a GPU: TensorFlow\'s CPU convolutions '
                         'support only NHWC (use --data_format=NHWC or auto)' % data_format)
    return resolved


def batch_norm(inputs, name, training, data_format, decay, epsilon):
    """BN as the original: centre and scale, fused, in scope `<name>/batch_normalization`."""
    with tf.variable_scope(name):
        return tf.layers.batch_normalization(
            inputs, axis=1 if data_format == 'channels_first' else 3,
            momentum=decay, epsilon=epsilon, center=True, scale=True,
            training=training, fused=True)


def fixed_padding(inputs, kernel_size, data_format):
    """Pads H and W by kernel_size - 1 in total, independently of the input size.

    Strided convs then use VALID padding, so the output grid does not depend on whether the
    input size is even (as 'SAME' would), matching Caffe-style alignment.
    """
    pad_total = kernel_size - 1
    pad_beg = pad_total // 2
    pad_end = pad_total - pad_beg
    if data_format == 'channels_first':
        paddings = [[0, 0], [0, 0], [pad_beg, pad_end], [pad_beg, pad_end]]
    else:
        paddings = [[0, 0], [pad_beg, pad_end], [pad_beg, pad_end], [0, 0]]
    return tf.pad(inputs, paddings)


def _conv_same_fast_input_grad(inputs, kernel):
    """Stride-1 SAME NHWC conv whose input gradient is a forward conv with the flipped kernel.

    The gradient is the same; TensorFlow's CPU Conv2DBackpropInput is up to ten times slower
    than the forward conv for 3x3 kernels with many channels on small feature maps (stage 3
    of a ResNet), while the forward conv with the spatially flipped, in/out-transposed
    kernel computes exactly the input gradient of a stride-1 SAME conv with an odd kernel.
    """
    @tf.custom_gradient
    def conv(x, k):
        def grad(dy):
            flipped = tf.transpose(tf.reverse(k, [0, 1]), [0, 1, 3, 2])
            dx = tf.nn.conv2d(dy, flipped, 1, 'SAME')
            dk = tf.raw_ops.Conv2DBackpropFilter(
                input=x, filter_sizes=tf.shape(k), out_backprop=dy,
                strides=[1, 1, 1, 1], padding='SAME')
            return dx, dk
        return tf.nn.conv2d(x, k, 1, 'SAME'), grad
    return conv(inputs, kernel)


def _pointwise_matmul(inputs, kernel):
    """A 1x1 stride-1 NHWC conv as the product [pixels, in] x [in, out], its gradients too.

    The same values: a 1x1 convolution is that product. On a CPU the matrix product beats
    the convolution kernels (TensorFlow's own and oneDNN's both: 4 % of a ResNet-50 step
    measured on an AVX2 EPYC); its input gradient dy x kernel^T and kernel gradient
    inputs^T x dy are products with transposed operands, so no transposed kernel is
    written and no layout is reordered.
    """
    channels_in, channels_out = kernel.shape[2], kernel.shape[3]

    @tf.custom_gradient
    def conv(x, k):
        pixels = tf.reshape(x, [-1, channels_in])
        matrix = tf.reshape(k, [channels_in, channels_out])
        out_shape = tf.concat([tf.shape(x)[:3], [channels_out]], 0)

        def grad(dy):
            dy = tf.reshape(dy, [-1, channels_out])
            dx = tf.matmul(dy, matrix, transpose_b=True)
            dk = tf.matmul(pixels, dy, transpose_a=True)
            return tf.reshape(dx, tf.shape(x)), tf.reshape(dk, tf.shape(k))
        return tf.reshape(tf.matmul(pixels, matrix), out_shape), grad
    out = conv(inputs, kernel)
    out.set_shape(inputs.shape[:3].concatenate([channels_out]))
    return out


def conv2d_fixed_padding(inputs, name, filters, kernel_size, strides, data_format,
                         cpu_input_grad=False, cpu_pointwise=False):
    """Bias-free conv, variance-scaling init, kernel `<name>/conv2d/kernel`; SAME at stride 1.

    The kernel is the variable tf.layers.conv2d would create (same name, shape, initializer).
    For a process without GPUs (cuDNN's own kernels are the fast ones on a GPU):
    cpu_input_grad, a stride-1 NHWC conv takes _conv_same_fast_input_grad; cpu_pointwise,
    a 1x1 NHWC conv is _pointwise_matmul, after a strided one's subsampling.
    """
    pointwise = cpu_pointwise and kernel_size == 1 and data_format == 'channels_last'
    if pointwise and strides > 1:
        # Every s-th pixel, as the strided conv reads them: a 1x1 window's average is the
        # pixel itself, and its gradient goes back to that pixel alone.
        inputs = tf.nn.avg_pool2d(inputs, 1, strides, 'VALID')
        strides = 1
    if strides > 1:
        inputs = fixed_padding(inputs, kernel_size, data_format)
    channel_axis = 1 if data_format == 'channels_first' else 3
    in_channels = inputs.shape[channel_axis]
    with tf.variable_scope(name):
        with tf.variable_scope('conv2d'):
            kernel = tf.get_variable(
                'kernel', [kernel_size, kernel_size, in_channels, filters], tf.float32,
                initializer=tf.variance_scaling_initializer())
        # float32 variable; a bf16 model (train.py --dtype=bf16) reads it as bf16
        kernel = tf.cast(tf.convert_to_tensor(kernel), inputs.dtype)
        if pointwise:
            return _pointwise_matmul(inputs, kernel)
        if cpu_input_grad and strides == 1 and data_format == 'channels_last':
            return _conv_same_fast_input_grad(inputs, kernel)
        fmt = 'NCHW' if data_format == 'channels_first' else 'NHWC'
        stride = [1, 1, strides, strides] if fmt == 'NCHW' else [1, strides, strides, 1]
        return tf.nn.conv2d(inputs, kernel, stride, 'SAME' if strides == 1 else 'VALID',
                            data_format=fmt)


class ResNet(object):
    """Builds the network; `network(images, training)` returns logits of shape [B, class_num].

    After a call, `network.features` holds the pooled feature vector [B, 2048] (512 for
    ResNet-18/34), the input of the logits layer.

    fix_block2 freezes `init` and stages 0-1 (the original's FixBlock2): no gradient flows
    into them, and their batch norm runs in inference mode (frozen_bn='inference') or, when
    training, in training mode like the rest (frozen_bn='train', the original's
    fine-tuning). Leaving their variables out of the optimizer is the caller's part
    (`trainable_under_fixblock2`).

    cpu_input_grad: stride-1 NHWC convolutions compute their input gradient as a forward
    convolution; cpu_pointwise: 1x1 NHWC convolutions are matrix products
    (conv2d_fixed_padding); both for a process that sees no GPU.
    """

    def __init__(self, resnet_size, class_num, data_format='channels_last',
                 batch_norm_decay=0.997, batch_norm_epsilon=1e-5, fix_block2=False,
                 frozen_bn='inference', head_shards=1, cpu_input_grad=False,
                 cpu_pointwise=False):
        if resnet_size not in _ARCHITECTURES:
            raise ValueError('resnet_size must be one of %s, got %r'
                             % (', '.join(map(str, SUPPORTED_SIZES)), resnet_size))
        self.block_type, self.stages = _ARCHITECTURES[resnet_size]
        self.filters = _STAGE_FILTERS[self.block_type]
        self.class_num = class_num
        self.data_format = normalize_data_format(data_format)
        self.bn_decay = batch_norm_decay
        self.bn_epsilon = batch_norm_epsilon
        self.fix_block2 = fix_block2
        if frozen_bn not in FROZEN_BN_MODES:
            raise ValueError('frozen_bn must be one of %s, got %r'
                             % (', '.join(FROZEN_BN_MODES), frozen_bn))
        self.frozen_bn = frozen_bn
        self.head_shards = head_shards
        self.cpu_input_grad = cpu_input_grad
        self.cpu_pointwise = cpu_pointwise
        self.features = None

    def _bn_relu(self, x, name, training):
        x = batch_norm(x, name, training, self.data_format, self.bn_decay, self.bn_epsilon)
        return tf.nn.relu(x)

    def _conv(self, x, name, filters, kernel_size, strides):
        return conv2d_fixed_padding(x, name, filters, kernel_size, strides, self.data_format,
                                    self.cpu_input_grad, self.cpu_pointwise)

    def _block(self, x, filters, strides, projection, training):
        """One pre-activation residual block; `projection` for the first block of a stage."""
        shortcut = x
        if projection:
            shortcut = self._bn_relu(x, 'conv1_b1_bn', training)
            shortcut = self._conv(shortcut, 'conv1_b1', filters, 1, strides)
        if self.block_type == 'bottleneck':
            x = self._bn_relu(x, 'conv1_b2_bn', training)
            x = self._conv(x, 'conv1_b2', filters // 4, 1, 1)
            x = self._bn_relu(x, 'conv2_b2_bn', training)
            x = self._conv(x, 'conv2_b2', filters // 4, 3, strides)
            x = self._bn_relu(x, 'conv3_b2_bn', training)
            x = self._conv(x, 'conv3_b2', filters, 1, 1)
        else:
            x = self._bn_relu(x, 'conv1_b2_bn', training)
            x = self._conv(x, 'conv1_b2', filters, 3, strides)
            x = self._bn_relu(x, 'conv2_b2_bn', training)
            x = self._conv(x, 'conv2_b2', filters, 3, 1)
        return x + shortcut

    def __call__(self, images, training):
        """The logits [B, class_num] of the NHWC images; training: batch norm in training
        mode (FixBlock2's frozen stages as frozen_bn says)."""
        x = images
        if self.data_format == 'channels_first':
            x = tf.transpose(x, [0, 3, 1, 2])
        with tf.variable_scope('init'):
            x = self._conv(x, 'init_conv', 64, 7, 2)
        for i, num_blocks in enumerate(self.stages):
            if self.fix_block2 and i == FIXBLOCK2_STAGES:
                x = tf.stop_gradient(x)
            frozen = self.fix_block2 and i < FIXBLOCK2_STAGES
            # 'inference': a frozen stage's batch norm uses (and keeps) its restored moving
            # statistics; 'train': batch statistics, and the moving ones keep updating.
            stage_training = training and (not frozen or self.frozen_bn == 'train')
            for j in range(num_blocks):
                with tf.variable_scope('stages_%d_block_%d' % (i, j)):
                    x = self._block(x, self.filters[i], _STAGE_STRIDES[i] if j == 0 else 1,
                                    projection=(j == 0), training=stage_training)
        with tf.variable_scope('global_pool'):
            x = self._bn_relu(x, 'bn', training)
            axes = [2, 3] if self.data_format == 'channels_first' else [1, 2]
            x = tf.reduce_mean(x, axes)
        self.features = tf.identity(x, name='features')
        with tf.variable_scope('logits', partitioner=class_partitioner(self.head_shards)):
            return tf.layers.dense(self.features, units=self.class_num)


def variable_shapes(resnet_size, class_num):
    """{variable name: shape} of ResNet(resnet_size, class_num)'s variables, from the
    architecture alone (no graph: what the graph creates, tests/test_resnet.py holds it so)."""
    block_type, stages = _ARCHITECTURES[resnet_size]
    shapes = {'init/init_conv/conv2d/kernel': [7, 7, 3, 64]}

    def conv_bn(scope, name, kernel, channels_in, filters):
        for part in ('beta', 'gamma', 'moving_mean', 'moving_variance'):
            shapes['%s/%s_bn/batch_normalization/%s' % (scope, name, part)] = [channels_in]
        shapes['%s/%s/conv2d/kernel' % (scope, name)] = [kernel, kernel, channels_in, filters]

    channels = 64
    for i, num_blocks in enumerate(stages):
        filters = _STAGE_FILTERS[block_type][i]
        for j in range(num_blocks):
            scope = 'stages_%d_block_%d' % (i, j)
            if j == 0:
                conv_bn(scope, 'conv1_b1', 1, channels, filters)
            if block_type == 'bottleneck':
                conv_bn(scope, 'conv1_b2', 1, channels, filters // 4)
                conv_bn(scope, 'conv2_b2', 3, filters // 4, filters // 4)
                conv_bn(scope, 'conv3_b2', 1, filters // 4, filters)
            else:
                conv_bn(scope, 'conv1_b2', 3, channels, filters)
                conv_bn(scope, 'conv2_b2', 3, filters, filters)
            channels = filters
    for part in ('beta', 'gamma', 'moving_mean', 'moving_variance'):
        shapes['global_pool/bn/batch_normalization/%s' % part] = [channels]
    shapes.update({'logits/dense/kernel': [channels, class_num], 'logits/dense/bias': [class_num]})
    return shapes


def class_partitioner(shards):
    """None for one shard, else a variable partitioner that splits the classes axis (the
    last: the head's kernel [features, classes] and bias [classes]) into `shards` nearly
    equal slices. A partitioned variable is saved under its own name, whole (as
    slices), so a checkpoint restores whatever the shard count, one included."""
    if shards <= 1:
        return None

    def partitioner(shape, dtype):
        del dtype
        dims = shape.as_list()
        return [1] * (len(dims) - 1) + [max(1, min(shards, dims[-1]))]
    return partitioner


def trainable_under_fixblock2(variables):
    """The variables the original's finetune.py updates under FixBlock2: those whose name
    contains stages_2, stages_3, global_pool or logits (not init, stages 0 and 1)."""
    return [v for v in variables if any(part in v.name for part in FIXBLOCK2_TRAINED)]
