"""The reference semantics of the lane-wise operations, on numpy arrays: one implementation.

Each operation's record names its functions (``OpRecord.semantics``, :mod:`cubepy.ir.ops.lanewise`; most
of them are numpy's, the rest are here or in :mod:`cubepy.ir.numerics`).  The interp runs every lane-wise
instruction through :func:`evaluate`, and constant folding (``cubepy.compiler.passes``) and the frontend's
comptime fold of Python values evaluate through the same function, so they cannot drift.  The LLVM
lowering implements the same semantics (its integer and cast helpers are tested against these functions
on the host).

f16 and bf16 compute in f32 and round once to their type, as the GPU does (f32 holds more than twice
their precision, so add/sub/mul/div/sqrt round exactly as a native half operation would).  Integer
arithmetic wraps; division, shift and conversion rules are in :mod:`cubepy.ir.numerics`.  Callers run
these under ``np.errstate(all="ignore")``, since inactive lanes may hold garbage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from cubepy.ir import numerics
from cubepy.ir.fma import fma as fused_multiply_add

if TYPE_CHECKING:
    from cubepy.ir.ops.base import Operation
    from cubepy.ir.types import ElemType

Value = Any  # a numpy array or scalar
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a float operation computes in: f32 for the 2-byte floats, the type itself otherwise."""
    return F32 if dtype.itemsize == 2 else dtype


def float_op(fn: Callable[..., Value], *args: Value) -> Value:
    """``fn(*args)`` computed in the first operand's compute type and rounded once to its type."""
    dtype = np.asarray(args[0]).dtype
    compute = compute_dtype(dtype)
    if compute == dtype:
        return fn(*args)
    return fn(*(np.asarray(a).astype(compute) for a in args)).astype(dtype)


def rsqrt(x: Value) -> Value:
    return np.reciprocal(np.sqrt(x))


def rhypot(a: Value, b: Value) -> Value:
    return np.reciprocal(np.hypot(a, b))


def erf(x: Value) -> Value:  # an f64 approximation, rounded once to the type
    return numerics.erf(x).astype(np.asarray(x).dtype)


def _elementwise(fn: Callable[[float], float], pole: Callable[[float], float]) -> Callable[[Value], Value]:
    """``fn`` of Python's math module over an array in f64; C's value where Python raises (a pole, a domain
    error: ``pole(x)``) or overflows (+inf, the sign of the true result being positive for these functions)."""

    def safe(v: float) -> float:
        try:
            return fn(v)
        except ValueError:
            return pole(v)
        except OverflowError:
            return math.inf

    vectorized = np.vectorize(safe, otypes=[np.float64])

    def apply(x: Value) -> Value:
        return vectorized(np.asarray(x).astype(np.float64)).astype(np.asarray(x).dtype)

    return apply


def _gamma_pole(v: float) -> float:
    return math.copysign(math.inf, v) if v == 0 else math.nan  # C: +-inf at +-0, NaN at -1, -2, ... and -inf


def lgamma(x: Value) -> Value:
    """log |gamma(x)| in f64 (:func:`cubepy.ir.numerics.lgamma`), rounded once to the type."""
    return numerics.lgamma(x).astype(np.asarray(x).dtype)


tgamma = _elementwise(math.gamma, _gamma_pole)
erfc = _elementwise(math.erfc, lambda v: math.nan)


def exp10(x: Value) -> Value:
    return np.power(np.asarray(10.0, dtype=np.asarray(x).dtype), x)


def remainder(a: Value, b: Value) -> Value:
    """IEEE remainder, exact: Python's ``math.remainder`` in f64 (exact for f32 operands too), rounded back."""
    dtype = np.result_type(np.asarray(a).dtype, np.asarray(b).dtype)

    def one(x: float, y: float) -> float:
        try:
            return math.remainder(x, y)
        except ValueError:  # x infinite or y zero: C gives NaN
            return math.nan

    wide = np.vectorize(one, otypes=[np.float64])(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
    return wide.astype(dtype)


def nextafter(a: Value, b: Value) -> Value:
    """C's nextafter in the operands' type: ``b`` when ``a == b`` (numpy's f16 version returns ``a``, so
    ``nextafter(0.0, -0.0)`` would be +0.0 instead of C's -0.0)."""
    return np.where(np.asarray(a) == np.asarray(b), b, np.nextafter(a, b))


def is_nan(x: Value) -> Value:
    return np.isnan(np.asarray(x).astype(compute_dtype(np.asarray(x).dtype)))


def is_inf(x: Value) -> Value:
    return np.isinf(np.asarray(x).astype(compute_dtype(np.asarray(x).dtype)))


def halves_in_f32(fn: Callable[[Value, Value], Value]) -> Callable[[Value, Value], Value]:
    """A comparison of two floats, f16/bf16 compared in f32 (exact; numpy lacks some bf16 comparisons)."""

    def compare_floats(a: Value, b: Value) -> Value:
        if np.asarray(a).dtype.itemsize == 2:
            a, b = np.asarray(a).astype(F32), np.asarray(b).astype(F32)
        return fn(a, b)

    return compare_floats


def powi(base: Value, exponent: Value) -> Value:
    """A float raised to an integer power: in f64, rounded once (exact for the small exponents used)."""
    dtype = np.asarray(base).dtype
    return np.power(np.asarray(base).astype(F64), np.asarray(exponent).astype(F64)).astype(dtype)


def fma(a: Value, b: Value, c: Value) -> Value:
    """a * b + c rounded once, correctly, to the operands' type (``fma.rn``; see :mod:`cubepy.ir.fma`)."""
    return fused_multiply_add(a, b, c, np.asarray(a).dtype)


def clamp_float(x: Value, lo: Value, hi: Value) -> Value:
    """min(max(x, lo), hi) of floats: a NaN bound is ignored, as PTX min/max do."""
    return np.fmin(np.fmax(x, lo), hi)


def clamp_int(x: Value, lo: Value, hi: Value) -> Value:
    """min(max(x, lo), hi) of integers."""
    return np.minimum(np.maximum(x, lo), hi)


convert = numerics.convert


def cast(x: Value, result: np.dtype[Any]) -> Value:
    """``x`` converted to ``result`` (the rules of :func:`cubepy.ir.numerics.convert`)."""
    return convert(x, np.asarray(x).dtype, result)


def evaluate(cls: type[Operation], elem: ElemType, *args: Value, result: np.dtype[Any] | None = None) -> Value:
    """What the operation ``cls`` computes on ``args``, whose first has element type ``elem``.

    The one entry point of every evaluation: the interp, ``fold_constants`` and the frontend's comptime
    fold.  ``result`` is the result's dtype, for a conversion.  Callers run it under
    ``np.errstate(all="ignore")``.
    """
    record = cls.RECORD
    semantics = record.semantics
    fn = None if semantics is None else semantics.function(elem)
    if semantics is None or fn is None:
        raise TypeError(f"op {record.name} has no semantics for {elem.name} operands")
    if semantics.result_dtype:
        return fn(*args, result)
    if elem.is_float and semantics.rounding == "once":
        return float_op(fn, *args)
    return fn(*args)


def unary(cls: type[Operation], elem: ElemType, x: Value) -> Value:
    """The unary member ``cls`` applied to ``x`` (of element type ``elem``)."""
    return evaluate(cls, elem, x)


def binary(cls: type[Operation], elem: ElemType, a: Value, b: Value) -> Value:
    """The binary member ``cls`` applied to ``a`` and ``b`` (``elem`` is ``a``'s element type)."""
    return evaluate(cls, elem, a, b)


def compare(cls: type[Operation], elem: ElemType, a: Value, b: Value) -> Value:
    """``a cls b`` as bool (NaN compares unequal to everything, as PTX's ordered compares)."""
    return evaluate(cls, elem, a, b)


def clamp(x: Value, lo: Value, hi: Value, elem: ElemType) -> Value:
    """min(max(x, lo), hi); float bounds ignore NaN like PTX min/max."""
    if elem.is_float:
        return float_op(clamp_float, x, lo, hi)
    return clamp_int(x, lo, hi)
