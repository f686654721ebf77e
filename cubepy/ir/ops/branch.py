"""Structured control flow: branch operations own the scopes they run."""

from __future__ import annotations

import attrs

from cubepy.ir.ops.base import Operation
from cubepy.ir.scope import Scope
from cubepy.ir.variable import Variable


@attrs.frozen
class If(Operation):
    """Run ``body`` when ``cond`` (a scalar bool) holds."""

    NAME = "if"
    cond: Variable
    body: Scope


@attrs.frozen
class IfElse(Operation):
    """Run ``then_body`` when ``cond`` holds, ``else_body`` otherwise."""

    NAME = "if_else"
    cond: Variable
    then_body: Scope
    else_body: Scope


@attrs.frozen
class Switch(Operation):
    """Run the body of the case equal to ``value`` (an integer), or ``default``; no fall-through."""

    NAME = "switch"
    value: Variable
    cases: tuple[tuple[int, Scope], ...]
    default: Scope

    def attributes(self) -> dict[str, object]:
        """Case values are printed with their bodies."""
        return {}


@attrs.frozen
class RangeLoop(Operation):
    """for index in range(start, end, step) (``inclusive`` includes end); ``index`` is defined per iteration.

    A positive step runs while index < end (<= when inclusive), a negative one while index > end.
    """

    NAME = "range_loop"
    index: Variable
    start: Variable
    end: Variable
    step: Variable
    inclusive: bool
    body: Scope

    def operands(self):
        """Start, end and step; the index is defined by the loop, not read."""
        yield from (self.start, self.end, self.step)


@attrs.frozen
class Loop(Operation):
    """Run ``body`` until a Break (or Return)."""

    NAME = "loop"
    body: Scope


@attrs.frozen
class Break(Operation):
    """Leave the innermost loop."""

    NAME = "break"


@attrs.frozen
class Continue(Operation):
    """Go to the next iteration of the innermost loop."""

    NAME = "continue"


@attrs.frozen
class Return(Operation):
    """End the unit's execution of the kernel."""

    NAME = "return"


BRANCH_OPS = (If, IfElse, Switch, RangeLoop, Loop, Break, Continue, Return)
