"""Checked global accesses proven in bounds by the launch's facts about its buffers (``Param``): the symbolic
rules of the range analysis (``cubepy.ir.ranges``) for buffers whose length is a launch value.

A branch that took ``a < b`` records that order (``("lt", a, b)`` in the analysis's ``Env``).  ``m[i]`` under
``i < n.len()`` is in bounds when ``n.len()`` is the word ``m``'s check compares with (``in_len_bounds``), and
``m[r * t.shape(1) + c]`` under ``r < t.shape(0)`` and ``c < t.shape(1)`` for a rank-2 tensor ``t`` of ``m``'s
length (``in_tensor_bounds``).  ``cubepy.ir.product_bounds`` builds on the same length words and extents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cubepy.ir import ops
from cubepy.ir.kernel import ProductFactor
from cubepy.ir.ranges import CUBE_POS_KEY
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.ranges import Env, RangeAnalysis, _Key


def in_tensor_bounds(analysis: RangeAnalysis, op: ops.Index | ops.IndexAssign, env: Env) -> bool:
    """Whether a checked access ``m[r * t.shape(d) + c]`` sits under ``r < t.shape(1 - d)`` and ``c < t.shape(d)``
    for a rank-2 tensor ``t`` whose ``len`` is the word ``m``'s check compares with (``m`` itself, or a buffer
    the launch found of ``t``'s length: ``out[c * rows + r]`` of a transpose, with ``rows`` and ``cols``
    read from ``x``): then ``r * cols + c <= rows * cols - 1 = len - 1``, with no wrap on the way.

    Only where the check's bound is ``len`` (``len_is_buffer_len``) and ``t``'s ``len`` is the product of its
    shape (items of one element: no lines), which the launch guarantees fits the u32 metadata word.
    """
    memory, index = op.memory, op.index
    param = analysis.buffers.get(memory.id)
    if memory.kind is not VarKind.GLOBAL or param is None or not param.len_is_buffer_len:
        return False
    if index.type.is_line or index.elem.kind != "uint" or not analysis.stable(index):
        return False
    word = len_word(analysis, memory)
    tensors = [
        t.var
        for t in analysis.buffers.values()
        if t.rank == 2 and t.len_is_buffer_len and not t.var.type.is_line and len_word(analysis, t.var) == word
    ]
    total = analysis.defs.get((index.kind, index.id))
    if not tensors or not isinstance(total, ops.Add):
        return False
    for product, column in ((total.lhs, total.rhs), (total.rhs, total.lhs)):
        mul = analysis.defs.get((product.kind, product.id)) if analysis.stable(product) else None
        if not isinstance(mul, ops.Mul) or not all(v.type == index.type for v in (column, product)):
            continue
        for row, cols in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
            if row.type != index.type or cols.type != index.type:
                continue
            for tensor in tensors:
                for dim in (0, 1):
                    if (
                        _is_shape(analysis, cols, tensor, dim)
                        and _below(analysis, column, tensor, dim, env)
                        and _below(analysis, row, tensor, 1 - dim, env)
                    ):
                        return True
    return False


def in_len_bounds(analysis: RangeAnalysis, op: ops.Index | ops.IndexAssign, env: Env) -> bool:
    """Whether a checked access ``m[i]`` sits under a branch that took ``i < n.len()`` where ``n.len()`` is
    the very word ``m``'s check compares against: ``m`` itself, or a buffer the launch found to have
    ``m``'s length (``Param.same_len``), with ``len_is_buffer_len`` so the check compares with ``len``;
    or ``i < t.shape(d) // L`` for the tensor extent the launch found equal to ``m``'s items
    (``Param.len_as_shape``), ``L`` being ``m``'s line size, so the bound is ``m``'s ``len``."""
    memory, index = op.memory, op.index
    param = analysis.buffers.get(memory.id)
    if memory.kind is not VarKind.GLOBAL or param is None or not analysis.stable(index) or index.type.is_line:
        return False
    if index.elem.kind != "uint":  # a negative signed index is below any length yet out of bounds
        return False
    if (index.kind, index.id) == CUBE_POS_KEY and param.len_is_buffer_len:  # m[CUBE_POS], m one item per cube
        if counts_cubes(analysis, ProductFactor("len", memory.id)):
            return True
    key = (index.kind, index.id)
    for fact in env:
        if fact[0] != "lt" or fact[1] != key:
            continue
        bound = analysis.defs.get(fact[2])
        if isinstance(bound, ops.BufferLen) and bound.memory == memory:
            return True
        if (
            isinstance(bound, ops.Len)
            and param.len_is_buffer_len
            and len_word(analysis, bound.memory) == len_word(analysis, memory)
        ):
            return True
        if param.len_is_buffer_len and _is_len_in_items(analysis, fact[2], memory):
            return True
    return False


def _is_len_in_items(analysis: RangeAnalysis, key: _Key, memory: Variable) -> bool:
    """Whether ``key`` is ``t.shape(d) // L`` (or ``t.shape(d)`` when ``L`` is 1) for the tensor extent the
    launch found equal to ``memory``'s item count, ``L`` its line size: then it equals ``memory.len()``."""
    extent = analysis.buffers[memory.id].len_as_shape
    if extent is None:
        return False
    found = analysis.defs.get(key)
    if isinstance(found, ops.Floordiv):
        divisor = found.rhs
        if not (divisor.kind is VarKind.CONSTANT and int(divisor.value) == memory.type.line):  # type: ignore[call-overload]
            return False
        if not analysis.stable(found.lhs):
            return False
        found = analysis.defs.get((found.lhs.kind, found.lhs.id))
    elif memory.type.line != 1:
        return False
    shape = _shape_read(found)
    if shape is None or shape[0].kind is not VarKind.GLOBAL or extent[0] not in analysis.buffers:
        return False
    return _is_shape_read(analysis, shape, analysis.buffers[extent[0]].var, extent[1])


def len_word(analysis: RangeAnalysis, memory: Variable) -> int | None:
    """The slot whose ``len`` word a buffer's ``len`` reads (its own, or the equal-length buffer's)."""
    param = analysis.buffers.get(memory.id)
    if memory.kind is not VarKind.GLOBAL or param is None:
        return None
    return param.slot if param.same_len is None else param.same_len


def _is_shape(analysis: RangeAnalysis, var: Variable, memory: Variable, dim: int) -> bool:
    return analysis.stable(var) and is_shape_key(analysis, (var.kind, var.id), memory, dim)


def is_shape_key(analysis: RangeAnalysis, key: _Key, memory: Variable, dim: int) -> bool:
    """Whether ``key`` is ``memory.shape(dim)``, or the same extent of a tensor the launch found shaped alike
    (``stride(0)`` of a contiguous tensor, which is its ``shape(1)``, counts)."""
    found = analysis.defs.get(key)
    read = _shape_read(found)
    if read is None and isinstance(found, ops.Stride) and found.dim is not None and found.dim.is_constant:
        param = analysis.buffers.get(found.memory.id) if found.memory.kind is VarKind.GLOBAL else None
        if param is not None and param.contiguous and int(found.dim.value) == 0:  # type: ignore[call-overload]
            read = (found.memory, 1)
    return read is not None and _is_shape_read(analysis, read, memory, dim)


def _is_shape_read(analysis: RangeAnalysis, read: tuple[Variable, int], memory: Variable, dim: int) -> bool:
    """Whether ``read``, a ``(tensor, dim)`` extent, is ``memory.shape(dim)`` or the same extent of a tensor
    the launch found shaped alike."""
    if read[1] != dim:
        return False
    word = _shape_word(analysis, memory)
    return read[0] == memory or (word is not None and _shape_word(analysis, read[0]) == word)


def _shape_word(analysis: RangeAnalysis, memory: Variable) -> int | None:
    """The slot of the first tensor shaped like ``memory`` (its own when none is earlier)."""
    param = analysis.buffers.get(memory.id)
    if memory.kind is not VarKind.GLOBAL or param is None or param.rank is None:
        return None
    return param.slot if param.same_shape is None else param.same_shape


def _shape_read(found: object) -> tuple[Variable, int] | None:
    """``(memory, dim)`` when ``found`` is ``memory.shape(dim)`` with a constant ``dim``, else None."""
    if isinstance(found, ops.Shape) and found.dim is not None and found.dim.is_constant:
        return found.memory, int(found.dim.value)  # type: ignore[call-overload]
    return None


def counts_cubes(analysis: RangeAnalysis, factor: ProductFactor) -> bool:
    """Whether the launch found the value ``factor`` names equal to its number of cubes (``CUBE_POS`` is
    below it): one of ``cube_count_as``, or the same extent of a tensor shaped alike, or a buffer's len
    read from the same word."""
    for found in analysis.cube_count_as:
        if found == factor:
            return True
        if found.kind == factor.kind == "shape" and factor.slot in analysis.buffers and found.slot in analysis.buffers:
            if _is_shape_read(
                analysis, (analysis.buffers[found.slot].var, found.dim), analysis.buffers[factor.slot].var, factor.dim
            ):
                return True
        if found.kind == factor.kind == "len" and factor.slot in analysis.buffers and found.slot in analysis.buffers:
            if len_word(analysis, analysis.buffers[found.slot].var) == len_word(
                analysis, analysis.buffers[factor.slot].var
            ):
                return True
    return False


def _below(analysis: RangeAnalysis, var: Variable, memory: Variable, dim: int, env: Env) -> bool:
    """Whether a branch established ``var < memory.shape(dim)``: for ``var`` itself, for a value computed
    by the same operation from the same operands (``i + 1`` written twice), or, for ``var = x - k`` with a
    literal ``k`` that ``x`` is at least (no wrap), for ``x`` (``i - 1`` under ``0 < i < rows``); or ``var``
    is ``CUBE_POS`` and the launch found that extent equal to its number of cubes."""
    if not analysis.stable(var):
        return False
    if (var.kind, var.id) == CUBE_POS_KEY and counts_cubes(analysis, ProductFactor("shape", memory.id, dim)):
        return True
    if took_below(analysis, var, env, lambda key: is_shape_key(analysis, key, memory, dim)):
        return True
    found = analysis.defs.get((var.kind, var.id))
    if isinstance(found, ops.Sub) and found.rhs.is_constant and found.lhs.type == var.type:
        least = analysis.of(found.lhs, env)
        step = int(found.rhs.value)  # type: ignore[call-overload]
        return step >= 0 and least is not None and least[0] >= step and _below(analysis, found.lhs, memory, dim, env)
    return False


def took_below(analysis: RangeAnalysis, var: Variable, env: Env, is_bound: Callable[[_Key], bool]) -> bool:
    """Whether a branch took ``var < b`` with ``b`` a value ``is_bound`` accepts, for ``var`` itself or for a value
    computed by the same operation from the same operands (``i + 1`` written twice)."""
    found = analysis.defs.get((var.kind, var.id))
    for fact in env:
        if fact[0] != "lt" or not is_bound(fact[2]):
            continue
        if fact[1] == (var.kind, var.id) or (found is not None and same_value(analysis, fact[1], found)):
            return True
    return False


def same_value(analysis: RangeAnalysis, key: _Key, operation: ops.Operation) -> bool:
    """Whether the immutable value ``key`` is computed by an operation equal to ``operation`` (the same
    pure operation on the same immutable operands: the same value)."""
    other = analysis.defs.get(key)
    if other is None or other != operation or not operation.RECORD.pure or operation.RECORD.reads:
        return False
    return all(
        v.kind is not VarKind.MUT and (v.kind is not VarKind.CONST or analysis.stable(v)) for v in operation.operands()
    )
