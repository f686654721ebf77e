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
}
# Float members with their own rounding.
FLOAT_UNARY_DIRECT: dict[type[Operation], Callable[[Value], Value]] = {
    arith.Erf: _erf,
    arith.IsNan: _is_nan,
    arith.IsInf: _is_inf,
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
}
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
        return float_op(FLOAT_BINARY[cls], a, b)
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
