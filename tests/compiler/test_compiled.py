"""``compile_definition`` end to end: every intermediate form, timings, libdevice, dumps."""

from __future__ import annotations

import pytest

from cubepy.compiler import CompiledKernel, compile_definition
from cubepy.errors import VerifyError
from cubepy.ir import BF16, F16, F32, F64, I32, U32, builtin, format_kernel, ops
from tests.irbuild import KernelBuilder, T, lit, vector_add

from .conftest import compile_checked, needs_ptxas


def test_compiled_kernel_has_every_form():
    compiled = compile_checked(vector_add(F32, 4, checked=True))
    assert isinstance(compiled, CompiledKernel)
    assert compiled.name == "vector_add" and compiled.target == "sm_90a"
    assert compiled.ir == format_kernel(compiled.definition) and "checked" in compiled.ir
    assert "alloca" not in compiled.llvm_opt and "define ptx_kernel" in compiled.llvm
    assert compiled.llvm != compiled.llvm_opt
    assert {"passes", "lower", "llvm_opt+emit"} <= compiled.timings.keys()
    assert all(seconds >= 0 for seconds in compiled.timings.values())
    assert [name for name, _ in compiled.pass_dumps] == [
        "input",
        "checked_io",
        "fold_constants",
        "contract",
        "dead_code",
        "merge_branches",
        "plane_uniform",
        "bounds",
    ]


def test_invalid_ir_is_stopped_by_the_verifier():
    kb = KernelBuilder()
    out = kb.array(T(F32), "out")
    kb.store(out, builtin("absolute_pos"), kb.emit(ops.lookup("add")(lit(1.0, F32), lit(1, U32)), T(F32)))
    with pytest.raises(VerifyError, match="type-mismatch"):
        compile_definition(kb.build())


@pytest.mark.parametrize("elem", [F16, BF16, F32, F64], ids=["f16", "bf16", "f32", "f64"])
def test_libdevice_is_linked_and_inlined(elem):
    kb = KernelBuilder(f"math_{elem.name}")
    data = kb.array(T(elem, 2), "data")
    pos = builtin("absolute_pos")
    x = kb.index(data, pos)
    y = kb.binary("powf", kb.unary("tanh", kb.unary("exp", x)), kb.binary("atan2", x, x))
    y = kb.binary("add", y, kb.binary("mod", x, y))
    y = kb.binary("add", y, kb.emit(ops.lookup("powi")(x, lit(3, I32)), x.type))
    kb.store(data, pos, y)
    compiled = compile_checked(kb.build())
    suffix = "" if elem is F64 else "f"
    assert {
        f"__nv_exp{suffix}",
        f"__nv_tanh{suffix}",
        f"__nv_pow{suffix}",
        f"__nv_atan2{suffix}",
        f"__nv_fmod{suffix}",
        f"__nv_powi{suffix}",
    } <= set(_libdevice_calls(compiled.llvm))
    assert "__nv_" not in compiled.ptx, "every libdevice entry point is inlined"
    # Large internal helpers may stay out of line (f64 pow's __internal_accurate_pow), but nothing is external.
    assert ".extern" not in compiled.ptx
    assert all(line.startswith(".func  (.param") for line in compiled.ptx.splitlines() if line.startswith(".func"))
    assert "__nvvm_reflect" not in compiled.llvm_opt


def _libdevice_calls(llvm: str) -> list[str]:
    import re

    return re.findall(r'declare \w+ @"?(__nv_\w+)', llvm)


@needs_ptxas
def test_vector_add_resources():
    resources = compile_checked(vector_add(F32, 4)).resources
    assert resources.registers <= 32 and resources.shared_bytes == 0 and resources.barriers == 0


def test_dump_writes_every_stage(tmp_path):
    compiled = compile_checked(vector_add(F32))
    compile_definition(vector_add(F32), dump=("ir", "passes", "llvm", "ptx", "resources"), dump_dir=tmp_path)
    names = sorted(p.name for p in (tmp_path / "vector_add").iterdir())
    assert names[:5] == ["00-input.ir", "01-checked_io.ir", "02-fold_constants.ir", "03-contract.ir", "04-dead_code.ir"]
    assert {"kernel.ir", "llvm.sm_90a.ll", "llvm.sm_90a.opt.ll", "kernel.sm_90a.ptx", "resources.sm_90a.txt"} <= set(
        names
    )
    assert not any(name.endswith(".tmp") for name in names)
    assert (tmp_path / "vector_add" / "kernel.sm_90a.ptx").read_text() == compiled.ptx


def test_dump_rejects_unknown_stages(tmp_path):
    from cubepy.errors import CompileError

    with pytest.raises(CompileError, match="sass"):
        compile_definition(vector_add(F32), assemble=False, dump=("ir", "sass"), dump_dir=tmp_path)


def test_kernel_names_become_valid_ptx_identifiers():
    compiled = compile_definition(vector_add(F32, name="my.kernel<f32>"), assemble=False)
    assert compiled.name == "my_kernel_f32_" and f".entry {compiled.name}(" in compiled.ptx
