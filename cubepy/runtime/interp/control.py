"""Structured control flow in the interp: handlers of ``if``, ``switch``, loops, ``break``/``continue``/``return``.

Divergence is a ``Mask`` per region.  The handlers do not recurse: they push the regions to run onto the
running group's frame stack (``ctx.enter``, ``ctx.enter_loop``) and the executor runs them, so a group
can stop anywhere and go on later (see ``groups``).  ``if`` runs its body under ``mask & cond``;
``if``/``else`` pushes the else-body below the then-body, so the then-lanes run first as before; loops
iterate while any lane is active, and ``break``/``continue``/``return`` clear lanes from the masks of the
enclosing regions through per-loop *broken*/*continued* masks and a per-chunk *returned* mask.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, Scope, Variable, VarKind, child_scopes
from cubepy.ir.ops import branch
from cubepy.runtime.interp.groups import Wait
from cubepy.runtime.interp.registry import blocking, implements
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk


OP_FAMILIES = ("branch",)  # the IR op families handled here


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

    def __init__(self, op: branch.RangeLoop, index: Any, end: Any, step: Any) -> None:  # lane arrays or uniforms
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


# -- progress: units that spin on memory -----------------------------------------------------------------
#
# A ``loop`` whose body reads global or shared memory and holds no barrier may be a spin lock or a flag
# wait (``Program.spin_loops``).  At each of its back-edges the executor lets the other units of the chunk
# run first when there are any (``Chunk.spin_yield``): the spinning units wait with a ``SpinWait``, which
# lets them go on once another group ran.  When only spinners are left and a whole round of their loop
# iterations changed nothing (memory, locals), no one can ever change what they read: a livelock report.


class SpinWait(Wait):
    """Units yielded at the back-edge of a loop that reads memory: they go on once another group has run."""

    def __init__(self, inst: Instruction, activity: int) -> None:
        self.inst = inst  # the ``loop``
        self.activity = activity  # the chunk's activity count when they yielded

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """Every lane once some other group ran (made progress) since the yield, else none."""
        return bits if ctx.activity != self.activity else np.zeros_like(bits)

    def on_idle(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """Nothing else can run: spin on (the executor checks that the spinning changes something)."""
        return bits

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """What the units spin on, for a report."""
        return spin_description(ctx, self.inst, int(np.count_nonzero(bits)))

    def deadlock_kind(self, ctx: Chunk, bits: np.ndarray) -> SanitizerKind:
        """A livelock, not a barrier deadlock."""
        return SanitizerKind.LIVELOCK


def spin_description(ctx: Chunk, loop: Instruction, units: int) -> str:
    """``N units spin in this loop (load of global buffer 0 (flag) at line L)``: the loop's memory reads."""
    op = loop.operation
    assert isinstance(op, branch.Loop)
    reads: dict[str, list[int]] = {}
    for inst in _nested(op.body):
        for field in inst.operation.RECORD.reads:
            var = getattr(inst.operation, field, None)
            if isinstance(var, Variable) and var.kind in (VarKind.GLOBAL, VarKind.SHARED) and inst.loc is not None:
                label = ctx.memory(var).label
                kind = "load" if inst.operation.RECORD.name == "index" else inst.operation.RECORD.name
                lines = reads.setdefault(f"{kind} of {label}", [])
                if inst.loc.line not in lines:
                    lines.append(inst.loc.line)
    what = "; ".join(
        f"{name} at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}" for name, lines in reads.items()
    )
    return f"{units} units spin in this loop ({what or 'memory reads'})"


def _nested(scope: Scope) -> Iterator[Instruction]:
    for inst in scope.instructions:
        yield inst
        for child in child_scopes(inst.operation):
            yield from _nested(child)


def state_fingerprint(ctx: Chunk) -> bytes:
    """A digest of everything a spinning unit's next iteration depends on: memories, locals, returned lanes."""
    digest = hashlib.blake2b(digest_size=20)
    arrays: list[np.ndarray] = [ref.items for ref in ctx.launch.globals.values()]
    arrays += [ref.items for (kind, _), ref in ctx.memory_refs().items() if kind is not VarKind.GLOBAL]
    arrays += [np.asarray(ctx.values.locals[key]) for key in sorted(ctx.values.locals)]
    arrays.append(ctx.returned)
    for array in arrays:
        digest.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
    return digest.digest()


def check_progress(ctx: Chunk, key: object, count: int, loop_inst: Instruction, lanes: np.ndarray) -> None:
    """Livelock check at round ``count`` of spinning: keep the state digest at 2^k, compare it at 2^k + 1."""
    if ctx.in_flight.copies or count < 1:
        return
    if count > 1 and (count - 1) & (count - 2) == 0 and ctx.spin_marks.get(key) == state_fingerprint(ctx):
        spinning = lanes & ~ctx.returned
        ctx.fail(
            loop_inst,
            f"{spin_description(ctx, loop_inst, int(np.count_nonzero(spinning)))}, and a whole round of their "
            "iterations changed no memory and no local: nothing left to run can change what they read",
            int(np.argmax(spinning)),
            kind=SanitizerKind.LIVELOCK,
        )
    if count & (count - 1) == 0:
        ctx.spin_marks[key] = state_fingerprint(ctx)


def idle_spin_check(ctx: Chunk) -> None:
    """Nothing but spinners can run: a livelock once a round of their spinning changes nothing."""
    spinners = [group for group in ctx.groups if isinstance(group.wait, SpinWait)]
    if not spinners:
        return
    activity, rounds = ctx.idle_rounds
    rounds = rounds + 1 if activity == ctx.activity else 1
    ctx.idle_rounds = (ctx.activity, rounds)
    lanes = np.logical_or.reduce([group.waiting for group in spinners if group.waiting is not None])
    check_progress(ctx, "idle", rounds, spinners[0].wait.inst, lanes)  # type: ignore[union-attr]
