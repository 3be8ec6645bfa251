"""What the CPU has, from /proc/cpuinfo, and the choices made from it (no TensorFlow).

    oneDNN      TensorFlow 2.15's own rule (tensorflow/core/util/port.cc): its oneDNN
                kernels are on by default on Linux x86 when the CPU has AVX512_VNNI,
                AVX512_BF16, AVX_VNNI or AMX; TF_ENABLE_ONEDNN_OPTS=1/0 overrides.
                train.py turns them on (prefer_onednn, before TensorFlow loads) where
                that rule leaves them off on a CPU with AVX2 and FMA, for an fp32 run:
                there they train a ResNet 1.2x faster than TensorFlow's own kernels
                (measured on an AVX2 EPYC); bf16 and fp16 keep TensorFlow's rule (its
                own kernels emulate them; oneDNN's bfloat16 needs AVX-512).
    input grad  resnet's forward-convolution input gradient (stride-1 convolutions)
                with TensorFlow's own (Eigen) kernels; oneDNN's or cuDNN's own
                backward-data convolution otherwise.
    pointwise   resnet's 1x1 convolutions as matrix products (a strided one subsampled
                first) in a process without GPU, with either kernel library.
    --dtype     auto: bf16 for a run without GPU on a CPU with AMX_BF16 or AVX512_BF16
                (oneDNN's bfloat16 convolutions use them), else fp32.

Each choice comes with its reason in words, for train.py's start lines.
"""
import collections

CPUINFO = '/proc/cpuinfo'

# The cpuinfo flags for which TensorFlow 2.15 turns oneDNN on by default.
ONEDNN_DEFAULT_FLAGS = ('avx512_vnni', 'avx512_bf16', 'avx_vnni', 'amx_tile', 'amx_int8',
                        'amx_bf16')
BF16_FLAGS = ('amx_bf16', 'avx512_bf16')
ONEDNN_ENV = 'TF_ENABLE_ONEDNN_OPTS'
# The cpuinfo flags of the CPUs on which train.py prefers oneDNN's fp32 kernels.
ONEDNN_PREFERRED_FLAGS = ('avx2', 'fma')
# Set to 1 beside ONEDNN_ENV when prefer_onednn set it, so this process's log and its
# child processes' (they inherit both) say whose choice it was.
ONEDNN_CHOSEN_ENV = 'MLIMAGES_ONEDNN_CHOSEN'

Cpu = collections.namedtuple('Cpu', 'model flags')
Choice = collections.namedtuple('Choice', 'value reason')
# resnet's CPU forms of its convolutions, a Choice each (conv_forms).
ConvForms = collections.namedtuple('ConvForms', 'input_grad pointwise')


def parse_cpuinfo(text):
    """Cpu(model name, frozenset of flags) of /proc/cpuinfo's text (its first processor);
    ('', empty) where the text has neither (not Linux x86)."""
    model, flags = '', frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(':')
        key = key.strip()
        if key == 'model name' and not model:
            model = value.strip()
        elif key == 'flags' and not flags:
            flags = frozenset(value.split())
    return Cpu(model, flags)


def this_cpu(path=CPUINFO):
    """The Cpu of this machine (empty where /proc/cpuinfo cannot be read)."""
    try:
        with open(path) as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return Cpu('', frozenset())


def _env_bool(value):
    """TF_ENABLE_ONEDNN_OPTS as TensorFlow reads it: True, False, or None (unset or not
    a boolean: TensorFlow then keeps its default)."""
    value = (value or '').strip().lower()
    return {'1': True, 'true': True, '0': False, 'false': False}.get(value)


def onednn(cpu, environ):
    """Choice(whether TensorFlow runs its oneDNN kernels, why)."""
    forced = _env_bool(environ.get(ONEDNN_ENV))
    if forced and environ.get(ONEDNN_CHOSEN_ENV):
        return Choice(True, 'train.py\'s choice for fp32 on a CPU with %s, faster than '
                      'TensorFlow\'s own kernels; %s=0 keeps those'
                      % (' and '.join(f.upper() for f in ONEDNN_PREFERRED_FLAGS), ONEDNN_ENV))
    if forced is not None:
        return Choice(forced, '%s=%s' % (ONEDNN_ENV, environ[ONEDNN_ENV]))
    having = [f for f in ONEDNN_DEFAULT_FLAGS if f in cpu.flags]
    if having:
        return Choice(True, 'the CPU has %s' % ', '.join(having))
    return Choice(False, 'the CPU has none of %s' % ', '.join(ONEDNN_DEFAULT_FLAGS))


def prefer_onednn(cpu, environ, dtype):
    """Turns TensorFlow's oneDNN kernels on (in environ, before TensorFlow loads) for an
    fp32 run (dtype fp32 or auto, which is fp32 on such a CPU) on a CPU with AVX2 and FMA
    whose TensorFlow default leaves them off; returns whether it did. TF_ENABLE_ONEDNN_OPTS
    already set, in any spelling, is the user's choice and stays."""
    if ONEDNN_ENV in environ or dtype not in ('fp32', 'auto') or onednn(cpu, environ).value:
        return False
    if not all(f in cpu.flags for f in ONEDNN_PREFERRED_FLAGS):
        return False
    environ[ONEDNN_ENV] = environ[ONEDNN_CHOSEN_ENV] = '1'
    return True


def has_bf16(cpu):
    """The CPU's bfloat16 instructions (AMX_BF16, AVX512_BF16) it has, a list."""
    return [f for f in BF16_FLAGS if f in cpu.flags]


def forward_input_grad(has_gpu, onednn_choice):
    """Choice(whether stride-1 convolutions take resnet's forward-convolution input
    gradient, why): only with TensorFlow's own (Eigen) kernels, whose stride-1
    backward-data convolution is slow; oneDNN's is native and beats the forward
    convolution with a flipped kernel, which it must reorder at every step."""
    if has_gpu:
        return Choice(False, 'a GPU: cuDNN\'s own input gradient is the fast one')
    if onednn_choice.value:
        return Choice(False, 'oneDNN\'s backward-data convolution beats a forward one '
                      'with the flipped kernel')
    return Choice(True, 'Eigen\'s backward-data convolution is slower than its forward one')


def pointwise_matmul(has_gpu):
    """Choice(whether resnet's 1x1 convolutions are matrix products, why)."""
    if has_gpu:
        return Choice(False, 'a GPU: cuDNN\'s convolutions')
    return Choice(True, 'the CPU\'s matrix product beats its 1x1 and strided 1x1 '
                  'convolutions')


def conv_forms(has_gpu, onednn_choice):
    """ConvForms(forward_input_grad's Choice, pointwise_matmul's) of a process."""
    return ConvForms(forward_input_grad(has_gpu, onednn_choice), pointwise_matmul(has_gpu))


def resolve_dtype(dtype, has_gpu, cpu):
    """Choice(--dtype with auto resolved, why); any other value is kept as given."""
    if dtype != 'auto':
        return Choice(dtype, 'given')
    if has_gpu:
        return Choice('fp32', 'auto: a GPU run computes in fp32 unless asked')
    bf16 = has_bf16(cpu)
    if bf16:
        return Choice('bf16', 'auto: no GPU, and the CPU has %s' % ', '.join(bf16))
    return Choice('fp32', 'auto: no GPU, and the CPU has neither %s'
                  % ' nor '.join(BF16_FLAGS))
