"""Groups: lanes of a chunk that run together, each with its own explicit continuation (a frame stack).

A *frame* is one structured region being run: the prepared steps of a scope, the index of the next
step and the mask of lanes in it; a loop adds a frame that iterates its body (``LoopControl``).  A
*group* is a lane mask plus its frame stack.  Per-lane values live in the chunk's ``ValueStore``,
written under masks, so groups with disjoint lanes share it.

``split(group, lanes)`` gives the lanes a copy of the continuation (every frame's mask restricted to
them) and takes them out of the original; ``merge`` joins two groups at the same program point (the
same frames at the same step), which is how lanes that diverged run together again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.ir import Instruction
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.program import Step


class LoopState:
    """Lanes that left the innermost running loop: for good (broken) or for this iteration (continued)."""

    __slots__ = ("broken", "continued")

    def __init__(self, no_lanes: np.ndarray) -> None:
        # Masks are never changed in place, so both start as the chunk's shared all-false array.
        self.broken = no_lanes
        self.continued = no_lanes


class LoopControl:
    """The state of one running loop: lanes still iterating, the lanes of this iteration, a range index."""

    __slots__ = ("body", "state", "active", "current", "iteration", "may_leave", "range")

    def __init__(self, body: tuple[Step, ...], state: LoopState, active: Mask, may_leave: bool, range_: Any) -> None:
        self.body = body
        self.state = state
        self.active = active  # lanes that enter the next condition test
        self.current: Mask | None = None  # lanes of the iteration running now (None before the first)
        self.iteration = 0
        self.may_leave = may_leave
        self.range = range_  # a RangeIndex for ``for i in range(..)``, None for ``loop``

    def advance(self, ctx: Chunk) -> Mask | None:
        """The lanes of the next iteration, or None when the loop is over."""
        current = self.current
        if current is not None:  # the body of the previous iteration just finished
            if self.may_leave:
                active = current.without(self.state.broken | ctx.returned)
                if not active.any:
                    return None
            else:
                active = current
            self.active = active
            self.iteration += 1
        active = self.active
        if not active.any:
            return None
        if self.range is not None:
            current = self.range.condition(ctx, active, self.iteration)
        else:
            current = active
        if not current.any:
            return None
        self.current = current
        self.state.continued = ctx.no_lanes
        return current

    def restricted(self, bits: np.ndarray) -> LoopControl:
        """A copy for the lanes of ``bits`` only."""
        state = LoopState(self.state.broken)
        state.broken = self.state.broken & bits
        state.continued = self.state.continued & bits
        copy = LoopControl(self.body, state, Mask(self.active.bits & bits), self.may_leave, self.range)
        copy.current = None if self.current is None else Mask(self.current.bits & bits)
        copy.iteration = self.iteration
        if self.range is not None:
            copy.range = self.range.copy()
        return copy

    def absorb(self, other: LoopControl) -> None:
        """Take the lanes of ``other`` (the same loop at the same point) into this one."""
        if self.range is not None:
            lanes = other.current if other.current is not None else other.active
            self.range.absorb(other.range, lanes.bits)
        self.state.broken = self.state.broken | other.state.broken
        self.state.continued = self.state.continued | other.state.continued
        self.active = Mask(self.active.bits | other.active.bits)
        if self.current is not None and other.current is not None:
            self.current = Mask(self.current.bits | other.current.bits)
        self.iteration = max(self.iteration, other.iteration)


class Frame:
    """One region being run: its steps, the next step's index and the lanes in it (or a loop's control)."""

    __slots__ = ("steps", "pc", "mask", "loop")

    def __init__(self, steps: tuple[Step, ...], mask: Mask, loop: LoopControl | None = None) -> None:
        self.steps = steps
        self.pc = 0
        self.mask = mask
        self.loop = loop

    def key(self) -> tuple[int, int, bool]:
        """What must be equal for two frames to merge: the same steps at the same position."""
        if self.loop is not None:
            return (id(self.loop.body), -1, self.loop.current is None)
        return (id(self.steps), self.pc, False)


class Wait:
    """Why a group is blocked; subclasses say when its lanes may go on (``poll``) and what they wait for."""

    inst: Instruction

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The lanes of ``bits`` that may go on now (may update shared state, e.g. release a barrier)."""
        raise NotImplementedError

    def resume(self, ctx: Chunk, mask: Mask) -> None:
        """Run for the lanes that go on, before they continue (e.g. write a barrier's result)."""

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """What the lanes of ``bits`` wait for, for a deadlock report."""
        raise NotImplementedError

    def on_idle(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The lanes of ``bits`` that go on because every group waits and no copy is in flight (none: deadlock)."""
        return np.zeros_like(bits)

    def absorb(self, other: Wait) -> bool:
        """Take over the lanes of ``other`` (a wait at the same instruction); False when it cannot."""
        return False

    def deadlock_kind(self, ctx: Chunk, bits: np.ndarray) -> SanitizerKind:
        """The kind of the report when nothing can end this wait (a wrong parity is its own kind)."""
        return SanitizerKind.BARRIER_DEADLOCK


class Group:
    """Lanes of a chunk that run together, with their continuation and, when blocked, their wait."""

    __slots__ = ("lanes", "frames", "loops", "home", "wait", "waiting", "order", "parked")

    def __init__(self, lanes: np.ndarray, frames: list[Frame], home: int, order: int) -> None:
        self.lanes = lanes  # the lanes this group owns (returned ones included until it finishes)
        self.frames = frames
        self.loops = [frame.loop.state for frame in frames if frame.loop is not None]
        self.home = home  # groups merge only with groups of the same home (the chunk, or one plane)
        self.wait: Wait | None = None
        self.waiting: np.ndarray | None = None
        self.order = order  # creation order: the lockstep schedule runs the oldest runnable group
        # Stopped at the end of a region while other groups exist, so that they can catch up and merge.
        self.parked = False

    def position(self) -> tuple[tuple[int, int, bool], ...]:
        """The program point: equal for groups whose frame stacks run the same regions at the same step."""
        return tuple(frame.key() for frame in self.frames)

    def split(self, bits: np.ndarray, order: int) -> Group:
        """Move the lanes of ``bits`` to a new group with a copy of this group's continuation."""
        keep = ~bits
        frames: list[Frame] = []
        for position, frame in enumerate(self.frames):
            mine = frame.mask.bits & bits
            top = position == len(self.frames) - 1
            if frame.loop is None and not top and not mine.any():
                continue  # a pending sibling region (an else, a case) none of these lanes runs
            copy = Frame(frame.steps, Mask(mine), None if frame.loop is None else frame.loop.restricted(bits))
            copy.pc = frame.pc
            frames.append(copy)
            frame.mask = Mask(frame.mask.bits & keep)
            if frame.loop is not None:
                _restrict_loop(frame.loop, keep)
        self.lanes = self.lanes & keep
        return Group(bits.copy(), frames, self.home, order)

    def merge(self, other: Group) -> None:
        """Take in ``other``, which is at the same position (see ``position``)."""
        for mine, theirs in zip(self.frames, other.frames):
            mine.mask = Mask(mine.mask.bits | theirs.mask.bits)
            if mine.loop is not None and theirs.loop is not None:
                mine.loop.absorb(theirs.loop)
        self.lanes = self.lanes | other.lanes


def _restrict_loop(control: LoopControl, bits: np.ndarray) -> None:
    control.state.broken = control.state.broken & bits
    control.state.continued = control.state.continued & bits
    control.active = Mask(control.active.bits & bits)
    if control.current is not None:
        control.current = Mask(control.current.bits & bits)
