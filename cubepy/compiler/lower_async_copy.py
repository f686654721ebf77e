"""Lowering of asynchronous global-to-shared copies (PTX ``cp.async``, sm_80 and later) to NVVM intrinsics.

* ``async_copy`` is ``llvm.nvvm.cp.async.{ca,cg}.shared.global.{4,8,16}`` (``cp.async.ca.shared.global
  [dst], [src], 16;``); when the source byte count is not the constant ``size`` it is the ``.s`` form with a
  ``src-size`` operand, which zero-fills the destination bytes past it, or, when the ``bounds`` pass proved
  the count 0 or ``size`` (``all_or_nothing``: a checked or masked chunk), the ``ignore-src`` form
  ``cp.async.cg.shared.global [dst], [src], 16, p;`` (inline PTX: LLVM has no intrinsic for it), whose
  predicate ptxas puts on the copy;
* ``async_commit_group`` is ``cp.async.commit_group``; ``async_wait_group n`` is ``cp.async.wait_group n``.

The host target (cpu runtime) replaces ``async_copy`` with a plain copy at issue
(``cubepy.compiler.targets.host_async_copy``); the group operations are no-ops there.
"""

from __future__ import annotations

from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, as_u32, lowers, unsigned_index
from cubepy.errors import CompileError
from cubepy.ir import Instruction, Type, Variable, ops

MIN_SM = 80  # cp.async exists from sm_80 (Ampere)


def element_address(lw: KernelLowering, memory: Variable, offset: Variable) -> ir.Value:
    """``&memory[offset]`` where ``offset`` counts scalar elements (not items), in the memory's address space."""
    index = unsigned_index(lw, lw.value(offset), offset)
    etype = lt.item_type(Type(memory.elem), memory=True)
    return lw.builder.gep(lw.memory_base(memory), [index], source_etype=etype)


def _require_sm80(lw: KernelLowering, inst: Instruction) -> None:
    if lw.sm < MIN_SM:
        raise CompileError(f"{inst.op} (cp.async) needs sm_80 or later; this kernel is compiled for sm_{lw.sm}")


@lowers(ops.AsyncCopy)
def lower_async_copy(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.{ca,cg}.shared.global [dst], [src], size[, src_bytes]."""
    _require_sm80(lw, inst)
    op = cast(ops.AsyncCopy, inst.operation)
    dst = element_address(lw, op.dst, op.dst_offset)
    src = element_address(lw, op.src, op.src_offset)
    name = f"llvm.nvvm.cp.async.{op.cache}.shared.global.{op.size}"
    whole = op.src_bytes.is_constant and op.src_bytes.value == op.size
    if whole:
        lw.call(name, lt.VOID, [dst, src])
        return
    count = as_u32(lw, lw.value(op.src_bytes), op.src_bytes)
    if not op.all_or_nothing:
        lw.call(name + ".s", lt.VOID, [dst, src, count])
        return
    # The count is 0 or the whole chunk (the bounds pass proved it): cp.async's ``ignore-src`` form, whose
    # predicate ptxas puts on the copy, in place of a byte count it would compare with 0 again.
    b = lw.builder
    empty = b.icmp_unsigned("==", count, ir.Constant(lt.I32, 0))
    text = f"cp.async.{op.cache}.shared.global [$0], [$1], {op.size}, $2;"
    asm = ir.InlineAsm(ir.FunctionType(lt.VOID, [lt.I32, lt.I64, lt.I1]), text, "r,l,b,~{memory}", side_effect=True)
    b.call(asm, [b.ptrtoint(dst, lt.I32), b.ptrtoint(src, lt.I64), empty])


@lowers(ops.AsyncCommitGroup)
def lower_async_commit_group(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.commit_group."""
    _require_sm80(lw, inst)
    lw.call("llvm.nvvm.cp.async.commit.group", lt.VOID, [])


@lowers(ops.AsyncWaitGroup)
def lower_async_wait_group(lw: KernelLowering, inst: Instruction) -> None:
    """cp.async.wait_group N (N an immediate)."""
    _require_sm80(lw, inst)
    lw.call(
        "llvm.nvvm.cp.async.wait.group",
        lt.VOID,
        [ir.Constant(lt.I32, cast(ops.AsyncWaitGroup, inst.operation).pending)],
    )
