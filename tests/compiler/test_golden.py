"""Golden text of the unoptimized LLVM IR of a few kernels.

Every golden is also parsed and verified by real LLVM and its PTX assembled by ptxas, so a golden can
never bless invalid output.  Regenerate a golden by printing ``str(lower_kernel(definition, NvptxTarget(90)).module)``
and reviewing the diff line by line.
"""

from __future__ import annotations

import textwrap

import pytest

from cubepy.compiler import ptxas
from cubepy.compiler.emit_ptx import check_module, optimize_and_emit, parse_target
from cubepy.compiler.lower import lower_kernel
from cubepy.compiler.passes import run_passes
from cubepy.compiler.targets.nvptx import NvptxTarget

from .conftest import assert_valid_llvm
from .golden_kernels import KERNELS

GOLDEN_COPY_CHECKED = textwrap.dedent("""\
    ; ModuleID = "copy_checked"
    target triple = "nvptx64-nvidia-cuda"
    target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

    define ptx_kernel void @"copy_checked"(ptr addrspace(1) %"src", ptr addrspace(1) %"dst", i32 %"src.buffer_len", i32 %"src.len", i32 %"dst.buffer_len", i32 %"dst.len") "nvvm.reqntid"="32,1,1"
    {
    entry:
      %"ctaid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.ctaid.x"()
      %"ctaid_y" = call i32 @"llvm.nvvm.read.ptx.sreg.ctaid.y"()
      %"ctaid_z" = call i32 @"llvm.nvvm.read.ptx.sreg.ctaid.z"()
      %"nctaid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.nctaid.x"()
      %"nctaid_y" = call i32 @"llvm.nvvm.read.ptx.sreg.nctaid.y"()
      %".8" = mul i32 %"nctaid_x", %"nctaid_y"
      %".9" = mul i32 %"ctaid_z", %".8"
      %".10" = mul i32 %"ctaid_y", %"nctaid_x"
      %".11" = add i32 %".9", %".10"
      %".12" = add i32 %".11", %"ctaid_x"
      %".13" = mul i32 %".12", 32
      %"tid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.tid.x"(), !range !0
      %"absolute_pos" = add i32 %".13", %"tid_x"
      br label %"body"
    body:
      %".15" = zext i32 %"absolute_pos" to i64
      %".16" = zext i32 %"src.buffer_len" to i64
      %"in_bounds" = icmp ult i64 %".15", %".16"
      %".17" = getelementptr <4 x float>, ptr addrspace(1) %"src", i64 %".15"
      %".18" = call {i32, i32, i32, i32} asm sideeffect "mov.b32 $0, 0; mov.b32 $1, 0; mov.b32 $2, 0; mov.b32 $3, 0; @$5 ld.global.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,l,b"(ptr addrspace(1) %".17", i1 %"in_bounds")
      %".19" = extractvalue {i32, i32, i32, i32} %".18", 0
      %".20" = insertelement <4 x i32> <i32 0, i32 0, i32 0, i32 0>, i32 %".19", i32 0
      %".21" = extractvalue {i32, i32, i32, i32} %".18", 1
      %".22" = insertelement <4 x i32> %".20", i32 %".21", i32 1
      %".23" = extractvalue {i32, i32, i32, i32} %".18", 2
      %".24" = insertelement <4 x i32> %".22", i32 %".23", i32 2
      %".25" = extractvalue {i32, i32, i32, i32} %".18", 3
      %".26" = insertelement <4 x i32> %".24", i32 %".25", i32 3
      %"v0" = bitcast <4 x i32> %".26" to <4 x float>
      %".28" = zext i32 %"absolute_pos" to i64
      %".29" = zext i32 %"dst.buffer_len" to i64
      %"in_bounds.1" = icmp ult i64 %".28", %".29"
      br i1 %"in_bounds.1", label %"store.in_bounds1", label %"store.join2"
    store.in_bounds1:
      %".31" = getelementptr <4 x float>, ptr addrspace(1) %"dst", i64 %".28"
      store <4 x float> %"v0", ptr addrspace(1) %".31", align 16
      br label %"store.join2"
    store.join2:
      ret void
    }

    declare i32 @"llvm.nvvm.read.ptx.sreg.ctaid.x"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.ctaid.y"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.ctaid.z"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.nctaid.x"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.nctaid.y"()

    declare i32 @"llvm.nvvm.read.ptx.sreg.tid.x"()

    !0 = !{ i32 0, i32 32 }""")


GOLDEN_FLOORDIV_I32 = textwrap.dedent("""\
    ; ModuleID = "floordiv_i32"
    target triple = "nvptx64-nvidia-cuda"
    target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

    define ptx_kernel void @"floordiv_i32"(ptr addrspace(1) %"a", i32 %"divisor", i32 %"a.buffer_len", i32 %"a.len") "nvvm.reqntid"="32,1,1"
    {
    entry:
      %"tid_x" = call i32 @"llvm.nvvm.read.ptx.sreg.tid.x"(), !range !0
      br label %"body"
    body:
      %".6" = zext i32 %"tid_x" to i64
      %".7" = getelementptr i32, ptr addrspace(1) %"a", i64 %".6"
      %"v0" = load i32, ptr addrspace(1) %".7", align 4
      %".9" = icmp eq i32 %"divisor", 0
      %".10" = icmp eq i32 %"divisor", -1
      %".11" = or i1 %".9", %".10"
      %".12" = select  i1 %".11", i32 1, i32 %"divisor"
      %".13" = sdiv i32 %"v0", %".12"
      %".14" = srem i32 %"v0", %".12"
      %".15" = xor i32 %".14", %"divisor"
      %".16" = icmp slt i32 %".15", 0
      %".17" = icmp ne i32 %".14", 0
      %".18" = and i1 %".17", %".16"
      %".19" = sub i32 %".13", 1
      %".20" = select  i1 %".18", i32 %".19", i32 %".13"
      %".21" = add i32 %".14", %"divisor"
      %".22" = select  i1 %".18", i32 %".21", i32 %".14"
      %".23" = sub i32 0, %"v0"
      %".24" = select  i1 %".10", i32 %".23", i32 %".20"
      %"v1" = select  i1 %".9", i32 -1, i32 %".24"
      %".26" = zext i32 %"tid_x" to i64
      %".27" = getelementptr i32, ptr addrspace(1) %"a", i64 %".26"
      store i32 %"v1", ptr addrspace(1) %".27", align 4
      ret void
    }

    declare i32 @"llvm.nvvm.read.ptx.sreg.tid.x"()

    !0 = !{ i32 0, i32 32 }""")


GOLDEN_STRIDED_SUM = textwrap.dedent("""\
    ; ModuleID = "strided_sum"
    target triple = "nvptx64-nvidia-cuda"
    target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

    define ptx_kernel void @"strided_sum"(ptr addrspace(1) %"a", i32 %"step", i32 %"a.buffer_len", i32 %"a.len") "nvvm.reqntid"="32,1,1"
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
      %".10" = icmp slt i32 %"v1", 64
      %".11" = icmp sgt i32 %"v1", 64
      %".12" = icmp ne i32 %"step", 0
      %".13" = icmp sgt i32 %"step", 0
      %".14" = select  i1 %".13", i1 %".10", i1 %".11"
      %".15" = and i1 %".12", %".14"
      br i1 %".15", label %"for.body2", label %"for.end4"
    for.body2:
      %".17" = sext i32 %"v1" to i64
      %".18" = getelementptr float, ptr addrspace(1) %"a", i64 %".17"
      %"v2" = load float, ptr addrspace(1) %".18", align 4
      %"m0.read" = load float, ptr %"m0"
      %"v3" = fadd float %"m0.read", %"v2"
      store float %"v3", ptr %"m0"
      br label %"for.latch3"
    for.latch3:
      %".23" = add i32 %"v1", %"step"
      store i32 %".23", ptr %"i1"
      br label %"for.header1"
    for.end4:
      %".26" = zext i32 0 to i64
      %"m0.read.1" = load float, ptr %"m0"
      %".27" = getelementptr float, ptr addrspace(1) %"a", i64 %".26"
      store float %"m0.read.1", ptr addrspace(1) %".27", align 4
      ret void
    }
""")


GOLDENS = {"copy_checked": GOLDEN_COPY_CHECKED, "floordiv_i32": GOLDEN_FLOORDIV_I32, "strided_sum": GOLDEN_STRIDED_SUM}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_golden_llvm(name):
    definition, _ = run_passes(KERNELS[name]())
    assert str(lower_kernel(definition, NvptxTarget(90)).module) == GOLDENS[name]


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
