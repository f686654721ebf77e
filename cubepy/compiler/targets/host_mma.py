"""``mma_sync``, ``ldmatrix`` and ``stmatrix`` on the host target: plane collectives through the runtime's emulation.

Each unit calls ``cubepy_host_op`` with the addresses of its fragments (local arrays, which the address
escape keeps in the unit's coroutine frame) and, for ``ldmatrix``/``stmatrix``, its row offset; then it
suspends as a plane collective.  The runtime (``cubepy.runtime.cpu.plane_ops``) gathers the 32 units'
operands and, when the last one arrives, runs the interp's per-unit emulation
(``cubepy.runtime.interp.mma``) on them, writing every unit's fragment (or the cube's shared block).
After the plane resumes, a second call checks that the whole plane took part (``partial plane``
otherwise, as on the interp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.targets.host_async import _call, _wide
from cubepy.ir import VarKind, ops

if TYPE_CHECKING:
    import llvmlite.ir as ir

    from cubepy.compiler.lower import KernelLowering
    from cubepy.compiler.targets.host import HostTarget
    from cubepy.ir import Instruction, Variable


def _address(lw: KernelLowering, fragment: Variable) -> ir.Value:
    return lw.builder.ptrtoint(lw.local_array(fragment), lt.I64)


def _collective(lw: KernelLowering, inst: Instruction, kind: str, operands: list[ir.Value], **static) -> None:
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


HOST_MMA_LOWERINGS = {
    ops.MmaSync: lower_mma_sync,
    ops.Ldmatrix: lower_ldmatrix,
    ops.Stmatrix: lower_stmatrix,
}
