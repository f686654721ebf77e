"""The ``merge_branches`` pass: adjacent branches on one immutable condition become one branch.

``x = a[i] if inside else 0`` followed by ``y = b[i] if inside else 0`` expands to two ``if_else`` on
``inside``, each after an ``assign`` of its result's initial value.  Every unit runs the same instructions in
the same order whether the two bodies are apart or joined (the condition cannot change in between), so they
are joined: ``if_else inside {x = a[i]; y = b[i]} else {x = 0; y = 0}``, one branch where the back ends saw
several (ptxas then predicates the loads of a row once).  Instructions between the two branches move above
the first when that changes nothing: pure ones whose operands and result the first branch's bodies neither
read nor write.
"""

from __future__ import annotations

import attrs

from cubepy.ir import ops
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.ops import branch
from cubepy.ir.scope import Instruction, Scope, defined_once, map_child_scopes, walk
from cubepy.ir.variable import Variable, VarKind

_Key = tuple[VarKind, int]


def merge_branches(definition: KernelDefinition) -> KernelDefinition:
    """The pipeline's ``merge_branches`` pass (see the module docstring)."""
    once = defined_once(definition.body)
    return attrs.evolve(definition, body=_scope(definition.body, once))


def _scope(scope: Scope, once: set[_Key]) -> Scope:
    out: list[Instruction] = []
    pending: list[Instruction] = []  # movable instructions after the branch that ends ``out``
    touched: tuple[Instruction, set[_Key]] | None = None  # that branch and what its bodies touch, walked once
    for inst in scope.instructions:
        inst = attrs.evolve(inst, operation=map_child_scopes(inst.operation, lambda child: _scope(child, once)))
        last = out[-1] if out and _is_branch(out[-1]) else None
        if last is not None:
            if _joinable(last, inst, once):
                out[-1:] = [*pending, _joined(last, inst)]
                pending = []
                continue
            if touched is None or touched[0] is not last:
                touched = (last, _touched(last))
            if _movable(inst, touched[1]):
                pending.append(inst)
                continue
        out.extend(pending)
        pending = []
        out.append(inst)
    out.extend(pending)
    return Scope(tuple(out))


def _is_branch(inst: Instruction) -> bool:
    return isinstance(inst.operation, (branch.If, branch.IfElse))


def _bodies(op: branch.If | branch.IfElse) -> tuple[Scope, Scope]:
    if isinstance(op, branch.If):
        return op.body, Scope(())
    return op.then_body, op.else_body


def _joinable(first: Instruction, second: Instruction, once: set[_Key]) -> bool:
    """Whether ``second`` branches on the same immutable condition as ``first``."""
    a, b = first.operation, second.operation
    if not (isinstance(a, (branch.If, branch.IfElse)) and isinstance(b, (branch.If, branch.IfElse))):
        return False
    cond = a.cond
    if b.cond != cond or cond.is_constant:
        return False
    return cond.kind in (VarKind.BUILTIN, VarKind.SCALAR) or (cond.kind, cond.id) in once


def _joined(first: Instruction, second: Instruction) -> Instruction:
    a, b = first.operation, second.operation
    assert isinstance(a, (branch.If, branch.IfElse)) and isinstance(b, (branch.If, branch.IfElse))
    (then_a, else_a), (then_b, else_b) = _bodies(a), _bodies(b)
    then_body = Scope(then_a.instructions + then_b.instructions)
    else_body = Scope(else_a.instructions + else_b.instructions)
    if not else_body.instructions:
        return attrs.evolve(first, operation=branch.If(a.cond, then_body))
    return attrs.evolve(first, operation=branch.IfElse(a.cond, then_body, else_body))


def _movable(inst: Instruction, touched: set[_Key]) -> bool:
    """Whether ``inst`` may run before a branch whose bodies touch the variables ``touched`` (``_touched``)
    instead of after it: a pure operation (no memory, no branch) whose result and operands are not among them."""
    op = inst.operation
    if inst.out is None or isinstance(op, branch.BRANCH_OPS) or not op.RECORD.pure or op.RECORD.reads:
        return False
    if isinstance(op, ops.Index):
        return False
    keys = [(inst.out.kind, inst.out.id)]
    keys += [(v.kind, v.id) for v in op.operands() if isinstance(v, Variable) and not v.is_constant]
    return not any(key in touched for key in keys)


def _touched(inst: Instruction) -> set[_Key]:
    """Every variable the bodies of the branch ``inst`` define, assign or read."""
    found: set[_Key] = set()
    op = inst.operation
    assert isinstance(op, (branch.If, branch.IfElse))
    for body in _bodies(op):
        for inner in walk(body):
            if inner.out is not None:
                found.add((inner.out.kind, inner.out.id))
            for var in inner.operation.operands():
                if isinstance(var, Variable):
                    found.add((var.kind, var.id))
    return found
