"""Lowering of asynchronous barriers (mbarrier) and TMA bulk tensor copies to NVVM intrinsics.

Every form uses LLVM 22's intrinsic signatures (measured forms, accepted by ptxas for
sm_90a with PTX 8.0):

* a barrier is an ``i64`` ``addrspace(3)`` global (declared by the driver), an array of n barriers an
  ``[n x i64]`` one whose element an operation's ``index`` picks by address; ``barrier_init`` is
  ``mbarrier.init`` (of each element) on the elected units, ``fence.proxy.async.shared::cta`` so TMA sees the
  initialised barrier, then ``bar.sync 0`` so every unit does (CubeCL's CUDA back end does the same);
* waits are ``mbarrier.try_wait{.parity}`` loops (the instruction may time out and return false);
* loads are ``cp.async.bulk.tensor.Nd.shared::cluster.global.{tile,im2col}.mbarrier::complete_tx::bytes``
  with the destination cast to ``addrspace(7)`` and cta_group 0; stores are
  ``cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group``; groups are ``cp.async.bulk.*_group``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, as_u32, lowers, unsigned_index
from cubepy.errors import CompileError
from cubepy.ir import Instruction, Variable, VarKind, ops

CLUSTER_SHARED_PTR = ir.PointerType(addrspace=7)  # shared::cluster, the destination space of g2s copies
_I16 = ir.IntType(16)
_FALSE = ir.Constant(lt.I1, 0)


def _barrier(lw: KernelLowering, op: ops.Operation) -> ir.Value:
    """The shared address of the barrier ``op`` names: its ``barrier``, element ``index`` of an array."""
    var: Variable = op.barrier  # type: ignore[attr-defined]
    try:
        base = lw.memories[(VarKind.BARRIER, var.id)]
    except KeyError:
        raise CompileError(f"{var!r} is not declared in the kernel's barriers") from None
    index = getattr(op, "index", None)
    if index is None:
        return base
    return lw.builder.gep(base, [unsigned_index(lw, lw.value(index), index)], source_etype=lt.I64)


def _u32(lw: KernelLowering, var: Variable) -> ir.Value:
    return as_u32(lw, lw.value(var), var)


def _tensor_map(lw: KernelLowering, var: Variable) -> ir.Value:
    """The grid_constant byval parameter: its generic address is what TMA reads the descriptor from."""
    return lw.params[(VarKind.TENSOR_MAP, var.id)]


def _shared_address(lw: KernelLowering, smem: Variable, offset: Variable) -> ir.Value:
    """``&smem[offset]`` in shared::cta (``addrspace(3)``)."""
    index = unsigned_index(lw, lw.value(offset), offset)
    return lw.builder.gep(lw.shared_memory(smem), [index], source_etype=lt.item_type(smem.type, memory=True))


def _wait_loop(lw: KernelLowering, try_wait: Callable[[], ir.Value]) -> None:
    """Spin on ``try_wait()`` (an i1) until it reports the phase complete."""
    b = lw.builder
    spin, done = lw.new_block("mbarrier.wait"), lw.new_block("mbarrier.done")
    b.branch(spin)
    b.position_at_end(spin)
    b.cbranch(try_wait(), done, spin)
    b.position_at_end(done)


# -- barriers ------------------------------------------------------------------------------------------
def lower_barrier_init(lw: KernelLowering, inst: Instruction) -> None:
    """Elected units: mbarrier.init (of every element of an array) + fence.proxy.async; then bar.sync 0 for the whole cube."""
    op = cast(ops.BarrierInit, inst.operation)
    b = lw.builder
    bar = _barrier(lw, op)
    init, join = lw.new_block("mbarrier.init"), lw.new_block("mbarrier.ready")
    b.cbranch(lw.value(op.is_elected), init, join)
    b.position_at_end(init)
    count = _u32(lw, op.arrival_count)
    for element in range(op.barrier.length or 1):  # every barrier of an array
        address = bar if element == 0 else b.gep(bar, [ir.Constant(lt.I64, element)], source_etype=lt.I64)
        lw.call("llvm.nvvm.mbarrier.init.shared", lt.VOID, [address, count])
    lw.call("llvm.nvvm.fence.proxy.async.shared_cta", lt.VOID, [])
    b.branch(join)
    b.position_at_end(join)
    lw.call("llvm.nvvm.barrier.cta.sync.aligned.all", lt.VOID, [ir.Constant(lt.I32, 0)])


def lower_barrier_arrive(lw: KernelLowering, inst: Instruction) -> None:
    """token = mbarrier.arrive.shared.b64."""
    op = cast(ops.BarrierArrive, inst.operation)
    lw.define(inst.out, lw.call("llvm.nvvm.mbarrier.arrive.shared", lt.I64, [_barrier(lw, op)]))


def lower_barrier_arrive_expect_tx(lw: KernelLowering, inst: Instruction) -> None:
    """token = mbarrier.arrive.expect_tx (one arrival), else expect_tx followed by an arrive of ``count``."""
    op = cast(ops.BarrierArriveExpectTx, inst.operation)
    bar = _barrier(lw, op)
    tx_bytes = _u32(lw, op.tx_bytes)
    if op.arrivals.is_constant and op.arrivals.value == 1:
        token = lw.call("llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta", lt.I64, [bar, tx_bytes])
    else:
        # The expectation is raised before this unit arrives, so the phase cannot complete in between.
        lw.call("llvm.nvvm.mbarrier.expect.tx.scope.cta.space.cta", lt.VOID, [bar, tx_bytes])
        token = lw.call("llvm.nvvm.mbarrier.arrive.scope.cta.space.cta", lt.I64, [bar, _u32(lw, op.arrivals)])
    lw.define(inst.out, token)


def lower_barrier_expect_tx(lw: KernelLowering, inst: Instruction) -> None:
    """mbarrier.expect_tx."""
    op = cast(ops.BarrierExpectTx, inst.operation)
    lw.call("llvm.nvvm.mbarrier.expect.tx.scope.cta.space.cta", lt.VOID, [_barrier(lw, op), _u32(lw, op.tx_bytes)])


def lower_barrier_wait(lw: KernelLowering, inst: Instruction) -> None:
    """Spin on mbarrier.try_wait with the arrival's state token."""
    op = cast(ops.BarrierWait, inst.operation)
    bar, token = _barrier(lw, op), lw.value(op.token)
    _wait_loop(lw, lambda: lw.call("llvm.nvvm.mbarrier.try.wait.scope.cta.space.cta", lt.I1, [bar, token]))


def lower_barrier_wait_parity(lw: KernelLowering, inst: Instruction) -> None:
    """Spin on mbarrier.try_wait.parity."""
    op = cast(ops.BarrierWaitParity, inst.operation)
    bar = _barrier(lw, op)
    parity = lw.builder.and_(_u32(lw, op.phase), ir.Constant(lt.I32, 1))
    _wait_loop(lw, lambda: lw.call("llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta", lt.I1, [bar, parity]))


def lower_barrier_try_wait_parity(lw: KernelLowering, inst: Instruction) -> None:
    """out = mbarrier.try_wait.parity.shared::cta.b64 (one test; false may also mean it timed out)."""
    op = cast(ops.BarrierTryWaitParity, inst.operation)
    parity = lw.builder.and_(_u32(lw, op.phase), ir.Constant(lt.I32, 1))
    done = lw.call("llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta", lt.I1, [_barrier(lw, op), parity])
    lw.define(inst.out, done)


# -- copies -------------------------------------------------------------------------------------------------
def _load_prefix(lw: KernelLowering, op: ops.TmaLoad | ops.TmaLoadIm2col) -> list[ir.Value]:
    dst = lw.builder.addrspacecast(_shared_address(lw, op.smem, op.offset), CLUSTER_SHARED_PTR)
    coords = [_u32(lw, c) for c in op.coords]
    return [dst, _barrier(lw, op), _tensor_map(lw, op.tensor_map), *coords]


# cta_mask i16, cache_hint i64, use_cta_mask i1, use_cache_hint i1, cta_group i32 (0: none on sm_90)
def _load_suffix(mask: ir.Value | None = None) -> list[ir.Value]:
    if mask is None:
        return [ir.Constant(_I16, 0), ir.Constant(lt.I64, 0), _FALSE, _FALSE, ir.Constant(lt.I32, 0)]
    return [mask, ir.Constant(lt.I64, 0), ir.Constant(lt.I1, 1), _FALSE, ir.Constant(lt.I32, 0)]


def lower_tma_load(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes[.multicast::cluster]."""
    op = cast(ops.TmaLoad, inst.operation)
    mask = None if op.multicast is None else lw.builder.trunc(_u32(lw, op.multicast), _I16)
    args = _load_prefix(lw, op) + _load_suffix(mask)
    lw.call(f"llvm.nvvm.cp.async.bulk.tensor.g2s.tile.{op.rank}d", lt.VOID, args)


def lower_tma_load_im2col(lw: KernelLowering, inst: Instruction) -> None:
    """The im2col form, with rank-2 i16 offsets (W first) after the coordinates."""
    op = cast(ops.TmaLoadIm2col, inst.operation)
    offsets = [lw.value(o) for o in op.offsets]
    args = _load_prefix(lw, op) + offsets + _load_suffix()
    lw.call(f"llvm.nvvm.cp.async.bulk.tensor.g2s.im2col.{op.rank}d", lt.VOID, args)


def lower_tma_store(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group."""
    op = cast(ops.TmaStore, inst.operation)
    src = _shared_address(lw, op.smem, op.offset)
    coords = [_u32(lw, c) for c in op.coords]
    args = [src, _tensor_map(lw, op.tensor_map), *coords, ir.Constant(lt.I64, 0), _FALSE]
    lw.call(f"llvm.nvvm.cp.async.bulk.tensor.s2g.tile.{op.rank}d", lt.VOID, args)


def lower_group_commit(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.bulk.commit_group."""
    lw.call("llvm.nvvm.cp.async.bulk.commit.group", lt.VOID, [])


def lower_group_wait(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.bulk.wait_group N."""
    lw.call(
        "llvm.nvvm.cp.async.bulk.wait.group",
        lt.VOID,
        [ir.Constant(lt.I32, cast(ops.TmaGroupWait, inst.operation).pending)],
    )


def lower_group_wait_read(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.bulk.wait_group.read N."""
    lw.call(
        "llvm.nvvm.cp.async.bulk.wait.group.read",
        lt.VOID,
        [ir.Constant(lt.I32, cast(ops.TmaGroupWaitRead, inst.operation).pending)],
    )


for _op_type, _lowering in {
    ops.BarrierInit: lower_barrier_init,
    ops.BarrierArrive: lower_barrier_arrive,
    ops.BarrierArriveExpectTx: lower_barrier_arrive_expect_tx,
    ops.BarrierExpectTx: lower_barrier_expect_tx,
    ops.BarrierWait: lower_barrier_wait,
    ops.BarrierWaitParity: lower_barrier_wait_parity,
    ops.BarrierTryWaitParity: lower_barrier_try_wait_parity,
    ops.TmaLoad: lower_tma_load,
    ops.TmaLoadIm2col: lower_tma_load_im2col,
    ops.TmaStore: lower_tma_store,
    ops.TmaGroupCommit: lower_group_commit,
    ops.TmaGroupWait: lower_group_wait,
    ops.TmaGroupWaitRead: lower_group_wait_read,
}.items():
    lowers(_op_type)(_lowering)
