"""Targets, LLVM-abort isolation, intrinsic checks and lazy imports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import attrs
import llvmlite.ir as llir
import pytest

from cubepy.compiler import emit_ptx, llvm_process, lower
from cubepy.compiler import llvm_types as lt
from cubepy.compiler.compiled import compile_definition
from cubepy.compiler.targets.nvptx import NvptxTarget
from cubepy.errors import CompileError
from cubepy.ir import F32, builtin
from cubepy.ir.ops import OpRecord
from cubepy.ir.ops.base import Operation
from tests.irbuild import KernelBuilder, T, vector_add

from .conftest import compile_checked, needs_ptxas


@pytest.mark.parametrize(
    "name, sm, ptx",
    [("sm_90a", 90, "+ptx80"), ("sm_80", 80, "+ptx80"), ("sm_100a", 100, "+ptx86"), ("sm_120f", 120, "+ptx88")],
)
def test_parse_target(name, sm, ptx):
    assert emit_ptx.parse_target(name) == emit_ptx.Target(name, sm, ptx)


@pytest.mark.parametrize("name", ["sm_60", "sm_52", "compute_90", "sm_90b", "", "sm_95", "SM_90", "sm_90a "])
def test_bad_targets_are_rejected_before_llvm(name):
    with pytest.raises(CompileError, match="target"):
        compile_definition(vector_add(F32), name)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_89", "sm_90", "sm_100a"])
def test_other_architectures(arch):
    compiled = compile_checked(vector_add(F32, 4), arch)
    assert f".target {arch}" in compiled.ptx and compiled.target == arch


def _checked_module(definition):
    lowered = lower.lower_kernel(definition, NvptxTarget(90))
    return emit_ptx.check_module(str(lowered.module), lowered.entry_name, lowered.libdevice), lowered


def test_llvm_error_in_the_child_becomes_compile_error():
    """PTX 7.8 cannot target sm_90a: LLVM aborts with "LLVM ERROR" (in the child, not here)."""
    module, lowered = _checked_module(vector_add(F32))
    bad = emit_ptx.Target("sm_90a", 90, "+ptx78")
    with pytest.raises(CompileError) as info:
        emit_ptx.optimize_and_emit(module, bad, lowered.entry_name, lowered.libdevice)
    message = str(info.value)
    assert "LLVM ERROR" in message and "vector_add" in message and "PTX version" in message
    # This process is alive and LLVM still works in it.
    module, lowered = _checked_module(vector_add(F32))
    assert (
        ".entry vector_add"
        in emit_ptx.optimize_and_emit(
            module, emit_ptx.parse_target("sm_90a"), lowered.entry_name, lowered.libdevice
        ).ptx
    )


def test_a_child_killed_by_a_signal_becomes_compile_error():
    with pytest.raises(CompileError, match="SIGSEGV"):
        llvm_process.run_isolated(lambda: os.kill(os.getpid(), signal.SIGSEGV), "crasher")


def test_an_exception_in_the_child_becomes_compile_error():
    def fail() -> bytes:
        raise RuntimeError("boom inside LLVM work")

    with pytest.raises(CompileError, match="boom inside LLVM work"):
        llvm_process.run_isolated(fail, "raiser")


@attrs.frozen
class CallIntrinsic(Operation):
    """A test-only op: call one LLVM function with fixed arguments."""

    RECORD = OpRecord("call_intrinsic", "test")  # not declared: only this test lowers it
    function: str = ""
    arguments: str = ""


def _lower_call(lw: lower.KernelLowering, inst) -> None:
    op = inst.operation
    args = {
        "i64": [llir.Constant(lt.I64, 0)],
        "": [],
        "smem_i32": [llir.Constant(lt.SHARED_PTR, None), llir.Constant(lt.I32, 128)],
    }[op.arguments]
    lw.call(op.function, lt.I64 if "arrive" in op.function else lt.VOID, args)


@pytest.fixture
def call_intrinsic_op():
    lower.LLVM.implements(CallIntrinsic)(_lower_call)
    yield
    lower.LLVM.implementations.pop(CallIntrinsic)


def _kernel_calling(function: str, arguments: str = ""):
    kb = KernelBuilder("calls_" + function.replace(".", "_"))
    data = kb.array(T(F32), "data")
    kb.emit(CallIntrinsic(function, arguments))
    kb.store(data, builtin("absolute_pos"), kb.index(data, builtin("absolute_pos")))
    return kb.build()


def test_cannot_select_becomes_compile_error(call_intrinsic_op):
    """wgmma.wait_group exists only on sm_90a: on sm_90 LLVM's instruction selection aborts."""
    definition = _kernel_calling("llvm.nvvm.wgmma.wait_group.sync.aligned", "i64")
    with pytest.raises(CompileError, match="Cannot select") as info:
        compile_definition(definition, "sm_90", assemble=False)
    assert "calls_llvm_nvvm_wgmma_wait_group_sync_aligned" in str(info.value)
    assert "wgmma.wait_group" in compile_definition(definition, "sm_90a", assemble=False).ptx


def test_relaxed_mbarrier_needs_newer_ptx(call_intrinsic_op):
    definition = _kernel_calling("llvm.nvvm.mbarrier.arrive.expect.tx.relaxed.scope.cta.space.cta", "smem_i32")
    with pytest.raises(CompileError, match="LLVM ERROR"):
        compile_definition(definition, "sm_90a", assemble=False)


def test_unknown_intrinsic_is_rejected_in_process(call_intrinsic_op):
    """LLVM accepts any llvm.nvvm.* name and ptxas fails much later; the attributes check catches it."""
    definition = _kernel_calling("llvm.nvvm.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16")
    with pytest.raises(CompileError, match="unknown LLVM intrinsic"):
        compile_definition(definition, assemble=False)


def test_unresolved_function_is_rejected(call_intrinsic_op):
    with pytest.raises(CompileError, match="unresolved external function 'my_helper'"):
        compile_definition(_kernel_calling("my_helper"), assemble=False)


def test_unknown_libdevice_function_is_rejected(call_intrinsic_op):
    with pytest.raises(CompileError, match="libdevice has no function '__nv_frobnicate'"):
        compile_definition(_kernel_calling("__nv_frobnicate"), assemble=False)


def test_unknown_operation_names_the_instruction(call_intrinsic_op):
    lower.LLVM.implementations.pop(CallIntrinsic)
    try:
        with pytest.raises(CompileError, match="op call_intrinsic is not supported by back end llvm") as info:
            compile_definition(_kernel_calling("x"), assemble=False)
        assert "user_kernels.py" in str(info.value)
    finally:
        lower.LLVM.implements(CallIntrinsic)(_lower_call)


def test_importing_the_compiler_loads_no_llvm():
    code = (
        "import sys, cubepy.compiler, cubepy.compiler.compiled, cubepy.compiler.passes, cubepy.compiler.abi; "
        "print('llvmlite.binding' in sys.modules, 'llvmlite.ir' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_isolation_can_be_turned_off():
    module, lowered = _checked_module(vector_add(F32))
    result = emit_ptx.optimize_and_emit(
        module, emit_ptx.parse_target("sm_90a"), lowered.entry_name, lowered.libdevice, isolate=False
    )
    assert ".entry vector_add" in result.ptx


def test_a_hanging_child_is_killed():
    import time

    with pytest.raises(CompileError, match="did not finish within"):
        llvm_process.run_isolated(lambda: time.sleep(30) or b"", "sleeper", timeout_s=0.5)
