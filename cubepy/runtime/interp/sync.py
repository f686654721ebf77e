"""Barriers: handlers of ``SyncCube`` (and its predicate forms), ``SyncPlane``, ``Fence`` and ``SyncProxyShared``.

``sync_cube`` is barrier 0 of the cube (``bar.sync 0``): a unit that reaches it waits until every live
unit of its cube has arrived at barrier 0 (units that returned or finished the kernel do not count, as
in CUDA).  When one group holds every unit of a cube they all arrive together and nothing waits; else
the arriving units block (``ctx.block``) and the last arrival releases them.  ``sync_cube_count/and/or``
reduce the predicate over the units that arrived, at the release.

A barrier is divergent when some live unit of a cube (or plane) is not at the same barrier.  While one
group holds every lane (the lockstep schedule before any split) this is checked at once, as before:
under ``sanitize=True`` a ``SanitizerError``.  Once groups run apart, units arriving at different
``sync_cube`` instructions are reported at the release.  ``sync_plane`` never waits: a group runs the
units of a plane that are together in one numpy operation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, ops
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.interp.groups import Wait
from cubepy.runtime.interp.registry import blocking, implements
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.ir import Variable
    from cubepy.runtime.interp.executor import Chunk


OP_FAMILIES = ("sync",)  # the IR op families handled here


def _first_missing(here: np.ndarray, live: np.ndarray) -> tuple[int, int] | None:
    """(group, unit) of the first live unit missing from a group that has units here, or None."""
    missing = live & ~here
    divergent = here.any(axis=1) & missing.any(axis=1)
    if not divergent.any():
        return None
    group = int(np.argmax(divergent))
    return group, int(np.argmax(missing[group]))


class CubeBarrier:
    """Barrier 0 of every cube of a chunk: who arrived, at which instruction, releases so far."""

    def __init__(self, ctx: Chunk) -> None:
        self.arrived = np.zeros(ctx.lanes, dtype=bool)
        self.at = np.zeros(ctx.lanes, dtype=np.int64)  # id of the sync instruction each arrived lane is at
        self.pred = np.zeros(ctx.lanes, dtype=bool)
        self.generation = np.zeros(ctx.topology.cubes, dtype=np.int64)
        self.result = np.zeros(ctx.topology.cubes, dtype=np.int64)  # the last reduction of each cube


def _barrier(ctx: Chunk) -> CubeBarrier:
    state = ctx.state.cube_barrier
    if state is None:
        state = ctx.state.cube_barrier = CubeBarrier(ctx)
    return state


def _release(ctx: Chunk, inst: Instruction, state: CubeBarrier, reduce: str | None) -> None:
    """Release every cube whose live units have all arrived (they may have arrived at other sync instructions)."""
    units = ctx.topology.units
    live = ~(ctx.returned | ctx.finished)
    arrived = state.arrived.reshape(-1, units)
    complete = cast(np.ndarray, arrived.any(axis=1) & ~(live.reshape(-1, units) & ~arrived).any(axis=1))
    if not complete.any():
        return
    if ctx.launch.sanitize:
        at = state.at.reshape(-1, units)
        for cube in np.flatnonzero(complete).tolist():
            here = at[cube][arrived[cube]]
            if (here != here[0]).any():
                unit = int(np.argmax(arrived[cube] & (at[cube] != here[0])))
                ctx.fail(
                    inst,
                    f"divergent sync_cube: unit {unit} of this cube waits at another sync_cube instruction",
                    cube * units + int(np.argmax(arrived[cube])),
                    kind=SanitizerKind.DIVERGENT_BARRIER,
                )
    if reduce is not None:
        pred = state.pred.reshape(-1, units) & arrived
        if reduce == "count":
            state.result[complete] = pred.sum(axis=1)[complete]
        elif reduce == "and":
            some_false = np.asarray((arrived & ~state.pred.reshape(-1, units)).any(axis=1))
            state.result[complete] = ~some_false[complete]
        else:
            state.result[complete] = np.asarray(pred.any(axis=1))[complete]
    state.generation[complete] += 1
    state.arrived.reshape(-1, units)[complete] = False
    release_for_sanitizer(ctx, complete)


def release_for_sanitizer(ctx: Chunk, cubes: np.ndarray) -> None:
    """The barrier ends the race-tracking interval of the released ``cubes`` (bool per chunk cube)."""
    if ctx.sanitizer is not None:
        ctx.sanitizer.sync_cube(cubes)
        races = ctx.state.async_races
        if races is not None:
            races.cube_released(cubes, ctx.topology.units)
        on_release = ctx.state.on_cube_release  # wgmma_async: retired wgmma reads are ordered
        if on_release is not None:
            on_release(cubes)


class CubeBarrierWait(Wait):
    """Units waiting at barrier 0 of their cube for the release after ``generation``."""

    def __init__(self, inst: Instruction, state: CubeBarrier, generation: np.ndarray, reduce: str | None) -> None:
        self.inst = inst
        self.state = state
        self.generation = generation  # per lane: the cube's release count when it arrived
        self.reduce = reduce

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The waiting lanes whose cube was released (releasing it if the units still away have left)."""
        state = self.state
        cube_of_lane = np.repeat(state.generation, ctx.topology.units)
        if not (bits & (cube_of_lane <= self.generation)).any():
            return bits
        _release(ctx, self.inst, state, self.reduce)
        return bits & (np.repeat(state.generation, ctx.topology.units) > self.generation)

    def resume(self, ctx: Chunk, mask: Mask) -> None:
        """Write the reduction of a ``sync_cube_count/and/or`` to the released units."""
        if self.reduce is not None:
            _write_reduction(ctx, self.inst, self.state, mask)

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """How many units of the first waiting cube have arrived."""
        units = ctx.topology.units
        lane = int(np.argmax(bits))
        cube = lane // units
        arrived = int(self.state.arrived[cube * units : (cube + 1) * units].sum())
        return f"sync_cube can never complete: {arrived} of the cube's {units} units arrived, the others wait elsewhere"


def _write_reduction(ctx: Chunk, inst: Instruction, state: CubeBarrier, mask: Mask) -> None:
    op = inst.operation
    values = np.repeat(state.result, ctx.topology.units)
    assert inst.out is not None
    if isinstance(op, ops.SyncCubeCount):
        ctx.write(inst.out, values.astype(np.uint32), mask)
    else:
        ctx.write(inst.out, values.astype(bool), mask)


def _arrive(ctx: Chunk, inst: Instruction, mask: Mask, reduce: str | None) -> bool:
    """Barrier 0 for the units of ``mask``; False when some of them wait (``ctx.block`` was called)."""
    state = _barrier(ctx)
    bits = mask.bits
    state.arrived |= bits
    state.at[bits] = id(inst)
    if reduce is not None:
        op = inst.operation
        assert isinstance(op, (ops.SyncCubeCount, ops.SyncCubeAnd, ops.SyncCubeOr))
        state.pred[bits] = np.broadcast_to(ctx.read(op.pred), (ctx.lanes,))[bits]
    before = np.repeat(state.generation, ctx.topology.units)
    _release(ctx, inst, state, reduce)
    released = np.repeat(state.generation, ctx.topology.units) > before
    waiting = bits & ~released
    if waiting.any():
        ctx.block(waiting, CubeBarrierWait(inst, state, before, reduce))
        return False
    return True


def _check_together(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """One group holds every lane: every live unit of a cube with units here must be here."""
    units = ctx.topology.units
    here = mask.bits.reshape(-1, units)
    live = ~ctx.returned.reshape(-1, units)
    found = _first_missing(here, live)
    if found is not None:
        cube, unit = found
        ctx.fail(
            inst,
            f"divergent sync_cube: unit {unit} of this cube is live but does not reach this barrier",
            cube * units + int(np.argmax(here[cube])),
            kind=SanitizerKind.DIVERGENT_BARRIER,
        )


@implements(ops.SyncCube)
@blocking
def sync_cube(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Barrier of a cube: every live unit of the cube arrives before any goes on."""
    if mask.full:  # the whole chunk is here: nobody waits
        release_for_sanitizer(ctx, np.ones(ctx.topology.cubes, dtype=bool))
        return
    if ctx.frees and ctx.launch.sanitize:
        _check_together(ctx, inst, mask)
    _arrive(ctx, inst, mask, None)


@implements(ops.SyncPlane)
def sync_plane(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Barrier of a plane: check that every live unit of each plane here is here."""
    if ctx.sanitizer is not None:  # the barrier orders the earlier accesses of each plane here
        layout = ctx.plane_layout()
        ctx.sanitizer.sync_plane(layout.active(mask.bits).any(axis=1).reshape(ctx.topology.cubes, -1))
    op = inst.operation
    assert isinstance(op, ops.SyncPlane)
    if op.mask is not None and ctx.launch.sanitize:
        _check_plane_mask(ctx, inst, op.mask, mask)
        return
    if mask.full or not ctx.launch.sanitize:
        return
    layout = ctx.plane_layout()
    here = layout.active(mask.bits)
    live = layout.active(~ctx.returned)
    found = _first_missing(here, live)
    if found is not None:
        plane, lane = found
        marker = np.zeros(here.shape, dtype=bool)
        marker[plane, int(np.argmax(here[plane]))] = True
        ctx.fail(
            inst,
            f"divergent sync_plane: lane {lane} of this plane is live but does not reach this barrier",
            int(np.argmax(layout.scatter(marker))),
            kind=SanitizerKind.DIVERGENT_BARRIER,
        )


def _check_plane_mask(ctx: Chunk, inst: Instruction, mask_var: Variable, mask: Mask) -> None:
    """A masked sync_plane: the units here pass one mask, are in it, and every live unit it names is here."""
    layout = ctx.plane_layout()
    here = layout.active(mask.bits)
    live = layout.active(~ctx.returned)
    values = layout.gather(np.broadcast_to(np.asarray(ctx.read(mask_var), dtype=np.uint32), (ctx.lanes,)))
    first = np.argmax(here, axis=1)
    plane_mask = values[np.arange(len(values)), first]  # the mask the plane's first unit here passes
    lanes = np.arange(PLANE_WIDTH, dtype=np.uint32)
    in_mask = ((plane_mask[:, None] >> lanes) & np.uint32(1)).astype(bool)

    def report(plane: int, lane: int, why: str) -> None:
        marker = np.zeros(here.shape, dtype=bool)
        marker[plane, lane] = True
        ctx.fail(
            inst,
            f"sync_plane(mask=0x{int(plane_mask[plane]):08x}): {why}",
            int(np.argmax(layout.scatter(marker))),
            kind=SanitizerKind.DIVERGENT_BARRIER,
        )

    different = here & (values != plane_mask[:, None])
    if different.any():
        plane, lane = np.argwhere(different)[0]
        report(int(plane), int(lane), f"lane {lane} passes a different mask 0x{int(values[plane, lane]):08x}")
    outside = here & ~in_mask
    if outside.any():
        plane, lane = np.argwhere(outside)[0]
        report(int(plane), int(lane), f"lane {lane} reaches this barrier but is not in its mask")
    planes_here = np.asarray(here.any(axis=1))
    missing = planes_here[:, None] & in_mask & live & ~here
    if missing.any():
        plane, lane = np.argwhere(missing)[0]
        report(int(plane), int(first[plane]), f"lane {lane} is in the mask and live but does not reach this barrier")


@implements(ops.SyncProxyShared)
def sync_proxy_shared(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Shared-memory writes are visible to TMA at once here; the sanitizer records the fence (``async_proxy``)."""
    if ctx.sanitizer is not None:
        ctx.sanitizer.proxy.fence(mask.bits.reshape(-1, ctx.topology.units))


@implements(*ops.SYNC_CUBE_REDUCTIONS)
@blocking
def sync_cube_reduce(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """``__syncthreads_count/and/or``: a cube barrier whose result reduces ``pred`` over the cube's units here."""
    op = inst.operation
    assert isinstance(op, (ops.SyncCubeCount, ops.SyncCubeAnd, ops.SyncCubeOr))
    reduce = "count" if isinstance(op, ops.SyncCubeCount) else "and" if isinstance(op, ops.SyncCubeAnd) else "or"
    if not mask.full:
        if ctx.frees and ctx.launch.sanitize:
            _check_together(ctx, inst, mask)
        if _arrive(ctx, inst, mask, reduce):
            _write_reduction(ctx, inst, _barrier(ctx), mask)
        return
    release_for_sanitizer(ctx, np.ones(ctx.topology.cubes, dtype=bool))
    units = ctx.topology.units
    pred = np.broadcast_to(ctx.read(op.pred), (ctx.lanes,)).reshape(-1, units)
    if isinstance(op, ops.SyncCubeCount):
        per_cube = pred.sum(axis=1).astype(np.uint32)
    elif isinstance(op, ops.SyncCubeAnd):
        per_cube = pred.all(axis=1)
    else:
        per_cube = pred.any(axis=1)
    assert inst.out is not None
    ctx.write(inst.out, np.repeat(per_cube, units), mask)


@implements(ops.Fence)
def fence(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Lockstep runs each instruction for every unit before the next: memory is already ordered."""
