"""The kernel ABI: entry parameters and the by-value metadata words."""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

from cubepy.compiler import abi
from cubepy.compiler.compiled import compile_definition
from cubepy.errors import CompileError, LaunchError
from cubepy.ir import BOOL, F32, I64, U32, builtin, ops
from tests.irbuild import KernelBuilder, T, lit


@attrs.define
class FakeBinding:
    """What pack_metadata reads of a BufferBinding."""

    buffer_len: int
    len: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _three_buffers(shape_read=(False, True, True)):
    """An array, a rank-3 tensor and a rank-2 tensor; ``shape_read`` says whose shape the kernel reads."""
    kb = KernelBuilder()
    buffers = [kb.array(T(F32)), kb.tensor(T(F32), rank=3), kb.tensor(T(F32), rank=2)]
    kb.scalar(T(U32))
    for buffer, read in zip(buffers, shape_read):
        if read:
            kb.emit(ops.lookup("stride")(buffer, lit(0, U32)), T(U32))
    return kb.build()


def test_metadata_words_follow_slots_and_reads():
    words = [(w.buffer, w.name) for w in abi.metadata_words(_three_buffers())]
    assert words == [
        (0, "buffer_len"),
        (0, "len"),
        (1, "buffer_len"),
        (1, "len"),
        (1, "shape0"),
        (1, "shape1"),
        (1, "shape2"),
        (1, "stride0"),
        (1, "stride1"),
        (1, "stride2"),
        (2, "buffer_len"),
        (2, "len"),
        (2, "shape0"),
        (2, "shape1"),
        (2, "stride0"),
        (2, "stride1"),
    ]
    # a tensor whose shape the kernel never reads has only its two lengths
    assert len(abi.metadata_words(_three_buffers((False, False, True)))) == 2 + 2 + 6


def test_pack_metadata_values():
    buffers = [
        FakeBinding(100, 100, (100,), (1,)),
        FakeBinding(24, 6, (2, 3, 4), (12, 4, 1)),
        FakeBinding(50, 40, (5, 8), (10, 1)),
    ]
    values = abi.pack_metadata(abi.metadata_words(_three_buffers()), buffers)
    assert values == [100, 100, 24, 6, 2, 3, 4, 12, 4, 1, 50, 40, 5, 8, 10, 1]


@pytest.mark.parametrize(
    "binding, match",
    [
        (FakeBinding(2**32, 1, (1, 1), (1, 1)), "buffer_len"),
        (FakeBinding(1, 1, (3, 2), (-1, 1)), "stride0"),
        (FakeBinding(1, 1, (3, 2, 1), (2, 1, 1)), "rank 2"),
    ],
)
def test_pack_metadata_rejects_what_the_kernel_cannot_describe(binding, match):
    kb = KernelBuilder()
    t = kb.tensor(T(F32), rank=2)
    kb.emit(ops.lookup("shape")(t, lit(0, U32)), T(U32))
    with pytest.raises(LaunchError, match=match):
        abi.pack_metadata(abi.metadata_words(kb.build()), [binding])


def test_pack_metadata_reads_real_buffer_bindings():
    from cubepy.runtime import bindings
    from cubepy.runtime import handle as handle_mod

    storage = np.zeros(4 * 6 + 2, dtype=np.float32)
    handle = handle_mod.Handle(None, storage, np.float32, (4, 6), offset=2)
    binding = bindings.BufferBinding(handle, 2, (4, 6), (6, 1))
    kb = KernelBuilder()
    t = kb.tensor(T(F32, 2), rank=2)
    kb.emit(ops.lookup("rank")(t), T(U32))
    assert abi.pack_metadata(abi.metadata_words(kb.build()), [binding]) == [12, 12, 4, 6, 6, 1]


def test_a_tensor_compiled_without_a_rank_cannot_read_its_shape():
    kb = KernelBuilder("open_rank")
    t = kb.tensor(T(F32), "t", rank=None)
    kb.store(t, lit(0, U32), kb.cast(kb.emit(ops.lookup("shape")(t, lit(0, U32)), T(U32)), T(F32)))
    with pytest.raises(CompileError, match=r"tensor parameter 't' reads its rank.*rank=N"):
        compile_definition(kb.build(), assemble=False)
    # its lengths alone need no rank
    kb = KernelBuilder("lengths_only")
    t = kb.tensor(T(F32), "t", rank=None)
    kb.store(t, lit(0, U32), kb.cast(kb.emit(ops.lookup("len")(t), T(U32)), T(F32)))
    assert compile_definition(kb.build(), assemble=False).ptx.count(".param .u32") == 2


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
        'ptr addrspace(1) %"t", i32 %"a.buffer_len", i32 %"a.len", i32 %"t.buffer_len", i32 %"t.len", '
        'i32 %"t.shape0", i32 %"t.shape1", i32 %"t.stride0", i32 %"t.stride1"'
    )
    assert ".param .align 64 .b8 abi_kernel_param_3[128]" in compiled.ptx
    assert compiled.ptx.count(".param .u64 .ptr .global") == 2
    assert compiled.ptx.count(".param .u32") == 8
    # stride(1) of a rank-2 tensor is one parameter read: no global load before the data access
    body = compiled.ptx[compiled.ptx.index("{") :]
    assert "ld.param.b32" in body and "ld.global.u32" not in body and "ld.global.b32" not in body


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
        (".u32", ""),  # out.buffer_len
        (".u32", ""),  # out.len
    ]
