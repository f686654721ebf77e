"""``CUBEPY_CPU_WIDE_VECTORS``: 512-bit vectors in host code on AVX-512 CPUs LLVM tunes for 256 bits.

The setting only changes how wide LLVM vectorizes the cpu runtime's unit loops: results stay the interp's
bit for bit, and the host code's cache key names the choice (``/wide``).
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, config, cube, f32
from cubepy.compiler.emit_host import _machine_spec, compile_host, host_target_name
from tests.compiler.fission import on_interp_and_cpu

AVX512 = "+avx512f" in _machine_spec(False)[2].split(",")


@cube(launch=True)
def exp_scaled(x: Array[f32], out: Array[f32], scale: f32):
    """out[i] = exp(x[i] * scale) / (1 + x[i]): a loop LLVM vectorizes (exp inline, a division)."""
    if ABSOLUTE_POS < out.len():
        v = x[ABSOLUTE_POS]
        out[ABSOLUTE_POS] = cp.exp(v * scale) / (f32(1.0) + v)


def _inputs(client):
    x = np.linspace(-20.0, 20.0, 4099, dtype=np.float32)
    return client.create(x), client.zeros((x.size,), np.float32)


def _launch(client, x, out):
    exp_scaled.launch(client, cp.CubeCount(17), cp.CubeDim(256), cp.ArrayArg(x), cp.ArrayArg(out), f32(0.75))


def test_the_cache_key_names_the_vector_width():
    with config.override(CUBEPY_CPU_WIDE_VECTORS=False):
        narrow = host_target_name()
    with config.override(CUBEPY_CPU_WIDE_VECTORS=True):
        wide = host_target_name()
    assert not narrow.endswith("/wide")
    # only CPUs with AVX-512 get the feature, and only their objects the tag
    assert wide == (narrow + "/wide" if AVX512 else narrow)
    assert ("-prefer-256-bit" in _machine_spec(True)[2].split(",")) == AVX512
    assert "-prefer-256-bit" not in _machine_spec(False)[2].split(",")


@cube(launch=True)
def divided(x: Array[f32], out: Array[f32], scale: f32):
    """out[i] = (x[i] * scale + 1) / (1 + x[i] * x[i]): IEEE operations only, so exact on every runtime."""
    if ABSOLUTE_POS < out.len():
        v = x[ABSOLUTE_POS]
        out[ABSOLUTE_POS] = (v * scale + f32(1.0)) / (f32(1.0) + v * v)


def _launch_divided(client, x, out):
    divided.launch(client, cp.CubeCount(17), cp.CubeDim(256), cp.ArrayArg(x), cp.ArrayArg(out), f32(0.75))


def _bits(array):
    return array.view(np.uint32).tolist()


@pytest.mark.parametrize("wide", [False, True])
def test_exact_results_are_the_interps_bit_for_bit_at_either_width(wide):
    with config.override(CUBEPY_CPU_WIDE_VECTORS=wide):
        (_, interp_out), (_, cpu_out) = on_interp_and_cpu(_launch_divided, _inputs)
    assert _bits(interp_out) == _bits(cpu_out)
    assert np.count_nonzero(cpu_out) > 4000  # the kernel wrote its items


def test_math_library_results_do_not_depend_on_the_width():
    # exp is the cpu runtime's own vector code, lane by lane: within its stated bound of the interp's, and
    # the same bits at 8 or 16 lanes
    results = []
    for wide in (False, True):
        with config.override(CUBEPY_CPU_WIDE_VECTORS=wide):
            client = cp.client("cpu")
            x, out = _inputs(client)
            _launch(client, x, out)
            results.append(client.read(out))
    assert _bits(results[0]) == _bits(results[1])
    assert np.isfinite(results[0]).sum() > 4000


@pytest.mark.skipif(not AVX512, reason="this CPU has no AVX-512: both settings give the same code")
def test_wide_vectors_reach_the_optimized_code():
    x = cp.ArrayArg(cp.client("interp").zeros((4096,), np.float32))
    out = cp.ArrayArg(cp.client("interp").zeros((4096,), np.float32))
    definition = exp_scaled.define(exp_scaled.compilation_args((x, out, f32(1.0))), cp.CubeDim(256), checked=True)
    widths = {}
    for wide in (False, True):
        with config.override(CUBEPY_CPU_WIDE_VECTORS=wide):
            widths[wide] = compile_host(definition).llvm_opt
    assert "<16 x float>" in widths[True]
    if "<16 x float>" in widths[False]:  # e.g. AMD's Zen 4: no prefer-256-bit tuning to undo
        pytest.skip(f"LLVM's own tuning for {_machine_spec(False)[1]} already prefers 512-bit vectors")
    assert "<8 x float>" in widths[False]


@cube(launch=True)
def add_f64(lhs: Array[cp.f64], rhs: Array[cp.f64], out: Array[cp.f64]):
    """A streaming kernel of 8-byte items."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = lhs[ABSOLUTE_POS] + rhs[ABSOLUTE_POS]


@cube(launch=True)
def summed_rows(x: Array[f32], out: Array[f32]):
    """A loop: not a streaming kernel, whatever its arithmetic."""
    acc = f32(0.0)
    for k in range(4):
        acc += x[ABSOLUTE_POS * 4 + k]
    out[ABSOLUTE_POS] = acc


def _plain_definition(kernel, *elems):
    return kernel.compile(cp.CubeDim(256), *(cp.BufferCompilationArg(e, 1) for e in elems)).definition


def test_a_kernel_that_mostly_moves_memory_gets_256_bit_rows():
    from cubepy.compiler.targets.host_plain import streaming_vector_width
    from examples.vector_add import vector_add

    assert streaming_vector_width(_plain_definition(vector_add, "f32", "f32", "f32")) == 8
    assert streaming_vector_width(_plain_definition(add_f64, "f64", "f64", "f64")) == 4
    scaled = exp_scaled.compile(cp.CubeDim(256), *(cp.BufferCompilationArg("f32", 1),) * 2, f32(1.0)).definition
    assert streaming_vector_width(scaled) is None  # four float operations for two accesses: arithmetic
    assert streaming_vector_width(_plain_definition(summed_rows, "f32", "f32")) is None
    host = compile_host(_plain_definition(vector_add, "f32", "f32", "f32"))
    assert '!"llvm.loop.vectorize.width", i32 8' in host.llvm


def test_a_looping_kernel_left_at_llvm_width_gives_the_sums():
    values = np.random.default_rng(6).standard_normal(1024).astype(np.float32)

    def make(client):
        return client.create(values), client.zeros(256, np.float32)

    def launch(client, source, out):
        summed_rows.launch(client, cp.CubeCount(1), cp.CubeDim(256), cp.ArrayArg(source), cp.ArrayArg(out))

    (_, interp), (_, cpu) = on_interp_and_cpu(launch, make)
    expected = np.zeros(256, np.float32)
    for k in range(4):  # in the kernel's order, rounded to f32 after each add
        expected = (expected + values.reshape(256, 4)[:, k]).astype(np.float32)
    np.testing.assert_array_equal(interp, expected)
    np.testing.assert_array_equal(cpu, interp)


def test_a_streaming_kernel_gives_the_interps_bits():
    values = np.random.default_rng(4).standard_normal(1000)

    def make(client):
        return client.create(values), client.create(values[::-1].copy()), client.zeros(1000, np.float64)

    def launch(client, lhs, rhs, out):
        add_f64.launch(client, cp.CubeCount(4), cp.CubeDim(256), cp.ArrayArg(lhs), cp.ArrayArg(rhs), cp.ArrayArg(out))

    (_, _, interp), (_, _, cpu) = on_interp_and_cpu(launch, make)
    np.testing.assert_array_equal(interp, values + values[::-1])
    np.testing.assert_array_equal(cpu, interp)
