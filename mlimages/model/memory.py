"""The GPU memory one training replica needs, estimated before the first step (no
TensorFlow: train.py, tools/plan_run.py and the failure message use the same formula).

    bytes = PARAM_BYTES x P                          the model's values, float32 in every
                                                     --dtype: weights, Momentum slot, the
                                                     step's gradients and their transients
          + [16-bit] 2 x P                           the 16-bit copy of the weights
          + batch x ACTIVATION_FACTOR x R x (S / 224)^2 x e
                                                     what the forward pass keeps for the
                                                     backward one
          + batch x LOGIT_BYTES x C                  the head's outputs and the loss's
                                                     per-class tensors

    P  parameters: the body's of --resnet_size (ARCHITECTURE) + (features + 1) x C
    C  --class_num; S --image_size; e 4 bytes (fp32), 2 (fp16, bf16: 16-bit activations)
    R  elements an image at 224 px of the forward tensors the backward pass reads (the
       outputs of every Conv2D, Relu, Pad and residual AddV2), counted in the real graph

ARCHITECTURE is read from resnet.py's graph (tools/memory_peak.py --table); PARAM_BYTES and
ACTIVATION_FACTOR are fitted to the CPU allocator's measured peak of model_fn's training
step (TF_CPU_ALLOCATOR_USE_BFC=true: the BFC allocator a GPU uses), at 1000 classes:

    .venv/bin/python tools/memory_peak.py --fit --measure 50:4:112 50:16:112 \
        101:4:112 101:16:112 18:2:64 18:16:64           # DEPTH:BATCH:IMAGE

19.5 bytes a parameter is 4 for the weight, 4 for its Momentum slot, 4 for its gradient
and the rest for the step's transient copies (the weight decay's terms, the summed
gradients); 0.815 says the peak holds about 4/5 of R at once. Every figure of that run
is within 10 % of its peak (docs/hardware.md, "Memory per GPU"; tests/test_memory.py checks 20 %).
LOGIT_BYTES is not measurable at those sizes: four float32 tensors [batch, classes] (the
logits, the scores, the loss's terms, their gradient).

What only a GPU adds is the margin (margin(): the CUDA context outside TensorFlow's
allocator, the memory TensorFlow leaves to the system, cuDNN's autotuning workspace). A
replica fits a GPU when estimate + margin <= its memory; the estimate alone above it
cannot fit.
"""
import ctypes
import math
import os

from mlimages.errors import UsageError

GB = 1e9  # the decimal gigabyte of GPU spec sheets and of nvidia-smi's "16 GB" cards
REFERENCE_PIXELS = 224 * 224

# resnet_size -> (parameters of the body (every variable but the head's, batch-norm
# moving statistics included), features into the head, R: elements an image at 224 px
# the backward pass reads). tools/memory_peak.py --table prints these from the graph.
ARCHITECTURE = {
    18: (11188672, 512, 9441068),
    34: (21304256, 512, 12577068),
    50: (23553216, 2048, 33645612),
    101: (42597568, 2048, 47293484),
    152: (58287296, 2048, 64152620),
    200: (62792896, 2048, 89842732),
}
# Fitted to the measured peaks, see the module docstring.
PARAM_BYTES = 19.5
ACTIVATION_FACTOR = 0.815
LOGIT_BYTES = 16.0

# What only a GPU adds, the margin: the CUDA context with cuBLAS and cuDNN loaded (about
# 0.3-0.5 GB a process, outside TensorFlow's allocator) -- 0.5 GB; the memory TensorFlow
# leaves to the system when it sizes its GPU allocator (about 5 % of the card) and cuDNN's
# workspace while autotuning picks each convolution's algorithm (a try that finds no room
# is skipped, not fatal) -- 5 % of the card. Fragmentation is in the estimate already: its
# constants are fitted to the BFC allocator's peak, not to the tensors'. Judged against
# NVIDIA's batches for ResNet-50 on a 16 GB V100 (docs/hardware.md, "Memory per GPU"); tools/gpu_smoke.sh
# prints a GPU's measured peak beside the estimate to confirm it.
GPU_MARGIN_BYTES = 0.5 * GB
GPU_MARGIN_FRACTION = 0.05

# The memory of each GPU in GB, where the driver is not to be asked (a MIG slice, a card
# shared with another job): read here only.
GPU_MEMORY_ENV = 'MLIMAGES_GPU_MEMORY_GB'


def parameters(resnet_size, class_num):
    """P: the model's values (the body's and the head's (features + 1) x classes)."""
    body, features, _ = ARCHITECTURE[resnet_size]
    return body + (features + 1) * class_num


def activation_bytes(dtype):
    """e: bytes of an activation; 16-bit for fp16 (the rewrite) and bf16."""
    return 4 if dtype == 'fp32' else 2


def estimate(resnet_size, class_num, batch_size, image_size, dtype='fp32'):
    """Bytes of GPU memory one replica needs (the module docstring's formula)."""
    params = parameters(resnet_size, class_num)
    fixed = PARAM_BYTES * params + (0 if dtype == 'fp32' else 2 * params)
    return fixed + batch_size * per_image(resnet_size, class_num, image_size, dtype)


def per_image(resnet_size, class_num, image_size, dtype='fp32'):
    """Bytes each image of the batch adds."""
    retained = ARCHITECTURE[resnet_size][2]
    return (ACTIVATION_FACTOR * retained * image_size ** 2 / REFERENCE_PIXELS *
            activation_bytes(dtype) + LOGIT_BYTES * class_num)


def margin(gpu_bytes):
    """What only a GPU adds, for a GPU of gpu_bytes: the module docstring's list."""
    return GPU_MARGIN_BYTES + GPU_MARGIN_FRACTION * gpu_bytes


def largest_batch(resnet_size, class_num, image_size, dtype, gpu_bytes):
    """The largest --batch_size whose estimate + margin fits gpu_bytes (0: none)."""
    room = gpu_bytes - margin(gpu_bytes) - estimate(resnet_size, class_num, 0, image_size,
                                                    dtype)
    return max(0, int(math.floor(room / per_image(resnet_size, class_num, image_size,
                                                  dtype))))


def describe(resnet_size, class_num, batch_size, image_size, dtype):
    """'ResNet-101, batch 512, fp32 at 224 px, 11166 classes: 81.3 GB a replica'."""
    return 'ResNet-%d, batch %d, %s at %d px, %d classes: %.1f GB a replica' % (
        resnet_size, batch_size, dtype, image_size, class_num,
        estimate(resnet_size, class_num, batch_size, image_size, dtype) / GB)


def fit(resnet_size, class_num, batch_size, image_size, dtype, gpu_bytes):
    """('fits' | 'margin' | 'exceeds', the largest batch that fits): fits when estimate +
    margin <= gpu_bytes; margin when only the margin overflows; exceeds when the estimate
    alone does."""
    needed = estimate(resnet_size, class_num, batch_size, image_size, dtype)
    verdict = ('exceeds' if needed > gpu_bytes else
               'margin' if needed + margin(gpu_bytes) > gpu_bytes else 'fits')
    return verdict, largest_batch(resnet_size, class_num, image_size, dtype, gpu_bytes)


def oom_note(resnet_size, class_num, batch_size, image_size, dtype, gpu_bytes=None):
    """One clause for an out-of-memory message: 'the estimate for ResNet-101, batch 512,
    fp32 at 224 px, 11166 classes is 81.3 GB a replica; --batch_size=96 fits 16 GB'
    (without gpu_bytes, the batch that fits is left out)."""
    text = 'the estimate for %s' % describe(resnet_size, class_num, batch_size, image_size,
                                            dtype).replace(': ', ' is ')
    if gpu_bytes:
        batch = largest_batch(resnet_size, class_num, image_size, dtype, gpu_bytes)
        text += ('; --batch_size=%d fits %.0f GB' % (batch, gpu_bytes / GB) if batch else
                 '; no batch fits %.0f GB' % (gpu_bytes / GB))
    return text


def gpu_memory(has_gpu, environ=None, driver=None):
    """Bytes of the smallest GPU this process sees, or None: the MLIMAGES_GPU_MEMORY_GB
    environment variable, else (has_gpu: TensorFlow found one) the CUDA driver's
    cuDeviceTotalMem over the devices CUDA_VISIBLE_DEVICES leaves. Call it after
    devices.choose. driver: a loaded libcuda (ctypes) to ask instead of libcuda.so.1.
    Raises UsageError for a variable that is not a positive number."""
    environ = os.environ if environ is None else environ
    given = environ.get(GPU_MEMORY_ENV)
    if given is not None:
        try:
            value = float(given)
        except ValueError:
            value = 0
        if not value > 0:
            raise UsageError('%s=%r: give the memory of each GPU in GB, e.g. 16'
                             % (GPU_MEMORY_ENV, given))
        return value * GB
    if not has_gpu:
        return None
    try:
        cuda = driver or ctypes.CDLL('libcuda.so.1')
    except OSError:
        return None
    count, sizes = ctypes.c_int(0), []
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    for index in range(count.value):
        device, size = ctypes.c_int(0), ctypes.c_size_t(0)
        if cuda.cuDeviceGet(ctypes.byref(device), index) == 0 and \
                cuda.cuDeviceTotalMem_v2(ctypes.byref(size), device) == 0:
            sizes.append(size.value)
    return float(min(sizes)) if sizes else None


def preflight(resnet_size, class_num, batch_size, image_size, dtype, gpu_bytes, enforce=True):
    """train.py's memory lines before the first step: (the estimate's line, a warning line
    or None). Raises UsageError (exit 2) when the estimate alone exceeds gpu_bytes and
    enforce (--memory_check); gpu_bytes None: nothing to compare with."""
    needed = describe(resnet_size, class_num, batch_size, image_size, dtype)
    if not gpu_bytes:
        return 'memory: estimate %s (no GPU memory known: not checked)' % needed, None
    verdict, batch = fit(resnet_size, class_num, batch_size, image_size, dtype, gpu_bytes)
    room = ('--batch_size=%d fits' % batch if batch else
            'no --batch_size fits; a smaller --image_size or --resnet_size, or --dtype=fp16, '
            'would')
    gpu = 'the GPU\'s %.1f GB' % (gpu_bytes / GB)
    extra = ('a margin of %.1f GB for what a GPU adds (CUDA context, cuDNN workspace, '
             'fragmentation)' % (margin(gpu_bytes) / GB))
    line = 'memory: estimate %s; %s, %s' % (needed, gpu, 'it fits with %s' % extra
                                            if verdict == 'fits' else 'too little')
    if verdict == 'fits':
        return line, None
    if verdict == 'margin':
        return line, ('GPU memory: the estimate leaves less than %s of %s: it may run out '
                      'of memory; %s with the margin' % (extra, gpu, room))
    problem = ('GPU memory: %s exceeds %s (before %s); %s' % (needed, gpu, extra, room))
    if enforce:
        raise UsageError(problem + ', or --nomemory_check trains anyway')
    return line, problem + ' (--nomemory_check: training anyway)'
