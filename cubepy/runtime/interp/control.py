"""Structured control flow in the interp: handlers of ``if``, ``switch``, loops, ``break``/``continue``/``return``.

Divergence is a ``Mask`` per region.  The handlers do not recurse: they push the regions to run onto the
running group's frame stack (``ctx.enter``, ``ctx.enter_loop``) and the executor runs them, so a group
can stop anywhere and go on later (see ``groups``).  ``if`` runs its body under ``mask & cond``;
``if``/``else`` pushes the else-body below the then-body, so the then-lanes run first as before; loops
iterate while any lane is active, and ``break``/``continue``/``return`` clear lanes from the masks of the
enclosing regions through per-loop *broken*/*continued* masks and a per-chunk *returned* mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction
from cubepy.ir.ops import branch
from cubepy.runtime.interp.registry import blocking, implements
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk


@implements(branch.If)
@blocking
def run_if(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Run the body for the lanes where the condition holds."""
    op = inst.operation
    assert isinstance(op, branch.If)
    inner = mask.where(ctx.read(op.cond))
    if inner.any:
        ctx.enter(op.body, inner)


@implements(branch.IfElse)
@blocking
def run_if_else(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Run the then-body where the condition holds, then the else-body on the other lanes."""
    op = inst.operation
    assert isinstance(op, branch.IfElse)
    cond = ctx.read(op.cond)
    else_mask = mask.where(np.logical_not(cond))
    if else_mask.any:
        ctx.enter(op.else_body, else_mask)  # below the then-body: it runs second
    then_mask = mask.where(cond)
    if then_mask.any:
        ctx.enter(op.then_body, then_mask)


@implements(branch.Switch)
@blocking
def run_switch(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Run each case's body for the lanes whose value matches it, the default for the rest (in that order)."""
    op = inst.operation
    assert isinstance(op, branch.Switch)
    value = ctx.read(op.value)
    rest = mask
    regions = []
    for case_value, body in op.cases:
        hit = value == case_value
        case_mask = mask.where(hit)
        if case_mask.any:
            regions.append((body, case_mask))
        rest = rest.where(np.logical_not(hit))
    if rest.any:
        regions.append((op.default, rest))
    for body, region_mask in reversed(regions):  # the first case on top of the stack runs first
        ctx.enter(body, region_mask)


@implements(branch.Loop)
@blocking
def run_loop(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Iterate until every lane broke out or returned."""
    op = inst.operation
    assert isinstance(op, branch.Loop)
    ctx.enter_loop(op.body, mask, None)


class RangeIndex:
    """The per-lane state of ``for index in range(start, end, step)``: index, bounds, step."""

    __slots__ = ("op", "index", "end", "step", "signed", "moving")

    def __init__(self, op: branch.RangeLoop, index, end, step) -> None:
        self.op = op
        self.index = index
        self.end = end
        self.step = step
        self.signed = op.start.elem.kind == "int"
        # A zero step runs zero iterations (Python would raise; a kernel cannot): the lowering agrees.
        self.moving = step != 0

    def condition(self, ctx: Chunk, active: Mask, iteration: int) -> Mask:
        """The lanes of ``active`` whose index is still in range (stepping it after the first iteration)."""
        index, end, step = self.index, self.end, self.step
        if iteration:
            index = self.index = index + step  # wraps in the index type, like the GPU
        if self.op.inclusive:
            cond = index <= end
            if self.signed:
                cond = np.where(step > 0, cond, index >= end)
        else:
            cond = index < end
            if self.signed:
                cond = np.where(step > 0, cond, index > end)
        current = active.where(cond & self.moving)
        if current.any:
            ctx.set_index(self.op.index, index, current)
        return current

    def copy(self) -> RangeIndex:
        """A copy whose index advances on its own."""
        twin = RangeIndex.__new__(RangeIndex)
        for name in RangeIndex.__slots__:
            setattr(twin, name, getattr(self, name))
        return twin

    def absorb(self, other: RangeIndex, bits: np.ndarray) -> None:
        """Take ``other``'s values on the lanes of ``bits`` (the lanes of the group merged in)."""
        for name in ("index", "end", "step", "moving"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is theirs or (np.ndim(mine) == 0 and np.ndim(theirs) == 0 and mine == theirs):
                continue
            setattr(self, name, np.where(bits, theirs, mine))


@implements(branch.RangeLoop)
@blocking
def run_range_loop(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """for index in start..end step: each lane runs its own trip count."""
    op = inst.operation
    assert isinstance(op, branch.RangeLoop)
    start, end, step = ctx.read(op.start), ctx.read(op.end), ctx.read(op.step)
    index = RangeIndex(op, start, end, step)
    if ctx.launch.sanitize:
        stuck = mask.bits & ~np.broadcast_to(index.moving, mask.bits.shape)
        if stuck.any():
            ctx.fail(
                inst,
                "range() step is zero at run time (the loop runs zero iterations)",
                int(np.flatnonzero(stuck)[0]),
                SanitizerKind.ZERO_RANGE_STEP,
            )
    ctx.enter_loop(op.body, mask, index)


@implements(branch.Break)
def run_break(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The lanes here leave the innermost loop."""
    loop = ctx.loops[-1]
    loop.broken = loop.broken | mask.bits


@implements(branch.Continue)
def run_continue(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The lanes here skip the rest of the innermost loop's iteration."""
    loop = ctx.loops[-1]
    loop.continued = loop.continued | mask.bits


@implements(branch.Return)
def run_return(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The lanes here end their execution of the kernel."""
    ctx.returned = ctx.returned | mask.bits
