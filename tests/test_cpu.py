"""mlimages/config/cpu.py: the choices from given cpuinfo flags, and the oneDNN rule
against TensorFlow's own answer on this machine."""
import os

import pytest

from mlimages.config import cpu

AMX = 'fpu sse2 avx avx2 fma avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8'
AVX512_BF16 = 'fpu sse2 avx avx2 fma avx512f avx512_vnni avx512_bf16'
AVX512_VNNI = 'fpu sse2 avx avx2 fma avx512f avx512_vnni'
AVX2 = 'fpu sse2 avx avx2 fma'


def cpuinfo(flags, model='Some CPU @ 2.00GHz'):
    """/proc/cpuinfo's text of two processors with these flags."""
    one = 'processor\t: %d\nvendor_id\t: X\nmodel name\t: %s\nflags\t\t: %s\n\n'
    return one % (0, model, flags) + one % (1, model, flags)


def test_cpuinfo_gives_the_model_name_and_the_flags():
    parsed = cpu.parse_cpuinfo(cpuinfo(AVX2, 'AMD EPYC 7B13'))
    assert parsed == cpu.Cpu('AMD EPYC 7B13', frozenset(AVX2.split()))
    assert cpu.parse_cpuinfo('') == cpu.Cpu('', frozenset())
    assert cpu.this_cpu(os.path.join(os.sep, 'no', 'such', 'cpuinfo')) == \
        cpu.Cpu('', frozenset())


@pytest.mark.parametrize('flags,expected', [(AMX, 'bf16'), (AVX512_BF16, 'bf16'),
                                            (AVX512_VNNI, 'fp32'), (AVX2, 'fp32'),
                                            ('', 'fp32')])
def test_dtype_auto_is_bf16_only_without_gpu_on_a_cpu_with_bfloat16(flags, expected):
    this = cpu.parse_cpuinfo(cpuinfo(flags))
    choice = cpu.resolve_dtype('auto', False, this)
    assert choice.value == expected
    assert choice.reason.startswith('auto: no GPU')
    # a GPU run: fp32 whatever the CPU; a dtype given: kept
    assert cpu.resolve_dtype('auto', True, this).value == 'fp32'
    for given in ('fp32', 'fp16', 'bf16'):
        assert cpu.resolve_dtype(given, False, this) == (given, 'given')


@pytest.mark.parametrize('flags,default', [(AMX, True), (AVX512_BF16, True),
                                           (AVX512_VNNI, True), ('avx2 avx_vnni', True),
                                           (AVX2, False), ('', False)])
def test_onednn_follows_tensorflows_rule_and_its_environment_variable(flags, default):
    this = cpu.parse_cpuinfo(cpuinfo(flags))
    choice = cpu.onednn(this, {})
    assert choice.value is default
    assert ('the CPU has ' if default else 'the CPU has none of ') in choice.reason
    for value, forced in (('1', True), ('true', True), ('0', False), ('False', False)):
        assert cpu.onednn(this, {cpu.ONEDNN_ENV: value}) == \
            (forced, '%s=%s' % (cpu.ONEDNN_ENV, value))
    # not a boolean: TensorFlow keeps its default
    assert cpu.onednn(this, {cpu.ONEDNN_ENV: 'maybe'}).value is default


def test_onednn_rule_agrees_with_tensorflow_here():
    from tensorflow.python.util import _pywrap_util_port
    assert cpu.onednn(cpu.this_cpu(), os.environ).value is \
        bool(_pywrap_util_port.IsMklEnabled())


def test_forward_input_gradient_only_with_eigen_kernels_and_no_gpu():
    eigen, onednn = cpu.Choice(False, 'why'), cpu.Choice(True, 'why')
    assert cpu.forward_input_grad(False, eigen).value is True
    assert 'Eigen' in cpu.forward_input_grad(False, eigen).reason
    assert cpu.forward_input_grad(False, onednn).value is False
    assert 'oneDNN' in cpu.forward_input_grad(False, onednn).reason
    assert cpu.forward_input_grad(True, eigen).value is False
    assert cpu.forward_input_grad(True, onednn).value is False


@pytest.mark.parametrize('flags,dtype,chosen', [
    (AVX2, 'fp32', True), (AVX2, 'auto', True),       # TensorFlow's default: off
    (AVX2, 'bf16', False), (AVX2, 'fp16', False),      # its own kernels emulate these
    ('fpu sse2 avx avx2', 'fp32', False),              # no FMA
    ('fpu sse2 avx', 'fp32', False), ('', 'fp32', False),
    (AVX512_VNNI, 'fp32', False), (AMX, 'fp32', False),  # TensorFlow's default: on
])
def test_onednn_preferred_for_fp32_on_avx2_fma_cpus_tensorflow_leaves_off(flags, dtype, chosen):
    this = cpu.parse_cpuinfo(cpuinfo(flags))
    environ = {}
    assert cpu.prefer_onednn(this, environ, dtype) is chosen
    if chosen:
        assert environ[cpu.ONEDNN_ENV] == '1'
        choice = cpu.onednn(this, environ)
        assert choice.value is True and "train.py's choice" in choice.reason
        assert 'TF_ENABLE_ONEDNN_OPTS=0' in choice.reason
    else:
        assert environ == {}
    # a setting of the user's, in any spelling, stays
    for value in ('0', '1', 'maybe', ''):
        environ = {cpu.ONEDNN_ENV: value}
        assert cpu.prefer_onednn(this, environ, dtype) is False
        assert environ == {cpu.ONEDNN_ENV: value}


def test_pointwise_matmul_only_without_gpu():
    assert cpu.pointwise_matmul(False).value is True
    assert cpu.pointwise_matmul(True) == (False, "a GPU: cuDNN's convolutions")
