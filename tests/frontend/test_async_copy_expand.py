"""Expansion of ``cp.memcpy_async``, copy groups and ``cp.Pipeline`` into ``async_copy`` IR ops."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Line, f16, f32, u32
from cubepy.errors import ExpandError


def _copies(expansion) -> list:
    return [i.operation for i in expansion.instructions if i.op == "async_copy"]


@cp.cube
def one_line_per_unit(a: Array[Line[f32, 4]]):
    smem = cp.SharedMemory[Line[f32, 4]](32)
    cp.memcpy_async(a[UNIT_POS : UNIT_POS + 1], smem[UNIT_POS : UNIT_POS + 1])
    cp.async_commit_group()
    cp.async_wait_group(0)


def test_a_16_byte_line_is_one_cg_copy_of_16_bytes():
    e = cp.testing.expand(one_line_per_unit, Array[Line[f32, 4]])
    (copy,) = _copies(e)
    assert (copy.size, copy.cache) == (16, "cg")
    assert copy.src_bytes.is_constant and copy.src_bytes.value == 16
    assert [i.op for i in e.instructions][-2:] == ["async_commit_group", "async_wait_group"]
    assert e.instructions[-1].operation.pending == 0


@cp.cube
def whole_tile(a: Array[f32], base: u32):
    smem = cp.SharedMemory[f32](24)
    cp.memcpy_async(a[base : base + 24], smem)


def test_a_96_byte_tile_is_six_16_byte_copies_at_consecutive_offsets():
    copies = _copies(cp.testing.expand(whole_tile, Array[f32], u32))
    assert [c.size for c in copies] == [16] * 6
    assert [c.dst_offset.value for c in copies] == [0, 4, 8, 12, 16, 20]  # elements, 16 bytes apart


@cp.cube
def sizes_from_comptime_offsets(a: Array[f16]):
    smem = cp.SharedMemory[f16](64)
    cp.memcpy_async(a[0:4], smem[4:8])  # 8 bytes at byte offset 8: one 8-byte copy
    cp.memcpy_async(a[0:6], smem[2:8])  # 12 bytes at byte offset 4: three 4-byte copies


def test_chunk_size_follows_size_and_known_alignment():
    copies = _copies(cp.testing.expand(sizes_from_comptime_offsets, Array[f16]))
    assert [(c.size, c.cache) for c in copies] == [(8, "ca"), (4, "ca"), (4, "ca"), (4, "ca")]
    assert [c.dst_offset.value for c in copies] == [4, 2, 4, 6]


@cp.cube
def ragged(a: Array[f32], n: u32):
    smem = cp.SharedMemory[f32](8)
    cp.memcpy_async(a.slice(0, n), smem)


def test_a_runtime_source_length_gives_per_chunk_source_byte_counts():
    copies = _copies(cp.testing.expand(ragged, Array[f32], u32))
    assert len(copies) == 2 and all(not c.src_bytes.is_constant for c in copies)


@cp.cube
def checked_source(a: Array[f32]):
    smem = cp.SharedMemory[f32](4)
    cp.memcpy_async(a[4:8], smem)


def test_checked_mode_cuts_the_source_at_the_buffer_end():
    unchecked = _copies(cp.testing.expand(checked_source, Array[f32]))
    assert unchecked[0].src_bytes.is_constant and unchecked[0].src_bytes.value == 16
    checked = cp.testing.expand(checked_source, Array[f32], checked=True)
    assert not _copies(checked)[0].src_bytes.is_constant
    assert "len" in [i.op for i in checked.instructions]


@cp.cube(launch=True)
def two_chunks_per_unit(a: Array[f32]):
    smem = cp.SharedMemory[f32](128)
    cp.memcpy_async(a[UNIT_POS * 8 : UNIT_POS * 8 + 8], smem[UNIT_POS * 8 : UNIT_POS * 8 + 8])


@pytest.mark.parametrize(("n", "whole_chunks"), [(64, True), (60, False)])
def test_a_length_in_whole_chunks_tests_each_chunk_instead_of_clamping(n, whole_chunks):
    # The launch found 64 a multiple of 16: a 16-byte chunk is then all inside or all past the end, and a checked
    # copy compares its offset once per chunk; for 60 the source bytes are clamped at the end (min per chunk).
    client = cp.client("interp")
    arg = cp.ArrayArg(client.create(np.zeros(n, np.float32)))
    ops = [i.op for i in cp.testing.expand(two_chunks_per_unit, arg, checked=True).instructions]
    assert ops.count("async_copy") == 2
    assert (ops.count("lt"), "min" in ops) == ((2, False) if whole_chunks else (0, True))


@cp.cube(launch=True)
def two_chunks_of_lines(a: Array[Line[f32, 4]], b: Array[Line[f32, 2]]):
    wide = cp.SharedMemory[Line[f32, 4]](64)  # a 16-byte line: one chunk each
    cp.memcpy_async(a[UNIT_POS * 2 : UNIT_POS * 2 + 2], wide[UNIT_POS * 2 : UNIT_POS * 2 + 2])
    narrow = cp.SharedMemory[Line[f32, 2]](128)  # 8-byte lines: two per chunk
    cp.memcpy_async(b[UNIT_POS * 4 : UNIT_POS * 4 + 4], narrow[UNIT_POS * 4 : UNIT_POS * 4 + 4])


@pytest.mark.parametrize(("lines", "narrow_whole"), [(64, True), (62, False)])
def test_buffers_of_lines_test_chunks_whole_when_a_chunk_holds_whole_lines(lines, narrow_whole):
    # A line that is a chunk is always wholly inside or outside (any length); two lines per chunk need the
    # launch's fact that the length (in lines) is a multiple of 16, which 62 is not: it is clamped
    client = cp.client("interp")
    args = [
        cp.ArrayArg(client.create(np.zeros(4 * lines, np.float32)), line_size=4),
        cp.ArrayArg(client.create(np.zeros(2 * lines, np.float32)), line_size=2),
    ]
    ops = [i.op for i in cp.testing.expand(two_chunks_of_lines, *args, checked=True).instructions]
    assert ops.count("async_copy") == 4
    assert (ops.count("lt"), ops.count("min") > 0) == ((4, False) if narrow_whole else (2, True))


@cp.cube
def pipelined(a: Array[f32], tiles: u32):
    smem = cp.SharedMemory[f32](64)
    pipe = cp.Pipeline(3)
    for t in range(tiles):
        pipe.producer_acquire()
        pipe.memcpy_async(a[t * 4 : t * 4 + 4], smem[(t % 3) * 4 : (t % 3) * 4 + 4])
        pipe.producer_commit()
        pipe.consumer_wait()
        pipe.consumer_release()


def test_pipeline_waits_by_the_number_of_stages_in_flight():
    text = cp.testing.expand(pipelined, Array[f32], u32).ir
    for pending in range(3):
        assert f"async_wait_group {{pending={pending}}}" in text
    assert "async_wait_group {pending=3}" not in text
    assert text.count("async_commit_group") == 1 and text.count("async_copy ") == 1


@cp.cube
def five_stages(a: Array[f32], tiles: u32):
    smem = cp.SharedMemory[f32](64)
    pipe = cp.Pipeline(5)
    for t in range(tiles):
        pipe.consumer_wait()
        if t + 4 < tiles:
            pipe.memcpy_async(a[t * 4 : t * 4 + 4], smem[(t % 5) * 4 : (t % 5) * 4 + 4])
            pipe.producer_commit()
        pipe.consumer_release()


def test_pipeline_waits_exactly_in_the_steady_states_and_wait_all_below():
    # 5 stages: >= 5 in flight waits for all but 4, exactly 4 for all but 3; fewer share wait_group 0 (with none
    # in flight it returns at once): one if/else chain of two compares
    text = cp.testing.expand(five_stages, Array[f32], u32).ir
    assert re.findall(r"async_wait_group \{pending=(\d)\}", text) == ["4", "3", "0"]
    assert len(re.findall(r"if_else %\w+", text)) == 2
    for test in (r"ge %\w+, 5u32", r"eq %\w+, 4u32"):
        assert re.search(test, text), test


def _fails(fn, *specs, match: str) -> None:
    with pytest.raises(ExpandError, match=match):
        cp.testing.expand(fn, *specs)


@cp.cube
def into_global(a: Array[f32], b: Array[f32]):
    cp.memcpy_async(a[0:4], b[0:4])


@cp.cube
def from_shared(a: Array[f32]):
    s = cp.SharedMemory[f32](8)
    t = cp.SharedMemory[f32](8)
    cp.memcpy_async(s, t)


@cp.cube
def mixed_types(a: Array[f16]):
    smem = cp.SharedMemory[f32](8)
    cp.memcpy_async(a[0:8], smem)


@cp.cube
def runtime_destination_length(a: Array[f32], n: u32):
    smem = cp.SharedMemory[f32](8)
    cp.memcpy_async(a[0:4], smem.slice(0, n))


@cp.cube
def six_bytes(a: Array[f16]):
    smem = cp.SharedMemory[f16](8)
    cp.memcpy_async(a[0:3], smem[0:3])


@cp.cube
def wait_for_eight(a: Array[f32]):
    cp.async_wait_group(8)


@cp.cube
def runtime_wait(n: u32):
    cp.async_wait_group(n)


@cp.cube
def nine_stages(a: Array[f32]):
    cp.Pipeline(9)


@cp.cube
def cg_on_4_bytes(a: Array[f32]):
    smem = cp.SharedMemory[f32](1)
    cp.memcpy_async(a[0:1], smem, cache="cg")


def test_bad_calls_name_what_is_wrong():
    _fails(into_global, Array[f32], Array[f32], match="destination: expected a shared memory")
    _fails(from_shared, Array[f32], match="source: expected a global buffer")
    _fails(mixed_types, Array[f16], match="element types must match")
    _fails(runtime_destination_length, Array[f32], u32, match="length must be comptime")
    _fails(six_bytes, Array[f16], match="4, 8 or 16 bytes; a destination of 6 bytes")
    _fails(wait_for_eight, Array[f32], match=r"comptime int in \[0, 7\], got 8")
    _fails(runtime_wait, u32, match=r"comptime int in \[0, 7\]")
    _fails(nine_stages, Array[f32], match=r"Pipeline\(stages\): expected a comptime int in \[1, 8\]")
    _fails(cg_on_4_bytes, Array[f32], match="'cg' for 16-byte chunks")


def test_errors_point_at_the_kernel_line():
    with pytest.raises(ExpandError) as info:
        cp.testing.expand(mixed_types, Array[f16])
    assert "test_async_copy_expand.py:" in str(info.value)
