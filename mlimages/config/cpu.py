"""What the CPU has, from /proc/cpuinfo, and the choices made from it (no TensorFlow).

    oneDNN      TensorFlow 2.15's own rule (tensorflow/core/util/port.cc): its oneDNN
                kernels are on by default on Linux x86 when the CPU has AVX512_VNNI,
                AVX512_BF16, AVX_VNNI or AMX; TF_ENABLE_ONEDNN_OPTS=1/0 overrides.
    input grad  resnet's forward-convolution input gradient (stride-1 convolutions)
                with TensorFlow's own (Eigen) kernels; oneDNN's or cuDNN's own
                backward-data convolution otherwise.
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

Cpu = collections.namedtuple('Cpu', 'model flags')
Choice = collections.namedtuple('Choice', 'value reason')


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
    if forced is not None:
        return Choice(forced, '%s=%s' % (ONEDNN_ENV, environ[ONEDNN_ENV]))
    having = [f for f in ONEDNN_DEFAULT_FLAGS if f in cpu.flags]
    if having:
        return Choice(True, 'the CPU has %s' % ', '.join(having))
    return Choice(False, 'the CPU has none of %s' % ', '.join(ONEDNN_DEFAULT_FLAGS))


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
