"""``and``/``or``/``not``, conditional expressions and chained comparisons at expansion time.

On a comptime left operand (or condition) these keep Python's meaning exactly.  On a runtime one,
the other side is first expanded into a scratch scope: when everything it emitted is *pure*
(arithmetic, comparisons, casts, lane reads, metadata, bounds-checked global reads) the instructions
are kept in place and combined with an IR ``and``/``or``/``select``; otherwise (stores, atomics,
calls with side effects, unchecked or shared-memory reads that could fault, plane collectives)
the side is moved into an IR branch so it only runs when Python would evaluate it, and the value
flows through a mutable local.  The guard idiom ``i < n and a[i] > 0`` is therefore safe.  A conditional
expression on a scalar condition whose side reads global memory (``x[i] if i < n else 0``) takes the branch
too: the read is then in range under its guard, where checked mode drops its check.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, cast

import attrs

from cubepy import ir
from cubepy.frontend import mutability, operations
from cubepy.frontend.flow import _classify
from cubepy.frontend.state import ScopeBuilder, require_state
from cubepy.frontend.values import ExpandBase, ExpandElement
from cubepy.ir import Type, VarKind
from cubepy.ir import ops as irops
from cubepy.ir.ops import branch


def _is_pure(scope: ScopeBuilder) -> bool:
    """Whether every instruction of ``scope`` may run where its branch is not taken: its record says it is pure
    (an assign only of an immutable local; a read only a checked global one, which cannot fault)."""
    for inst in scope.instructions:
        operation = inst.operation
        if isinstance(operation, irops.Assign):
            if inst.out is None or inst.out.kind is not VarKind.CONST:
                return False
        elif isinstance(operation, irops.Index):
            if not operation.checked or operation.memory.kind is not VarKind.GLOBAL:
                return False
        elif not operation.RECORD.pure:
            return False
    return True


def _expand_aside(function: Callable[[], Any]) -> tuple[ScopeBuilder, Any]:
    """Run ``function`` with a scratch child of the current scope as insertion point."""
    state = require_state()
    scratch = state.current.child()
    with state.in_scope(scratch):
        value = function()
    mutability.check_bound(value)
    return scratch, value


def _keep(scratch: ScopeBuilder) -> None:
    """Move a pure scratch scope's instructions into its parent, where they run unconditionally."""
    parent = scratch.parent
    assert parent is not None, "a scratch scope always has a parent"
    state = scratch.state
    for inst in scratch.instructions:
        if isinstance(inst.operation, irops.Index):  # a checked read, now run where Python would not run it
            inst = attrs.evolve(inst, operation=attrs.evolve(inst.operation, speculative=True))
        parent.instructions.append(inst)
        if inst.out is not None and state.defined_in.get((inst.out.kind, inst.out.id)) is scratch:
            state.defined_in[(inst.out.kind, inst.out.id)] = parent


def and_(left: Any, right_fn: Callable[[], Any]) -> Any:
    """``left and right``: Python semantics when ``left`` is comptime, else a runtime ``and``."""
    return _logic("and", left, right_fn)


def or_(left: Any, right_fn: Callable[[], Any]) -> Any:
    """``left or right``: Python semantics when ``left`` is comptime, else a runtime ``or``."""
    return _logic("or", left, right_fn)


def _logic(op: str, left: Any, right_fn: Callable[..., Any]) -> Any:
    mutability.check_bound(left)
    if operations.is_comptime(left):
        truth = bool(operations.comptime_value(left))
        if (op == "and") != truth:
            return left
        return _keep_proxy(left, right_fn())
    a = operations.to_bool(left)
    scratch, right = _expand_aside(right_fn)
    if not _is_pure(scratch) and a.type.line == 1:
        return _short_circuit(op, a, scratch, right)
    _keep(scratch)
    if operations.is_comptime(right):
        truth = bool(operations.comptime_value(right))
        return a if (op == "and") == truth else right
    b = operations.to_bool(right)
    if a.type != b.type:
        line = max(a.type.line, b.type.line)
        a, b = (operations.cast(x, ir.BOOL, line=line) for x in (a, b))
    return operations.emit(irops.lookup(op)(a.var, b.var))


def _short_circuit(op: str, left: ExpandElement, scratch: ScopeBuilder, right: Any) -> ExpandElement:
    """``result = left; if (left for and / not left for or) { <right>; result = right }``."""
    state = require_state()
    parent = scratch.parent
    assert parent is not None, "a scratch scope always has a parent"
    result = parent.create_local_mut(Type(ir.BOOL), left.var)
    cond = left if op == "and" else operations.unary("not", left)
    with state.in_scope(scratch):
        value = (
            operations.to_bool(right)
            if not operations.is_comptime(right)
            else operations.literal(bool(operations.comptime_value(right)), ir.BOOL)
        )
        if value.type.line != 1:
            value = operations.cast(value, ir.BOOL)
        scratch.append(irops.Assign(value.var), result)
    parent.append(branch.If(cond.var, scratch.freeze()))
    return ExpandElement(result, state)


def not_(value: Any) -> Any:
    """``not value``: Python's on comptime values, an IR ``not`` on runtime ones."""
    mutability.check_bound(value)
    if operations.is_comptime(value):
        return _keep_proxy(value, not operations.comptime_value(value))
    return operations.unary("not", operations.to_bool(value))


def _keep_proxy(operand: Any, result: Any) -> Any:
    """A bool computed from a ``cp.runtime`` constant stays a proxy (an IR constant), so that a ``while``
    on it is still a runtime loop; ``if`` folds it all the same."""
    if isinstance(operand, ExpandBase) and isinstance(result, bool):
        return operations.literal(result, ir.BOOL)
    return result


def ifexp(cond: Any, then_fn: Callable[[], Any], else_fn: Callable[[], Any]) -> Any:
    """``a if cond else b``: one side when comptime; else a select, or a branch when a side is impure."""
    is_runtime, cond_value = _classify(cond)
    if not is_runtime:
        return then_fn() if cond_value else else_fn()
    then_scope, then_value = _expand_aside(then_fn)
    else_scope, else_value = _expand_aside(else_fn)
    pure = _is_pure(then_scope) and _is_pure(else_scope)
    scalar = isinstance(cond_value, ExpandElement) and cond_value.type.line == 1
    if pure and not (scalar and (_reads_global(then_scope) or _reads_global(else_scope))):
        _keep(then_scope)
        _keep(else_scope)
        return operations.select(cond_value, then_value, else_value)
    return _branch_select(cast(ExpandElement, cond_value), then_scope, then_value, else_scope, else_value)


def _reads_global(scope: ScopeBuilder) -> bool:
    """Whether ``scope`` reads global memory: such a side of ``a if c else b`` runs only when Python would run it
    (a branch), so that a read guarded by ``c`` is known in range there and costs no check, and no lane loads
    what it throws away (the select of both sides did both)."""
    return any(
        isinstance(inst.operation, irops.Index) and inst.operation.memory.kind is VarKind.GLOBAL
        for inst in scope.instructions
    )


def _branch_select(
    cond: ExpandElement, then_scope: ScopeBuilder, then_value: Any, else_scope: ScopeBuilder, else_value: Any
) -> ExpandElement:
    state = require_state()
    parent = cast(ScopeBuilder, then_scope.parent)  # a scratch scope always has a parent
    sample = []
    for scope, value in ((then_scope, then_value), (else_scope, else_value)):
        if isinstance(value, ExpandElement) or operations.is_runtime(value):
            with state.in_scope(scope):
                sample.append(operations.as_element(value))
        elif operations.is_number(value):
            sample.append(value)
        else:
            from cubepy.frontend import source

            source.fail(
                f"a conditional expression under a runtime condition needs numbers or runtime values, "
                f"got {type(value).__name__}"
            )
    runtime_types = [s.type for s in sample if isinstance(s, ExpandElement)]
    elem = runtime_types[0].elem if runtime_types else operations.as_element(sample[0]).elem
    line = 1
    for ty in runtime_types:
        elem, line = ir.promote(elem, ty.elem), max(line, ty.line)
    if any(isinstance(s, float) for s in sample) and not elem.is_float:
        elem = operations.float_for(elem)
    target = Type(elem, line)
    otherwise = _literal_of(else_value, target) if not else_scope.instructions else None
    result = parent.create_local_mut(target, otherwise if otherwise is not None else ir.constant(0, target))
    sides = (
        ((then_scope, then_value),) if otherwise is not None else ((then_scope, then_value), (else_scope, else_value))
    )
    for scope, value in sides:
        with state.in_scope(scope):
            scope.append(irops.Assign(operations.convert(value, target, "conditional expression")), result)
    if otherwise is not None:  # ``x[i] if c else 0``: the local starts at 0 and only the taken side assigns
        parent.append(branch.If(cond.var, then_scope.freeze()))
    else:
        parent.append(branch.IfElse(cond.var, then_scope.freeze(), else_scope.freeze()))
    return ExpandElement(result, state)


def _literal_of(value: Any, target: Type) -> ir.Variable | None:
    """``value`` as a literal of ``target`` when it is a number or a literal of that type already, else None."""
    if isinstance(value, ExpandElement):
        var = value.var
        return var if var.is_constant and var.type == target else None
    if operations.is_number(value) and not isinstance(value, bool) and (target.elem.is_float or isinstance(value, int)):
        return ir.constant(float(value) if target.elem.is_float else value, target)
    return None


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    **operations.PY_COMPARE,
    "is": operator.is_,
    "is_not": operator.is_not,
    "in": lambda a, b: a in b,
    "not_in": lambda a, b: a not in b,
}


def compare_chain(ops: tuple[str, ...], *operand_fns: Callable[[], Any]) -> Any:
    """``a < b <= c``: each operand evaluated once, comparisons joined with ``and``."""
    left = operand_fns[0]()
    result = None
    for op, fn in zip(ops, operand_fns[1:]):
        right = fn()
        current = _COMPARE[op](left, right)
        result = current if result is None else _logic("and", result, lambda current=current: current)
        if operations.is_comptime(result) and not operations.comptime_value(result):
            return result
        left = right
    return result
