"""Checked accesses of a buffer the launch found as long as a product of two arguments (``Param.len_as_product``).

The launch records ``len(m) = outer * (inner // L)`` (``L`` the buffer's line size, ``inner`` a multiple of it,
both factors at least 1), each factor a u32 scalar parameter, a tensor's extent or another buffer's ``len``.  An
access ``m[r * b + c]`` with ``b`` the value ``inner // L`` (``inner`` itself when ``L`` is 1), under branches
that took ``c < b`` and ``r < outer`` (or with ``r = x % outer``), is in bounds: ``r * b + c <= (outer - 1) * b +
b - 1 = len - 1``, and nothing on the way wraps since ``len`` fits the u32 metadata word.  That is a matmul's
``c[row * n + col]`` under ``row < m and col < n`` for an ``m * n`` output with ``m`` and ``n`` scalars, and a
layer norm's partial rows ``dw[(row % group) * n + col]`` under ``col < n``.  When ``L`` is 1 the two factors may
swap roles.  The index is read as a sum of terms, so ``row * n + col + 1`` under ``col + 1 < n`` counts too: u32
sums are equal modulo 2**32 in any order, and the bound shows the exact sum is below ``len``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from cubepy.ir import ops
from cubepy.ir.kernel import ProductFactor
from cubepy.ir.launch_bounds import counts_cubes, is_shape_key, len_word, took_below
from cubepy.ir.ranges import CUBE_POS_KEY
from cubepy.ir.types import Type
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.ranges import Env, RangeAnalysis, _Key

Factor = tuple[ProductFactor, ...]  # every parameter value equal to one factor
Sum = tuple[Counter[object], int]  # the leaves of an integer sum and the sum of its literals


def in_product_bounds(analysis: RangeAnalysis, op: ops.Index | ops.IndexAssign, env: Env) -> bool:
    """Whether a checked access of a buffer with ``len_as_product`` is ``m[r * b + c]`` under the facts above."""
    memory, index = op.memory, op.index
    param = analysis.buffers.get(memory.id)
    if memory.kind is not VarKind.GLOBAL or param is None or param.len_as_product is None:
        return False
    if not param.len_is_buffer_len or index.type.is_line or index.elem.kind != "uint":
        return False
    line = memory.type.line
    outer, inner = param.len_as_product
    orders = ((outer, inner), (inner, outer)) if line == 1 else ((outer, inner),)
    total = _sum_terms(analysis, index, index.type)
    if total is None:
        return False
    terms, constant = total
    for leaf in terms:
        if not isinstance(leaf, ops.Mul) or leaf.lhs.type != index.type or leaf.rhs.type != index.type:
            continue
        rest = (terms - Counter({leaf: 1}), constant)
        for row, width in ((leaf.lhs, leaf.rhs), (leaf.rhs, leaf.lhs)):
            for row_factor, width_factor in orders:
                if (
                    _is_factor(analysis, width, width_factor, line)
                    and _sum_below(analysis, rest, index.type, width_factor, line, env)
                    and (_below(analysis, row, row_factor, 1, env) or _remainder_of(analysis, row, row_factor))
                ):
                    return True
    return False


def _sum_terms(analysis: RangeAnalysis, start: Variable | _Key, ty: Type) -> Sum | None:
    """``start`` as a sum of type ``ty``: its leaves, the values that are not a ``+`` of that type, each counted
    by what it computes (a pure operation of stable operands is itself, so ``UNIT_POS * 2`` computed twice is one
    leaf; any other value its variable), and the sum of its literals modulo 2**bits; None when a leaf may change (a mutable
    value)."""
    terms: Counter[object] = Counter()
    constant = 0
    stack: list[Variable | _Key] = [start]
    while stack:
        value = stack.pop()
        if isinstance(value, Variable):
            if value.kind is VarKind.CONSTANT:
                constant += int(value.value)  # type: ignore[call-overload]
                continue
            value = (value.kind, value.id)
        if not _stable_key(analysis, value):
            return None
        found = analysis.defs.get(value)
        if isinstance(found, ops.Add) and found.lhs.type == ty and found.rhs.type == ty:
            stack += [found.lhs, found.rhs]
        elif isinstance(found, ops.Assign) and found.input.type == ty:
            stack.append(found.input)
        elif found is not None and _same_everywhere(analysis, found):
            terms[found] += 1
        else:
            terms[value] += 1
    return terms, constant % (1 << ty.elem.bits)


def _same_everywhere(analysis: RangeAnalysis, operation: ops.Operation) -> bool:
    """Whether ``operation`` gives one value wherever it is computed: pure, reading no memory, its operands
    literals or stable values."""
    if not operation.RECORD.pure or operation.RECORD.reads:
        return False
    return all(v.kind is VarKind.CONSTANT or analysis.stable(v) for v in operation.operands())


def _stable_key(analysis: RangeAnalysis, key: _Key) -> bool:
    """``RangeAnalysis.stable`` by key: a builtin, a scalar parameter or an immutable local."""
    kind = key[0]
    return kind in (VarKind.BUILTIN, VarKind.SCALAR) or (kind is VarKind.CONST and key not in analysis.reassigned)


def _sum_below(analysis: RangeAnalysis, rest: Sum, ty: Type, factor: Factor, line: int, env: Env) -> bool:
    """Whether a branch established ``v < f`` for a ``v`` that sums to ``rest`` and ``f`` the value
    ``factor // line``."""
    for fact in env:
        if fact[0] == "lt" and _key_is_factor(analysis, fact[2], factor, line):
            if _sum_terms(analysis, fact[1], ty) == rest:
                return True
    return False


def _definition(analysis: RangeAnalysis, var: Variable) -> ops.Operation | None:
    """The operation that computed the immutable ``var`` (None for a parameter, a builtin, a mutable value)."""
    return analysis.defs.get((var.kind, var.id)) if analysis.stable(var) else None


def _is_constant(var: Variable, value: int) -> bool:
    return var.kind is VarKind.CONSTANT and int(var.value) == value  # type: ignore[call-overload]


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
        word = len_word(analysis, buffer.var)
        return isinstance(found, ops.Len) and word is not None and len_word(analysis, found.memory) == word
    return is_shape_key(analysis, key, buffer.var, factor.dim)


def _below(analysis: RangeAnalysis, var: Variable, factor: Factor, line: int, env: Env) -> bool:
    """Whether a branch established ``var < v`` (for ``var`` or a value computed alike) with ``v`` the value
    ``factor // line``."""
    if not analysis.stable(var):
        return False
    if line == 1 and (var.kind, var.id) == CUBE_POS_KEY and any(counts_cubes(analysis, f) for f in factor):
        return True
    return took_below(analysis, var, env, lambda key: _key_is_factor(analysis, key, factor, line))


def _remainder_of(analysis: RangeAnalysis, var: Variable, factor: Factor) -> bool:
    """Whether ``var`` is ``x % v`` (unsigned) with ``v`` the factor's value, which the launch found at least 1."""
    found = _definition(analysis, var)
    return (
        isinstance(found, (ops.Mod, ops.RemTrunc))
        and found.lhs.type == var.type
        and var.elem.kind == "uint"
        and _is_factor(analysis, found.rhs, factor, 1)
    )
