"""The 8-bit floats ``cp.e4m3`` and ``cp.e5m2``: conversions on the interp and in PTX, against hand-encoded bits.

Expected encodings are worked out by hand from the formats (e4m3: sign, 4 exponent bits with bias 7,
3 mantissa bits, no infinity, 0x7F/0xFF NaN, largest finite 448; e5m2: sign, 5 exponent bits with bias
15, 2 mantissa bits, IEEE-like infinities, largest finite 57344) and PTX's ``cvt.rn.satfinite``
(round to nearest even; magnitudes past the largest finite value, infinities too, saturate to it; NaN
stays NaN).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, e4m3, e5m2, f16, f32
from cubepy.errors import ExpandError

# (f32 input, e4m3 bits, e5m2 bits), each worked out by hand.
TO_FP8 = [
    (1.0, 0x38, 0x3C),  # 1.0 * 2^0: exponent 7 / 15, mantissa 0
    (-2.0, 0xC0, 0xC0),  # sign, exponent 8 / 16
    (448.0, 0x7E, 0x5F),  # 1.75 * 2^8: e4m3's largest finite; e5m2 exponent 23, mantissa 11
    (464.0, 0x7E, 0x5F),  # e4m3: past 448, saturates; e5m2: 1.8125 * 2^8 rounds to 1.75 (tie to even)
    (500.0, 0x7E, 0x60),  # e4m3 saturates; e5m2: 1.953 * 2^8 rounds up to 2^9
    (-1e9, 0xFE, 0xFB),  # saturates to -448 / -57344
    (math.inf, 0x7E, 0x7B),  # .satfinite: infinity becomes the largest finite value
    (-math.inf, 0xFE, 0xFB),
    (0.3, 0x2A, 0x35),  # 1.2 * 2^-2: e4m3 mantissa 1.25 (010); e5m2 mantissa 1.25 (01)
    (1.0625, 0x38, 0x3C),  # a tie between 1.0 and 1.125 in e4m3: to even (1.0)
    (1.1875, 0x3A, 0x3D),  # e4m3: a tie between 1.125 and 1.25, to even (1.25); e5m2: 1.25
    (2.0**-9, 0x01, 0x18),  # e4m3's smallest subnormal; e5m2 normal: exponent 6, mantissa 0
    (2.0**-10, 0x00, 0x14),  # e4m3: a tie between 0 and 2^-9, to even (0)
    (-0.0, 0x80, 0x80),
]
# (bits, value) from fp8 to f32, by hand.
FROM_E4M3 = [(0x7E, 448.0), (0x01, 2.0**-9), (0x80, -0.0), (0x3A, 1.25), (0xB8, -1.0), (0x08, 2.0**-6)]
FROM_E5M2 = [(0x7B, 57344.0), (0x7C, math.inf), (0xFC, -math.inf), (0x03, 3 * 2.0**-16), (0x3D, 1.25)]


@cube(launch=True)
def to_fp8(x: Array[f32], h: Array[f16], a: Array[e4m3], b: Array[e5m2], ah: Array[e4m3], bh: Array[e5m2]):
    """f32 and f16 inputs to both fp8 types."""
    i = ABSOLUTE_POS
    if i < x.len():
        a[i] = e4m3(x[i])
        b[i] = e5m2(x[i])
        ah[i] = e4m3(h[i])
        bh[i] = e5m2(h[i])


@cube(launch=True)
def from_fp8(a: Array[e4m3], b: Array[e5m2], af: Array[f32], bf: Array[f32], ah: Array[f16], bh: Array[f16]):
    """Both fp8 types to f32 and f16."""
    i = ABSOLUTE_POS
    if i < a.len():
        af[i] = f32(a[i])
        bf[i] = f32(b[i])
        ah[i] = f16(a[i])
        bh[i] = f16(b[i])


def test_f32_and_f16_to_fp8_give_the_hand_encoded_bits(client):
    x = np.array([v for v, _, _ in TO_FP8], np.float32)
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)  # every input is an f16 value or rounds past the fp8 ranges either way
    n = len(x)
    outs = [client.zeros((n,), dtype) for dtype in (e4m3.numpy, e5m2.numpy, e4m3.numpy, e5m2.numpy)]
    args = [client.create(x), client.create(h), *outs]
    to_fp8.launch(client, cp.CubeCount(1), cp.CubeDim(32), *map(cp.ArrayArg, args))
    a, b, ah, bh = (client.read(o).view(np.uint8).tolist() for o in outs)
    assert a == [bits for _, bits, _ in TO_FP8]
    assert b == [bits for _, _, bits in TO_FP8]
    # f16 holds every input but 1e9 (which is inf in f16 and saturates the same way) and 2^-9, 2^-10 exactly.
    assert ah == a
    assert bh == b


def test_nan_converts_to_nan(client):
    x = np.array([np.nan, -np.nan], np.float32)
    outs = [client.zeros((2,), dtype) for dtype in (e4m3.numpy, e5m2.numpy, e4m3.numpy, e5m2.numpy)]
    args = [client.create(x), client.create(x.astype(np.float16)), *outs]
    to_fp8.launch(client, cp.CubeCount(1), cp.CubeDim(32), *map(cp.ArrayArg, args))
    for out in outs:
        bits = client.read(out).view(np.uint8)
        assert np.isnan(client.read(out).astype(np.float32)).all(), bits
        assert ((bits & 0x7F) >= 0x7C).all()  # e4m3 NaN is x1111111; e5m2 NaNs are x11111mm, mm != 0


def test_fp8_to_f32_and_f16_give_the_hand_values(client):
    n = max(len(FROM_E4M3), len(FROM_E5M2))
    a_bits = np.array([bits for bits, _ in FROM_E4M3] + [0] * (n - len(FROM_E4M3)), np.uint8)
    b_bits = np.array([bits for bits, _ in FROM_E5M2] + [0] * (n - len(FROM_E5M2)), np.uint8)
    outs = [client.zeros((n,), np.float32), client.zeros((n,), np.float32)]
    outs += [client.zeros((n,), np.float16), client.zeros((n,), np.float16)]
    args = [client.create(a_bits.view(e4m3.numpy)), client.create(b_bits.view(e5m2.numpy)), *outs]
    from_fp8.launch(client, cp.CubeCount(1), cp.CubeDim(32), *map(cp.ArrayArg, args))
    af, bf, ah, bh = (client.read(o).astype(np.float64) for o in outs)
    for got in (af, ah):
        for i, (_, value) in enumerate(FROM_E4M3):
            assert got[i] == value and math.copysign(1, got[i]) == math.copysign(1, value)
    for got in (bf, bh):
        for i, (_, value) in enumerate(FROM_E5M2):
            assert got[i] == value


def test_the_interp_agrees_with_ml_dtypes_inside_the_finite_range(client):
    """Every f32 that rounds inside the range converts as ml_dtypes rounds it (round to nearest even)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4096) * rng.choice([1e-3, 1.0, 100.0], 4096)).astype(np.float32)
    x = x[np.abs(x) < 440]
    n = len(x)
    outs = [client.zeros((n,), dtype) for dtype in (e4m3.numpy, e5m2.numpy, e4m3.numpy, e5m2.numpy)]
    args = [client.create(x), client.create(x.astype(np.float16)), *outs]
    to_fp8.launch(client, cp.CubeCount(n // 128 + 1), cp.CubeDim(128), *map(cp.ArrayArg, args))
    np.testing.assert_array_equal(client.read(outs[0]).view(np.uint8), x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    np.testing.assert_array_equal(client.read(outs[1]).view(np.uint8), x.astype(ml_dtypes.float8_e5m2).view(np.uint8))


def buffers(*elems) -> list:
    """Compilation arguments of buffers of ``elems`` (line size 1)."""
    return [cp.BufferCompilationArg(elem, 1) for elem in elems]


@pytest.mark.ptxas
def test_the_ptx_converts_with_cvt_satfinite():
    ptx = to_fp8.compile(cp.CubeDim(32), *buffers(f32, f16, e4m3, e5m2, e4m3, e5m2)).ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert "cvt.rn.satfinite.e5m2x2.f32" in ptx
    assert "cvt.rn.satfinite.e4m3x2.f16x2" in ptx
    assert "cvt.rn.satfinite.e5m2x2.f16x2" in ptx
    back = from_fp8.compile(cp.CubeDim(32), *buffers(e4m3, e5m2, f32, f32, f16, f16))
    assert "cvt.rn.f16x2.e4m3x2" in back.ptx and "cvt.rn.f16x2.e5m2x2" in back.ptx
    assert back.cubin


def test_fp8_before_sm_89_is_refused():
    with pytest.raises(cp.CompileError, match="sm_89"):
        to_fp8.compile(cp.CubeDim(32), *buffers(f32, f16, e4m3, e5m2, e4m3, e5m2), target="sm_80")


def test_arithmetic_on_fp8_asks_for_a_conversion():
    @cube(launch=True)
    def add_fp8(a: Array[e4m3], out: Array[e4m3]):
        out[0] = a[0] + a[0]

    with pytest.raises(ExpandError, match=r"`\+` on e4m3 values: fp8 is not computed with; convert first"):
        add_fp8.compile(cp.CubeDim(1), *buffers(e4m3, e4m3))
