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
