"""cp.async copies lower to the NVVM intrinsics: the PTX forms are present and ptxas assembles them."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Line, f16, f32, u32
from cubepy.errors import CompileError

A32 = cp.BufferCompilationArg("f32", 1)
A16 = cp.BufferCompilationArg("f16", 1)
LINES = cp.BufferCompilationArg("f32", 4)


@cp.cube(launch=True)
def every_form(a: Array[f32], h: Array[f16], out: Array[f32], n: u32):
    smem = cp.SharedMemory[f32](128)
    half = cp.SharedMemory[f16](64)
    cp.memcpy_async(a[UNIT_POS * 4 : UNIT_POS * 4 + 4], smem[UNIT_POS * 4 : UNIT_POS * 4 + 4])  # cg 16
    cp.memcpy_async(a[UNIT_POS * 4 : UNIT_POS * 4 + 4], smem[UNIT_POS * 4 : UNIT_POS * 4 + 4], cache="ca")
    cp.memcpy_async(h[0:4], half[4:8])  # ca 8
    cp.memcpy_async(h[0:2], half[2:4])  # ca 4
    cp.async_commit_group()
    cp.memcpy_async(a.slice(0, n), smem[0:8])  # ragged: the src-size form
    cp.async_commit_group()
    cp.async_wait_group(1)
    cp.async_wait_group(0)
    cp.sync_cube()
    out[UNIT_POS] = smem[UNIT_POS] + f32(half[UNIT_POS])


@pytest.mark.ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_every_form_is_in_the_ptx_and_assembles(target):
    compiled = every_form.compile((32, 1, 1), A32, A16, A32, cp.ScalarArg(4, u32), target=target, unchecked=True)
    ptx = compiled.ptx
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16;", ptx), ptx
    assert re.search(r"cp\.async\.ca\.shared\.global \[%r\d+\], \[%rd\d+\], 16;", ptx)
    # comptime offsets fold into the addresses: [shared1+8]
    assert re.search(r"cp\.async\.ca\.shared\.global \[shared\d\+8\], \[%rd\d+\], 8;", ptx)
    assert re.search(r"cp\.async\.ca\.shared\.global \[shared\d\+4\], \[%rd\d+\], 4;", ptx)
    # the ragged copy: a runtime src-size operand (zero fill past it), one per 16-byte chunk
    ragged = re.findall(r"cp\.async\.cg\.shared\.global \[shared\d(?:\+16)?\], \[%rd\d+(?:\+16)?\], 16, %r\d+;", ptx)
    assert len(ragged) == 2
    assert ptx.count("cp.async.commit_group;") == 2
    assert re.search(r"cp\.async\.wait_group\s+1;", ptx) and re.search(r"cp\.async\.wait_group\s+0;", ptx)
    assert compiled.cubin


@cp.cube(launch=True)
def line_copy(a: Array[Line[f32, 4]], out: Array[Line[f32, 4]]):
    smem = cp.SharedMemory[Line[f32, 4]](32)
    cp.memcpy_async(a[UNIT_POS : UNIT_POS + 1], smem[UNIT_POS : UNIT_POS + 1])
    cp.async_commit_group()
    cp.async_wait_group(0)
    out[UNIT_POS] = smem[UNIT_POS]


@pytest.mark.ptxas
def test_a_16_byte_line_is_one_cp_async_and_no_shared_store():
    ptx = line_copy.compile((32, 1, 1), LINES, LINES, unchecked=True).ptx
    assert len(re.findall(r"cp\.async\.cg\.shared\.global", ptx)) == 1
    assert "st.shared" not in ptx


def test_before_sm_80_is_a_compile_error():
    with pytest.raises(CompileError, match="needs sm_80 or later"):
        line_copy.compile((32, 1, 1), LINES, LINES, target="sm_75", unchecked=True)


@cp.cube(launch=True)
def checked_chunks(a: Array[f32], out: Array[f32]):
    smem = cp.SharedMemory[f32](128)
    cp.memcpy_async(a[UNIT_POS * 4 : UNIT_POS * 4 + 4], smem[UNIT_POS * 4 : UNIT_POS * 4 + 4])
    cp.async_commit_group()
    cp.async_wait_group(0)
    cp.sync_cube()
    out[UNIT_POS] = smem[UNIT_POS]


@pytest.mark.ptxas
def test_a_checked_chunk_is_the_ignore_src_form_and_a_ragged_one_keeps_its_byte_count():
    # checked, with the launch's length a multiple of 16 items, a chunk of 4 items at a multiple of 4 lies all
    # inside the buffer or all past its end: all or nothing, so one predicate instead of a byte count
    client = cp.client("interp")
    whole = [cp.ArrayArg(client.zeros((128,), np.float32)) for _ in range(2)]
    ptx = checked_chunks.compile((32, 1, 1), *whole).ptx
    assert re.findall(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %p\d+;", ptx), ptx
    assert not re.search(r"cp\.async\.cg\.shared\.global [^;]*, 16, %r\d+;", ptx)
    # a count that may be anything from 0 to 16 keeps the src-size operand (beside the predicated form)
    ragged = every_form.compile((32, 1, 1), A32, A16, A32, cp.ScalarArg(4, u32), unchecked=True).ptx
    assert re.search(r"cp\.async\.cg\.shared\.global [^;]*, 16, %r\d+;", ragged)
