"""GPU-exact numeric kernels on numpy arrays: integer division, shifts, conversions, bit counts, erf.

Every function takes and returns numpy arrays or scalars of the operands' dtype; callers run them
under ``np.errstate(all="ignore")``, since inactive lanes may hold garbage.

Choices that PTX leaves to us (the LLVM back end is told the same):
- integer division by zero gives all ones (``0xFFFFFFFF`` for u32, ``-1`` for signed types), as
  ``div.u32``/``div.s32`` do on NVIDIA GPUs; the remainder by zero is the dividend;
- shift amounts are read as unsigned and clamped like PTX ``shl``/``shr``: an amount at or above the
  bit width gives 0 for ``shl`` and logical ``shr``, and sign fill for arithmetic ``shr``;
- float to integer truncates toward zero and saturates to the target's range, NaN gives 0
  (``cvt.rzi.sat``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

Value = Any  # a numpy array or scalar

_UNSIGNED_OF: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


def as_unsigned(value: Value) -> Value:
    """The bits of an integer value viewed as the unsigned type of the same width."""
    array = np.asarray(value)
    return array.view(_UNSIGNED_OF[array.dtype.itemsize])


def _nonzero_divisor(b: Value) -> tuple[Value, Value | None]:
    """``b`` with zeros replaced by 1, and the zero mask (None when no divisor is zero)."""
    zero = b == 0
    if not np.any(zero):
        return b, None
    return np.where(zero, b.dtype.type(1), b), zero


def int_floordiv(a: Value, b: Value) -> Value:
    """Floor division (Python ``//``); a zero divisor gives all ones."""
    safe, zero = _nonzero_divisor(b)
    quotient = np.floor_divide(a, safe)
    if zero is not None:
        quotient = np.where(
            zero, quotient.dtype.type(-1) if quotient.dtype.kind == "i" else np.iinfo(quotient.dtype).max, quotient
        )
    return quotient


def int_mod(a: Value, b: Value) -> Value:
    """Modulo with the sign of the divisor (Python ``%``); a zero divisor gives the dividend."""
    safe, zero = _nonzero_divisor(b)
    rem = np.remainder(a, safe)
    return rem if zero is None else np.where(zero, a, rem)


def int_div_trunc(a: Value, b: Value) -> Value:
    """Division truncating toward zero (C ``/``); a zero divisor gives all ones."""
    if np.asarray(a).dtype.kind == "u":
        return int_floordiv(a, b)
    safe, zero = _nonzero_divisor(b)
    quotient = np.floor_divide(a, safe)
    # Floor and truncation differ when the division is inexact and the signs differ.
    inexact = np.remainder(a, safe) != 0
    quotient = quotient + ((inexact & ((a < 0) != (safe < 0))).astype(quotient.dtype))
    if zero is not None:
        quotient = np.where(zero, quotient.dtype.type(-1), quotient)
    return quotient


def int_rem_trunc(a: Value, b: Value) -> Value:
    """Remainder with the sign of the dividend (C ``%``); a zero divisor gives the dividend."""
    safe, zero = _nonzero_divisor(b)
    rem = np.fmod(a, safe)
    return rem if zero is None else np.where(zero, a, rem)


def _shift_amount(amount: Value, bits: int, dtype: np.dtype) -> tuple[Value, Value]:
    """The amount clamped below the width (in ``dtype``) and where it was at or above the width."""
    unsigned = as_unsigned(amount) if np.asarray(amount).dtype.kind == "i" else np.asarray(amount)
    too_far = unsigned >= bits
    return np.minimum(unsigned, bits - 1).astype(dtype), too_far


def shift_left(a: Value, amount: Value) -> Value:
    """``a << amount`` with PTX clamping: amounts >= the width give 0."""
    dtype = np.asarray(a).dtype
    clamped, too_far = _shift_amount(amount, dtype.itemsize * 8, dtype)
    return np.where(too_far, dtype.type(0), np.left_shift(a, clamped))


def shift_right(a: Value, amount: Value) -> Value:
    """``a >> amount``: arithmetic for signed, logical for unsigned types, with PTX clamping."""
    dtype = np.asarray(a).dtype
    clamped, too_far = _shift_amount(amount, dtype.itemsize * 8, dtype)
    shifted = np.right_shift(a, clamped)
    if dtype.kind == "i":
        return shifted  # shifting by width - 1 already is the sign fill
    return np.where(too_far, dtype.type(0), shifted)


def float_to_int(x: Value, dtype: np.dtype) -> Value:
    """Truncate toward zero and saturate into integer ``dtype``; NaN gives 0 (``cvt.rzi.sat``)."""
    wide = np.asarray(x).astype(np.float64)
    info = np.iinfo(dtype)
    upper = float(info.max) + 1.0  # a power of two, exact in f64
    truncated = np.trunc(np.where(np.isnan(wide), 0.0, wide))
    clipped = np.clip(truncated, float(info.min), np.nextafter(upper, 0.0))
    result = clipped.astype(dtype)
    if dtype.itemsize == 8:  # f64 cannot hold 2**63 - 1 or 2**64 - 1: set the saturated top exactly
        result = np.where(truncated >= upper, dtype.type(info.max), result)
    return result


def convert(x: Value, src: np.dtype[Any], dst: np.dtype[Any]) -> Value:
    """Numeric conversion with GPU semantics (saturating float->int, bool as 0/1, single rounding)."""
    if src == dst:
        return x
    if src.name in FP8_MAX or dst.name in FP8_MAX:
        return _convert_fp8(x, src, dst)
    if dst.kind == "b":
        return np.asarray(x) != 0  # NaN is true, as in C
    if dst.kind in "iu":
        if src.kind == "f" or src.name == "bfloat16":
            return float_to_int(x, dst)
        return np.asarray(x).astype(dst)  # int->int wraps, bool->int is 0/1
    # To a float.  Integers and f64 go through f64 so that bf16/f16 round once (ml_dtypes and
    # numpy round f64 directly); f32 and narrower floats convert exactly or round once anyway.
    array = np.asarray(x)
    if src.kind in "iub":
        array = array.astype(np.float64)
    return array.astype(dst)


# The largest finite value of each fp8 dtype (OCP FP8), by numpy name.
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def _convert_fp8(x: Value, src: np.dtype[Any], dst: np.dtype[Any]) -> Value:
    """Conversions from and to fp8, as PTX's ``cvt.rn.satfinite`` does.

    fp8 -> anything goes through f32 (exact).  To fp8: the value as f32 (one rounding from f64 or an
    integer), then round to nearest even with saturation: magnitudes past the largest finite fp8 value
    and infinities become that value with their sign, NaN stays NaN.
    """
    if src.name in FP8_MAX:
        return convert(np.asarray(x).astype(np.float32), np.dtype(np.float32), dst)
    wide = np.asarray(convert(x, src, np.dtype(np.float32)))
    limit = np.float32(FP8_MAX[dst.name])
    clipped = np.where(np.isnan(wide), wide, np.clip(wide, -limit, limit))
    return clipped.astype(dst)


def count_ones(a: Value) -> Value:
    """Set bits of each integer (of its two's-complement bits), as u32."""
    return np.bitwise_count(as_unsigned(a)).astype(np.uint32)


def leading_zeros(a: Value) -> Value:
    """Leading zero bits of each integer within its width, as u32."""
    bits = np.asarray(a).dtype.itemsize * 8
    smeared = as_unsigned(a).astype(np.uint64)
    shift = 1
    while shift < bits:  # set every bit below the highest set bit
        smeared = smeared | (smeared >> np.uint64(shift))
        shift *= 2
    return (bits - np.bitwise_count(smeared).astype(np.int64)).astype(np.uint32)


def trailing_zeros(a: Value) -> Value:
    """Trailing zero bits of each integer (its width for 0), as u32."""
    unsigned = as_unsigned(a)
    lowest = unsigned & (~unsigned + unsigned.dtype.type(1))  # the lowest set bit (0 for 0)
    return np.bitwise_count(lowest - unsigned.dtype.type(1)).astype(np.uint32)  # 0 - 1 wraps to all ones


def find_first_set(a: Value) -> Value:
    """The 1-based position of the lowest set bit of each integer (0 for 0), as u32."""
    zeros = trailing_zeros(a)
    return np.where(as_unsigned(a) == 0, np.uint32(0), zeros + np.uint32(1)).astype(np.uint32)


def mul_hi(a: Value, b: Value) -> Value:
    """The high half of the double-width product of two integers of the same type."""
    a, b = np.asarray(a), np.asarray(b)
    dtype = a.dtype
    bits = dtype.itemsize * 8
    if bits <= 32:
        wide = np.int64 if dtype.kind == "i" else np.uint64
        return (np.right_shift(a.astype(wide) * b.astype(wide), bits)).astype(dtype)
    high = np.frompyfunc(lambda x, y: ((int(x) * int(y)) >> 64) & 0xFFFF_FFFF_FFFF_FFFF, 2, 1)
    return np.asarray(high(a, b), dtype=object).astype(np.uint64).view(dtype)


_BYTE_REVERSED = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=np.uint8)


def reverse_bits(a: Value) -> Value:
    """The bits of each integer in reverse order within its width."""
    array = np.ascontiguousarray(a)
    size = array.dtype.itemsize
    as_bytes = _BYTE_REVERSED[array.reshape(-1).view(np.uint8)].reshape(-1, size)[:, ::-1]
    return np.ascontiguousarray(as_bytes).view(array.dtype).reshape(array.shape)


# W. J. Cody's rational Chebyshev approximations of erf/erfc (Math. Comp. 23, 1969; netlib
# specfun CALERF), accurate to about 1e-16 in f64: plenty for every float type here.
_ERF_A = (
    3.16112374387056560e00,
    1.13864154151050156e02,
    3.77485237685302021e02,
    3.20937758913846947e03,
    1.85777706184603153e-1,
)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_ERF_C = (
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
    2.15311535474403846e-8,
)
_ERF_D = (
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
_ERF_P = (
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
    1.63153871373020978e-2,
)
_ERF_Q = (
    2.56852019228982242e00,
    1.87295284992346725e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)
_INV_SQRT_PI = 5.6418958354775628695e-1


def erf(x: Value) -> Value:
    """The error function in f64 (Cody's three-range rational approximation)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.minimum(np.abs(x), 32.0)  # erfc(32) underflows f64: beyond it erf is exactly +-1
    # |x| <= 0.46875: erf directly.
    ysq = y * y
    num, den = _ERF_A[4] * ysq, ysq
    for i in range(3):
        num, den = (num + _ERF_A[i]) * ysq, (den + _ERF_B[i]) * ysq
    small = x * (num + _ERF_A[3]) / (den + _ERF_B[3])
    # 0.46875 < |x| <= 4: erfc = exp(-x^2) * R(|x|).
    num, den = _ERF_C[8] * y, y
    for i in range(7):
        num, den = (num + _ERF_C[i]) * y, (den + _ERF_D[i]) * y
    mid = (num + _ERF_C[7]) / (den + _ERF_D[7])
    # |x| > 4: erfc = exp(-x^2) / |x| * (1/sqrt(pi) + R(1/x^2) / x^2).
    inv = 1.0 / np.where(y > 0, ysq, 1.0)
    num, den = _ERF_P[5] * inv, inv
    for i in range(4):
        num, den = (num + _ERF_P[i]) * inv, (den + _ERF_Q[i]) * inv
    far = (_INV_SQRT_PI - inv * (num + _ERF_P[4]) / (den + _ERF_Q[4])) / np.where(y > 0, y, 1.0)
    # exp(-y^2) split as exp(-r^2) * exp(-(y - r)(y + r)) with r = y rounded to 1/16, as Cody does,
    # to keep the large exponent accurate.
    rounded = np.trunc(y * 16.0) / 16.0
    scale = np.exp(-rounded * rounded) * np.exp(-(y - rounded) * (y + rounded))
    erfc = np.where(y <= 4.0, mid, far) * scale
    large = np.copysign(1.0 - erfc, x)
    return np.where(y <= 0.46875, small, np.where(np.isnan(x), x, large))


# -- lgamma ------------------------------------------------------------------------------------------------
def _coefficients(*hex_values: str) -> tuple[float, ...]:
    return tuple(float.fromhex(h) for h in hex_values)


# Taylor coefficients (t, t^2, ...; computed with mpmath at 200 bits, rounded to f64; tests/ir/test_math_accuracy.py
# derives them again): lgamma(2 + t) = (1 - euler) t + sum_k (-1)^k (zeta(k) - 1) t^k / k, for |t| <= 0.75
# (radius 2; 40 terms leave 2e-19), and lgamma(1 + t) = -euler t + sum_k (-1)^k zeta(k) t^k / k, for |t| <= 0.25
# (radius 1; 30 terms leave 3e-20).  Both vanish at t = 0 with their relative accuracy: the zeros at 1 and 2.
_LGAMMA_AT_2 = _coefficients(
    *"""0x1.b0ee6072093cep-2 0x1.4a34cc4a60fa6p-2 -0x1.13e001a557607p-4 0x1.51322ac7d8483p-6 -0x1.e404fc218f5f2p-8
    0x1.7add6eadb6c30p-9 -0x1.38ac5c2bf8e08p-10 0x1.0b36af86396e9p-11 -0x1.d3fd4c76d2fc8p-13 0x1.a127b0f17d65ap-14
    -0x1.78de5bd7c81efp-15 0x1.580dcee66eb02p-16 -0x1.3cbc963ce2243p-17 0x1.2597a39f34aacp-18 -0x1.11b2eb7679541p-19
    0x1.0064cdeb22f0fp-20 -0x1.e2600d93cfd2fp-22 0x1.c76bbb3f07a4dp-23 -0x1.af5a6cbbf8a97p-24 0x1.99b93c2070b0fp-25
    -0x1.862c734df3eacp-26 0x1.7469daccfadcdp-27 -0x1.6434a8447aeadp-28 0x1.555a877ffd2c3p-29 -0x1.47b1679258d0ep-30
    0x1.3b15d2b2fc10cp-31 -0x1.2f69a9fabe3e0p-32 0x1.24932a337434cp-33 -0x1.1a7c26ec2523cp-34 0x1.11116e693ed98p-35
    -0x1.08424cbc543d8p-36 0x1.000026e3f644fp-37 -0x1.f07c514fc9f0ap-39 0x1.e1e2026aafcd8p-40 -0x1.d41d56e5ee2e2p-41
    0x1.c71c7f6f10e37p-42 -0x1.bacf9a27bc89bp-43 0x1.af28718a10d6ep-44 -0x1.a41a45603e5b6p-45
    0x1.99999c0716ee9p-46""".split()
)
_LGAMMA_AT_1 = _coefficients(
    *"""-0x1.2788cfc6fb619p-1 0x1.a51a6625307d3p-1 -0x1.9a4d55beab2d7p-2 0x1.151322ac7d848p-2 -0x1.a8b9c17aa6149p-3
    0x1.5b40cb100c306p-3 -0x1.2703a1dcea3aep-3 0x1.010b36af86397p-3 -0x1.c806706d57db4p-4 0x1.9a01e385d5f8fp-4
    -0x1.748c33114c6d6p-4 0x1.556ad63243bc4p-4 -0x1.3b1d971fc5985p-4 0x1.2496df8320c5fp-4 -0x1.11133476e7fe0p-4
    0x1.00010064cdeb2p-4 -0x1.e1e2d311e8abdp-5 0x1.c71ce3a20b419p-5 -0x1.af28a1b5688a0p-5 0x1.9999b3352d5bap-5
    -0x1.86186db77bfbfp-5 0x1.745d1d1778df9p-5 -0x1.642c88591b66dp-5 0x1.555556aaafdcdp-5 -0x1.47ae151eb9fb7p-5
    0x1.3b13b189d925ep-5 -0x1.2f684c00002bcp-5 0x1.24924936db7bcp-5 -0x1.1a7b961a7b9aap-5
    0x1.111111155556dp-5""".split()
)
# Stirling's series: lgamma(x) = (x - 1/2)(log x - 1) + (log(2 pi) - 1) / 2 + sum_k B_2k / (2k (2k - 1) x^(2k - 1)).
_STIRLING = _coefficients(
    *"""0x1.5555555555555p-4 -0x1.6c16c16c16c17p-9 0x1.a01a01a01a01ap-11 -0x1.3813813813814p-11
    0x1.b951e2b18ff23p-11 -0x1.f6ab0d9993c7dp-10 0x1.a41a41a41a41ap-8 -0x1.e4286cb0f5398p-6""".split()
)
_HALF_LOG_2PI_MINUS_HALF = float.fromhex("0x1.acfe390c97d69p-2")
_LOG_PI = float.fromhex("0x1.250d048e7a1bdp+0")
_STIRLING_FROM = 10.0


def _series(coefficients: tuple[float, ...], t: Value) -> Value:
    """sum_k coefficients[k] t^(k+1), by Horner's rule."""
    total = np.zeros_like(t)
    for c in reversed(coefficients):
        total = (total + c) * t
    return total


def _lgamma_positive(x: Value) -> Value:
    """lgamma of f64 ``x`` > 0 (other lanes: garbage), relative error a few ulp, zeros at 1 and 2 included."""
    with np.errstate(all="ignore"):
        small = _series(_LGAMMA_AT_1, x) - np.log(x)  # (0, 0.25): lgamma(1 + x) - log x
        low = _series(_LGAMMA_AT_2, x - 1.0) - np.log(x)  # [0.25, 0.75): lgamma(2 + (x - 1)) - log x
        near_1 = _series(_LGAMMA_AT_1, x - 1.0)  # [0.75, 1.25), x - 1 exact
        # [1.25, 10): shift down by n to y in [1.25, 2.25) (exact), lgamma(x) = lgamma(y) + log(y (y+1) ... (x-1)).
        n = np.clip(np.floor(x - 1.25), 0.0, 8.0)
        y = x - n
        product = np.ones_like(x)
        for i in range(8):
            product = np.where(i < n, product * (y + i), product)
        middle = _series(_LGAMMA_AT_2, y - 2.0) + np.log(product)
        inv = 1.0 / x
        correction = np.zeros_like(x)  # sum_k S_k inv^(2k - 2), Horner in inv^2
        for c in reversed(_STIRLING):
            correction = correction * (inv * inv) + c
        large = (x - 0.5) * (np.log(x) - 1.0) + (_HALF_LOG_2PI_MINUS_HALF + correction * inv)
    return np.select([x < 0.25, x < 0.75, x < 1.25, x < _STIRLING_FROM], [small, low, near_1, middle], default=large)


def _abs_sinpi(x: Value) -> Value:
    """|sin(pi x)| of f64 ``x``, the argument reduced exactly (pi x itself would lose x's low bits)."""
    y = np.abs(x)
    f = y - np.floor(y)  # exact
    m = np.minimum(f, 1.0 - f)  # in [0, 0.5], exact
    return np.sin(np.pi * m)


def lgamma(x: Value) -> Value:
    """log |gamma(x)| in f64 (C's lgamma: +inf at 0 and the negative integers, +inf at +-inf).

    x > 0: Taylor series around 1 and 2 (where lgamma vanishes: relative accuracy there), the recurrence up to
    10, Stirling's series beyond.  x < 0: the reflection ``log(pi / |x sin(pi x)|) - lgamma(-x)``, whose two
    terms cancel next to lgamma's negative zeros (x between -2.26 and about -18): there the error is relative
    to ``lgamma(-x)``, not to the tiny result (libdevice and CUDA state the same limitation).
    """
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    with np.errstate(all="ignore"):
        positive = _lgamma_positive(np.where(ax > 0, ax, 1.0))
        sin = _abs_sinpi(x)
        # log |x sin(pi x)|; the product underflows only for a tiny |x|, where sin(pi x) is pi |x| to the last bit
        product = ax * sin
        log_product = np.where(product > 1e-300, np.log(product), 2 * np.log(ax) + _LOG_PI)
        reflected = _LOG_PI - log_product - positive
        result = np.where(x > 0, positive, reflected)
        pole = (x <= 0) & (np.floor(x) == x)
        result = np.where(pole | np.isinf(x), np.inf, result)
    return np.where(np.isnan(x), x, result)


# -- cbrt --------------------------------------------------------------------------------------------------
_cbrt64 = np.cbrt  # the f64 root that f32's is rounded from (a name of its own, so a test can perturb it)


def cbrt(x: Value) -> Value:
    """The cube root; of f32 correctly rounded (f64: numpy's, within 1 ulp).

    f32: the f64 root rounded to f32.  That can differ from rounding the exact root only when the f64 root lies
    within its own error of a midpoint between two f32 values; those lanes are decided exactly, by the sign of
    ``midpoint**3 - |x|`` in rational arithmetic (no midpoint is itself a root: its cube has over 24 bits).
    """
    a = np.asarray(x)
    if a.dtype != np.float32:
        return np.cbrt(a)
    with np.errstate(all="ignore"):
        wide = _cbrt64(np.abs(a).astype(np.float64))
        near = wide.astype(np.float32)
        below = np.where(near.astype(np.float64) > wide, np.nextafter(near, np.float32(0)), near)
        midpoint = (below.astype(np.float64) + np.nextafter(below, np.float32(np.inf)).astype(np.float64)) / 2
        doubtful = np.abs(wide - midpoint) <= 16 * np.spacing(wide)  # far beyond the f64 root's error
    result = np.array(near, copy=True, ndmin=1)
    flat_doubt = np.atleast_1d(doubtful)
    if np.any(flat_doubt):
        flat_a, flat_below, flat_mid = np.atleast_1d(a), np.atleast_1d(below), np.atleast_1d(midpoint)
        for i in np.flatnonzero(flat_doubt):
            above_root = Fraction(float(flat_mid[i])) ** 3 > Fraction(abs(float(flat_a[i])))
            result[i] = flat_below[i] if above_root else np.nextafter(flat_below[i], np.float32(np.inf))
    result = np.copysign(result.reshape(a.shape), a)
    return result if a.ndim else result[()]
