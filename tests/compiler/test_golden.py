"""Golden text of the unoptimized LLVM IR of a few kernels.

Every golden is also parsed and verified by real LLVM and its PTX assembled by ptxas, so a golden can
never bless invalid output.  Regenerate a golden by printing ``str(lower_kernel(definition).module)``
and reviewing the diff line by line.
"""

from __future__ import annotations

import textwrap

import pytest

from cubepy.compiler import ptxas
from cubepy.compiler.lower import lower_kernel
from cubepy.compiler.passes import run_passes
from cubepy.compiler.target import check_module, optimize_and_emit, parse_target

from .conftest import assert_valid_llvm
from .golden_kernels import KERNELS

GOLDEN_COPY_CHECKED = textwrap.dedent("""\
    ; ModuleID = "copy_checked"
    target triple = "nvptx64-nvidia-cuda"
    target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

    define ptx_kernel void @"copy_checked"(ptr addrspace(1) %"src", ptr addrspace(1) %"dst", ptr addrspace(1) %"info") "nvvm.reqntid"="32,1,1"
    {
    entry:
      %"nctaid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.nctaid.x"()
      %".5" = mul i32 %"nctaid_x", 32
      %"nctaid_y" = call i32 @"llvm.nvvm.read.ptx.sreg.nctaid.y"()
      %"ctaid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.ctaid.x"()
      %".6" = mul i32 %"ctaid_x", 32
      %"tid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.tid.x"(), !range !0
      %".7" = add i32 %".6", %"tid_x"
      %"ctaid_y" = call i32 @"llvm.nvvm.read.ptx.sreg.ctaid.y"()
      %"tid_y" = call i32 @"llvm.nvvm.read.ptx.sreg.tid.y"(), !range !1
      %".8" = add i32 %"ctaid_y", %"tid_y"
      %"ctaid_z" = call i32 @"llvm.nvvm.read.ptx.sreg.ctaid.z"()
      %"tid_z" = call i32 @"llvm.nvvm.read.ptx.sreg.tid.z"(), !range !1
      %".9" = add i32 %"ctaid_z", %"tid_z"
      %".10" = mul i32 %".5", %"nctaid_y"
      %".11" = mul i32 %".9", %".10"
      %".12" = mul i32 %".8", %".5"
      %".13" = add i32 %".11", %".12"
      %"absolute_pos" = add i32 %".13", %".7"
      br label %"body"
    body:
      %".15" = zext i32 %"absolute_pos" to i64
      %".16" = getelementptr i32, ptr addrspace(1) %"info", i32 0
      %".17" = load i32, ptr addrspace(1) %".16", align 4, !invariant.load !2
      %".18" = zext i32 %".17" to i64
      %"in_bounds" = icmp ult i64 %".15", %".18"
      br i1 %"in_bounds", label %"load.in_bounds1", label %"load.join2"
    load.in_bounds1:
      %".20" = getelementptr <4 x float>, ptr addrspace(1) %"src", i64 %".15"
      %".21" = load <4 x float>, ptr addrspace(1) %".20", align 16
      br label %"load.join2"
    load.join2:
      %"v0" = phi  <4 x float> [%".21", %"load.in_bounds1"], [<float 0.0, float 0.0, float 0.0, float 0.0>, %"body"]
      %".24" = zext i32 %"absolute_pos" to i64
      %".25" = getelementptr i32, ptr addrspace(1) %"info", i32 3
      %".26" = load i32, ptr addrspace(1) %".25", align 4, !invariant.load !2
      %".27" = zext i32 %".26" to i64
      %"in_bounds.1" = icmp ult i64 %".24", %".27"
      br i1 %"in_bounds.1", label %"store.in_bounds3", label %"store.join4"
    store.in_bounds3:
      %".29" = getelementptr <4 x float>, ptr addrspace(1) %"dst", i64 %".24"
      store <4 x float> %"v0", ptr addrspace(1) %".29", align 16
      br label %"store.join4"
    store.join4:
      ret void
    }

    declare i32 @"llvm.nvvm.read.ptx.sreg.nctaid.x"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.nctaid.y"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.ctaid.x"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.tid.x"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.ctaid.y"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.tid.y"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.ctaid.z"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.tid.z"()

    !0 = !{ i32 0, i32 32 }
    !1 = !{ i32 0, i32 1 }
    !2 = !{  }""")


GOLDEN_FLOORDIV_I32 = textwrap.dedent("""\
    ; ModuleID = "floordiv_i32"
    target triple = "nvptx64-nvidia-cuda"
    target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

    define ptx_kernel void @"floordiv_i32"(ptr addrspace(1) %"a", i32 %"divisor", ptr addrspace(1) %"info") "nvvm.reqntid"="32,1,1"
    {
    entry:
      %"tid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.tid.x"(), !range !0
      br label %"body"
    body:
      %".5" = zext i32 %"tid_x" to i64
      %".6" = getelementptr i32, ptr addrspace(1) %"a", i64 %".5"
      %"v0" = load i32, ptr addrspace(1) %".6", align 4
      %".8" = icmp eq i32 %"divisor", 0
      %".9" = icmp eq i32 %"divisor", -1
      %".10" = or i1 %".8", %".9"
      %".11" = select  i1 %".10", i32 1, i32 %"divisor"
      %".12" = sdiv i32 %"v0", %".11"
      %".13" = srem i32 %"v0", %".11"
      %".14" = xor i32 %".13", %"divisor"
      %".15" = icmp slt i32 %".14", 0
      %".16" = icmp ne i32 %".13", 0
      %".17" = and i1 %".16", %".15"
      %".18" = sub i32 %".12", 1
      %".19" = select  i1 %".17", i32 %".18", i32 %".12"
      %".20" = add i32 %".13", %"divisor"
      %".21" = select  i1 %".17", i32 %".20", i32 %".13"
      %".22" = sub i32 0, %"v0"
      %".23" = select  i1 %".9", i32 %".22", i32 %".19"
      %"v1" = select  i1 %".8", i32 -1, i32 %".23"
      %".25" = zext i32 %"tid_x" to i64
      %".26" = getelementptr i32, ptr addrspace(1) %"a", i64 %".25"
      store i32 %"v1", ptr addrspace(1) %".26", align 4
      ret void
    }

    declare i32 @"llvm.nvvm.read.ptx.sreg.tid.x"()

    !0 = !{ i32 0, i32 32 }""")


GOLDEN_STRIDED_SUM = textwrap.dedent("""\
    ; ModuleID = "strided_sum"
    target triple = "nvptx64-nvidia-cuda"
    target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

    define ptx_kernel void @"strided_sum"(ptr addrspace(1) %"a", i32 %"step", ptr addrspace(1) %"info") "nvvm.reqntid"="32,1,1"
    {
    entry:
      %"m0" = alloca float
      %"i1" = alloca i32
      br label %"body"
    body:
      store float 0.0, ptr %"m0"
      store i32 0, ptr %"i1"
      br label %"for.header1"
    for.header1:
      %"v1" = load i32, ptr %"i1"
      %".9" = icmp slt i32 %"v1", 64
      %".10" = icmp sgt i32 %"v1", 64
      %".11" = icmp ne i32 %"step", 0
      %".12" = icmp sgt i32 %"step", 0
      %".13" = select  i1 %".12", i1 %".9", i1 %".10"
      %".14" = and i1 %".11", %".13"
      br i1 %".14", label %"for.body2", label %"for.end4"
    for.body2:
      %".16" = sext i32 %"v1" to i64
      %".17" = getelementptr float, ptr addrspace(1) %"a", i64 %".16"
      %"v2" = load float, ptr addrspace(1) %".17", align 4
      %"m0.read" = load float, ptr %"m0"
      %"v3" = fadd float %"m0.read", %"v2"
      store float %"v3", ptr %"m0"
      br label %"for.latch3"
    for.latch3:
      %".22" = add i32 %"v1", %"step"
      store i32 %".22", ptr %"i1"
      br label %"for.header1"
    for.end4:
      %".25" = zext i32 0 to i64
      %"m0.read.1" = load float, ptr %"m0"
      %".26" = getelementptr float, ptr addrspace(1) %"a", i64 %".25"
      store float %"m0.read.1", ptr addrspace(1) %".26", align 4
      ret void
    }
""")


GOLDENS = {"copy_checked": GOLDEN_COPY_CHECKED, "floordiv_i32": GOLDEN_FLOORDIV_I32, "strided_sum": GOLDEN_STRIDED_SUM}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_golden_llvm(name):
    definition, _ = run_passes(KERNELS[name]())
    assert str(lower_kernel(definition).module) == GOLDENS[name]


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_golden_is_valid_llvm_and_valid_ptx(name):
    golden = GOLDENS[name]
    assert_valid_llvm(golden)
    module = check_module(golden, name, frozenset())
    ptx = optimize_and_emit(module, parse_target("sm_90a"), name, frozenset()).ptx
    if ptxas.available():
        cubin, resources = ptxas.assemble(ptx, "sm_90a", name)
        assert cubin[:4] == b"\x7fELF" and resources.spill_store_bytes == 0
        assert resources.stack_bytes == 0, "mutable locals and loop counters live in registers"
