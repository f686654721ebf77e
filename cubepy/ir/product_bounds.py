"""Checked accesses of a buffer the launch found as long as a product of two arguments (``Param.len_as_product``).

The launch records ``len(m) = outer * (inner // L)`` (``L`` the array's line size, ``inner`` a multiple of it,
both factors at least 1), each factor a u32 scalar parameter, a tensor's extent or another buffer's ``len``.  An access
``m[r * b + c]`` with ``b`` the value ``inner // L`` (``inner`` itself when ``L`` is 1), under branches that took
``c < b`` and ``r < outer`` (or with ``r = x % outer``), is in bounds: ``r * b + c <= (outer - 1) * b + b - 1 =
len - 1``, and nothing on the way wraps since ``len`` fits the u32 metadata word.  That is a matmul's
``c[row * n + col]`` under ``row < m and col < n`` for an ``m * n`` output with ``m`` and ``n`` scalars, and a
layer norm's partial rows ``dw[(row % group) * n + col]`` under ``col < n``.  When ``L`` is 1 the two factors may
swap roles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cubepy.ir import ops
from cubepy.ir.kernel import ProductFactor
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.ranges import Env, RangeAnalysis, _Key


def in_product_bounds(analysis: RangeAnalysis, op: ops.Index | ops.IndexAssign, env: Env) -> bool:
    """Whether a checked access of an array with ``len_as_product`` is ``m[r * b + c]`` under the facts above."""
    memory, index = op.memory, op.index
    param = analysis.buffers.get(memory.id)
    if memory.kind is not VarKind.GLOBAL or param is None or param.len_as_product is None:
        return False
    if not param.len_is_buffer_len or index.type.is_line or index.elem.kind != "uint":
        return False
    line = memory.type.line
    outer, inner = param.len_as_product
    orders = ((outer, inner), (inner, outer)) if line == 1 else ((outer, inner),)
    total = _through_identity(analysis, index)
    if not isinstance(total, ops.Add):
        return False
    for product, column in ((total.lhs, total.rhs), (total.rhs, total.lhs)):
        mul = _through_identity(analysis, product)
        if not isinstance(mul, ops.Mul) or product.type != index.type or column.type != index.type:
            continue
        for row, width in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
            for row_factor, width_factor in orders:
                if (
                    _is_factor(analysis, width, width_factor, line)
                    and _below(analysis, column, width_factor, line, env)
                    and (_below(analysis, row, row_factor, 1, env) or _remainder_of(analysis, row, row_factor))
                ):
                    return True
    return False


def _definition(analysis: RangeAnalysis, var: Variable) -> ops.Operation | None:
    """The operation that computed the immutable ``var`` (None for a parameter, a builtin, a mutable value)."""
    return analysis.defs.get((var.kind, var.id)) if analysis.stable(var) else None


def _through_identity(analysis: RangeAnalysis, var: Variable) -> ops.Operation | None:
    """``var``'s definition, looking through ``x + 0``, ``0 + x``, ``x * 1`` and plain assignments (a tile
    base of 0 that a helper adds)."""
    found = _definition(analysis, var)
    for _ in range(8):
        if isinstance(found, ops.Assign) and found.input.type == var.type:
            nxt = found.input
        elif isinstance(found, (ops.Add, ops.Mul)):
            unit = 0 if isinstance(found, ops.Add) else 1
            if _is_constant(found.rhs, unit):
                nxt = found.lhs
            elif _is_constant(found.lhs, unit):
                nxt = found.rhs
            else:
                return found
        else:
            return found
        if nxt.kind is not VarKind.CONST:
            return None
        var, found = nxt, _definition(analysis, nxt)
    return found


def _is_constant(var: Variable, value: int) -> bool:
    return var.kind is VarKind.CONSTANT and int(var.value) == value  # type: ignore[call-overload]


Factor = tuple[ProductFactor, ...]  # every parameter value equal to one factor


def _is_factor(analysis: RangeAnalysis, var: Variable, factor: Factor, line: int) -> bool:
    """Whether ``var`` is ``factor // line`` (``factor`` itself, or ``factor // 1``, when ``line`` is 1)."""
    return _key_is_factor(analysis, (var.kind, var.id), factor, line) if analysis.stable(var) else False


def _key_is_factor(analysis: RangeAnalysis, key: _Key, factor: Factor, line: int) -> bool:
    found = analysis.defs.get(key)
    while isinstance(found, ops.Assign) and analysis.stable(found.input):
        key = (found.input.kind, found.input.id)
        found = analysis.defs.get(key)
    if isinstance(found, ops.Floordiv) and _is_constant(found.rhs, line) and analysis.stable(found.lhs):
        return _key_is_factor(analysis, (found.lhs.kind, found.lhs.id), factor, 1)
    return line == 1 and any(_reads(analysis, key, found, alike) for alike in factor)


def _reads(analysis: RangeAnalysis, key: _Key, found: ops.Operation | None, factor: ProductFactor) -> bool:
    """Whether the value ``key`` (computed by ``found``) is the parameter value ``factor`` names."""
    if factor.kind == "scalar":
        return key == (VarKind.SCALAR, factor.slot)
    buffer = analysis.buffers.get(factor.slot)
    if buffer is None:
        return False
    if factor.kind == "len":
        word = analysis._len_word(buffer.var)
        return isinstance(found, ops.Len) and word is not None and analysis._len_word(found.memory) == word
    return analysis._is_shape_key(key, buffer.var, factor.dim)


def _below(analysis: RangeAnalysis, var: Variable, factor: Factor, line: int, env: Env) -> bool:
    """Whether a branch established ``var < v`` (for ``var`` or a value computed alike) with ``v`` the value
    ``factor // line``."""
    if not analysis.stable(var):
        return False
    found = analysis.defs.get((var.kind, var.id))
    for fact in env:
        if fact[0] != "lt" or not _key_is_factor(analysis, fact[2], factor, line):
            continue
        if fact[1] == (var.kind, var.id) or (found is not None and analysis._same_value(fact[1], found)):
            return True
    return False


def _remainder_of(analysis: RangeAnalysis, var: Variable, factor: Factor) -> bool:
    """Whether ``var`` is ``x % v`` (unsigned) with ``v`` the factor's value, which the launch found at least 1."""
    found = _definition(analysis, var)
    return (
        isinstance(found, (ops.Mod, ops.RemTrunc))
        and found.lhs.type == var.type
        and var.elem.kind == "uint"
        and _is_factor(analysis, found.rhs, factor, 1)
    )
