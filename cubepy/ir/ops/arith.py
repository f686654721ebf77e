"""Arithmetic, comparison, conversion and assignment operations."""

from __future__ import annotations

import attrs

from cubepy.ir.ops.base import NamedOperation, Operation
from cubepy.ir.variable import Variable

# Unary operations; which element kinds each accepts is checked by the verifier.
FLOAT_UNARY = frozenset({
    "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "erf",
    "floor", "ceil", "round", "trunc", "recip", "is_nan", "is_inf",
    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1", "to_degrees", "to_radians",
})
NUMERIC_UNARY = frozenset({"neg", "abs"})
INT_UNARY = frozenset({
    "bitnot", "count_ones", "leading_zeros", "reverse_bits", "trailing_zeros", "find_first_set",
})
# Unary operations whose result is a u32 (bit counts and positions), whatever the integer input.
U32_RESULT_UNARY = frozenset({"count_ones", "leading_zeros", "trailing_zeros", "find_first_set"})
BOOL_UNARY = frozenset({"not"})
UNARY_OPS = FLOAT_UNARY | NUMERIC_UNARY | INT_UNARY | BOOL_UNARY

# Binary operations.  `div` is true division (floats only); `floordiv`/`mod` follow Python
# (floor, sign of divisor); `div_trunc`/`rem_trunc` follow C (integers only).
FLOAT_BINARY = frozenset({"div", "powf", "atan2", "hypot", "rhypot"})
NUMERIC_BINARY = frozenset({"add", "sub", "mul", "floordiv", "mod", "min", "max"})
INT_BINARY = frozenset({"div_trunc", "rem_trunc", "bitand", "bitor", "bitxor", "shl", "shr", "mul_hi"})
BOOL_BINARY = frozenset({"and", "or"})
BINARY_OPS = FLOAT_BINARY | NUMERIC_BINARY | INT_BINARY | BOOL_BINARY | {"powi"}

COMPARE_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


@attrs.frozen
class Unary(NamedOperation):
    """out = op(input), lane-wise."""

    input: Variable


@attrs.frozen
class Binary(NamedOperation):
    """out = lhs op rhs, lane-wise; operands and result share one item type (powi: int exponent)."""

    lhs: Variable
    rhs: Variable


@attrs.frozen
class Compare(NamedOperation):
    """out = lhs op rhs as a bool (or a line of bools)."""

    lhs: Variable
    rhs: Variable


@attrs.frozen
class Fma(Operation):
    """out = a * b + c with one rounding."""

    NAME = "fma"
    a: Variable
    b: Variable
    c: Variable


@attrs.frozen
class Clamp(Operation):
    """out = min(max(input, lo), hi)."""

    NAME = "clamp"
    input: Variable
    lo: Variable
    hi: Variable


@attrs.frozen
class Select(Operation):
    """out = cond ? then : otherwise (lane-wise when cond is a line)."""

    NAME = "select"
    cond: Variable
    then: Variable
    otherwise: Variable


@attrs.frozen
class Cast(Operation):
    """out = input converted to out's element type; a scalar input is broadcast to out's line."""

    NAME = "cast"
    input: Variable


@attrs.frozen
class Bitcast(Operation):
    """out = the bits of input reinterpreted as out's type (same total size)."""

    NAME = "bitcast"
    input: Variable


@attrs.frozen
class Assign(Operation):
    """out = input; out is a mutable local (or a fresh immutable one)."""

    NAME = "assign"
    input: Variable
