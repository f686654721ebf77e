"""Expansion of the barrier and TMA API into IR: instruction names, operand order and text forms."""

from __future__ import annotations

import pytest

import cubepy as cp
from cubepy import TensorMap, f16, f32, i32, u32
from cubepy.runtime.tensormap import TensorMapCompilationArg


@cp.cube
def tiled_round_trip(m: TensorMap[f32], y: u32, x: i32):
    bar = cp.Barrier.shared(32, cp.UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 512, 128)
    bar.tma_load_2d(m, stage.slice(256, 512), y, x)
    token = bar.arrive_and_expect_tx(1, 1024)
    bar.wait(token)
    bar.expect_tx(16)
    bar.wait_parity(1)
    bar.arrive_and_wait()
    cp.tma_store_2d(stage, m, 3, x)
    cp.tma_group_commit()
    cp.tma_group_wait(0)
    cp.tma_group_wait_read(1)


@cp.cube
def loads_of_every_rank(m1: TensorMap[f32], m3: TensorMap[f32], m5: TensorMap[f32]):
    bar = cp.Barrier.shared(1, True)
    stage = cp.SharedMemory.aligned(f32, 1024, 128)
    bar.tma_load_1d(m1, stage, 1)
    bar.tma_load_3d(m3, stage, 1, 2, 3)
    bar.tma_load_4d(m5, stage, 1, 2, 3, 4)
    bar.tma_load_5d(m5, stage, 1, 2, 3, 4, 5)
    cp.tma_store_1d(stage, m1, 7)
    cp.tma_store_3d(stage, m3, 1, 2, 3)
    cp.tma_store_4d(stage, m5, 1, 2, 3, 4)
    cp.tma_store_5d(stage, m5, 1, 2, 3, 4, 5)


@cp.cube
def im2col_loads(m: TensorMap[f16], n: u32):
    bar = cp.Barrier.shared(1, True)
    stage = cp.SharedMemory.aligned(f16, 1024, 128)
    bar.tma_load_im2col_3d(m, stage, n, -1, 0, 2)
    bar.tma_load_im2col_4d(m, stage, n, -1, -2, 8, 1, 2)
    bar.tma_load_im2col_5d(m, stage, n, -1, -2, -3, 8, 1, 2, 3)


def _lines(expansion) -> list[str]:
    return [line.split("  ;")[0] for line in expansion.ir.splitlines()]


def test_tiled_ops_text_and_driver_order():
    e = cp.testing.expand(tiled_round_trip, TensorMap[f32], u32, i32)
    assert [i.op for i in e.instructions] == [
        "eq",
        "barrier_init",
        "cast",
        "tma_load",
        "barrier_arrive_expect_tx",
        "barrier_wait",
        "barrier_expect_tx",
        "barrier_wait_parity",
        "barrier_arrive",
        "barrier_wait",
        "tma_store",
        "tma_group_commit",
        "tma_group_wait",
        "tma_group_wait_read",
    ]
    lines = _lines(e)
    assert "barrier_init barrier[0], 32u32, %0" in lines
    assert "%1: i32 = cast scalar[0]" in lines  # a u32 coordinate becomes i32 (CubeCL's `as i32`)
    # coordinates are outermost first in the API and innermost first in the IR: (y, x) -> x, y
    assert "tma_load barrier[0], tmap[0], shared[0], 256u32, 256u32, scalar[1], %1 {rank=2}" in lines
    assert "%2: u64 = barrier_arrive_expect_tx barrier[0], 1u32, 1024u32" in lines
    assert "barrier_wait barrier[0], %2" in lines
    assert "barrier_expect_tx barrier[0], 16u32" in lines
    assert "barrier_wait_parity barrier[0], 1u32" in lines
    assert "%3: u64 = barrier_arrive barrier[0]" in lines and "barrier_wait barrier[0], %3" in lines
    assert "tma_store tmap[0], shared[0], 0u32, 512u32, scalar[1], 3i32 {rank=2}" in lines
    assert lines[-3:] == ["tma_group_commit", "tma_group_wait {pending=0}", "tma_group_wait_read {pending=1}"]


def test_every_rank_reverses_its_coordinates():
    e = cp.testing.expand(loads_of_every_rank, TensorMap[f32], TensorMap[f32], TensorMap[f32])
    lines = _lines(e)
    assert "tma_load barrier[0], tmap[0], shared[0], 0u32, 1024u32, 1i32 {rank=1}" in lines
    assert "tma_load barrier[0], tmap[1], shared[0], 0u32, 1024u32, 3i32, 2i32, 1i32 {rank=3}" in lines
    assert "tma_load barrier[0], tmap[2], shared[0], 0u32, 1024u32, 4i32, 3i32, 2i32, 1i32 {rank=4}" in lines
    assert "tma_load barrier[0], tmap[2], shared[0], 0u32, 1024u32, 5i32, 4i32, 3i32, 2i32, 1i32 {rank=5}" in lines
    assert "tma_store tmap[0], shared[0], 0u32, 1024u32, 7i32 {rank=1}" in lines
    assert "tma_store tmap[2], shared[0], 0u32, 1024u32, 5i32, 4i32, 3i32, 2i32, 1i32 {rank=5}" in lines


def test_im2col_coordinates_and_offsets_are_w_first():
    e = cp.testing.expand(im2col_loads, TensorMap[f16], u32)
    im2col = [line for line in _lines(e) if line.startswith("tma_load_im2col")]
    assert im2col == [
        "tma_load_im2col barrier[0], tmap[0], shared[0], 0u32, 1024u32, 0i32, -1i32, %0, 2u16 {rank=3}",
        "tma_load_im2col barrier[0], tmap[0], shared[0], 0u32, 1024u32, 8i32, -2i32, -1i32, %1, 2u16, 1u16 {rank=4}",
        "tma_load_im2col barrier[0], tmap[0], shared[0], 0u32, 1024u32, 8i32, -3i32, -2i32, -1i32, %2, 3u16, 2u16, "
        "1u16 {rank=5}",
    ]


@cp.cube(launch=True)
def wrong_rank(m: TensorMap[f32]):
    bar = cp.Barrier.shared(1, True)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    bar.tma_load_3d(m, stage, 0, 0, 0)


@cp.cube
def wrong_elem(m: TensorMap[f32]):
    bar = cp.Barrier.shared(1, True)
    stage = cp.SharedMemory.aligned(f16, 256, 128)
    bar.tma_load_2d(m, stage, 0, 0)


@cp.cube
def local_destination(m: TensorMap[f32]):
    bar = cp.Barrier.shared(1, True)
    stage = cp.LocalArray[f32](256)
    bar.tma_load_2d(m, stage, 0, 0)


@cp.cube
def runtime_group_count(m: TensorMap[f32], n: u32):
    cp.tma_group_wait(n)


@cp.cube
def offset_too_wide(m: TensorMap[f32]):
    bar = cp.Barrier.shared(1, True)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    bar.tma_load_im2col_3d(m, stage, 0, 0, 0, 70000)


def test_rank_of_the_copy_must_match_the_map():
    with pytest.raises(cp.ExpandError, match="rank 2"):
        cp.testing.expand(wrong_rank, TensorMapCompilationArg("f32", 2, "tiled"))


def test_shared_element_type_must_match_the_map():
    with pytest.raises(cp.ExpandError, match="shared memory of f16 with a tensor map of f32"):
        cp.testing.expand(wrong_elem, TensorMap[f32])


def test_destination_must_be_shared_memory():
    with pytest.raises(cp.ExpandError, match="through shared memory"):
        cp.testing.expand(local_destination, TensorMap[f32])


def test_group_wait_count_is_comptime():
    with pytest.raises(cp.ExpandError, match="comptime int"):
        cp.testing.expand(runtime_group_count, TensorMap[f32], u32)


def test_im2col_offset_is_u16():
    with pytest.raises(cp.ExpandError, match="not a u16"):
        cp.testing.expand(offset_too_wide, TensorMap[f32])
