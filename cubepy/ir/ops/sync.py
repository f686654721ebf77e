"""Synchronization: barriers of the cube and the plane, predicate barriers, memory fences, the async-proxy fence."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation, fixed
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.types import BOOL, U32, Type
from cubepy.ir.variable import Variable

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

FENCE_SCOPES = ("cube", "device", "system")


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


SYNC_CUBE_REDUCTIONS: tuple[type[Operation], ...] = (SyncCubeCount, SyncCubeAnd, SyncCubeOr)

__all__ = [
    "FENCE_SCOPES",
    "SYNC_CUBE_REDUCTIONS",
    "Fence",
    "SyncCube",
    "SyncCubeAnd",
    "SyncCubeCount",
    "SyncCubeOr",
    "SyncPlane",
    "SyncProxyShared",
]
