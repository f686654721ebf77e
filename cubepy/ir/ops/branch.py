"""Structured control flow: branch operations own the scopes they run."""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.record import OpRecord, declare
from cubepy.ir.scope import Scope
from cubepy.ir.variable import Variable


@declare(OpRecord("if", "branch"))
@attrs.frozen(repr=False)
class If(Operation):
    """Run ``body`` when ``cond`` (a scalar bool) holds."""

    cond: Variable
    body: Scope


@declare(OpRecord("if_else", "branch"))
@attrs.frozen(repr=False)
class IfElse(Operation):
    """Run ``then_body`` when ``cond`` holds, ``else_body`` otherwise."""

    cond: Variable
    then_body: Scope
    else_body: Scope


@declare(OpRecord("switch", "branch"))
@attrs.frozen(repr=False)
class Switch(Operation):
    """Run the body of the case equal to ``value`` (an integer), or ``default``; no fall-through."""

    value: Variable
    cases: tuple[tuple[int, Scope], ...]
    default: Scope

    def attributes(self) -> dict[str, object]:
        """Case values are printed with their bodies."""
        return {}


@declare(OpRecord("range_loop", "branch"))
@attrs.frozen(repr=False)
class RangeLoop(Operation):
    """for index in range(start, end, step) (``inclusive`` includes end); ``index`` is defined per iteration.

    A positive step runs while index < end (<= when inclusive), a negative one while index > end.
    ``unroll`` is a hint for the compiled back ends: 1 keeps the loop rolled (PTX ``.pragma "nounroll"``,
    as CUDA's ``#pragma unroll 1``), N > 1 unrolls it N times; None leaves the choice to LLVM and ptxas.
    """

    index: Variable
    start: Variable
    end: Variable
    step: Variable
    inclusive: bool
    body: Scope
    unroll: int | None = None

    def operands(self) -> Iterator[Variable]:
        """Start, end and step; the index is defined by the loop, not read."""
        yield from (self.start, self.end, self.step)


@declare(OpRecord("loop", "branch"))
@attrs.frozen(repr=False)
class Loop(Operation):
    """Run ``body`` until a Break (or Return)."""

    body: Scope


@declare(OpRecord("break", "branch"))
@attrs.frozen(repr=False)
class Break(Operation):
    """Leave the innermost loop."""


@declare(OpRecord("continue", "branch"))
@attrs.frozen(repr=False)
class Continue(Operation):
    """Go to the next iteration of the innermost loop."""


@declare(OpRecord("return", "branch"))
@attrs.frozen(repr=False)
class Return(Operation):
    """End the unit's execution of the kernel."""


BRANCH_OPS = (If, IfElse, Switch, RangeLoop, Loop, Break, Continue, Return)
