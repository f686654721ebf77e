"""Tensor-core plane collectives on the host target (``mma_sync``, ``ldmatrix``, ``stmatrix`` and the cmma
tile loads, products and stores), run by the runtime's emulation.

Each unit calls ``cubepy_host_op`` with the addresses of its fragments (local arrays, which the address
escape keeps in the unit's coroutine frame) and, for ``ldmatrix``/``stmatrix``, its row offset; then it
suspends as a plane collective.  The runtime (``cubepy.runtime.cpu.plane_ops``) gathers the 32 units'
operands and, when the last one arrives, runs the interp's per-unit emulation
(``cubepy.runtime.interp.mma``) on them, writing every unit's fragment (or the cube's shared block).
After the plane resumes, a second call checks that the whole plane took part (``partial plane``
otherwise, as on the interp).

cmma fragments keep the interp's element order (``cubepy.runtime.interp.cmma``: element ``(r, c)`` of a
plane's matrix in unit ``(16r + c) // 8``, slot ``(16r + c) % 8``), so ``fill`` and ``cast``, which touch
each unit's own slots, are the LLVM lowering's element loops followed by a plane check; a tile load or store publishes the memory's
address and length with its offset and stride, and the emulation reads or writes the whole plane's tile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower_cmma import lower_cast, lower_fill
from cubepy.compiler.lower_memory import memory_length
from cubepy.compiler.lower_wgmma import lower_descriptor_bits
from cubepy.compiler.targets.host_async import _call, _wide, bump_epoch, wait_until_done
from cubepy.errors import CompileError
from cubepy.ir import VarKind, ops
from cubepy.ir.variable import describe_memory

if TYPE_CHECKING:
    import llvmlite.ir as ir

    from cubepy.compiler.lower import KernelLowering
    from cubepy.compiler.targets.host import HostTarget
    from cubepy.ir import Instruction, Variable


def _address(lw: KernelLowering, fragment: Variable) -> ir.Value:
    return lw.builder.ptrtoint(lw.local_array(fragment), lt.I64)


def _collective(lw: KernelLowering, inst: Instruction, kind: str, operands: list[ir.Value], **static: Any) -> None:
    target = cast("HostTarget", lw.target)
    _call(lw, kind, inst, operands, **static)
    target.sync_plane(lw)
    _call(lw, "plane_done", inst, operands)  # the addresses again: the fragments may have changed


def lower_mma_sync(lw: KernelLowering, inst: Instruction) -> None:
    """Publish the four fragments' addresses; the plane's last unit computes every unit's ``d``."""
    op = cast(ops.MmaSync, inst.operation)
    _collective(lw, inst, "mma", [_address(lw, v) for v in (op.a, op.b, op.c, op.d)], mode=op.shape)


def _matrix_move(lw: KernelLowering, inst: Instruction, kind: str) -> None:
    op = cast("ops.Ldmatrix | ops.Stmatrix", inst.operation)
    target = cast("HostTarget", lw.target)
    static = dict(
        smem=repr(op.memory),
        smem_offset=target.placed[(VarKind.SHARED, op.memory.id)],
        smem_capacity=op.memory.length or 0,
        item=op.memory.type.size,
        rank=op.count,
        mode="trans" if op.trans else "",
    )
    _collective(lw, inst, kind, [_wide(lw, op.offset), _address(lw, op.fragment)], **static)


def lower_ldmatrix(lw: KernelLowering, inst: Instruction) -> None:
    """Publish the row offset and the fragment's address; the plane's last unit fills every fragment."""
    _matrix_move(lw, inst, "ldmatrix")


def lower_stmatrix(lw: KernelLowering, inst: Instruction) -> None:
    """Publish the row offset and the fragment's address; the plane's last unit writes the matrices."""
    _matrix_move(lw, inst, "stmatrix")


def _cmma_tile(lw: KernelLowering, inst: Instruction, kind: str) -> None:
    op = cast("ops.CmmaLoad | ops.CmmaStore", inst.operation)
    memory = op.memory
    if memory.kind not in (VarKind.SHARED, VarKind.GLOBAL):
        raise CompileError(f"cmma memory {memory!r} must be shared or global")
    param = next((p for p in lw.definition.params if p.var == memory), None)
    b = lw.builder
    base = b.ptrtoint(lw.memory_base(memory), lt.I64)
    operands = [base, memory_length(lw, memory), _wide(lw, op.offset), _wide(lw, op.stride), _address(lw, op.fragment)]
    label = describe_memory(memory, param.name if param is not None else None)
    _collective(lw, inst, kind, operands, mode=op.layout, memory=label, item=memory.type.size)


def lower_cmma_load(lw: KernelLowering, inst: Instruction) -> None:
    """Publish the memory, offset, stride and fragment; the plane's last unit loads every unit's slots."""
    _cmma_tile(lw, inst, "cmma_load")


def lower_cmma_store(lw: KernelLowering, inst: Instruction) -> None:
    """Publish the memory, offset, stride and fragment; the plane's last unit stores the plane's tile."""
    _cmma_tile(lw, inst, "cmma_store")


def lower_cmma_execute(lw: KernelLowering, inst: Instruction) -> None:
    """Publish the four fragments' addresses; the plane's last unit computes ``d = a @ b + c``."""
    op = cast(ops.CmmaExecute, inst.operation)
    _collective(lw, inst, "cmma_execute", [_address(lw, v) for v in (op.a, op.b, op.c, op.d)])


def lower_cmma_fill(lw: KernelLowering, inst: Instruction) -> None:
    """Each unit fills its own slots (the LLVM lowering); the plane then checks that all of it took part."""
    lower_fill(lw, inst)
    _collective(lw, inst, "cmma_together", [])


def lower_cmma_cast(lw: KernelLowering, inst: Instruction) -> None:
    """Each unit converts its own slots (the LLVM lowering); the plane then checks that all of it took part."""
    lower_cast(lw, inst)
    _collective(lw, inst, "cmma_together", [])


def lower_wgmma_mma_async(lw: KernelLowering, inst: Instruction) -> None:
    """Publish A (the fragment's address or a descriptor), B's descriptor, D's address and scale_d; the
    warpgroup's last unit computes every unit's D; the others wait (as at an mbarrier) until it did.

    Results are written when the product is computed, which the ISA allows: a program may not read D
    before the ``wgmma_wait_group`` covering it, so it cannot tell."""
    op = cast(ops.WgmmaMmaAsync, inst.operation)
    b = lw.builder
    a = _address(lw, op.a) if op.a.kind is VarKind.LOCAL_ARRAY else lw.value(op.a)
    scale = b.zext(lw.value(op.scale_d), lt.I64)
    batch = _call(lw, "wgmma", inst, [a, lw.value(op.b), _address(lw, op.d), scale])
    bump_epoch(lw)
    wait_until_done(lw, inst, "wgmma_wait", [batch])


def _nothing(lw: KernelLowering, inst: Instruction) -> None:
    """wgmma fence, commit and wait: results are visible when computed, so there is nothing to order."""


HOST_LOWERINGS = {
    ops.WgmmaDescriptor: lower_descriptor_bits,
    ops.WgmmaMmaAsync: lower_wgmma_mma_async,
    ops.WgmmaFence: _nothing,
    ops.WgmmaCommitGroup: _nothing,
    ops.WgmmaWaitGroup: _nothing,
    ops.CmmaFill: lower_cmma_fill,
    ops.CmmaCast: lower_cmma_cast,
    ops.CmmaLoad: lower_cmma_load,
    ops.CmmaStore: lower_cmma_store,
    ops.CmmaExecute: lower_cmma_execute,
    ops.MmaSync: lower_mma_sync,
    ops.Ldmatrix: lower_ldmatrix,
    ops.Stmatrix: lower_stmatrix,
}
