"""Contraction: ``a * b + c`` becomes one ``fma`` (a single rounding), decided in the IR.

nvcc contracts by default (``--fmad=true``); cubepy does the same here, in its own IR, so every back end
runs the same fused code: the interp executes ``fma`` correctly rounded and the PTX back end lowers it
to ``fma.rn``, while a ``mul`` or ``add`` left alone stays a separately rounded ``mul.rn``/``add.rn``.

A float ``mul`` fuses into the ``add``/``sub`` that reads it when

- its result is an immutable local read exactly once in the whole kernel (by that ``add``/``sub``), so no
  other reader sees a differently rounded product and the ``mul`` can be removed;
- the ``add``/``sub`` is in the same scope, and the ``mul``'s operands cannot change in between (a
  mutable operand is not reassigned by the instructions between them);
- every operand and the result share one type (f16, bf16, f32, f64, or lines of them).

Forms: ``a*b + c`` and ``c + a*b`` give ``fma(a, b, c)``; ``a*b - c`` gives ``fma(a, b, -c)`` and
``c - a*b`` gives ``fma(-a, b, c)``: negation is exact, so each is ``a*b ± c`` rounded once.  A literal
is negated in place; otherwise a ``neg`` instruction is added.  When both operands of an ``add`` are
fusable products, the left one is fused (as LLVM's DAG combiner prefers).  Integers are never touched;
neither are products read twice (``x*x + y`` with ``x*x`` reused), nor ``cp.fma`` calls (already fused).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator

import attrs

from cubepy.ir import ops
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.scope import Instruction, Scope, assigns, fresh_ids, map_child_scopes, walk
from cubepy.ir.variable import SourceLoc, Variable, VarKind, constant

_Key = tuple[VarKind, int]
_Uses = collections.Counter[_Key]


def contract_pass(definition: KernelDefinition) -> KernelDefinition:
    """The pipeline's ``contract`` pass: ``contract(definition)`` when ``definition.contract`` asks for it."""
    return contract(definition) if definition.contract else definition


def contract(definition: KernelDefinition, keep: Iterable[Variable] = ()) -> KernelDefinition:
    """``definition`` with every fusable ``mul`` + ``add``/``sub`` pair replaced by an ``fma``.

    ``keep``: variables read outside the body (a cube function's results), never fused away.
    """
    uses: collections.Counter[_Key] = collections.Counter(
        (v.kind, v.id) for inst in walk(definition.body) for v in inst.operation.operands()
    )
    uses.update(_key(v) for v in keep)
    fresh = fresh_ids(definition.body)
    body = _contract_scope(definition.body, uses, fresh)
    return definition if body == definition.body else attrs.evolve(definition, body=body)


def _key(var: Variable) -> _Key:
    return (var.kind, var.id)


def _product(var: Variable, candidates: dict[_Key, int], uses: _Uses) -> int | None:
    """The position in ``out`` of the one-use ``mul`` defining ``var``, or None."""
    if var.kind is not VarKind.CONST or uses[_key(var)] != 1:
        return None
    return candidates.get(_key(var))


def _unchanged_between(mul: ops.Binary, between: list[Instruction | None]) -> bool:
    """Whether no instruction in ``between`` (nested bodies included) reassigns a mutable operand of ``mul``."""
    mutable = [v for v in (mul.lhs, mul.rhs) if v.kind is VarKind.MUT]
    return not mutable or not assigns(Scope(tuple(inst for inst in between if inst is not None)), *mutable)


def _negated(var: Variable, fresh: Iterator[int], loc: SourceLoc | None, emitted: list[Instruction]) -> Variable:
    """``-var``: a literal negated in place, else the result of a new ``neg`` appended to ``emitted``."""
    if var.is_constant:
        value = var.value
        assert isinstance(value, (int, float))  # a float literal: the product's operands are floats
        return constant(-value, var.type)
    out = Variable(VarKind.CONST, next(fresh), var.type)
    emitted.append(Instruction(out, ops.Neg(var), loc))
    return out


def _fuse(
    inst: Instruction, candidates: dict[_Key, int], out: list[Instruction | None], uses: _Uses, fresh: Iterator[int]
) -> bool:
    """Replace ``inst`` (an add/sub) by an fma at the end of ``out`` when one operand is a fusable product."""
    operation = inst.operation
    assert isinstance(operation, (ops.Add, ops.Sub)) and inst.out is not None
    ty = inst.out.type
    if ty.elem.is_int or ty.elem.is_bool or operation.lhs.type != ty or operation.rhs.type != ty:
        return False
    sides = ((operation.lhs, operation.rhs, False), (operation.rhs, operation.lhs, True))
    for product, other, product_is_rhs in sides:
        position = _product(product, candidates, uses)
        if position is None:
            continue
        defining = out[position]
        assert defining is not None and isinstance(defining.operation, ops.Mul)
        mul = defining.operation
        if mul.lhs.type != ty or mul.rhs.type != ty or not _unchanged_between(mul, out[position + 1 :]):
            continue
        emitted: list[Instruction] = []
        a, b, c = mul.lhs, mul.rhs, other
        if isinstance(operation, ops.Sub):
            if product_is_rhs:  # c - a*b = fma(-a, b, c)
                if b.is_constant and not a.is_constant:
                    a, b = b, a
                a = _negated(a, fresh, inst.loc, emitted)
            else:  # a*b - c = fma(a, b, -c)
                c = _negated(c, fresh, inst.loc, emitted)
        out[position] = None  # the product's only reader is the fma: drop the mul
        del candidates[_key(product)]
        out.extend(emitted)
        out.append(Instruction(inst.out, ops.Fma(a, b, c), inst.loc))
        return True
    return False


def _contract_scope(scope: Scope, uses: _Uses, fresh: Iterator[int]) -> Scope:
    out: list[Instruction | None] = []
    candidates: dict[_Key, int] = {}  # product key -> its position in out
    for inst in scope.instructions:
        inst = _with_contracted_children(inst, uses, fresh)
        operation = inst.operation
        if isinstance(operation, ops.Binary) and inst.out is not None and inst.out.elem.is_float:
            if isinstance(operation, (ops.Add, ops.Sub)) and _fuse(inst, candidates, out, uses, fresh):
                continue
            if isinstance(operation, ops.Mul) and inst.out.kind is VarKind.CONST:
                candidates[_key(inst.out)] = len(out)
        out.append(inst)
    return Scope(tuple(i for i in out if i is not None))


def _with_contracted_children(inst: Instruction, uses: _Uses, fresh: Iterator[int]) -> Instruction:
    operation = map_child_scopes(inst.operation, lambda child: _contract_scope(child, uses, fresh))
    return inst if operation is inst.operation else attrs.evolve(inst, operation=operation)
