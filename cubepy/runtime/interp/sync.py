"""Barriers: handlers of ``SyncCube`` (and its predicate forms), ``SyncPlane``, ``Fence`` and ``SyncProxyShared``.

In lockstep every active unit reaches a barrier together, so a barrier has nothing to wait for; what
remains is to check it.  A barrier is divergent when some live unit of a cube (or plane) that has
units here is not here (it took another branch, or left the loop): under ``sanitize=True`` that is a
``SanitizerError``, otherwise execution goes on.  Units that returned early do not count, as in CUDA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, ops
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import PLANE_SIZE, Mask

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk


def _first_missing(here: np.ndarray, live: np.ndarray) -> tuple[int, int] | None:
    """(group, unit) of the first live unit missing from a group that has units here, or None."""
    missing = live & ~here
    divergent = here.any(axis=1) & missing.any(axis=1)
    if not divergent.any():
        return None
    group = int(np.argmax(divergent))
    return group, int(np.argmax(missing[group]))


@implements(ops.SyncCube)
def sync_cube(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Barrier of a cube: check that every live unit of each cube here is here."""
    units = ctx.topology.units
    if ctx.sanitizer is not None:  # the barrier ends the race-tracking interval of the cubes here
        ctx.sanitizer.sync_cube(mask.bits.reshape(-1, units).any(axis=1))
    if mask.full or not ctx.launch.sanitize:
        return
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


def _check_plane_mask(ctx: Chunk, inst: Instruction, mask_var, mask: Mask) -> None:
    """A masked sync_plane: the units here pass one mask, are in it, and every live unit it names is here."""
    layout = ctx.plane_layout()
    here = layout.active(mask.bits)
    live = layout.active(~ctx.returned)
    values = layout.gather(np.broadcast_to(np.asarray(ctx.read(mask_var), dtype=np.uint32), (ctx.lanes,)))
    first = np.argmax(here, axis=1)
    plane_mask = values[np.arange(len(values)), first]  # the mask the plane's first unit here passes
    lanes = np.arange(PLANE_SIZE, dtype=np.uint32)
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
def sync_cube_reduce(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """``__syncthreads_count/and/or``: a cube barrier whose result reduces ``pred`` over the cube's units here."""
    op = inst.operation
    assert isinstance(op, (ops.SyncCubeCount, ops.SyncCubeAnd, ops.SyncCubeOr))
    sync_cube(ctx, inst, mask)
    units = ctx.topology.units
    pred = np.broadcast_to(ctx.read(op.pred), (ctx.lanes,)).reshape(-1, units)
    here = mask.bits.reshape(-1, units)
    true_here = pred & here
    if isinstance(op, ops.SyncCubeCount):
        per_cube = true_here.sum(axis=1).astype(np.uint32)
    elif isinstance(op, ops.SyncCubeAnd):
        per_cube = ~(here & ~pred).any(axis=1)
    else:
        per_cube = true_here.any(axis=1)
    ctx.write(inst.out, np.repeat(per_cube, units), mask)


@implements(ops.Fence)
def fence(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Lockstep runs each instruction for every unit before the next: memory is already ordered."""
