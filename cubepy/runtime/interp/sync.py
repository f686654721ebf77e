"""Barriers: handlers of ``SyncCube``, ``SyncPlane`` and ``SyncProxyShared``.

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
from cubepy.runtime.interp.values import Mask

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


@implements(ops.SyncProxyShared)
def sync_proxy_shared(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Shared-memory writes are visible to TMA at once here: nothing to do."""
