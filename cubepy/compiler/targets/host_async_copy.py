"""Asynchronous copies (``cp.async``) on the host target: the copy happens at issue, groups are no-ops.

A copy issued on the cpu runtime is a ``memcpy`` of its ``src_bytes`` source bytes and a ``memset`` of the rest of
its ``size`` destination bytes to zero, done when the instruction runs.  Landing that early is allowed (the
bytes are only *guaranteed* visible after the wait that covers them), so a correct kernel gives the interp's
results bit for bit; a kernel that reads before its wait is not caught here (the interp's sanitizer finds it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower_async_copy import element_address
from cubepy.ir import Instruction, ops

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering

PTR = lt.GENERIC_PTR
_FALSE = ir.Constant(lt.I1, 0)


def lower_async_copy(lw: KernelLowering, inst: Instruction) -> None:
    """memcpy(dst, src, src_bytes); memset(dst + src_bytes, 0, size - src_bytes)."""
    op = cast(ops.AsyncCopy, inst.operation)
    b = lw.builder
    dst = b.addrspacecast(element_address(lw, op.dst, op.dst_offset), PTR)
    src = b.addrspacecast(element_address(lw, op.src, op.src_offset), PTR)
    count = lw.value(op.src_bytes)
    if count.type != lt.I32:
        count = b.trunc(count, lt.I32) if count.type.width > 32 else b.zext(count, lt.I32)
    lw.call("llvm.memcpy.p0.p0.i32", lt.VOID, [dst, src, count, _FALSE])
    if op.src_bytes.is_constant and op.src_bytes.value == op.size:
        return
    tail = b.gep(dst, [count], source_etype=lt.I8)
    rest = b.sub(ir.Constant(lt.I32, op.size), count)
    lw.call("llvm.memset.p0.i32", lt.VOID, [tail, ir.Constant(lt.I8, 0), rest, _FALSE])


def lower_group_noop(lw: KernelLowering, inst: Instruction) -> None:
    """Copies completed at issue: nothing to commit or wait for."""


HOST_LOWERINGS = {
    ops.AsyncCopy: lower_async_copy,
    ops.AsyncCommitGroup: lower_group_noop,
    ops.AsyncWaitGroup: lower_group_noop,
}
