"""The interp's native f32/f64 fma gives the numpy emulation's bits (cubepy.ir.fma), and hand-computed ones."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import Array, f32
from cubepy.ir.fma import fma as emulated_fma
from cubepy.runtime.interp import native_fma

pytestmark = pytest.mark.skipif(
    native_fma.unavailable_reason() is not None, reason=f"no native fma: {native_fma.unavailable_reason()}"
)

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _specials(dtype: np.dtype) -> np.ndarray:
    info = np.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, info.max, -info.max, info.tiny, -info.tiny]
    values += [info.smallest_subnormal, -info.smallest_subnormal, 3 * info.smallest_subnormal, 0.5, 2.0, 1e-30]
    return np.array(values, dtype=dtype)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    # NaN payloads are not part of fma's contract; every other lane must match bit for bit
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert got[~nan].tobytes() == want[~nan].tobytes()


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_every_combination_of_special_values_matches_the_emulation(dtype):
    s = _specials(dtype)
    a, b, c = (g.ravel().copy() for g in np.meshgrid(s, s, s, indexing="ij"))
    got = native_fma.fma(a, b, c)
    assert got is not None and got.dtype == dtype
    _same_bits(got, emulated_fma(a, b, c, dtype))


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("scale", [1.0, 1e-20, 1e20])
def test_random_operands_match_the_emulation(dtype, scale):
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(4099).astype(dtype) for _ in range(2))
    c = (rng.standard_normal(4099) * scale).astype(dtype)
    got = native_fma.fma(a, b, c)
    assert got is not None
    _same_bits(got, emulated_fma(a, b, c, dtype))


def test_a_sum_on_an_f32_midpoint_is_rounded_once():
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: exactly halfway between the f32 values 1 + 2^-11 and 1 + 2^-11 + 2^-23.
    # A c of +-2^-70 decides the side; f64 rounding of the sum would drop it and tie to even (by hand).
    x = np.float32(1 + 2.0**-12)
    a = np.full(3, x)
    c = np.array([2.0**-70, -(2.0**-70), 0.0], dtype=np.float32)
    got = native_fma.fma(a, a, c)
    low, high = np.float32(1 + 2.0**-11), np.float32(1 + 2.0**-11 + 2.0**-23)
    assert got is not None
    assert got.tolist() == [high, low, low]  # the tie goes to low, whose last significand bit is 0


def test_one_value_for_every_lane_broadcasts_like_numpy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)  # a Line of 4 per lane
    b, c = np.asarray(np.float32(0.5)), np.full(1, np.float32(-1.0))
    got = native_fma.fma(a, b, c)
    assert got is not None and got.shape == (3, 4)
    np.testing.assert_array_equal(got, a * np.float32(0.5) - np.float32(1.0))


def test_what_it_does_not_handle_is_left_to_the_emulation():
    a = np.ones(8, np.float32)
    assert native_fma.fma(a.astype(np.float16), a.astype(np.float16), a.astype(np.float16)) is None
    assert native_fma.fma(a, a, a.astype(np.float64)) is None  # mixed types
    assert native_fma.fma(np.ones(16, np.float32)[::2], a, a) is None  # strided
    assert native_fma.fma(a, np.ones(4, np.float32), a) is None  # shapes that do not broadcast


@cp.cube(launch=True)
def fused(a: Array[f32], b: Array[f32], c: Array[f32], out: Array[f32]):
    """out = a * b + c, contracted into one fma."""
    i = cp.ABSOLUTE_POS
    if i < out.len():
        out[i] = a[i] * b[i] + c[i]


def test_an_interp_launch_gives_the_cpu_runtimes_bits():
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(1000).astype(np.float32) for _ in range(3)]
    results = []
    for name in ("interp", "cpu"):
        client = cp.client(name)
        handles = [client.create(v) for v in inputs]
        out = client.empty((1000,), np.float32)
        fused.launch(client, cp.CubeCount(4), cp.CubeDim(256), *(cp.ArrayArg(h) for h in (*handles, out)))
        results.append(client.read(out))
    assert results[0].tobytes() == results[1].tobytes()
    assert results[0].tobytes() == emulated_fma(*inputs, F32).tobytes()
