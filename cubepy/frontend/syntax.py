"""Every call the rewritten code makes (the rewrite binds this module to the name ``_cph``).

Control flow lives in ``flow`` and name binding in ``mutability``; this module adds the statement
helpers (subscript and attribute assignment, augmented assignment, unpacking, annotated assignment)
and gathers the whole surface in one namespace so generated code needs a single closure variable.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

from cubepy.frontend import mutability, operations, source
from cubepy.frontend.elem import LineType, ScalarType
from cubepy.frontend.expressions import and_, compare_chain, ifexp, not_, or_  # noqa: F401  (for generated code)
from cubepy.frontend.flow import brk, cont, for_, for_range, if_, ret, while_  # noqa: F401
from cubepy.frontend.mutability import FrameVars, assign, check_bound, let  # noqa: F401
from cubepy.frontend.printing import kernel_print  # noqa: F401
from cubepy.frontend.state import require_state
from cubepy.frontend.values import ExpandBase, Unbound


def frame() -> FrameVars:
    """The mutables registry of one cube-function call."""
    return FrameVars()


def unbound(name: str) -> Unbound:
    """The initial value of a local that is assigned later in the function."""
    return Unbound(name)


def setitem(muts: FrameVars | None, obj: Any, index: Any, value: Any) -> Any:
    """``obj[index] = value``; returns what the target name holds afterwards.

    A line held by a name is copied into a mutable local on its first lane write (``muts`` owns it),
    so writing a lane never changes another name's line.
    """
    check_bound(obj)
    check_bound(value)
    if isinstance(obj, ExpandBase):
        line = operations.as_element(obj)
        if not (line.is_mutable and (muts is None or muts.owns(line))):
            if muts is None:
                source.fail("a lane can only be written on a line held by a local variable (`line[i] = v`)")
            line = mutability.into_mut(line, muts)
        operations.insert_lane(line, index, value)
        return line
    obj[index] = value
    return obj


def aug_setitem(muts: FrameVars | None, obj: Any, index: Any, op: str, value: Any) -> Any:
    """``obj[index] op= value`` (the index is evaluated once)."""
    check_bound(obj)
    current = obj[index]
    return setitem(muts, obj, index, iop(op, current, value))


def setattr_(muts: FrameVars | None, obj: Any, name: str, value: Any) -> None:
    """``obj.name = value``: an IR assignment when the field is an owned mutable, else a rebinding."""
    check_bound(obj)
    check_bound(value)
    current = getattr(obj, name, None)
    if current is not None and muts is not None and muts.owns(current):
        mutability.assign_into(current, value, f"assignment to field '{name}'")
        return
    if isinstance(current, ExpandBase) and operations.as_element(current).is_mutable and muts is None:
        mutability.assign_into(current, value, f"assignment to field '{name}'")
        return
    if _under_runtime_control():
        source.fail(
            f"field '{name}' of {type(obj).__name__} is assigned under a runtime condition, but the "
            "object is not a mutable variable; assign the object to a local before the branch (its "
            "numeric fields then become mutable)"
        )
    value = mutability.snapshot(value, muts)
    if mutability.is_composite(obj):
        object.__setattr__(obj, name, value)
    else:
        setattr(obj, name, value)


def _under_runtime_control() -> bool:
    """Whether the current cube function is inside a runtime branch or loop."""
    for entry in reversed(require_state().control):
        if entry.kind in ("arm", "loop"):
            return True
        if entry.kind in ("function", "kernel"):
            return False
    return False


def aug_setattr(muts: FrameVars | None, obj: Any, name: str, op: str, value: Any) -> None:
    """``obj.name op= value``."""
    check_bound(obj)
    setattr_(muts, obj, name, iop(op, getattr(obj, name), value))


def iop(op: str, left: Any, right: Any) -> Any:
    """An augmented operator (``"iadd"``, ...) with Python's in-place fallback to the plain one."""
    check_bound(left)
    return getattr(operator, op)(left, right)


def unpack(muts: FrameVars | None, value: Any, count: int, star: int | None = None) -> list[Any]:
    """Values for ``a, b = value`` (``star`` is the index of a starred target).

    Owned mutables among the values are copied first: Python evaluates the right side before any
    target is bound, so ``a, b = b, a`` must not read ``a`` after assigning it.
    """
    check_bound(value)
    if isinstance(value, ExpandBase):
        source.fail("cannot unpack a runtime value; index a line with line[i] or return a tuple")
    items = [mutability.snapshot(item, muts) for item in value]
    if star is None:
        if len(items) != count:
            source.fail(f"cannot unpack {len(items)} values into {count} names")
        return items
    after = count - star - 1
    if len(items) < count - 1:
        source.fail(f"cannot unpack {len(items)} values into at least {count - 1} names")
    return items[:star] + [items[star : len(items) - after]] + items[len(items) - after :]


def annotate(value: Any, annotation: object) -> Any:
    """``name: T = value``: element and line types convert the value (losslessly); others pass it through."""
    check_bound(value)
    if isinstance(annotation, ScalarType):
        if isinstance(value, ExpandBase) or operations.is_number(value):
            from cubepy.ir import Type

            line = operations.as_element(value).type.line if isinstance(value, ExpandBase) else 1
            var = operations.convert(value, Type(annotation.ir, line), f"value annotated {annotation!r}")
            return operations.element(var)
    if isinstance(annotation, LineType) and annotation.size is not None:
        return operations.broadcast(operations.cast(value, annotation.elem.ir), annotation.size)
    return value


def nested(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a function defined inside a cube function: its body is expanded like a cube function's."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        state = require_state(f"the nested function {fn.__name__!r}")
        with state.control_entry("function", fn.__name__):
            return fn(*args, **kwargs)

    return call
