"""Arithmetic, comparison, conversion and assignment: the interp's handlers of ``cubepy.ir.ops.arith``.

What each operation computes is its record's semantics, evaluated by :mod:`cubepy.ir.semantics` (shared with
constant folding and the frontend's comptime fold); these handlers read operands, broadcast lines and write.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING

import numpy as np

from cubepy.ir import Instruction, ops, semantics
from cubepy.runtime.interp import native_fma
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import Mask, as_line_operand, is_uniform, numpy_dtype

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk


OP_FAMILIES = ("arith",)  # the IR op families handled here


@implements(*ops.UNARY_OPS)
def unary(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = op(input)."""
    op = inst.operation
    assert isinstance(op, ops.Unary)
    assert inst.out is not None  # the record gives it a result
    ctx.write(inst.out, semantics.unary(type(op), op.input.elem, ctx.read(op.input)), mask)


@implements(*ops.BINARY_OPS)
def binary(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = lhs op rhs."""
    op = inst.operation
    assert isinstance(op, ops.Binary)
    lhs, rhs = ctx.read(op.lhs), ctx.read(op.rhs)
    if isinstance(op, ops.Powi) and op.lhs.type.line > 1:
        rhs = as_line_operand(rhs, op.rhs.type)
    assert inst.out is not None  # the record gives it a result
    ctx.write(inst.out, semantics.binary(type(op), op.lhs.elem, lhs, rhs), mask)


@implements(*ops.COMPARE_OPS)
def compare(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = lhs op rhs as bool."""
    op = inst.operation
    assert isinstance(op, ops.Compare)
    assert inst.out is not None  # the record gives it a result
    ctx.write(inst.out, semantics.compare(type(op), op.lhs.elem, ctx.read(op.lhs), ctx.read(op.rhs)), mask)


@implements(ops.Fma)
def fma(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = a * b + c, rounded once."""
    op = inst.operation
    assert isinstance(op, ops.Fma)
    assert inst.out is not None  # the record gives it a result
    a, b, c = ctx.read(op.a), ctx.read(op.b), ctx.read(op.c)
    fused = native_fma.fma(np.asarray(a), np.asarray(b), np.asarray(c))  # the same bits, one native pass
    ctx.write(inst.out, semantics.evaluate(ops.Fma, op.a.elem, a, b, c) if fused is None else fused, mask)


@implements(ops.Clamp)
def clamp(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = min(max(input, lo), hi)."""
    op = inst.operation
    assert isinstance(op, ops.Clamp)
    x, lo, hi = ctx.read(op.input), ctx.read(op.lo), ctx.read(op.hi)
    assert inst.out is not None  # the record gives it a result
    ctx.write(inst.out, semantics.evaluate(ops.Clamp, op.input.elem, x, lo, hi), mask)


@implements(ops.Select)
def select(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = cond ? then : otherwise, lane-wise."""
    op = typing.cast(ops.Select, inst.operation)
    assert inst.out is not None  # the record gives it a result
    cond = ctx.read(op.cond)
    if inst.out.type.line > 1:
        cond = as_line_operand(cond, op.cond.type)
    result = semantics.evaluate(ops.Select, op.cond.elem, cond, ctx.read(op.then), ctx.read(op.otherwise))
    ctx.write(inst.out, result, mask)


@implements(ops.Cast)
def cast(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = input converted to out's element type; a scalar input broadcasts to a line."""
    op = typing.cast(ops.Cast, inst.operation)
    assert inst.out is not None  # the record gives it a result
    x = ctx.read(op.input)
    if inst.out.type.line > 1:
        x = as_line_operand(x, op.input.type)
    result = semantics.convert(x, numpy_dtype(op.input.elem), numpy_dtype(inst.out.elem))
    ctx.write(inst.out, result, mask)


@implements(ops.Bitcast)
def bitcast(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = the bytes of input reinterpreted (line sizes may differ when the total size agrees)."""
    op = typing.cast(ops.Bitcast, inst.operation)
    assert inst.out is not None  # the record gives it a result
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
    assert inst.out is not None  # the record gives it a result
    ctx.write(inst.out, ctx.read(typing.cast(ops.Assign, inst.operation).input), mask)
