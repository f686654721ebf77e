"""Memories in the interp: bounds checks, lines, lanes of lines, metadata, shared memory, local arrays."""

from __future__ import annotations

import numpy as np
import pytest

from cubepy.errors import LaunchError, SanitizerError
from cubepy.ir import ops
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.handle import Handle
from cubepy.runtime.interp import executor, run
from cubepy.runtime.interp import launch as interp_launch

from .irb import F32, I32, U32, Builder, bi, c, launch, line


def copy_kernel(checked: bool, offset: int = 0):
    """out[pos + offset] = inp[pos + offset] for pos in 0..32 (with the given bounds mode)."""
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    pos = b.binary("add", bi("unit_pos"), c(offset))
    b.store(out, pos, b.load(inp, pos, checked=checked), checked=checked)
    return b.kernel()


def test_checked_reads_give_zero_and_checked_writes_drop():
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    pos = bi("unit_pos")
    b.store(out, pos, b.load(inp, b.binary("add", pos, c(20)), checked=True), checked=True)
    _, result = launch(b.kernel(), 1, [np.arange(1, 41, dtype=np.float32), np.full(24, -1, np.float32)])
    expected = np.concatenate([np.arange(21, 41), np.zeros(4)]).astype(np.float32)
    np.testing.assert_array_equal(result, expected)  # lanes 24..31 wrote out of bounds: dropped


def test_unchecked_out_of_bounds_read_is_reported():
    with pytest.raises(SanitizerError) as info:
        launch(copy_kernel(False, offset=10), 1, [np.zeros(40, np.float32), np.zeros(64, np.float32)])
    message = str(info.value)
    assert "user_kernel.py:42" in message
    assert "out-of-bounds read of global buffer 0 (buf0) at index 40 (length 40)" in message
    assert "unit (30, 0, 0) of cube (0, 0, 0)" in message
    assert "index global[0]" in message


def test_unchecked_out_of_bounds_write_is_reported_and_nothing_further_runs():
    b = Builder()
    out, after = b.buffer(U32), b.buffer(U32)
    b.store(out, bi("absolute_pos"), c(1))
    b.store(after, c(0), c(7))
    with pytest.raises(SanitizerError, match=r"write of global buffer 0 .* index 32 .*cube \(1, 0, 0\)"):
        launch(b.kernel(), 2, [np.zeros(32, np.uint32), np.zeros(1, np.uint32)])


def test_negative_index_is_out_of_bounds():
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    idx = b.binary("sub", b.cast(bi("unit_pos"), I32), c(1, I32))
    b.store(out, bi("unit_pos"), b.load(inp, idx, checked=True))
    _, result = launch(b.kernel(), 1, [np.arange(32, dtype=np.float32), np.full(32, 9, np.float32)])
    np.testing.assert_array_equal(result, np.r_[0, np.arange(31)])
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    idx = b.binary("sub", b.cast(bi("unit_pos"), I32), c(1, I32))
    b.store(out, bi("unit_pos"), b.load(inp, idx))
    with pytest.raises(SanitizerError, match="index -1"):
        launch(b.kernel(), 1, [np.arange(32, dtype=np.float32), np.zeros(32, np.float32)])


def test_inactive_lanes_never_fault():
    # Lanes past the end compute an out-of-bounds index but are masked off by the guard.
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, b.meta("len", inp))):
        b.store(out, pos, b.load(inp, pos))
    _, result = launch(b.kernel(), 2, [np.arange(40, dtype=np.float32), np.zeros(40, np.float32)])
    np.testing.assert_array_equal(result, np.arange(40))


def test_line4_loads_and_stores():
    b = Builder()
    ty = line(F32, 4)
    x, out = b.buffer(ty), b.buffer(ty)
    pos = bi("unit_pos")
    doubled = b.binary("mul", b.load(x, pos), c(2.0, ty))
    b.store(out, pos, doubled)
    data = np.arange(64, dtype=np.float32)
    _, result = launch(b.kernel((16, 1, 1)), 1, [data, np.zeros(64, np.float32)], line_sizes={0: 4, 1: 4})
    np.testing.assert_array_equal(result, data * 2)


def test_line_buffer_metadata_counts_items():
    b = Builder()
    x, out = b.buffer(line(F32, 4)), b.buffer(U32)
    b.store(out, c(0), b.meta("len", x))
    b.store(out, c(1), b.meta("buffer_len", x))
    b.store(out, c(2), b.meta("rank", x))
    b.store(out, c(3), b.meta("shape", x, c(0)))
    b.store(out, c(4), b.meta("stride", x, c(0)))
    _, result = launch(b.kernel((1, 1, 1)), 1, [np.zeros(32, np.float32), np.zeros(5, np.uint32)], line_sizes={0: 4})
    np.testing.assert_array_equal(result, [8, 8, 1, 32, 1])


def test_tensor_metadata_and_offset_handle():
    b = Builder()
    t, out = b.buffer(F32), b.buffer(U32)
    for i, (name, dim) in enumerate(
        [("shape", 0), ("shape", 1), ("stride", 0), ("stride", 1), ("len", None), ("buffer_len", None)]
    ):
        b.store(out, c(i), b.meta(name, t, None if dim is None else c(dim)))
    b.store(out, c(6), b.cast(b.load(t, c(0)), U32))
    kernel = b.kernel((1, 1, 1))
    storage = np.arange(20, dtype=np.float32)
    handle = Handle(None, storage, np.float32, (3, 4), strides=(5, 1), offset=2)
    results = np.zeros(7, np.uint32)
    bindings = Bindings(
        [BufferBinding(handle, 1, (3, 4), (5, 1)), BufferBinding(Handle(None, results, np.uint32, (7,)), 1, (7,), (1,))]
    )
    run(kernel, (1, 1, 1), bindings)
    np.testing.assert_array_equal(results, [3, 4, 5, 1, 12, 18, 2])


def test_metadata_dimension_out_of_range():
    b = Builder()
    t, out = b.buffer(F32), b.buffer(U32)
    b.store(out, c(0), b.meta("shape", t, c(3)))
    with pytest.raises(SanitizerError, match=r"shape\(3\) of a rank-1 buffer"):
        launch(b.kernel((1, 1, 1)), 1, [np.zeros(4, np.float32), np.zeros(1, np.uint32)])


def test_extract_and_insert_lane():
    b = Builder()
    ty = line(I32, 4)
    x, out, firsts = b.buffer(ty), b.buffer(ty), b.buffer(I32)
    pos = bi("unit_pos")
    value = b.mut(ty, b.load(x, pos))
    lane = b.binary("mod", pos, c(4))
    b.store(firsts, pos, b.emit(ops.ExtractLane(value, lane), I32))
    b.emit(ops.InsertLane(value, lane, c(-1, I32)))
    with b.if_(b.compare("eq", pos, c(0))):
        b.emit(ops.InsertLane(value, c(3), c(-9, I32)))
    b.store(out, pos, value)
    data = np.arange(32, dtype=np.int32)
    _, result, first = launch(
        b.kernel((8, 1, 1)), 1, [data, np.zeros(32, np.int32), np.zeros(8, np.int32)], line_sizes={0: 4, 1: 4}
    )
    expected = data.reshape(8, 4).copy()
    np.testing.assert_array_equal(first, expected[np.arange(8), np.arange(8) % 4])
    expected[np.arange(8), np.arange(8) % 4] = -1
    expected[0, 3] = -9
    np.testing.assert_array_equal(result.reshape(8, 4), expected)


def test_several_lanes_storing_one_item_highest_lane_wins():
    b = Builder()
    out = b.buffer(U32)
    active = b.compare("ne", bi("unit_pos"), c(31))
    with b.if_(active):
        b.store(out, b.binary("mod", bi("unit_pos"), c(4)), bi("unit_pos"))
    (result,) = launch(b.kernel(), 1, [np.zeros(4, np.uint32)])
    np.testing.assert_array_equal(result, [28, 29, 30, 27])  # lane 31 is inactive
    b = Builder()
    out = b.buffer(U32)
    b.store(out, c(0), bi("unit_pos"))  # a uniform index: the last lane's value stays
    (result,) = launch(b.kernel(), 1, [np.zeros(1, np.uint32)])
    assert result[0] == 31


def shared_sum_kernel(units: int):
    """Tree reduction of each cube's inputs in shared memory; unit 0 writes the cube's sum."""
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    smem = b.shared_memory(F32, units)
    unit = bi("unit_pos")
    b.store(smem, unit, b.load(inp, bi("absolute_pos")))
    b.sync_cube()
    stride = b.mut(U32, c(units // 2))
    with b.loop():
        with b.if_(b.compare("eq", stride, c(0))):
            b.break_()
        with b.if_(b.compare("lt", unit, stride)):
            other = b.load(smem, b.binary("add", unit, stride))
            b.store(smem, unit, b.binary("add", b.load(smem, unit), other))
        b.sync_cube()
        b.assign(stride, b.binary("shr", stride, c(1)))
    with b.if_(b.compare("eq", unit, c(0))):
        b.store(out, bi("cube_pos"), b.load(smem, c(0)))
    return b.kernel((units, 1, 1))


def test_shared_memory_reduction_over_two_cubes():
    data = np.arange(128, dtype=np.float32)
    _, result = launch(shared_sum_kernel(64), 2, [data, np.zeros(2, np.float32)], sanitize=True)
    np.testing.assert_array_equal(result, [data[:64].sum(), data[64:].sum()])


def test_shared_memory_is_per_cube_across_chunks(monkeypatch):
    monkeypatch.setattr(interp_launch, "MAX_LANES_PER_CHUNK", 96)  # 3 cubes of 32 per chunk, 10 cubes
    data = np.random.default_rng(1).integers(0, 100, 320).astype(np.float32)
    _, result = launch(shared_sum_kernel(32), 10, [data, np.zeros(10, np.float32)])
    np.testing.assert_array_equal(result, data.reshape(10, 32).sum(axis=1))


def test_shared_memories_are_laid_out_aligned_in_one_arena():
    b = Builder()
    out = b.buffer(U32)
    small = b.shared_memory(U32, 3)
    big = b.shared_memory(line(F32, 4), 8, alignment=1024)
    b.store(small, c(2), c(5))
    b.store(big, c(7), c(1.5, line(F32, 4)))
    b.store(out, c(0), b.load(small, c(2)))
    kernel = b.kernel((1, 1, 1))
    program = executor.prepare(kernel)
    assert program.shared_offsets == {0: 0, 1: 1024}
    assert program.shared_bytes == 2048
    (result,) = launch(kernel, 1, [np.zeros(1, np.uint32)])
    assert result[0] == 5


def test_local_arrays_are_per_unit():
    b = Builder()
    out = b.buffer(U32)
    arr = b.local_array(U32, 4)
    unit = bi("unit_pos")
    with b.range_loop(c(0), c(4)) as i:
        b.store(arr, i, b.binary("mul", unit, i))
    total = b.mut(U32, c(0))
    with b.range_loop(c(0), c(4)) as i:
        b.assign(total, b.binary("add", total, b.load(arr, i)))
    b.store(out, unit, total)
    (result,) = launch(b.kernel(), 1, [np.zeros(32, np.uint32)])
    np.testing.assert_array_equal(result, np.arange(32) * 6)


def test_local_array_out_of_bounds():
    b = Builder()
    arr = b.local_array(U32, 4)
    b.store(arr, bi("unit_pos"), c(1))
    with pytest.raises(SanitizerError, match=r"write of local array 0 at index 4 \(length 4\), by unit \(4, 0, 0\)"):
        launch(b.kernel(), 1)


def test_binding_mismatches_are_launch_errors():
    b = Builder()
    out = b.buffer(F32)
    b.store(out, c(0), c(1.0, F32))
    kernel = b.kernel((1, 1, 1))
    with pytest.raises(LaunchError, match="holds int32"):
        launch(kernel, 1, [np.zeros(4, np.int32)])
    with pytest.raises(LaunchError, match="line size 4"):
        launch(kernel, 1, [np.zeros(4, np.float32)], line_sizes={0: 4})
