"""Lowering of cluster operations (``cubepy.ir.ops.cluster``) for sm_90.

* ``sync_cluster`` is ``barrier.cluster.arrive`` + ``barrier.cluster.wait`` (default release/acquire).
* A peer access maps the local shared address to the peer's (``mapa.shared::cluster``, LLVM's
  ``llvm.nvvm.mapa.shared.cluster``) and loads or stores through ``addrspace(7)`` (``ld/st.shared::cluster``);
  checked accesses branch around an index out of range, as local ones do.
* A remote mbarrier arrival is ``mapa`` + ``mbarrier.arrive.release.cluster.shared::cluster.b64`` in inline
  PTX (one instruction with no result, which no NVVM intrinsic of LLVM 22 spells for a remote barrier).
* The cluster builtins read ``%cluster_ctarank``, ``%cluster_ctaid.*``, ``%cluster_nctarank`` and
  ``%cluster_nctaid.*`` (``builtins.read_builtin``).
"""

from __future__ import annotations

from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, as_u32, lowers, unsigned_index
from cubepy.compiler.lower_memory import checked_read, checked_write, element_pointer
from cubepy.compiler.lower_tma import CLUSTER_SHARED_PTR, _barrier
from cubepy.ir import Instruction, ops


def lower_sync_cluster(lw: KernelLowering, inst: Instruction) -> None:
    """barrier.cluster.arrive; barrier.cluster.wait."""
    lw.call("llvm.nvvm.barrier.cluster.arrive", lt.VOID, [])
    lw.call("llvm.nvvm.barrier.cluster.wait", lt.VOID, [])


def _peer_pointer(lw: KernelLowering, op: ops.ClusterLoad | ops.ClusterStore, index: ir.Value) -> ir.Value:
    local = element_pointer(lw, op.memory, index)
    peer = lw.call("llvm.nvvm.mapa.shared.cluster", CLUSTER_SHARED_PTR, [local, as_u32(lw, lw.value(op.rank), op.rank)])
    return peer


def lower_cluster_load(lw: KernelLowering, inst: Instruction) -> None:
    """out = the peer's memory[index] (ld.shared::cluster); checked: 0 out of range."""
    op = cast(ops.ClusterLoad, inst.operation)
    index = unsigned_index(lw, lw.value(op.index), op.index)
    item = lt.item_type(op.memory.type, memory=True)

    def load() -> ir.Value:
        raw = lw.builder.load(_peer_pointer(lw, op, index), typ=item, align=lt.item_align(op.memory.type))
        return lw.from_memory(raw, op.memory.type)

    lw.define(inst.out, checked_read(lw, inst, op.memory, index, op.checked, load))


def lower_cluster_store(lw: KernelLowering, inst: Instruction) -> None:
    """The peer's memory[index] = value (st.shared::cluster); checked: dropped out of range."""
    op = cast(ops.ClusterStore, inst.operation)
    index = unsigned_index(lw, lw.value(op.index), op.index)
    value = lw.to_memory(lw.value(op.value), op.value.type)

    def store() -> None:
        lw.builder.store(value, _peer_pointer(lw, op, index), align=lt.item_align(op.memory.type))

    checked_write(lw, inst, op.memory, index, op.checked, store)


_REMOTE_ARRIVE = (
    "{\n\t.reg .b32 peer;\n\tmapa.shared::cluster.u32 peer, $0, $1;\n"
    "\tmbarrier.arrive.release.cluster.shared::cluster.b64 _, [peer];\n}"
)


def lower_barrier_arrive_cluster(lw: KernelLowering, inst: Instruction) -> None:
    """One arrival on the peer's copy of the barrier."""
    op = cast(ops.BarrierArriveCluster, inst.operation)
    b = lw.builder
    address = b.ptrtoint(_barrier(lw, op), lt.I32)  # a 32-bit shared::cta address
    asm = ir.InlineAsm(ir.FunctionType(lt.VOID, [lt.I32, lt.I32]), _REMOTE_ARRIVE, "r,r,~{memory}", side_effect=True)
    b.call(asm, [address, as_u32(lw, lw.value(op.rank), op.rank)])


for _op_type, _lowering in {
    ops.SyncCluster: lower_sync_cluster,
    ops.ClusterLoad: lower_cluster_load,
    ops.ClusterStore: lower_cluster_store,
    ops.BarrierArriveCluster: lower_barrier_arrive_cluster,
}.items():
    lowers(_op_type)(_lowering)
