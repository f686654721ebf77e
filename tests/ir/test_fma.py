"""The interp's fma against an exact oracle: ``fractions.Fraction`` arithmetic and a by-hand rounding.

The oracle computes ``a * b + c`` exactly as a rational and rounds it to nearest-even at the target's
precision with gradual underflow and overflow to infinity (integer arithmetic only, written here, not
taken from the code under test).  Hypothesis draws random finite values over the whole exponent range
(subnormals included) and values built to hit ties, cancellation and the f64 limits.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cubepy.ir.fma import fma

BF16 = np.dtype(ml_dtypes.bfloat16)
# (numpy dtype, precision in bits incl. the hidden one, smallest normal exponent, largest exponent)
FORMATS = {
    "f64": (np.dtype(np.float64), 53, -1022, 1023),
    "f32": (np.dtype(np.float32), 24, -126, 127),
    "f16": (np.dtype(np.float16), 11, -14, 15),
    "bf16": (BF16, 8, -126, 127),
}


def _floor_log2(q: Fraction) -> int:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e if Fraction(2) ** e <= q else e - 1


def round_exact(q: Fraction, precision: int, emin: int, emax: int) -> float:
    """``q`` rounded to nearest-even at ``precision`` bits, subnormals below ``2**emin``, inf beyond the range."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    m = abs(q)
    quantum = max(_floor_log2(m), emin) - (precision - 1)
    n = round(m / Fraction(2) ** quantum)  # Fraction.__round__ rounds half to even
    value = Fraction(n) * Fraction(2) ** quantum
    if value >= Fraction(2) ** (emax + 1):
        return sign * math.inf
    return sign * float(value)  # representable in f64 for every format here: exact


def oracle(a: float, b: float, c: float, fmt: str) -> float:
    """The correctly rounded fma of finite ``a``, ``b``, ``c`` in format ``fmt`` (IEEE zero signs)."""
    _, precision, emin, emax = FORMATS[fmt]
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        product_negative = math.copysign(1, a) * math.copysign(1, b) < 0
        return -0.0 if (a * b == 0 and c == 0 and product_negative and math.copysign(1, c) < 0) else 0.0
    rounded = round_exact(exact, precision, emin, emax)
    return rounded if rounded != 0 else math.copysign(0.0, float(exact.numerator))


def _values(fmt: str):
    dtype = FORMATS[fmt][0]
    if fmt == "bf16":
        return st.integers(0, 0xFFFF).map(lambda bits: float(np.uint16(bits).view(BF16))).filter(math.isfinite)
    return st.floats(width=dtype.itemsize * 8, allow_nan=False, allow_infinity=False)


def _near(fmt: str):
    """Small integers times one power of two: products and sums land on ties and exact cancellations."""
    dtype, precision, emin, emax = FORMATS[fmt]
    scale = st.integers(emin - precision + 1, emax - precision - 1)
    mantissa = st.integers(-(2**precision) + 1, 2**precision - 1)
    return st.builds(lambda m, e: float(np.asarray(math.ldexp(m, e)).astype(dtype)), mantissa, scale)


def _triples(fmt: str):
    any_value = _values(fmt) | _near(fmt) | st.sampled_from([0.0, -0.0, 1.0, -1.0])
    plain = st.tuples(any_value, any_value, any_value)
    dtype = FORMATS[fmt][0]

    def cancel(ab, tweak):
        a, b = ab
        with np.errstate(over="ignore"):
            c = float(np.asarray(-(a * b) + tweak).astype(dtype))  # minus the product rounded to the format
        return a, b, c if math.isfinite(c) else 0.0

    cancelling = st.builds(cancel, st.tuples(any_value, any_value), st.sampled_from([0.0, 0.0, 1e-30, -1e-30]))
    return plain | cancelling


def _check(fmt: str, triples: list[tuple[float, float, float]]) -> None:
    dtype = FORMATS[fmt][0]
    a, b, c = (np.array([t[i] for t in triples], dtype=dtype) for i in range(3))
    got = fma(a, b, c, dtype)
    assert got.dtype == dtype
    for i, (x, y, z) in enumerate(zip(a.tolist(), b.tolist(), c.tolist())):
        want = oracle(float(x), float(y), float(z), fmt)
        have = float(got[i])
        assert have == want and math.copysign(1, have) == math.copysign(1, want), (
            f"fma({x!r}, {y!r}, {z!r}) in {fmt}: got {have!r}, exact rounding is {want!r}"
        )


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_random_and_edge_values_round_once(fmt):
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_triples(fmt), min_size=1, max_size=24))
    def check(triples):
        _check(fmt, triples)

    check()


# Hand-picked cases, each with the value worked out on paper.
TIES = [
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: exactly half an f32 ulp above 1 + 2^-11 -> ties to even (1 + 2^-11);
    # two roundings (product to f32 first) give the same here, but adding -2^-40 must round down and +2^-40 up.
    ("f32", 1 + 2**-12, 1 + 2**-12, 0.0, 1 + 2**-11),
    ("f32", 1 + 2**-12, 1 + 2**-12, 2**-40, 1 + 2**-11 + 2**-23),
    ("f32", 1 + 2**-12, 1 + 2**-12, -(2**-40), 1 + 2**-11),
    # the same tie plus 2^-80: an f64 sum rounds back onto the tie (double rounding gives 1 + 2^-11); once is above
    ("f32", 1 + 2**-12, 1 + 2**-12, 2**-80, 1 + 2**-11 + 2**-23),
    ("f32", 1 + 2**-12, 1 + 2**-12, -(2**-80), 1 + 2**-11),
    # f32's overflow threshold (largest + half an ulp, 2^103) is a tie that goes to inf; just below it stays
    ("f32", float(np.finfo(np.float32).max), 1.0, 2.0**103, math.inf),
    ("f32", float(np.finfo(np.float32).max), 1.0, 2.0**103 * (1 - 2**-24), float(np.finfo(np.float32).max)),
    # f32 subnormals: 2^-150 is half the smallest (ties to 0); 1.5 * 2^-149 + 2^-186 rounds up to 2^-148
    ("f32", 2.0**-75, 2.0**-75, 0.0, 0.0),
    ("f32", 2.0**-75 * (1 + 2**-12), 2.0**-75 * (1 - 2**-12 + 2**-24), 2.0**-149, 2.0**-148),
    # bf16 (8 bits): (1 + 2^-4)^2 = 1 + 2^-3 + 2^-8 is a tie; + 2^-100 must round up to 1 + 2^-3 + 2^-7
    ("bf16", 1 + 2**-4, 1 + 2**-4, 2**-100, 1 + 2**-3 + 2**-7),
    ("bf16", 1 + 2**-4, 1 + 2**-4, 0.0, 1 + 2**-3),
    # 0.1f * 10 - 1 is the product's rounding error, which mul + add loses entirely.
    ("f32", float(np.float32(0.1)), 10.0, -1.0, 1.4901161193847656e-08),
    ("f64", 0.1, 10.0, -1.0, 5.551115123125783e-17),
    # (1 + 2^-27)^2 - 1 = 2^-26 + 2^-54: needs the product's low half in f64.
    ("f64", 1 + 2**-27, 1 + 2**-27, -1.0, 2**-26 + 2**-54),
    # a product below f64's subnormals that still decides a rounding: 2^-1074 * 0.75 + 0 rounds to 2^-1074.
    ("f64", 2**-1074, 0.75, 0.0, 2**-1074),
    ("f64", 2**-1074, 0.5, 0.0, 0.0),  # exactly half the smallest subnormal: ties to even, 0
    # an f64 product beyond the range brought back by c: 2^1023 * 2 - 2^1023 = 2^1023.
    ("f64", 2.0**1023, 2.0, -(2.0**1023), 2.0**1023),
    # f16's largest is 65504 (ulp 32); values from 65520 = 65504 + ulp/2 on round to inf (IEEE 754 4.3.1)
    ("f16", 65504.0, 1.0, 8.0, 65504.0),
    ("f16", 65504.0, 1.0, 16.0, math.inf),
    ("f16", 2**-24, 0.5, 0.0, 0.0),  # half the smallest f16 subnormal ties to 0
    ("f16", 2**-24, 0.5, 2**-24, 2**-23),  # 1.5 * 2^-24 ties to even: 2 * 2^-24
]


@pytest.mark.parametrize(("fmt", "a", "b", "c", "want"), TIES)
def test_worked_cases(fmt, a, b, c, want):
    dtype = FORMATS[fmt][0]
    got = fma(np.asarray(a, dtype), np.asarray(b, dtype), np.asarray(c, dtype), dtype)
    assert float(got) == want
    assert oracle(a, b, c, fmt) == want  # the oracle agrees with the paper


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_ieee_special_values(fmt):
    dtype = FORMATS[fmt][0]
    inf, nan = math.inf, math.nan
    big = float(np.finfo(dtype).max)
    cases = [
        (big, big, -inf, -inf),  # a * b is exact inside an fma: finite, however large, so c's infinity wins
        (big, -2.0, inf, inf),
        (inf, 0.0, 1.0, nan),
        (inf, 2.0, -inf, nan),
        (inf, 2.0, 1.0, inf),
        (-inf, 2.0, 1.0, -inf),
        (2.0, 3.0, inf, inf),
        (nan, 1.0, 1.0, nan),
        (1.0, 1.0, nan, nan),
        (-0.0, 1.0, -0.0, -0.0),
        (0.0, -1.0, -0.0, -0.0),
        (-0.0, 1.0, 0.0, 0.0),
        (1.0, 1.0, -1.0, 0.0),
        (-1.0, 1.0, 1.0, 0.0),
    ]
    a, b, c, want = (np.array([case[i] for case in cases], dtype=np.float64) for i in range(4))
    got = fma(a.astype(dtype), b.astype(dtype), c.astype(dtype), dtype).astype(np.float64)
    np.testing.assert_array_equal(got, want)  # NaN matches NaN
    numbers = ~np.isnan(want)  # a NaN's sign is unspecified
    assert np.signbit(got[numbers]).tolist() == np.signbit(want[numbers]).tolist()


def test_broadcasts_a_scalar_operand():
    got = fma(np.float32(2.0), np.array([1.0, 2.0, 3.0], np.float32), np.float32(1.0), np.float32)
    assert got.tolist() == [3.0, 5.0, 7.0] and got.dtype == np.float32


@pytest.mark.parametrize("fmt", ["f32", "f16", "f64"])
@pytest.mark.parametrize("per_lane", ["c", "a", "b", "ab", "bc", "abc"])
def test_any_operands_may_be_single_values(fmt, per_lane):
    """One value or one per lane, in any combination (the interp passes uniform operands as single values): each
    lane rounds once as the oracle says.  f32 with only ``c`` per lane once failed: the product had no lanes."""
    dtype = FORMATS[fmt][0]
    lanes = {
        "a": np.array([1.5, -3.25, 7.0, 0.1], dtype),
        "b": np.array([2.0, 0.3, -1.75, 1e-3], dtype),
        "c": np.array([0.7, -2.5, 11.0, 1.0], dtype),
    }
    single = {"a": dtype.type(1.1), "b": dtype.type(-2.9), "c": dtype.type(0.25)}
    operands = [lanes[name] if name in per_lane else single[name] for name in "abc"]
    got = fma(*operands, dtype)
    assert got.shape == (4,) and got.dtype == dtype
    wide = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in operands))
    want = [oracle(float(x), float(y), float(z), fmt) for x, y, z in zip(*wide)]
    assert got.astype(np.float64).tolist() == want
