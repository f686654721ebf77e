"""Lowering of topology builtins and barriers (``sync_cube``, ``sync_plane``, named barriers, the async-proxy fence).

Builtins follow CubeCL's formulas on the PTX special registers; ``cube_dim`` is the kernel's static
cube_dim (the entry carries ``.reqntid``, so a launch with another block shape fails).
``absolute_pos = abs_z*GX*GY + abs_y*GX + abs_x`` with ``GX = cube_count_x * cube_dim_x``; planes are 32
units; ``unit_pos_plane`` is ``%laneid`` and ``plane_pos = unit_pos / 32``.
"""

from __future__ import annotations

from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, lowers
from cubepy.errors import CompileError
from cubepy.ir import Instruction, ops

PLANE_SIZE = 32
FULL_MASK = ir.Constant(lt.I32, -1)
_SHUFFLE_CLAMP = {"idx": 31, "bfly": 31, "down": 31, "up": 0}


# -- builtins -------------------------------------------------------------------------------------------
def sreg(lw: KernelLowering, name: str) -> ir.Value:
    """Read the PTX special register ``%name`` (``tid.x``, ``laneid``) as i32 (the target provides it)."""
    return lw.target.special_register(lw, name)


def read_builtin(lw: KernelLowering, name: str) -> ir.Value:
    """The value of the topology builtin ``name`` (u32)."""
    b = lw.builder
    dims = dict(zip("xyz", lw.definition.cube_dim))

    def const(value: int) -> ir.Value:
        return ir.Constant(lt.I32, value)

    def mul(x: ir.Value, y: ir.Value) -> ir.Value:  # skips "* 1" so the unoptimized text stays readable
        if isinstance(y, ir.Constant) and y.constant == 1:
            return x
        if isinstance(x, ir.Constant) and x.constant == 1:
            return y
        return b.mul(x, y)

    def flat(x: ir.Value, y: ir.Value, z: ir.Value, size_x: ir.Value, size_y: ir.Value) -> ir.Value:
        return b.add(b.add(mul(z, mul(size_x, size_y)), mul(y, size_x)), x)

    def absolute(axis: str) -> ir.Value:
        return b.add(mul(sreg(lw, f"ctaid.{axis}"), const(dims[axis])), sreg(lw, f"tid.{axis}"))

    if name.startswith(("cube_pos_cluster", "cube_cluster_dim")):
        axis = name[-1] if name[-2] == "_" else ""
        register = ("cluster_ctaid" if axis else "cluster_ctarank") if "pos" in name else "cluster_nctaid"
        if not axis and "dim" in name:
            register = "cluster_nctarank"
        return sreg(lw, register.replace("_", ".") + (f".{axis}" if axis else ""))
    base, _, axis = name.rpartition("_")
    if axis in ("x", "y", "z"):
        if base == "unit_pos":
            return sreg(lw, f"tid.{axis}")
        if base == "cube_pos":
            return sreg(lw, f"ctaid.{axis}")
        if base == "cube_dim":
            return const(dims[axis])
        if base == "cube_count":
            return sreg(lw, f"nctaid.{axis}")
        if base == "absolute_pos":
            return absolute(axis)
    if name == "unit_pos":
        return flat(*(sreg(lw, f"tid.{a}") for a in "xyz"), const(dims["x"]), const(dims["y"]))  # type: ignore[call-arg]  # x, y, z
    if name == "cube_pos":
        return flat(*(sreg(lw, f"ctaid.{a}") for a in "xyz"), sreg(lw, "nctaid.x"), sreg(lw, "nctaid.y"))  # type: ignore[call-arg]  # x, y, z
    if name == "cube_dim":
        return const(dims["x"] * dims["y"] * dims["z"])
    if name == "cube_count":
        return mul(mul(sreg(lw, "nctaid.x"), sreg(lw, "nctaid.y")), sreg(lw, "nctaid.z"))
    if name == "absolute_pos":
        grid_x = mul(sreg(lw, "nctaid.x"), const(dims["x"]))
        grid_y = mul(sreg(lw, "nctaid.y"), const(dims["y"]))
        return flat(absolute("x"), absolute("y"), absolute("z"), grid_x, grid_y)
    if name == "plane_dim":
        return const(PLANE_SIZE)
    if name == "unit_pos_plane":
        return sreg(lw, "laneid")
    if name == "plane_pos":
        unit_pos = flat(*(sreg(lw, f"tid.{a}") for a in "xyz"), const(dims["x"]), const(dims["y"]))  # type: ignore[call-arg]  # x, y, z
        return b.udiv(unit_pos, const(PLANE_SIZE))
    raise CompileError(f"unknown builtin {name!r}")


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


# -- shuffles -------------------------------------------------------------------------------------------


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
