"""Asynchronous global-to-shared copies (PTX ``cp.async``) in the interp: handlers of ``cubepy.ir.ops.async_copy``.

Model:

* A copy is checked and its source bytes are read at issue (alignment, bounds, ``src_bytes <= size``; a
  failure is a ``SanitizerError`` of kind ``ASYNC_COPY_MISUSE`` or ``OUT_OF_BOUNDS``); the bytes past
  ``src_bytes`` are zeros.  The copy joins its unit's open group; ``async_commit_group`` closes the group
  and ``async_wait_group(n)`` lands every copy of the unit's committed groups but the newest ``n``.
* When the bytes reach shared memory before that wait is up to the schedule: ``lockstep`` and
  ``adversarial`` land them at the wait (as late as allowed); ``random`` keeps each copy in flight
  (``ctx.in_flight``) and may land it at any later step.  Copies never waited for never land.
* Under ``sanitize=True`` (``AsyncCopyRaces``): a copy counts as its unit's write of the destination at
  issue (so it races with unordered earlier accesses of other units, as a store would) and again at the
  wait that covers it (so another unit must ``sync_cube`` after that wait before reading).  Between issue
  and wait the bytes are *pending*: any read or write of them, by any unit, is ``ASYNC_COPY_UNCOVERED``,
  naming the copy's line and the access's line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, ops
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.sanitizer import SELF_REPORTING
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.ir import Variable
    from cubepy.runtime.interp.executor import Chunk

OP_FAMILIES = ("async_copy",)  # the IR op families handled here
NOBODY = -1

SELF_REPORTING.add(ops.AsyncCopy)  # its handler tells the sanitizer exactly which bytes it writes


class Copy:
    """One issued copy: where it lands, its bytes, and whether it has landed."""

    __slots__ = ("lane", "cube", "start", "data", "inst", "landed", "arena")

    def __init__(self, lane: int, cube: int, start: int, data: np.ndarray, inst: Instruction, arena: np.ndarray):
        self.lane = lane
        self.cube = cube
        self.start = start  # byte offset in the cube's shared arena
        self.data = data  # uint8, size bytes (zero-filled past src_bytes)
        self.inst = inst
        self.landed = False
        self.arena = arena

    def land(self) -> None:
        """Write the bytes into shared memory (once)."""
        if not self.landed:
            self.landed = True
            self.arena[self.cube, self.start : self.start + self.data.size] = self.data


class CopyGroups:
    """Per chunk lane: the open group and the committed groups (oldest first) of its copies."""

    def __init__(self) -> None:
        self.open: dict[int, list[Copy]] = {}
        self.committed: dict[int, list[list[Copy]]] = {}


def _groups(ctx: Chunk) -> CopyGroups:
    found = ctx.state.copy_groups
    if found is None:
        found = ctx.state.copy_groups = CopyGroups()
    return found


def _races(ctx: Chunk) -> AsyncCopyRaces | None:
    if ctx.sanitizer is None:
        return None
    found = ctx.state.async_copy_races  # the shared sanitizer's access hook reads it too
    if found is None:
        found = ctx.state.async_copy_races = AsyncCopyRaces(ctx)
    return found


def _where(inst: Instruction) -> str:
    return f"{inst.loc.file}:{inst.loc.line}" if inst.loc is not None else "an unknown line"


class AsyncCopyRaces:
    """Per shared byte: the copy that fills it and that its unit has not waited for yet (or nobody)."""

    def __init__(self, ctx: Chunk) -> None:
        shape = (ctx.topology.cubes, ctx.program.shared_bytes)
        self.lane = np.full(shape, NOBODY, dtype=np.int64)
        self.which = np.zeros(shape, dtype=np.int64)
        self.copies: list[Instruction] = []

    def issued(self, copy: Copy) -> None:
        """``copy`` now fills its bytes until its unit waits for it."""
        span = slice(copy.start, copy.start + copy.data.size)
        self.copies.append(copy.inst)
        self.lane[copy.cube, span] = copy.lane
        self.which[copy.cube, span] = len(self.copies) - 1

    def waited(self, ctx: Chunk, copy: Copy, units: int) -> None:
        """The unit of ``copy`` waited for it: its bytes are its unit's write from now on."""
        span = slice(copy.start, copy.start + copy.data.size)
        mine = self.lane[copy.cube, span] == copy.lane
        self.lane[copy.cube, span][mine] = NOBODY
        byte = np.arange(copy.start, copy.start + copy.data.size)[mine]
        if byte.size and ctx.sanitizer is not None:
            rows = np.full(byte.shape, copy.cube, dtype=np.int64)
            who = np.full(byte.shape, copy.lane % units, dtype=np.int32)
            ctx.sanitizer.record_async_write(rows, byte, who, copy.inst)

    def accessed(
        self, ctx: Chunk, inst: Instruction, kind: str, lanes: np.ndarray, rows: np.ndarray, byte: np.ndarray
    ) -> None:
        """A ``kind`` access of bytes ``byte`` (n, item bytes) of cube rows ``rows`` by ``lanes``."""
        pending = self.lane[rows, byte]
        if not (pending != NOBODY).any():
            return
        k, col = (int(v) for v in np.argwhere(pending != NOBODY)[0])
        cube, at = int(rows[k, col]), int(byte[k, col])
        copier = int(pending[k, col])
        access = "read" if kind == "read" else "write"
        whose = "its" if copier == int(lanes[k]) else f"{ctx.describe_lane(copier)}'s"
        ctx.fail(
            inst,
            f"{SanitizerKind.ASYNC_COPY_UNCOVERED.value}: {access} of shared byte {at}, which the cp.async copy "
            f"at {_where(self.copies[int(self.which[cube, at])])} by {ctx.describe_lane(copier)} fills, before "
            f"{whose} async_wait_group covering that copy; this access at {_where(inst)}",
            int(lanes[k]),
            kind=SanitizerKind.ASYNC_COPY_UNCOVERED,
        )


def _per_lane(ctx: Chunk, var: Variable, lanes: np.ndarray) -> np.ndarray:
    value = np.asarray(ctx.read(var))
    if value.ndim == 0:
        return np.full(lanes.size, int(value), dtype=np.int64)
    return cast(np.ndarray, value[lanes].astype(np.int64))


def _misuse(ctx: Chunk, inst: Instruction, lane: int, message: str) -> None:
    ctx.fail(inst, f"{SanitizerKind.ASYNC_COPY_MISUSE.value}: {message}", lane, kind=SanitizerKind.ASYNC_COPY_MISUSE)


@implements(ops.AsyncCopy)
def async_copy(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each active unit checks its copy, reads the source bytes now and joins the copy to its open group."""
    op = cast(ops.AsyncCopy, inst.operation)
    lanes = np.flatnonzero(mask.bits)
    if lanes.size == 0:
        return
    size, elem = op.size, op.src.elem.size
    src_ref, dst_ref = ctx.memory(op.src), ctx.memory(op.dst)
    src_bytes_all = np.asarray(src_ref.items).reshape(-1).view(np.uint8)
    src_limit = src_bytes_all.size
    dst_base = ctx.shared_offset(op.dst)
    dst_limit = (op.dst.length or 0) * op.dst.type.size
    src_at = _per_lane(ctx, op.src_offset, lanes) * elem
    dst_at = _per_lane(ctx, op.dst_offset, lanes) * elem
    counts = _per_lane(ctx, op.src_bytes, lanes)
    arena = ctx.shared_arena()
    groups = _groups(ctx)
    races = _races(ctx)
    keep_in_flight = ctx.schedule.name == "random"  # the others land copies at the covering wait
    units = ctx.topology.units
    for k, lane in enumerate(lanes.tolist()):
        src, dst, count = int(src_at[k]), int(dst_at[k]), int(counts[k])
        if not 0 <= count <= size:
            _misuse(ctx, inst, lane, f"{count} source bytes for a {size}-byte copy")
        if src % size or (dst_base + dst) % size:
            _misuse(
                ctx,
                inst,
                lane,
                f"a {size}-byte copy needs {size}-byte aligned addresses; source byte offset {src} in "
                f"{src_ref.label}, destination byte offset {dst} in {dst_ref.label}",
            )
        if dst < 0 or dst + size > dst_limit:
            ctx.fail(
                inst,
                f"out-of-bounds cp.async write of {dst_ref.label} at bytes [{dst}, {dst + size}) "
                f"(it holds {dst_limit} bytes)",
                lane,
                kind=SanitizerKind.OUT_OF_BOUNDS,
            )
        if count and (src < 0 or src + count > src_limit):
            ctx.fail(
                inst,
                f"out-of-bounds cp.async read of {src_ref.label} at bytes [{src}, {src + count}) "
                f"(it holds {src_limit} bytes)",
                lane,
                kind=SanitizerKind.OUT_OF_BOUNDS,
            )
        data = np.zeros(size, dtype=np.uint8)
        data[:count] = src_bytes_all[src : src + count]
        cube = lane // units
        copy = Copy(lane, cube, dst_base + dst, data, inst, arena)
        if races is not None and ctx.sanitizer is not None:
            item = dst_ref.items.dtype.itemsize * dst_ref.line
            idx = np.arange(dst // item, -(-(dst + size) // item), dtype=np.int64)
            ctx.sanitizer.mark_access(ctx, inst, dst_ref, np.full(idx.size, lane), idx, "write")
            races.issued(copy)
        groups.open.setdefault(lane, []).append(copy)
        if keep_in_flight:
            ctx.in_flight.add(lane, False, copy.land)


@implements(ops.AsyncCommitGroup)
def async_commit_group(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each active unit's open group becomes its newest committed group (empty groups count too)."""
    groups = _groups(ctx)
    for lane in np.flatnonzero(mask.bits).tolist():
        groups.committed.setdefault(lane, []).append(groups.open.pop(lane, []))


@implements(ops.AsyncWaitGroup)
def async_wait_group(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Land every copy of each active unit's committed groups but the newest ``pending``."""
    pending = cast(ops.AsyncWaitGroup, inst.operation).pending
    groups = _groups(ctx)
    races = _races(ctx)
    units = ctx.topology.units
    landed: set[int] = set()
    for lane in np.flatnonzero(mask.bits).tolist():
        committed = groups.committed.get(lane)
        while committed and len(committed) > pending:
            for copy in committed.pop(0):
                if not copy.landed:
                    landed.add(id(copy))
                copy.land()
                if races is not None:
                    races.waited(ctx, copy, units)
    if landed and ctx.in_flight.copies:
        ctx.in_flight.copies[:] = [c for c in ctx.in_flight.copies if id(getattr(c[2], "__self__", None)) not in landed]
