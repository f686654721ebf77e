"""Fixtures of the compiler tests: LLVM parsing, PTX emission and ptxas checks."""

from __future__ import annotations

import pytest

from cubepy.compiler import ptxas, toolkit
from cubepy.compiler.compiled import CompiledKernel, compile_definition
from cubepy.errors import CompileError
from cubepy.ir import KernelDefinition

needs_ptxas = pytest.mark.skipif(not ptxas.available(), reason=ptxas.unavailable_reason() or "")


def assert_valid_llvm(text: str) -> None:
    """Real LLVM parses and verifies ``text`` (a golden is never blessed without this)."""
    from cubepy.compiler.llvm_process import binding

    module = binding().parse_assembly(text)
    module.verify()


def compile_checked(definition: KernelDefinition, target: str = "sm_90a") -> CompiledKernel:
    """Compile to PTX and, when ptxas exists, assert it accepted the PTX and produced a cubin.

    A kernel that needs libdevice is skipped (not failed) on a machine without the CUDA toolkit's.
    """
    try:
        compiled = compile_definition(definition, target, assemble=ptxas.available())
    except CompileError as error:
        if "needs libdevice" in str(error) and toolkit.find_libdevice() is None:
            pytest.skip("libdevice not found (CUDA_HOME, /usr/local/cuda, nvidia-cuda-nvcc wheel)")
        raise
    assert compiled.ptx.startswith("//") and f".entry {compiled.name}" in compiled.ptx
    if ptxas.available():
        assert compiled.cubin and compiled.resources is not None
    return compiled


@pytest.fixture
def compile_ok():
    """``compile_checked`` as a fixture."""
    return compile_checked
