"""Clusters (sm_90): the cluster barrier, distributed shared memory and remote mbarrier arrivals.

A launch may group its cubes into clusters (``cp.CubeCount(..., cluster=cp.ClusterDim(2))``); the cubes of a
cluster run at the same time and can read and write each other's shared memory.  ``rank`` is a cube's
index in its cluster (``CUBE_POS_CLUSTER``: x fastest).  A shared memory, an mbarrier, has the same offset
in every cube, so naming the variable and a rank names a peer's copy (PTX ``mapa``).  TMA multicast is the
``multicast`` mask of ``TmaLoad`` (``cubepy.ir.ops.tma``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation, same_as
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.ops.tma import check_barrier_index
from cubepy.ir.types import U32, Type
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

__all__ = ["CLUSTER_RULES", "MAX_CLUSTER_CUBES", "BarrierArriveCluster", "ClusterLoad", "ClusterStore", "SyncCluster"]

MAX_CLUSTER_CUBES = 8  # the portable cluster size on sm_90 (16 needs a non-portable opt-in)
CLUSTER_RULES = ("not-shared", "not-barrier", "barrier-index")


def _shared(c: Checker, inst: Instruction, memory: Variable) -> None:
    if memory.kind is not VarKind.SHARED:
        c.fail("not-shared", inst, f"{memory!r} is a {memory.kind.value}; a peer access names a shared memory")


def _rank(c: Checker, inst: Instruction, rank: Variable) -> None:
    if rank.type != Type(U32):
        c.fail("type-mismatch", inst, f"the cube rank must be a u32 scalar, got {rank.type!r}")


def _check_load(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, (ClusterLoad, ClusterStore))
    _shared(c, inst, op.memory)
    _rank(c, inst, op.rank)
    c.int_scalar(inst, "index", op.index)


def _check_store(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, ClusterStore)
    _check_load(c, inst, op)
    c.same_type(inst, "stored value", op.value.type, op.memory.type)


def _check_remote_arrive(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, BarrierArriveCluster)
    if op.barrier.kind is not VarKind.BARRIER:
        c.fail("not-barrier", inst, f"{op.barrier!r} is a {op.barrier.kind.value}, expected an mbarrier")
    check_barrier_index(c, inst, op.barrier, op.index)
    _rank(c, inst, op.rank)


@declare(
    OpRecord(
        "sync_cluster",
        "cluster",
        doc="Barrier for every unit of every cube of the cluster (barrier.cluster.arrive + wait), with "
        "shared-memory visibility across the cluster.",
    )
)
@attrs.frozen(repr=False)
class SyncCluster(Operation):
    """Every live unit of the cluster arrives before any goes on; shared writes before it are visible after it."""


@declare(
    OpRecord(
        "cluster_load",
        "cluster",
        result=same_as("memory"),
        reads=("memory",),
        checks=(_check_load,),
        doc="memory[index] of the cube of this cluster at rank ``rank`` (distributed shared memory).",
    )
)
@attrs.frozen(repr=False)
class ClusterLoad(Operation):
    """out = ``memory[index]`` in the shared memory of the cluster's cube ``rank``; ``checked``: out of range reads 0."""

    memory: Variable
    rank: Variable
    index: Variable
    checked: bool = False


@declare(
    OpRecord(
        "cluster_store",
        "cluster",
        writes=("memory",),
        checks=(_check_store,),
        doc="memory[index] = value in the shared memory of the cluster's cube ``rank``.",
    )
)
@attrs.frozen(repr=False)
class ClusterStore(Operation):
    """``memory[index] = value`` in the cluster's cube ``rank``; ``checked``: out of range writes are dropped."""

    memory: Variable
    rank: Variable
    index: Variable
    value: Variable
    checked: bool = False


@declare(
    OpRecord(
        "barrier_arrive_cluster",
        "cluster",
        checks=(_check_remote_arrive,),
        doc="One arrival on the mbarrier ``barrier`` of the cluster's cube ``rank`` (release, cluster scope).",
    )
)
@attrs.frozen(repr=False)
class BarrierArriveCluster(Operation):
    """Arrive once on ``barrier`` of the cube ``rank`` of this cluster (a consumer freeing a multicast stage)."""

    barrier: Variable
    rank: Variable
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier
