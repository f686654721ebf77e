"""The cube context's one declaration (``host_abi.CubeContext``) against LLVM's data layout for this machine.

The runtime writes the context at the ctypes offsets; the lowering reads it with plain loads at the same
offsets, which LLVM takes to be naturally aligned: a field ctypes places where LLVM would not is a misaligned
load, or a read of the wrong bytes."""

from __future__ import annotations

import ctypes
from typing import Any

import llvmlite.ir as ir
import pytest

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.emit_host import host_machine, host_unavailable_reason
from cubepy.compiler.targets.host_abi import CTX_BYTES, CubeContext

pytestmark = pytest.mark.skipif(host_unavailable_reason() is not None, reason=host_unavailable_reason() or "")

_SCALARS: dict[Any, ir.Type] = {
    ctypes.c_void_p: lt.GENERIC_PTR,
    ctypes.c_uint64: lt.I64,
    ctypes.c_int64: lt.I64,
    ctypes.c_uint32: lt.I32,
    ctypes.c_int32: lt.I32,
}


def _llvm_type(field_type: Any) -> ir.Type:
    """The LLVM type the lowering reads a ctypes field as."""
    if issubclass(field_type, ctypes.Array):
        return ir.ArrayType(_llvm_type(field_type._type_), field_type._length_)
    return _SCALARS[field_type]


def _layout_mismatches(structure: Any, target_data: Any) -> list[str]:
    """Where ``structure``'s ctypes layout differs from the equivalent LLVM struct's on ``target_data``, or
    puts a field off its LLVM alignment."""
    fields = structure._fields_
    llvm_struct = ir.LiteralStructType([_llvm_type(field_type) for _, field_type in fields])
    problems = []
    for index, (name, field_type) in enumerate(fields):
        offset = getattr(structure, name).offset
        llvm_offset = llvm_struct.get_element_offset(target_data, index)
        if offset != llvm_offset:
            problems.append(f"{name}: at {offset} in ctypes, at {llvm_offset} in LLVM")
        alignment = _llvm_type(field_type).get_abi_alignment(target_data)
        if offset % alignment:
            problems.append(f"{name}: at {offset}, not a multiple of its alignment {alignment}")
    size, llvm_size = ctypes.sizeof(structure), llvm_struct.get_abi_size(target_data)
    if size != llvm_size:
        problems.append(f"size {size} in ctypes, {llvm_size} in LLVM")
    return problems


@pytest.fixture(scope="module")
def target_data() -> Any:
    return host_machine().target_data


def test_the_cube_context_has_llvms_layout_for_this_machine(target_data):
    assert _layout_mismatches(CubeContext, target_data) == []
    assert CTX_BYTES == ctypes.sizeof(CubeContext)


def test_the_cube_contexts_pointers_are_8_aligned():
    pointers = [name for name, field_type in CubeContext._fields_ if field_type is ctypes.c_void_p]
    assert len(pointers) == 8
    assert [name for name in pointers if getattr(CubeContext, name).offset % 8] == []


def test_a_field_reordered_into_misalignment_is_found(target_data):
    """The check itself: a packed context with ``epoch`` first puts every pointer 4 bytes off."""

    class Reordered(ctypes.Structure):
        _pack_ = 4
        _layout_ = "ms"  # what ``_pack_`` gives anyway; said, as Python 3.14 asks
        _fields_ = [("epoch", ctypes.c_int32), *(field for field in CubeContext._fields_ if field[0] != "epoch")]

    problems = _layout_mismatches(Reordered, target_data)
    assert "shared: at 4 in ctypes, at 8 in LLVM" in problems
    assert "shared: at 4, not a multiple of its alignment 8" in problems
