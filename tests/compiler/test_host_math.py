"""The host target's inline f32 ``exp`` against the exact value (numpy's f64 ``exp`` of the f32 input)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32
from cubepy.cli import default_compilation_args


@cube(launch=True)
def exp_each(x: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < x.len():
        out[ABSOLUTE_POS] = cp.exp(x[ABSOLUTE_POS])


def _exp_on_cpu(x: np.ndarray) -> np.ndarray:
    client = cp.client("cpu")
    hx, ho = client.create(x), client.empty(x.shape, np.float32)
    exp_each.launch(client, cp.CubeCount(-(-x.size // 256)), cp.CubeDim(256), cp.ArrayArg(hx), cp.ArrayArg(ho))
    return client.read(ho)


def _ulps_from_exact(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - e^x| in units of the f32 spacing at e^x (the smallest subnormal below the normal range)."""
    exact = np.exp(x.astype(np.float64))
    spacing = np.spacing(exact.astype(np.float32)).astype(np.float64)
    spacing = np.maximum(spacing, float(np.finfo(np.float32).smallest_subnormal))
    return np.abs(got.astype(np.float64) - exact) / spacing


def test_exp_is_within_one_ulp_of_the_exact_value():
    rng = np.random.default_rng(7)
    # the whole finite range of results: normal, subnormal (below -87.34) and rounding to 0 (below -103.97)
    x = np.concatenate([rng.uniform(-104.0, 88.7, 200_000), rng.standard_normal(50_000)]).astype(np.float32)
    assert _ulps_from_exact(_exp_on_cpu(x), x).max() <= 1.0


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (0.0, 1.0),
        (-0.0, 1.0),
        (1.0, np.float32(np.e)),
        (np.inf, np.inf),
        (-np.inf, 0.0),
        (88.72284, np.inf),  # above ln(FLT_MAX) = 88.7228391...
        (88.7228, np.float32(np.exp(np.float64(np.float32(88.7228))))),
        (-103.9, np.float32(1.4e-45)),  # e^x = 7.5e-46: rounds up to the smallest subnormal (1.4e-45)
        (-104.0, 0.0),  # 6.8e-46: below half of it
    ],
)
def test_exp_of_edge_values(x, expected):
    got = _exp_on_cpu(np.array([x], np.float32))[0]
    assert got == np.float32(expected)


def test_exp_of_nan_is_nan():
    assert np.isnan(_exp_on_cpu(np.array([np.nan], np.float32))[0])


def test_the_exp_kernel_also_assembles_for_the_gpu():
    from cubepy.compiler import ptxas

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas is not installed: the PTX is not assembled")
    buffer = cp.BufferCompilationArg("f32", 1)
    compiled = exp_each.compile(cp.CubeDim(256), buffer, buffer)
    assert compiled.cubin and "ex2.approx" in compiled.ptx  # libdevice's __nv_expf on the GPU, not the host's


def test_the_polynomial_is_numpys_chebyshev_interpolant_rounded_to_f32():
    from numpy.polynomial import Chebyshev, Polynomial

    from cubepy.compiler.targets.host_math import EXP_TAIL

    half_ln2 = float(np.log(2.0)) / 2
    tail = Chebyshev.interpolate(lambda r: (np.expm1(r) - r) / (r * r), 5, domain=[-half_ln2, half_ln2])
    derived = tail.convert(kind=Polynomial).coef.astype(np.float32)
    np.testing.assert_array_equal(np.array(EXP_TAIL, np.float32), derived)
    assert all(float(np.float32(c)) == c for c in EXP_TAIL)


def test_the_exp_loop_is_vector_code_in_f32_lanes():
    """f32 lanes, twice as many to a register as f64 ones; ``k`` reaches the exponent bits through i32 lanes."""
    from cubepy.compiler.emit_host import compile_host

    definition = exp_each.define(tuple(default_compilation_args(exp_each, {})), (256, 1, 1), True)
    optimized = compile_host(definition).llvm_opt
    conversions = [line for line in optimized.splitlines() if " fptosi <" in line]
    assert conversions, "the loop over units was not vectorized"
    assert all(" x float> " in line and " x i32>" in line for line in conversions), conversions
    assert " x double>" not in optimized


def test_ldexp_and_two_multiplications_scale_to_the_same_bits(monkeypatch):
    """With AVX-512, exp scales by 2^k with ``llvm.ldexp``; elsewhere by two multiplications: the same bits."""
    from cubepy.compiler import emit_host as host
    from cubepy.runtime.cpu import make_client

    if not host._has_vector_ldexp():
        pytest.skip("this CPU has no vector ldexp (x86 AVX-512): only the two-multiplication form runs here")
    monkeypatch.setenv("CUBEPY_CACHE_DIR", "off")
    rng = np.random.default_rng(5)
    # overflow to inf, k = 128, normal and subnormal results, rounding to 0, and a NaN
    edges = [89.0, 88.72, 88.7, 0.5, -87.0, -87.4, -100.0, -103.9, -104.5, np.nan, np.inf, -np.inf]
    x = np.concatenate([rng.uniform(-110.0, 90.0, 100_000), edges]).astype(np.float32)
    results = []
    for vector_ldexp in (False, True):
        monkeypatch.setattr(host, "_has_vector_ldexp", lambda flag=vector_ldexp: flag)
        definition = exp_each.define(tuple(default_compilation_args(exp_each, {})), (256, 1, 1), True)
        assert ("llvm.ldexp" in host.compile_host(definition).llvm_opt) == vector_ldexp
        client = make_client()
        hx, ho = client.create(x), client.empty(x.shape, np.float32)
        exp_each.launch(client, cp.CubeCount(-(-x.size // 256)), cp.CubeDim(256), cp.ArrayArg(hx), cp.ArrayArg(ho))
        results.append(client.read(ho))
    np.testing.assert_array_equal(results[0].view(np.uint32), results[1].view(np.uint32))
