"""Synchronization: barriers of the cube and the plane, named barriers, predicate barriers, fences, ``setmaxnreg``.

Named barriers are the 16 hardware barriers of a cube (PTX ``bar.sync``/``bar.arrive`` with an id and a
thread count); barrier 0 is the one ``sync_cube`` uses.  ``setmaxnreg`` hands registers between the
warpgroups of a warp-specialized kernel (sm_90a).
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation, fixed
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.types import BOOL, U32, Type
from cubepy.ir.variable import Variable

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

FENCE_SCOPES = ("cube", "device", "system")
NAMED_BARRIERS = 16  # PTX: barrier ids 0..15 per cube (CTA)
NAMED_BARRIER_GRANULE = 32  # PTX: a named barrier's thread count is a multiple of the warp size
MAX_CUBE_UNITS = 1024
SETMAXNREG_RANGE = (24, 256)  # PTX ISA: setmaxnreg's count lies in [24, 256] ...
SETMAXNREG_GRANULE = 8  # ... and is a multiple of 8


@declare(OpRecord("sync_cube", "sync", doc="Barrier for every unit of the cube."))
@attrs.frozen(repr=False)
class SyncCube(Operation):
    """Barrier for every unit of the cube, with shared-memory visibility."""


def _check_sync_plane_mask(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, SyncPlane)
    if op.mask is not None and op.mask.type != Type(U32):
        c.fail("type-mismatch", inst, f"sync_plane mask must be a u32 scalar, got {op.mask.type}")


@declare(
    OpRecord(
        "sync_plane",
        "sync",
        checks=(_check_sync_plane_mask,),
        doc="Barrier for the units of one plane (all of them, or the lanes of a u32 mask: CUDA's __syncwarp).",
    )
)
@attrs.frozen(repr=False)
class SyncPlane(Operation):
    """Barrier for the units of one plane; with ``mask``, for the lanes whose bits it sets."""

    mask: Variable | None = None


@declare(OpRecord("sync_async_proxy_shared", "sync", doc="Generic-proxy shared writes made visible to TMA."))
@attrs.frozen(repr=False)
class SyncProxyShared(Operation):
    """Make generic-proxy shared-memory writes visible to the async proxy (TMA)."""


def _check_fence_scope(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Fence)
    if op.scope not in FENCE_SCOPES:
        c.fail("bad-immediate", inst, f"fence scope {op.scope!r}: expected one of {', '.join(FENCE_SCOPES)}")


@declare(
    OpRecord(
        "fence",
        "sync",
        checks=(_check_fence_scope,),
        doc="Memory fence (CUDA's __threadfence_block/__threadfence/__threadfence_system): this unit's "
        "memory accesses before it are ordered before those after it, as seen from the scope.",
    )
)
@attrs.frozen(repr=False)
class Fence(Operation):
    """A memory fence at ``scope`` ("cube", "device" or "system"); no barrier."""

    scope: str


@declare(
    OpRecord(
        "sync_cube_count",
        "sync",
        result=fixed(Type(U32)),
        operand_kind="bool",
        kind_of=("pred",),
        doc="Barrier of the cube (sync_cube) that also gives how many of its units passed a true pred.",
    )
)
@attrs.frozen(repr=False)
class SyncCubeCount(Operation):
    """``__syncthreads_count(pred)``."""

    pred: Variable


@declare(
    OpRecord(
        "sync_cube_and",
        "sync",
        result=fixed(Type(BOOL)),
        operand_kind="bool",
        kind_of=("pred",),
        doc="Barrier of the cube (sync_cube) that also gives whether pred holds on every unit.",
    )
)
@attrs.frozen(repr=False)
class SyncCubeAnd(Operation):
    """``__syncthreads_and(pred)``."""

    pred: Variable


@declare(
    OpRecord(
        "sync_cube_or",
        "sync",
        result=fixed(Type(BOOL)),
        operand_kind="bool",
        kind_of=("pred",),
        doc="Barrier of the cube (sync_cube) that also gives whether pred holds on some unit.",
    )
)
@attrs.frozen(repr=False)
class SyncCubeOr(Operation):
    """``__syncthreads_or(pred)``."""

    pred: Variable


def named_barrier_problem(barrier_id: int | None, units: int | None, cube_units: int | None = None) -> str | None:
    """What is wrong with a named barrier's id and unit count (None when nothing is, or a value is unknown)."""
    if barrier_id is not None and not 0 <= barrier_id < NAMED_BARRIERS:
        return f"named barrier id {barrier_id} is outside [0, {NAMED_BARRIERS})"
    if units is not None:
        if units <= 0 or units % NAMED_BARRIER_GRANULE:
            return f"named barrier unit count {units} is not a positive multiple of {NAMED_BARRIER_GRANULE} (the plane size)"
        limit = MAX_CUBE_UNITS if cube_units is None else cube_units
        if units > limit:
            return f"named barrier unit count {units} exceeds the {limit} units of the cube"
    return None


def _comptime_int(var: Variable) -> int | None:
    value = var.value
    return int(value) if var.is_constant and isinstance(value, numbers.Integral) else None


def _check_named_barrier(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, (NamedBarrierSync, NamedBarrierArrive))
    for what, var in (("named barrier id", op.barrier_id), ("named barrier unit count", op.units)):
        if var.type != Type(U32):
            c.fail("type-mismatch", inst, f"{what} must be a u32 scalar, got {var.type}")
    cube_units = None
    if c.kernel is not None:
        x, y, z = c.kernel.cube_dim
        cube_units = -(-(x * y * z) // NAMED_BARRIER_GRANULE) * NAMED_BARRIER_GRANULE  # whole planes arrive
    problem = named_barrier_problem(_comptime_int(op.barrier_id), _comptime_int(op.units), cube_units)
    if problem is not None:
        c.fail("bad-immediate", inst, problem)


@declare(
    OpRecord(
        "named_barrier_sync",
        "sync",
        checks=(_check_named_barrier,),
        doc="Wait at named barrier ``barrier_id`` until ``units`` units (whole planes) arrived (PTX bar.sync id, n).",
    )
)
@attrs.frozen(repr=False)
class NamedBarrierSync(Operation):
    """Arrive at named barrier ``barrier_id`` and wait until ``units`` units have arrived there."""

    barrier_id: Variable
    units: Variable


@declare(
    OpRecord(
        "named_barrier_arrive",
        "sync",
        checks=(_check_named_barrier,),
        doc="Arrive at named barrier ``barrier_id`` of ``units`` units without waiting (PTX bar.arrive id, n).",
    )
)
@attrs.frozen(repr=False)
class NamedBarrierArrive(Operation):
    """Arrive at named barrier ``barrier_id`` (``units`` units complete it) and go on without waiting."""

    barrier_id: Variable
    units: Variable


def _check_setmaxnreg(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, SetMaxNReg)
    count, low, high = op.count, *SETMAXNREG_RANGE
    if isinstance(count, bool) or not isinstance(count, int) or not low <= count <= high or count % SETMAXNREG_GRANULE:
        c.fail(
            "bad-immediate",
            inst,
            f"setmaxnreg needs a compile-time register count in [{low}, {high}] that is a multiple of "
            f"{SETMAXNREG_GRANULE}, got {count!r}",
        )
    if not isinstance(op.increase, bool):
        c.fail("bad-immediate", inst, f"setmaxnreg's increase flag must be a bool, got {op.increase!r}")


@declare(
    OpRecord(
        "setmaxnreg",
        "sync",
        checks=(_check_setmaxnreg,),
        doc="Raise (increase) or lower the plane's register budget to ``count`` (PTX setmaxnreg.inc/.dec, sm_90a).",
    )
)
@attrs.frozen(repr=False)
class SetMaxNReg(Operation):
    """Ask for ``count`` registers per unit: ``increase`` waits for them, else releases down to ``count``."""

    count: int
    increase: bool


SYNC_CUBE_REDUCTIONS: tuple[type[Operation], ...] = (SyncCubeCount, SyncCubeAnd, SyncCubeOr)

__all__ = [
    "FENCE_SCOPES",
    "NAMED_BARRIERS",
    "NAMED_BARRIER_GRANULE",
    "SETMAXNREG_GRANULE",
    "SETMAXNREG_RANGE",
    "named_barrier_problem",
    "NamedBarrierArrive",
    "NamedBarrierSync",
    "SetMaxNReg",
    "SYNC_CUBE_REDUCTIONS",
    "Fence",
    "SyncCube",
    "SyncCubeAnd",
    "SyncCubeCount",
    "SyncCubeOr",
    "SyncPlane",
    "SyncProxyShared",
]
