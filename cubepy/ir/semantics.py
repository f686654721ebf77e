"""The reference semantics of the lane-wise operations, on numpy arrays: one implementation.

The interp runs every lane-wise instruction through :func:`evaluate`, and constant folding
(``cubepy.compiler.passes``) evaluates literal operands through the same function, so the two cannot
drift.  The LLVM lowering implements the same semantics (its integer and cast helpers are tested
against these functions on the host).

f16 and bf16 compute in f32 and round once to their type, as the GPU does (f32 holds more than twice
their precision, so add/sub/mul/div/sqrt round exactly as a native half operation would).  Integer
arithmetic wraps; division, shift and conversion rules are in :mod:`cubepy.ir.numerics`.  Callers run
these under ``np.errstate(all="ignore")``, since inactive lanes may hold garbage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from cubepy.ir import numerics
from cubepy.ir.fma import fma as fused_multiply_add
from cubepy.ir.ops import arith
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


def _rsqrt(x: Value) -> Value:
    return np.reciprocal(np.sqrt(x))


def _rhypot(a: Value, b: Value) -> Value:
    return np.reciprocal(np.hypot(a, b))


def _erf(x: Value) -> Value:  # an f64 approximation, rounded once to the type
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


_lgamma = _elementwise(math.lgamma, lambda v: math.inf)
_tgamma = _elementwise(math.gamma, _gamma_pole)
_erfc = _elementwise(math.erfc, lambda v: math.nan)


def _exp10(x: Value) -> Value:
    return np.power(np.asarray(10.0, dtype=np.asarray(x).dtype), x)


def _remainder(a: Value, b: Value) -> Value:
    """IEEE remainder, exact: Python's ``math.remainder`` in f64 (exact for f32 operands too), rounded back."""
    dtype = np.result_type(np.asarray(a).dtype, np.asarray(b).dtype)

    def one(x: float, y: float) -> float:
        try:
            return math.remainder(x, y)
        except ValueError:  # x infinite or y zero: C gives NaN
            return math.nan

    wide = np.vectorize(one, otypes=[np.float64])(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
    return wide.astype(dtype)


def _nextafter(a: Value, b: Value) -> Value:
    """C's nextafter in the operands' type: ``b`` when ``a == b`` (numpy's f16 version returns ``a``, so
    ``nextafter(0.0, -0.0)`` would be +0.0 instead of C's -0.0)."""
    return np.where(np.asarray(a) == np.asarray(b), b, np.nextafter(a, b))


def _is_nan(x: Value) -> Value:
    return np.isnan(np.asarray(x).astype(compute_dtype(np.asarray(x).dtype)))


def _is_inf(x: Value) -> Value:
    return np.isinf(np.asarray(x).astype(compute_dtype(np.asarray(x).dtype)))


# Float members computed in the compute type and rounded once (``float_op``).
FLOAT_UNARY: dict[type[Operation], Callable[[Value], Value]] = {
    arith.Exp: np.exp,
    arith.Log: np.log,
    arith.Log1p: np.log1p,
    arith.Sqrt: np.sqrt,
    arith.Rsqrt: _rsqrt,
    arith.Cbrt: np.cbrt,
    arith.Sin: np.sin,
    arith.Cos: np.cos,
    arith.Tan: np.tan,
    arith.Tanh: np.tanh,
    arith.Floor: np.floor,
    arith.Ceil: np.ceil,
    arith.Round: np.rint,
    arith.Trunc: np.trunc,
    arith.Recip: np.reciprocal,
    arith.Neg: np.negative,
    arith.Abs: np.abs,
    arith.Asin: np.arcsin,
    arith.Acos: np.arccos,
    arith.Atan: np.arctan,
    arith.Sinh: np.sinh,
    arith.Cosh: np.cosh,
    arith.Asinh: np.arcsinh,
    arith.Acosh: np.arccosh,
    arith.Atanh: np.arctanh,
    arith.Expm1: np.expm1,
    arith.ToDegrees: np.degrees,
    arith.ToRadians: np.radians,
    arith.Exp2: np.exp2,
    arith.Exp10: _exp10,
    arith.Log2: np.log2,
    arith.Log10: np.log10,
}
# Float members with their own rounding.
FLOAT_UNARY_DIRECT: dict[type[Operation], Callable[[Value], Value]] = {
    arith.Erf: _erf,
    arith.IsNan: _is_nan,
    arith.IsInf: _is_inf,
    arith.Erfc: _erfc,
    arith.Lgamma: _lgamma,
    arith.Tgamma: _tgamma,
}
INT_UNARY: dict[type[Operation], Callable[[Value], Value]] = {
    arith.Neg: np.negative,
    arith.Abs: np.abs,
    arith.Bitnot: np.invert,
    arith.CountOnes: numerics.count_ones,
    arith.LeadingZeros: numerics.leading_zeros,
    arith.ReverseBits: numerics.reverse_bits,
    arith.TrailingZeros: numerics.trailing_zeros,
    arith.FindFirstSet: numerics.find_first_set,
}
BOOL_UNARY: dict[type[Operation], Callable[[Value], Value]] = {arith.Not: np.logical_not}

FLOAT_BINARY: dict[type[Operation], Callable[[Value, Value], Value]] = {
    arith.Add: np.add,
    arith.Sub: np.subtract,
    arith.Mul: np.multiply,
    arith.Div: np.true_divide,
    arith.Floordiv: np.floor_divide,
    arith.Mod: np.remainder,
    arith.Min: np.fmin,
    arith.Max: np.fmax,
    arith.Powf: np.power,
    arith.Atan2: np.arctan2,
    arith.Hypot: np.hypot,
    arith.Rhypot: _rhypot,
    arith.Copysign: np.copysign,
    arith.Fmod: np.fmod,
    arith.Remainder: _remainder,
}
# Float members computed in the operands' own type (one ulp of f16 is not one ulp of f32).
FLOAT_BINARY_DIRECT: dict[type[Operation], Callable[[Value, Value], Value]] = {arith.Nextafter: _nextafter}
INT_BINARY: dict[type[Operation], Callable[[Value, Value], Value]] = {
    arith.Add: np.add,
    arith.Sub: np.subtract,
    arith.Mul: np.multiply,
    arith.Min: np.minimum,
    arith.Max: np.maximum,
    arith.Floordiv: numerics.int_floordiv,
    arith.Mod: numerics.int_mod,
    arith.DivTrunc: numerics.int_div_trunc,
    arith.RemTrunc: numerics.int_rem_trunc,
    arith.Bitand: np.bitwise_and,
    arith.Bitor: np.bitwise_or,
    arith.Bitxor: np.bitwise_xor,
    arith.Shl: numerics.shift_left,
    arith.Shr: numerics.shift_right,
    arith.MulHi: numerics.mul_hi,
}
BOOL_BINARY: dict[type[Operation], Callable[[Value, Value], Value]] = {
    arith.And: np.logical_and,
    arith.Or: np.logical_or,
}
COMPARE: dict[type[Operation], Callable[[Value, Value], Value]] = {
    arith.Eq: np.equal,
    arith.Ne: np.not_equal,
    arith.Lt: np.less,
    arith.Le: np.less_equal,
    arith.Gt: np.greater,
    arith.Ge: np.greater_equal,
}


def unary(cls: type[Operation], elem: ElemType, x: Value) -> Value:
    """The unary member ``cls`` applied to ``x`` (of element type ``elem``)."""
    if elem.is_bool:
        return BOOL_UNARY[cls](x)
    if elem.is_int:
        return INT_UNARY[cls](x)
    direct = FLOAT_UNARY_DIRECT.get(cls)
    if direct is not None:
        return direct(x)
    return float_op(FLOAT_UNARY[cls], x)


def powi(base: Value, exponent: Value) -> Value:
    """A float raised to an integer power: in f64, rounded once (exact for the small exponents used)."""
    dtype = np.asarray(base).dtype
    return np.power(np.asarray(base).astype(F64), np.asarray(exponent).astype(F64)).astype(dtype)


def binary(cls: type[Operation], elem: ElemType, a: Value, b: Value) -> Value:
    """The binary member ``cls`` applied to ``a`` and ``b`` (``elem`` is ``a``'s element type)."""
    if cls is arith.Powi:
        return powi(a, b)
    if elem.is_float:
        direct = FLOAT_BINARY_DIRECT.get(cls)
        return direct(a, b) if direct is not None else float_op(FLOAT_BINARY[cls], a, b)
    if elem.is_bool:
        return BOOL_BINARY[cls](a, b)
    return INT_BINARY[cls](a, b)


def compare(cls: type[Operation], elem: ElemType, a: Value, b: Value) -> Value:
    """``a cls b`` as bool (NaN compares unequal to everything, as PTX's ordered compares)."""
    if elem.is_float and elem.size == 2:
        a, b = np.asarray(a).astype(F32), np.asarray(b).astype(F32)
    return COMPARE[cls](a, b)


def fma(a: Value, b: Value, c: Value) -> Value:
    """a * b + c rounded once, correctly, to the operands' type (``fma.rn``; see :mod:`cubepy.ir.fma`)."""
    return fused_multiply_add(a, b, c, np.asarray(a).dtype)


def clamp(x: Value, lo: Value, hi: Value, elem: ElemType) -> Value:
    """min(max(x, lo), hi); float bounds ignore NaN like PTX min/max."""
    if elem.is_float:
        return float_op(lambda v, a, b: np.fmin(np.fmax(v, a), b), x, lo, hi)
    return np.minimum(np.maximum(x, lo), hi)


convert = numerics.convert
