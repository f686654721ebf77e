"""Lowering of barriers and fences (``sync_cube``, ``sync_plane``, named barriers, cube-wide votes, the async-proxy fence).

The topology builtins these read are in ``cubepy.compiler.builtins``.
"""

from __future__ import annotations

from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, lowers
from cubepy.ir import Instruction, ops


# -- barriers -------------------------------------------------------------------------------------------
def lower_sync_cube(lw: KernelLowering, inst: Instruction) -> None:
    """bar.sync 0: every unit of the cube, with shared-memory visibility."""
    lw.target.sync_cube(lw)


def lower_sync_plane(lw: KernelLowering, inst: Instruction) -> None:
    """bar.warp.sync over the whole plane, or over the lanes of the op's mask."""
    op = inst.operation
    assert isinstance(op, ops.SyncPlane)
    lw.target.sync_plane(lw, None if op.mask is None else lw.value(op.mask))


def lower_sync_proxy_shared(lw: KernelLowering, inst: Instruction) -> None:
    """fence.proxy.async.shared::cta: generic-proxy shared writes become visible to TMA."""
    lw.target.fence_proxy_shared(lw)


def lower_named_barrier_sync(lw: KernelLowering, inst: Instruction) -> None:
    """barrier.sync.aligned id, units (``bar.sync id, units``): wait until ``units`` units arrived at ``id``."""
    op = inst.operation
    assert isinstance(op, ops.NamedBarrierSync)
    lw.call("llvm.nvvm.barrier.cta.sync.aligned.count", lt.VOID, [lw.value(op.barrier_id), lw.value(op.units)])


def lower_named_barrier_arrive(lw: KernelLowering, inst: Instruction) -> None:
    """barrier.arrive.aligned id, units (``bar.arrive id, units``): arrive without waiting."""
    op = inst.operation
    assert isinstance(op, ops.NamedBarrierArrive)
    lw.call("llvm.nvvm.barrier.cta.arrive.aligned.count", lt.VOID, [lw.value(op.barrier_id), lw.value(op.units)])


def lower_setmaxnreg(lw: KernelLowering, inst: Instruction) -> None:
    """setmaxnreg.inc/dec.sync.aligned.u32 count (the target decides: the host has no register file to split)."""
    op = inst.operation
    assert isinstance(op, ops.SetMaxNReg)
    lw.target.set_max_registers(lw, op.count, op.increase)


_BARRIER_REDUCTION = {ops.SyncCubeCount: "popc", ops.SyncCubeAnd: "and", ops.SyncCubeOr: "or"}


def lower_sync_cube_reduce(lw: KernelLowering, inst: Instruction) -> None:
    """bar.red.popc/and/or: a cube barrier that reduces the predicate (``__syncthreads_count/and/or``)."""
    b = lw.builder
    kind = _BARRIER_REDUCTION[type(inst.operation)]
    op = cast("ops.SyncCubeCount | ops.SyncCubeAnd | ops.SyncCubeOr", inst.operation)
    pred = b.zext(lw.value(op.pred), lt.I32)
    reduced = lw.target.sync_cube_reduce(lw, kind, pred)
    lw.define(inst.out, reduced if kind == "popc" else b.icmp_unsigned("!=", reduced, ir.Constant(lt.I32, 0)))


# LLVM's NVPTX scopes: "block" -> fence.acq_rel.cta, "device" -> .gpu, the default (system) -> .sys.
_FENCE_SYNCSCOPE = {"cube": "block", "device": "device", "system": None}


def lower_fence(lw: KernelLowering, inst: Instruction) -> None:
    """fence.acq_rel.{cta,gpu,sys}: CUDA's __threadfence_block/__threadfence/__threadfence_system."""
    lw.builder.fence("acq_rel", _FENCE_SYNCSCOPE[cast(ops.Fence, inst.operation).scope])


for _op_type, _lowering in {
    ops.SyncCube: lower_sync_cube,
    ops.SyncPlane: lower_sync_plane,
    ops.SyncProxyShared: lower_sync_proxy_shared,
    ops.SyncCubeCount: lower_sync_cube_reduce,
    ops.SyncCubeAnd: lower_sync_cube_reduce,
    ops.SyncCubeOr: lower_sync_cube_reduce,
    ops.Fence: lower_fence,
    ops.NamedBarrierSync: lower_named_barrier_sync,
    ops.NamedBarrierArrive: lower_named_barrier_arrive,
    ops.SetMaxNReg: lower_setmaxnreg,
}.items():
    lowers(_op_type)(_lowering)
