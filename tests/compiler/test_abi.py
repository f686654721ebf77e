"""The kernel ABI: entry parameters and the info buffer."""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

from cubepy.compiler import abi
from cubepy.compiler.compiled import compile_definition
from cubepy.errors import LaunchError
from cubepy.ir import BOOL, F32, I64, U32, builtin, ops
from tests.irbuild import KernelBuilder, T, lit


@attrs.define
class FakeBinding:
    """What pack_info reads of a BufferBinding."""

    buffer_len: int
    len: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _metadata(info: np.ndarray, slot: int) -> dict:
    """Read a buffer's metadata back with the formulas the lowering uses."""
    base = 3 * slot
    block = int(info[base + 2])
    out = {"buffer_len": int(info[base]), "len": int(info[base + 1])}
    if block:
        rank = int(info[block])
        out["shape"] = tuple(int(info[block + 1 + d]) for d in range(rank))
        out["strides"] = tuple(int(info[block + 1 + rank + d]) for d in range(rank))
    return out


def test_pack_info_layout():
    buffers = [
        FakeBinding(100, 100, (100,), (1,)),
        FakeBinding(24, 6, (2, 3, 4), (12, 4, 1)),
        FakeBinding(50, 40, (5, 8), (10, 1)),
    ]
    info = abi.pack_info(buffers, extended=[False, True, True])
    assert info.dtype == np.uint32
    assert info.tolist() == [100, 100, 0, 24, 6, 9, 50, 40, 16, 3, 2, 3, 4, 12, 4, 1, 2, 5, 8, 10, 1]
    assert _metadata(info, 1) == {"buffer_len": 24, "len": 6, "shape": (2, 3, 4), "strides": (12, 4, 1)}
    assert _metadata(info, 0) == {"buffer_len": 100, "len": 100}


def test_pack_info_defaults_to_a_block_per_buffer_and_never_empty():
    info = abi.pack_info([FakeBinding(8, 8, (8,), (1,))])
    assert info.tolist() == [8, 8, 3, 1, 8, 1]
    assert abi.pack_info([]).tolist() == [0]


def test_extended_flags_follow_roles_and_reads():
    kb = KernelBuilder()
    kb.array(T(F32))
    kb.scalar(T(U32))
    kb.tensor(T(F32))
    shaped = kb.array(T(F32))
    kb.emit(ops.lookup("len")(kb.params[0].var), T(U32))
    kb.emit(ops.lookup("shape")(shaped, lit(0, U32)), T(U32))
    assert abi.extended_flags(kb.build()) == [False, True, True]


@pytest.mark.parametrize(
    "binding, match",
    [
        (FakeBinding(2**32, 1, (1,), (1,)), "buffer_len"),
        (FakeBinding(1, 1, (3,), (-1,)), r"stride\[0\]"),
        (FakeBinding(1, 1, (3, 2), (1,)), "rank"),
    ],
)
def test_pack_info_rejects_what_u32_cannot_describe(binding, match):
    with pytest.raises(LaunchError, match=match):
        abi.pack_info([binding])


def test_pack_info_reads_real_buffer_bindings():
    from cubepy.runtime import bindings
    from cubepy.runtime import handle as handle_mod

    storage = np.zeros(4 * 6 + 2, dtype=np.float32)
    handle = handle_mod.Handle(None, storage, np.float32, (4, 6), offset=2)
    binding = bindings.BufferBinding(handle, 2, (4, 6), (6, 1))
    info = abi.pack_info([binding], extended=[True])
    assert _metadata(info, 0) == {"buffer_len": 12, "len": 12, "shape": (4, 6), "strides": (6, 1)}


def test_entry_parameters_follow_the_abi():
    kb = KernelBuilder("abi_kernel")
    a = kb.array(T(F32, 4), "a")
    flag = kb.scalar(T(BOOL), "flag")
    count = kb.scalar(T(I64), "count")
    kb.tensor_map("tmap")
    t = kb.tensor(T(F32), "t")
    pos = builtin("absolute_pos")
    with kb.if_(flag):
        kb.store(a, pos, kb.index(a, pos))
    stride = kb.emit(ops.lookup("stride")(t, lit(1, U32)), T(U32))
    kb.store(t, pos, kb.cast(kb.binary("add", kb.cast(stride, T(I64)), count), T(F32)))
    compiled = compile_definition(kb.build(), assemble=False)
    header = next(line for line in compiled.llvm.splitlines() if line.startswith("define"))
    params = re.search(r"@\"?abi_kernel\"?\((.*)\)", header).group(1)
    assert params == (
        'ptr addrspace(1) %"a", i8 %"flag", i64 %"count", '
        'ptr byval([128 x i8]) align 64 "nvvm.grid_constant" %"tmap", '
        'ptr addrspace(1) %"t", ptr addrspace(1) %"info"'
    )
    assert ".param .align 64 .b8 abi_kernel_param_3[128]" in compiled.ptx
    assert compiled.ptx.count(".param .u64 .ptr .global") == 3


def test_scalar_parameter_space_layout():
    """What the CUDA runtime's parameter packing relies on: a line is a vector padded to a power of two."""
    from cubepy.ir import BF16, F16, U8

    kb = KernelBuilder("params")
    out = kb.array(T(F32), "out")
    scalars = [kb.scalar(ty) for ty in (T(F32, 3), T(U8, 3), T(BOOL), T(F16), T(I64), T(BF16, 2))]
    total = lit(0.0, F32)
    for var in scalars:
        first = kb.emit(ops.ExtractLane(var, lit(0, U32)), T(var.elem)) if var.type.is_line else var
        total = kb.binary("add", total, kb.cast(first, T(F32)))
    kb.store(out, builtin("absolute_pos"), total)
    ptx = compile_definition(kb.build(), assemble=False).ptx
    declared = re.findall(r"\.param (.*?) params_param_(\d+)(\[\d+\])?", ptx)
    assert [(spec, size) for spec, _, size in declared] == [
        (".u64 .ptr .global .align 1", ""),
        (".align 16 .b8", "[16]"),
        (".align 4 .b8", "[4]"),
        (".u8", ""),
        (".align 2 .b8", "[2]"),
        (".u64", ""),
        (".align 4 .b8", "[4]"),
        (".u64 .ptr .global .align 1", ""),
    ]
