"""A correctly rounded fused multiply-add on numpy arrays: ``a * b + c`` rounded once, as ``fma.rn`` does.

Neither numpy nor Python 3.11's ``math`` has one, and computing ``a * b + c`` in a wider type rounds
twice.  Two exact building blocks avoid that:

- **Round to odd.**  Rounding a value first to a precision of at least ``p + 2`` bits *to odd* (keep the
  truncation when exact, else the neighbour whose last bit is 1), then to nearest at ``p`` bits, gives
  the correctly rounded ``p``-bit result (Boldo & Melquiond, "Emulation of FMA and correctly rounded
  sums: proved algorithms using rounding to odd", IEEE TC 2008).  f64 has 53 bits, at least
  ``2 * 24 + 2``, so for f32, f16 and bf16 operands the product is exact in f64 and one round-to-odd
  f64 sum, then one rounding to the target, is exact rounding.  f16 and bf16 go through a second
  round-to-odd step to f32 (24 >= 11 + 2 and 8 + 2) so the last rounding is numpy's/ml_dtypes' f32 ->
  half conversion, whatever path their f64 conversions take.
- **Error-free transformations** for f64: Dekker's product with Veltkamp splitting gives ``a * b =
  uh + ul`` exactly, Knuth's two-sum gives ``c + uh = th + tl`` exactly, and
  ``RN(th + RO(tl + ul))`` is the correctly rounded fma (Boldo & Melquiond's emulated FMA).  The proof
  assumes no underflow or overflow in the intermediates; the few lanes near those limits (products or
  results below 2^-900 or above 2^990, operands above 2^995) are computed exactly with Python integers
  instead (``float`` of an exact ratio rounds correctly, subnormals and overflow included).

Non-finite operands follow IEEE: ``inf * 0 + c`` and ``inf - inf`` are NaN, NaN propagates, and an exact
zero sum is +0 unless both ``a * b`` and ``c`` are -0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # numpy.typing and fractions cost ~1 ms to import; a first launch pays for what it imports
    from numpy.typing import ArrayLike, DTypeLike

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
_SPLITTER = np.float64(2.0**27 + 1.0)
_SMALL = 2.0**-900
_LARGE = 2.0**990
_SPLIT_LIMIT = 2.0**995


def fma(a: ArrayLike, b: ArrayLike, c: ArrayLike, dtype: DTypeLike) -> np.ndarray:
    """``a * b + c`` rounded once to ``dtype`` (f16, bf16, f32 or f64), lane-wise with broadcasting."""
    dtype = np.dtype(dtype)
    if dtype == F32:
        return _fma32(a, b, c)
    with np.errstate(all="ignore"):
        a64, b64, c64 = (np.asarray(v).astype(F64) for v in (a, b, c))
        a64, b64, c64 = np.broadcast_arrays(a64, b64, c64)
        if dtype == F64:
            shape = a64.shape
            return _fma64(a64.ravel(), b64.ravel(), c64.ravel()).reshape(shape)
        if dtype.name not in ("float32", "float16", "bfloat16"):
            raise TypeError(f"fma: expected f16, bf16, f32 or f64, got {dtype}")
        odd = _add_round_to_odd(a64 * b64, c64)
        return _round_to_odd_f32(odd).astype(dtype)


_F32_DROPPED = np.uint64((1 << 29) - 1)  # the f64 significand bits below f32's
_F32_HALF = np.uint64(1 << 28)  # ... holding exactly half an f32 ulp: an f32 rounding midpoint
_ABS_BITS = np.uint64((1 << 63) - 1)
_F32_MIN_NORMAL_BITS = np.float64(np.finfo(np.float32).tiny).view(np.uint64)


def _fma32(a: ArrayLike, b: ArrayLike, c: ArrayLike) -> np.ndarray:
    """RN32(a * b + c): the product exact in f64, the f64 sum, rounded again only where that is wrong.

    f32's midpoints (the overflow threshold among them) are f64 values and RN64 is monotone, so RN64(v)
    rounds to the same f32 as v unless it lands exactly on a midpoint (then v's side of it decides), or
    below f32's normal range, where the midpoints are spaced differently. Only those lanes take the
    round-to-odd path; the others cost one f64 buffer (product, then sum) and one bit buffer.
    """
    with np.errstate(all="ignore"):
        # The three operands' common shape: ``a`` and ``b`` may be single values and ``c`` one per lane.
        total = np.empty(np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c)), F64)
        np.multiply(a, b, out=total, dtype=F64)  # two 24-bit significands: exact in f64
        np.add(total, c, out=total, dtype=F64)
        bits = total.reshape(-1).view(np.uint64)  # 1-D: ufuncs on 0-d arrays return scalars
        low = np.bitwise_and(bits, _F32_DROPPED)
        suspect = np.equal(low, _F32_HALF)
        np.bitwise_and(bits, _ABS_BITS, out=low)
        np.subtract(low, np.uint64(1), out=low)
        suspect |= np.less(low, _F32_MIN_NORMAL_BITS - np.uint64(1))  # nonzero and below f32's normal range
        result = total.astype(F32)
        if np.any(suspect):
            lanes = np.flatnonzero(suspect)  # indices into the flattened lanes
            a_lanes, b_lanes, c_lanes = (
                np.broadcast_to(np.asarray(v, dtype=F64), total.shape).reshape(-1)[lanes] for v in (a, b, c)
            )
            flat = result.reshape(-1)
            flat[lanes] = _add_round_to_odd(a_lanes * b_lanes, c_lanes).astype(F32)
            result = flat.reshape(total.shape)
    return np.asarray(result)


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, e) with s = RN(x + y) and s + e = x + y exactly (Knuth; valid for finite s)."""
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def _round_to_odd_fix(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Given s = RN(v) and err = v - s exactly, the round-to-odd of v at s's precision.

    An inexact ``s`` with an even significand moves one ulp toward ``v``: on the bit pattern that is +1
    when ``err`` points away from zero (the same sign as ``s``) and -1 when it points toward zero (an even
    pattern never sits at the largest finite value, and a sum of finite values that rounds to zero is exact).
    Integer steps on the bits cost a fraction of ``np.nextafter``.
    """
    bits = s.view(np.int64)
    move = ((bits & 1) == 0) & (err != 0) & np.isfinite(s) & np.isfinite(err)
    if not np.any(move):
        return s
    step = np.where((err > 0) == (s > 0), np.int64(1), np.int64(-1))
    moved: np.ndarray = (bits + np.where(move, step, np.int64(0))).view(np.float64)
    return moved


def _add_round_to_odd(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y rounded to odd in f64 (IEEE results for non-finite operands, and +0 for an exact zero)."""
    s, err = _two_sum(x, y)
    return _round_to_odd_fix(s, err)


def _round_to_odd_f32(x: np.ndarray) -> np.ndarray:
    """f64 values rounded to odd at f32's precision (beyond f32's range: the largest f32 of that sign)."""
    y = x.astype(F32)
    back = y.astype(F64)
    inexact = np.isfinite(x) & (back != x)
    huge = inexact & np.isinf(y)
    max32 = np.float32(np.finfo(np.float32).max)
    y = np.where(huge, np.copysign(max32, x).astype(F32), y)
    back = y.astype(F64)
    even = (y.view(np.uint32) & np.uint32(1)) == 0
    move = inexact & ~huge & even
    if np.any(move):
        toward = np.where(x > back, np.float32(np.inf), np.float32(-np.inf))
        y = np.where(move, np.nextafter(y, toward), y)
    return y


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: hi + lo = x exactly, each with at most 26 significant bits."""
    t = _SPLITTER * x
    hi = t - (t - x)
    return hi, x - hi


def _two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p, e) with p = RN(a * b) and p + e = a * b exactly (Dekker; no underflow or overflow)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The f64 fma of flat arrays."""
    uh, ul = _two_product(a, b)
    th, tl = _two_sum(c, uh)
    result = th + _add_round_to_odd(tl, ul)
    finite_product = np.isfinite(a) & np.isfinite(b)
    finite_inputs = finite_product & np.isfinite(c)
    # IEEE inf/NaN rules; a finite a * b is exact in an fma, so an infinite c wins even where f64's a * b overflows
    result = np.where(finite_inputs, result, np.where(finite_product & np.isinf(c), c, a * b + c))
    big = np.maximum(np.abs(a), np.abs(b))
    hard = finite_inputs & (
        (big >= _SPLIT_LIMIT)
        | (np.abs(uh) >= _LARGE)
        | (np.abs(c) >= _LARGE)
        | ((uh != 0) & (np.abs(uh) < _SMALL))
        | (np.abs(th) < _SMALL)
    )
    zero_sum = finite_inputs & ~hard & (result == 0)
    if np.any(zero_sum):  # an exact zero: +0, or -0 when a * b and c are both -0 (signs lost above)
        negative = (uh == 0) & (c == 0) & np.signbit(uh) & np.signbit(c)
        result = np.where(zero_sum, np.where(negative, -0.0, 0.0), result)
    if np.any(hard):
        result = np.array(result, copy=True)
        for i in np.flatnonzero(hard):
            result[i] = _exact_fma64(float(a[i]), float(b[i]), float(c[i]))
    return np.asarray(result)


def _exact_fma64(a: float, b: float, c: float) -> float:
    """a * b + c for finite doubles through exact rationals (float() of a ratio rounds to nearest even)."""
    from fractions import Fraction  # only for the rare hard case

    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        product_negative = (math.copysign(1.0, a) < 0) != (math.copysign(1.0, b) < 0)
        both_negative_zeros = a * b == 0 and c == 0 and product_negative and math.copysign(1.0, c) < 0
        return -0.0 if both_negative_zeros else 0.0
    try:
        return float(exact)
    except OverflowError:
        return float("inf") if exact > 0 else float("-inf")
