"""The spot checks a GPU engineer makes on generated code: vector widths, bounds logic, spills, line info."""

from __future__ import annotations

import collections
import re
import subprocess

import pytest

from cubepy.compiler import lower_control, ptxas
from cubepy.compiler.compiled import compile_definition
from cubepy.ir import F16, F32, U32, builtin, ops
from tests.irbuild import USER_FILE, KernelBuilder, T, vector_add

from .conftest import compile_checked, needs_ptxas


def _instructions(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if line.startswith("\t") and not line.strip().startswith(".")]


# LLVM 22 types f32 registers as .b32 (older LLVMs print .f32), and packs
# four f16 into two 32-bit registers: either way one 16- or 8-byte access per unit.
@pytest.mark.parametrize("elem, access", [(F32, r"v4\.(f32|b32)"), (F16, r"(v4\.(f16|b16)|v2\.b32|b64)")])
def test_line4_copy_is_one_vector_load_and_store(elem, access):
    kb = KernelBuilder("copy_line4")
    src, dst = kb.array(T(elem, 4), "src"), kb.array(T(elem, 4), "dst")
    pos = builtin("absolute_pos")
    kb.store(dst, pos, kb.index(src, pos))
    ptx = compile_checked(kb.build()).ptx
    body = _instructions(ptx)
    loads = [i for i in body if i.startswith("ld.global")]
    stores = [i for i in body if i.startswith("st.global")]
    assert len(loads) == 1 and re.match(rf"ld\.global(\.nc)?\.{access}\s", loads[0]), ptx
    assert len(stores) == 1 and re.match(rf"st\.global\.{access}\s", stores[0]), ptx


def _body_opcodes(llvm: str) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    in_body = False
    for line in llvm.splitlines():
        if line.startswith("define"):
            in_body = True
            continue
        if in_body and line.startswith("}"):
            break
        if not in_body or not line.startswith("  "):
            continue
        text = line.split(", !dbg")[0].strip()
        opcode = text.split(" = ")[-1].split(" ")[0]
        counts[opcode] += 1
    return counts


def test_checked_and_unchecked_differ_only_by_bounds_logic(monkeypatch):
    # Without the if-conversion of unchecked guarded bodies (tests/compiler/test_if_conversion.py), which
    # gives the unchecked kernel predicated inline-PTX loads and stores instead of its guard's branch.
    monkeypatch.setattr(lower_control, "SPECULATE", False)
    unchecked = compile_definition(vector_add(F32, 4, checked=False), assemble=False)
    checked = compile_definition(vector_add(F32, 4, checked=True), assemble=False)
    assert all(ops_.checked for ops_ in _accesses(checked.definition))
    assert not any(ops_.checked for ops_ in _accesses(unchecked.definition))
    plain, guarded = _body_opcodes(unchecked.llvm), _body_opcodes(checked.llvm)
    loads = 2
    # Each load of a line of 4 f32 becomes one inline-PTX call (zeroing moves, then ``@p ld.global.v4.b32``)
    # whose four words are put back into a line: 4 extractvalue, 4 insertelement and a bitcast.
    assert plain - guarded == collections.Counter({"load": loads}), "nothing else of the unchecked kernel goes"
    extra = guarded - plain
    accesses = 3  # two loads, one store
    # Per access: widen the by-value buffer_len parameter and compare; the store branches around itself.
    expected = {"zext": accesses, "icmp": accesses, "br": 2 * (accesses - loads)}
    expected.update({"call": loads, "extractvalue": 4 * loads, "insertelement": 4 * loads, "bitcast": loads})
    assert extra == collections.Counter(expected), extra
    assert "in_bounds" in checked.llvm and "in_bounds" not in unchecked.llvm


def _accesses(definition):
    from cubepy.ir import walk

    return [i.operation for i in walk(definition.body) if isinstance(i.operation, (ops.Index, ops.IndexAssign))]


@needs_ptxas
def test_checked_store_is_skipped_not_clamped():
    """Out of bounds, the store must not happen at all: the st.global sits behind a predicated branch."""
    kb = KernelBuilder("checked_store")
    dst = kb.array(T(F32), "dst")
    kb.store(dst, builtin("absolute_pos"), kb.emit(ops.Cast(builtin("unit_pos")), T(F32)), checked=True)
    ptx = compile_checked(kb.build()).ptx
    body = _instructions(ptx)
    store = next(i for i, line in enumerate(body) if line.startswith("st.global"))
    assert any(line.startswith("@%p") and "bra" in line for line in body[:store]), ptx


@needs_ptxas
@pytest.mark.parametrize("elem, line", [(F32, 1), (F32, 4), (F16, 8)])
def test_no_local_memory_at_small_sizes(elem, line):
    resources = compile_checked(vector_add(elem, line, checked=True)).resources
    assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0
    assert resources.stack_bytes == 0
    assert 0 < resources.registers <= 32


@needs_ptxas
def test_resources_match_an_independent_ptxas_run(tmp_path):
    kb = KernelBuilder("smem_user", cube_dim=(128, 1, 1))
    src = kb.array(T(F32), "src")
    tile = kb.shared(T(F32), 1000, alignment=128)
    unit = builtin("unit_pos")
    kb.store(tile, unit, kb.index(src, builtin("absolute_pos")))
    kb.emit(ops.SyncCube())
    kb.store(src, builtin("absolute_pos"), kb.index(tile, kb.binary("bitxor", unit, kb.builtin("plane_dim"))))
    compiled = compile_checked(kb.build())
    (tmp_path / "k.ptx").write_text(compiled.ptx)
    proc = subprocess.run(
        [ptxas.find_ptxas(), "-arch=sm_90a", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
        check=True,
    )
    log = proc.stdout + proc.stderr
    used = re.search(r"Used (\d+) registers, used (\d+) barriers, (\d+) bytes smem", log)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    registers, barriers, smem = map(int, used.groups())
    stack, spill_stores, spill_loads = map(int, frame.groups())
    r = compiled.resources
    assert (r.registers, r.barriers, r.shared_bytes) == (registers, barriers, smem)
    assert (r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes) == (stack, spill_stores, spill_loads)
    assert smem == 4000 and barriers == 1
    assert (tmp_path / "k.cubin").read_bytes()[:4] == compiled.cubin[:4] == b"\x7fELF"


@needs_ptxas
def test_loc_lines_carry_the_user_source_line():
    kb = KernelBuilder("lines", first_line=40)
    data = kb.array(T(F32), "data")
    pos = builtin("absolute_pos")
    value = kb.index(data, pos)  # line 40
    kb.line = 77
    doubled = kb.binary("mul", value, kb.unary("exp", value))  # lines 77, 78
    kb.store(data, pos, doubled)  # line 79
    compiled = compile_checked(kb.build())
    ptx = compiled.ptx
    files = dict(re.findall(r'\.file\s+(\d+)\s+"([^"]+)"', ptx))
    assert USER_FILE in files.values()
    user = next(number for number, name in files.items() if name == USER_FILE)
    lines = {int(n) for n in re.findall(rf"\.loc\s+{user}\s+(\d+)\s+\d+", ptx)}
    assert {40, 77, 79} <= lines, lines
    # ptxas -lineinfo carried the table into the cubin, naming the user's file.
    assert b".debug_line" in compiled.cubin and b"user_kernels.py" in compiled.cubin


def test_kernel_without_locations_has_no_debug_info():
    from cubepy.ir import KernelDefinition, Param, Scope, Variable, VarKind

    data = Variable(VarKind.GLOBAL, 0, T(U32))
    body = Scope((ops_inst(ops.IndexAssign(data, builtin("absolute_pos"), builtin("unit_pos"))),))
    definition = KernelDefinition("no_locs", (Param(data, "data", "array"),), body, (32, 1, 1))
    compiled = compile_definition(definition, assemble=False)
    assert "!dbg" not in compiled.llvm and ".loc" not in compiled.ptx


def ops_inst(operation):
    from cubepy.ir import Instruction

    return Instruction(None, operation, None)
