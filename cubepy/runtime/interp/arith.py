"""Arithmetic, comparison, conversion and assignment: handlers of ``cubepy.ir.ops.arith``.

f16 and bf16 compute in f32 and round once to their type, as the GPU does (f32 holds more than
twice their precision, so add/sub/mul/div/sqrt round exactly as a native half operation would).
``fma`` rounds once, correctly, for every float type (:mod:`cubepy.runtime.interp.fma`), as ``fma.rn`` does.
Integer arithmetic wraps; division semantics are in :mod:`cubepy.runtime.interp.numerics`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from cubepy.ir import Instruction, ops
from cubepy.ir.types import ElemType
from cubepy.runtime.interp import numerics
from cubepy.runtime.interp.fma import fma as fma_rn
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import Mask, as_line_operand, is_uniform, numpy_dtype

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk

Value = np.ndarray | np.generic
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def _compute_dtype(elem: ElemType) -> np.dtype:
    """The dtype a float operation computes in: f32 for the 2-byte floats, the type itself otherwise."""
    return F32 if elem.size == 2 else numpy_dtype(elem)


def float_op(elem: ElemType, fn: Callable[..., Value], *args: Value) -> Value:
    """``fn(*args)`` computed in ``elem``'s compute type and rounded once to ``elem``."""
    dtype = numpy_dtype(elem)
    compute = _compute_dtype(elem)
    if compute == dtype:
        return fn(*args)
    return fn(*(np.asarray(a).astype(compute) for a in args)).astype(dtype)


_FLOAT_UNARY: dict[str, Callable[[Value], Value]] = {
    "exp": np.exp, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "trunc": np.trunc,
    "recip": np.reciprocal, "neg": np.negative, "abs": np.abs, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "expm1": np.expm1, "to_degrees": np.degrees, "to_radians": np.radians,
}
_INT_UNARY: dict[str, Callable[[Value], Value]] = {
    "neg": np.negative, "abs": np.abs, "bitnot": np.invert, "count_ones": numerics.count_ones,
    "leading_zeros": numerics.leading_zeros, "reverse_bits": numerics.reverse_bits,
    "trailing_zeros": numerics.trailing_zeros, "find_first_set": numerics.find_first_set,
}


@implements(ops.Unary)
def unary(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = op(input)."""
    op: ops.Unary = inst.operation
    x = ctx.read(op.input)
    elem = op.input.elem
    name = op.op
    if name == "not":
        result = np.logical_not(x)
    elif elem.is_int:
        result = _INT_UNARY[name](x)
    elif name in ("is_nan", "is_inf"):
        x = np.asarray(x).astype(_compute_dtype(elem))
        result = np.isnan(x) if name == "is_nan" else np.isinf(x)
    elif name == "erf":  # f64 approximation, rounded once to the type
        result = numerics.erf(x).astype(numpy_dtype(elem))
    else:
        result = float_op(elem, _FLOAT_UNARY[name], x)
    ctx.write(inst.out, result, mask)


def _powi(base: Value, exponent: Value) -> Value:
    return np.power(base, np.asarray(exponent).astype(base.dtype))


_FLOAT_BINARY: dict[str, Callable[[Value, Value], Value]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "min": np.fmin, "max": np.fmax,
    "powf": np.power, "atan2": np.arctan2, "hypot": np.hypot,
    "rhypot": lambda a, b: np.reciprocal(np.hypot(a, b)),
}
_INT_BINARY: dict[str, Callable[[Value, Value], Value]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
    "floordiv": numerics.int_floordiv, "mod": numerics.int_mod, "div_trunc": numerics.int_div_trunc,
    "rem_trunc": numerics.int_rem_trunc, "bitand": np.bitwise_and, "bitor": np.bitwise_or,
    "bitxor": np.bitwise_xor, "shl": numerics.shift_left, "shr": numerics.shift_right,
    "mul_hi": numerics.mul_hi,
}
_BOOL_BINARY: dict[str, Callable[[Value, Value], Value]] = {"and": np.logical_and, "or": np.logical_or}


@implements(ops.Binary)
def binary(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = lhs op rhs."""
    op: ops.Binary = inst.operation
    lhs, rhs = ctx.read(op.lhs), ctx.read(op.rhs)
    elem = op.lhs.elem
    name = op.op
    if name == "powi":
        if op.lhs.type.line > 1:
            rhs = as_line_operand(rhs, op.rhs.type)
        # In f64, rounded once: exact for the small exponents powi is used with.
        result = _powi(np.asarray(lhs).astype(F64), rhs).astype(numpy_dtype(elem))
    elif elem.is_float:
        result = float_op(elem, _FLOAT_BINARY[name], lhs, rhs)
    elif elem.is_bool:
        result = _BOOL_BINARY[name](lhs, rhs)
    else:
        result = _INT_BINARY[name](lhs, rhs)
    ctx.write(inst.out, result, mask)


_COMPARE: dict[str, Callable[[Value, Value], Value]] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal,
}


@implements(ops.Compare)
def compare(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = lhs op rhs as bool (NaN compares unequal to everything, as PTX's ordered compares)."""
    op: ops.Compare = inst.operation
    lhs, rhs = ctx.read(op.lhs), ctx.read(op.rhs)
    if op.lhs.elem.is_float and op.lhs.elem.size == 2:
        lhs, rhs = np.asarray(lhs).astype(F32), np.asarray(rhs).astype(F32)
    ctx.write(inst.out, _COMPARE[op.op](lhs, rhs), mask)


@implements(ops.Fma)
def fma(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = a * b + c rounded once (correctly rounded, as ``fma.rn``)."""
    op: ops.Fma = inst.operation
    ctx.write(inst.out, fma_rn(ctx.read(op.a), ctx.read(op.b), ctx.read(op.c), numpy_dtype(inst.out.elem)), mask)


@implements(ops.Clamp)
def clamp(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = min(max(input, lo), hi); float bounds ignore NaN like PTX min/max."""
    op: ops.Clamp = inst.operation
    x, lo, hi = ctx.read(op.input), ctx.read(op.lo), ctx.read(op.hi)
    elem = op.input.elem
    if elem.is_float:
        result = float_op(elem, lambda v, a, b: np.fmin(np.fmax(v, a), b), x, lo, hi)
    else:
        result = np.minimum(np.maximum(x, lo), hi)
    ctx.write(inst.out, result, mask)


@implements(ops.Select)
def select(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = cond ? then : otherwise, lane-wise."""
    op: ops.Select = inst.operation
    cond = ctx.read(op.cond)
    if inst.out.type.line > 1:
        cond = as_line_operand(cond, op.cond.type)
    ctx.write(inst.out, np.where(cond, ctx.read(op.then), ctx.read(op.otherwise)), mask)


@implements(ops.Cast)
def cast(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = input converted to out's element type; a scalar input broadcasts to a line."""
    op: ops.Cast = inst.operation
    x = ctx.read(op.input)
    if inst.out.type.line > 1:
        x = as_line_operand(x, op.input.type)
    result = numerics.convert(x, numpy_dtype(op.input.elem), numpy_dtype(inst.out.elem))
    ctx.write(inst.out, result, mask)


@implements(ops.Bitcast)
def bitcast(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = the bytes of input reinterpreted (line sizes may differ when the total size agrees)."""
    op: ops.Bitcast = inst.operation
    src_ty, dst_ty = op.input.type, inst.out.type
    x = np.asarray(ctx.read(op.input))
    if src_ty.elem.is_bool:
        x = x.astype(np.uint8)
    rows = () if is_uniform(x, src_ty) else (x.shape[0],)
    raw = np.array(x, order="C").reshape(rows + (src_ty.line,)).view(np.uint8)  # rows + (bytes,)
    dst_elem = dst_ty.elem
    result = raw != 0 if dst_elem.is_bool else raw.view(numpy_dtype(dst_elem))
    result = result.reshape(rows + ((dst_ty.line,) if dst_ty.line > 1 else ()))
    ctx.write(inst.out, result, mask)


@implements(ops.Assign)
def assign(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = input."""
    ctx.write(inst.out, ctx.read(inst.operation.input), mask)
