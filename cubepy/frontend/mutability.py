"""Mutable locals: Python has no ``let mut``, so the rewrite decides and this module implements.

A name assigned inside a runtime branch or loop and visible outside it becomes a *mutable local*
before the branch (``into_mut``: a fresh IR ``MUT`` variable holding a copy); assignments to it are
IR ``Assign``s.  Each cube-function call owns the mutables it created (``FrameVars``), so assigning
a parameter that happens to be the caller's mutable rebinds the name instead of writing the caller's
variable, and binding a name to an owned mutable takes a snapshot (value semantics, as in Rust).

Python numbers promoted to mutables are *weakly typed*: they start as i32/f32/bool and a later
use (an assignment of another type, an index, an integer of another type) records a hint; the
expansion then runs again with the hinted type.  ``Unbound`` (``values``) marks a name that has no usable
value (read before assignment, or bound only inside a runtime branch); any use raises an ExpandError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from cubepy import ir
from cubepy.frontend import elem as elems
from cubepy.frontend import operations, source
from cubepy.frontend.state import Promotion, current_scope, require_state
from cubepy.frontend.values import ExpandBase, ExpandElement, Unbound
from cubepy.ir import VarKind
from cubepy.ir import ops as irops

if TYPE_CHECKING:
    from cubepy.frontend.state import ScopeBuilder
    from cubepy.ir import Variable


def is_comptime_number(value: object) -> bool:
    """A Python number or an IR constant: a value known while expanding."""
    if isinstance(value, ExpandBase):
        return value.expand_element().var.kind is VarKind.CONSTANT
    return operations.is_number(value)


def record_promotion(name: str, before: object, after: object, construct: str, loc: ir.SourceLoc | None) -> None:
    """Remember that the comptime ``before`` became the mutable ``after`` at a runtime ``construct``."""
    if isinstance(after, ExpandElement) and after.var.kind is VarKind.MUT and is_comptime_number(before):
        shown = before.expand_element().var.value if isinstance(before, ExpandBase) else before
        require_state().promotions[after.var.id] = Promotion(name, shown, construct, loc)


def check_bound(value: object) -> None:
    """Raise when ``value`` is an ``Unbound`` marker."""
    if isinstance(value, Unbound):
        value.fail()


class FrameVars:
    """The mutables one cube-function call created (by identity)."""

    __slots__ = ("_owned",)

    def __init__(self) -> None:
        self._owned: dict[int, object] = {}

    def own(self, value: object) -> None:
        """Record ``value`` as a mutable owned by this call."""
        self._owned[id(value)] = value

    def owns(self, value: object) -> bool:
        """Whether ``value`` is a mutable this call created."""
        return self._owned.get(id(value)) is value


def is_composite(value: object) -> bool:
    """Whether ``value`` is a derived cube type's expand value (it has runtime and comptime fields)."""
    return hasattr(type(value), "__cube_fields__")


def composite_fields(value: Any) -> list[tuple[str, bool]]:
    """(field name, is_comptime) of a derived expand value, in declaration order."""
    return list(type(value).__cube_fields__)


def rebuild(value: Any, updates: dict[str, object]) -> Any:
    """A copy of the derived expand ``value`` with some fields replaced."""
    fields = {name: getattr(value, name) for name, _ in composite_fields(value)}
    fields.update(updates)
    return type(value)._cp_from_fields(fields)


def _is_leaf(value: object) -> bool:
    return isinstance(value, ExpandBase) or operations.is_number(value)


def can_be_mutable(value: object) -> bool:
    """Whether ``value`` can become a mutable local: a number or runtime value, or a tuple or cube type
    holding at least one (its other parts, such as buffers, stay fixed and may not be rebound)."""
    if _is_leaf(value):
        return True
    if isinstance(value, tuple):
        return any(can_be_mutable(v) for v in value)
    if is_composite(value):
        return any(can_be_mutable(getattr(value, n)) for n, comptime in composite_fields(value) if not comptime)
    return False


def _weak_elem(value: Any) -> tuple[int | None, ir.ElemType]:
    """The type a Python number takes as a mutable: numpy scalars keep theirs, others are weak."""
    if isinstance(value, np.generic) and not isinstance(value, (int, float)):
        elem = elems.elem_of_dtype(value.dtype)
        if elem is not None:
            return None, elem
    return require_state().weak_type(elems.literal_elem(value))


def into_mut(value: Any, muts: FrameVars | None) -> Any:
    """A fresh mutable copy of ``value`` (owned by ``muts``); values that cannot mutate are returned as is."""
    if isinstance(value, Unbound) or (muts is not None and muts.owns(value)):
        return value
    result = _into_mut(value, muts)
    return result


def _into_mut(value: Any, muts: FrameVars | None) -> Any:
    scope = current_scope()
    result: object  # an ExpandElement, a tuple of results, or a rebuilt composite
    if isinstance(value, ExpandBase):
        source_el = operations.as_element(value)
        weak = source_el.weak
        if source_el.literal:
            weak, elem = require_state().weak_type(source_el.elem)
            init = operations.literal(source_el.var.value, elem, source_el.type.line)
        else:
            init = source_el
        var = scope.create_local_mut(init.type, init.var)
        result = ExpandElement(var, require_state(), weak=weak)
    elif operations.is_number(value):
        weak, elem = _weak_elem(value)
        number = value.item() if hasattr(value, "item") else value
        init = operations.literal(number, elem)
        result = ExpandElement(scope.create_local_mut(init.type, init.var), require_state(), weak=weak)
    elif isinstance(value, tuple) and can_be_mutable(value):
        result = tuple(_into_mut(v, muts) for v in value)  # fixed parts come back unchanged
    elif is_composite(value) and can_be_mutable(value):
        result = rebuild(
            value, {n: _into_mut(getattr(value, n), muts) for n, comptime in composite_fields(value) if not comptime}
        )
    else:
        return value
    if muts is not None:
        muts.own(result)
    return result


def _zero_like(value: Any) -> Any:
    """A zero of the same type as ``value`` (a Python number's zero is weakly typed)."""
    if isinstance(value, ExpandBase):
        el = operations.as_element(value)
        if el.literal:
            return type(cast(Any, el.var.value))(0)
        return ExpandElement(ir.constant(0, el.type), require_state(), weak=el.weak)
    if isinstance(value, tuple):
        return tuple(_zero_like(v) for v in value)
    if is_composite(value):
        return rebuild(
            value, {n: _zero_like(getattr(value, n)) for n, comptime in composite_fields(value) if not comptime}
        )
    if operations.is_number(value):
        return type(value)(0)
    return value  # a fixed part (a buffer): kept as it is


def declare_like(value: Any, muts: FrameVars | None, scope: ScopeBuilder) -> Any:
    """A new mutable of the same type as ``value``, zero-initialised in ``scope`` (before a branch)."""
    state = require_state()
    with state.in_scope(scope):
        return into_mut(_zero_like(value), muts)


def assign_into(target: Any, value: Any, what: str = "assignment") -> None:
    """Emit the IR assignment ``target = value`` (target a mutable, or a tuple/cube type of mutables)."""
    check_bound(value)
    if isinstance(target, ExpandElement):
        if target.var.kind is not VarKind.MUT:
            source.fail(f"{what}: the target is not a mutable variable")
        promotion = require_state().promotions.get(target.var.id)
        if promotion is not None and promotion.assigned_loc is None:
            promotion.assigned_loc = require_state().location()
        current_scope().append(irops.Assign(_convert_to_mut(value, target, what)), target.var)
    elif isinstance(target, tuple):
        if not isinstance(value, tuple) or len(value) != len(target):
            source.fail(f"{what}: a tuple of {len(target)} values is assigned {_describe(value)}")
        for t, v in zip(target, value):
            assign_into(t, v, what)
    elif is_composite(target):
        if type(value) is not type(target):
            source.fail(f"{what}: a {type(target).__name__} is assigned {_describe(value)}")
        for name, comptime in composite_fields(target):
            if comptime:
                if getattr(value, name) != getattr(target, name):
                    source.fail(
                        f"{what}: comptime field '{name}' differs ({getattr(target, name)!r} vs "
                        f"{getattr(value, name)!r}); a comptime field cannot change at runtime"
                    )
            else:
                assign_into(getattr(target, name), getattr(value, name), what)
    elif value is not target:
        source.fail(
            f"{what}: {_describe(target)} cannot be rebound under a runtime condition (only numbers, "
            f"runtime values and tuples or cube types of them can); got {_describe(value)}"
        )


def _describe(value: object) -> str:
    if isinstance(value, ExpandElement):
        return f"a runtime {value.type!r}"
    return f"a {type(value).__name__}"


def _convert_to_mut(value: Any, target: ExpandElement, what: str) -> Variable:
    state = require_state()
    if target.weak is not None:
        operand = operations._operand(value)
        new_elem = None
        if isinstance(operand, ExpandElement) and not ir.is_lossless(operand.elem, target.elem):
            new_elem = ir.promote(target.elem, operand.elem)
        elif isinstance(operand, float) and not target.elem.is_float:
            new_elem = ir.F32
        elif isinstance(operand, int) and not isinstance(operand, bool) and not elems.fits(operand, target.elem):
            new_elem = ir.I64 if target.elem.kind == "int" else ir.U64
        if new_elem is not None:
            state.hint_weak(target.weak, new_elem)
            if state.needs_rerun():
                return operations.cast(value, target.elem, line=target.type.line).var
    return operations.convert(value, target.type, f"{what} to a mutable {target.type!r} variable")


def snapshot(value: Any, muts: FrameVars | None) -> Any:
    """``value`` with owned mutables replaced by immutable copies (Python's value semantics)."""
    if muts is None:
        return value
    if isinstance(value, ExpandElement):
        if muts.owns(value):
            out = current_scope().emit(irops.Assign(value.var), value.type)
            return ExpandElement(out, value.state, weak=value.weak)
        return value
    if isinstance(value, tuple) and value:
        copies = tuple(snapshot(v, muts) for v in value)
        return value if all(a is b for a, b in zip(copies, value)) else copies
    if is_composite(value) and muts.owns(value):
        return rebuild(
            value, {n: snapshot(getattr(value, n), muts) for n, comptime in composite_fields(value) if not comptime}
        )
    return value


def let(muts: FrameVars | None, value: Any) -> Any:
    """The value a plain name binding takes (``x = value`` for a name that is never mutable)."""
    check_bound(value)
    return snapshot(value, muts)


def assign(muts: FrameVars | None, old: Any, new: Any) -> Any:
    """``name = new`` for a name that may be mutable: an IR assignment into an owned mutable, else a rebinding."""
    if new is old:
        return old
    check_bound(new)
    if muts is not None and muts.owns(old):
        assign_into(old, new)
        return old
    return snapshot(new, muts)
