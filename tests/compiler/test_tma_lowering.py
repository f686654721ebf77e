"""Every barrier and TMA form lowers to the expected PTX form and ptxas accepts it."""

from __future__ import annotations

import re

import pytest

import cubepy as cp
from cubepy import UNIT_POS, TensorMap, f16, f32, u32
from cubepy.runtime.tensormap import TensorMapCompilationArg


@cp.cube(launch=True)
def every_tiled_rank(
    m1: TensorMap[f32], m2: TensorMap[f32], m3: TensorMap[f32], m4: TensorMap[f32], m5: TensorMap[f32], arrivals: u32
):
    bar = cp.Barrier.shared(cp.CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 1024, 1024)
    if UNIT_POS == 0:
        bar.tma_load_1d(m1, stage, 1)
        bar.tma_load_2d(m2, stage, 1, 2)
        bar.tma_load_3d(m3, stage, 1, 2, 3)
        bar.tma_load_4d(m4, stage, 1, 2, 3, 4)
        bar.tma_load_5d(m5, stage, 1, 2, 3, 4, 5)
        bar.expect_tx(64)
    token = bar.arrive_and_expect_tx(arrivals, 128)
    bar.wait(token)
    bar.wait_parity(0)
    cp.sync_async_proxy_shared()
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_1d(stage, m1, 1)
        cp.tma_store_2d(stage, m2, 1, 2)
        cp.tma_store_3d(stage, m3, 1, 2, 3)
        cp.tma_store_4d(stage, m4, 1, 2, 3, 4)
        cp.tma_store_5d(stage, m5, 1, 2, 3, 4, 5)
        cp.tma_group_commit()
        cp.tma_group_wait_read(1)
        cp.tma_group_wait(0)


@cp.cube(launch=True)
def every_im2col_rank(m3: TensorMap[f16], m4: TensorMap[f16], m5: TensorMap[f16], n: u32, off: u32):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f16, 1024, 128)
    if UNIT_POS == 0:
        bar.tma_load_im2col_3d(m3, stage, n, -1, 0, off)
        bar.tma_load_im2col_4d(m4, stage, n, -1, -1, 0, off, 1)
        bar.tma_load_im2col_5d(m5, stage, n, -1, -1, -1, 0, 1, off, 2)
        bar.arrive_and_wait()


def _maps(dtype: str, ranks, mode: str):
    return [TensorMapCompilationArg(dtype, rank, mode) for rank in ranks]


@pytest.mark.ptxas
def test_tiled_loads_stores_and_barriers_assemble():
    compiled = every_tiled_rank.compile((64, 1, 1), *_maps("f32", range(1, 6), "tiled"), cp.ScalarArg(2, u32))
    ptx = compiled.ptx
    for rank in range(1, 6):
        coords = ", ".join(["%r\\d+"] * rank)
        assert re.search(
            rf"cp\.async\.bulk\.tensor\.{rank}d\.shared::cluster\.global\.tile\.mbarrier::complete_tx"
            rf"::bytes \[%r\d+\], \[%rd\d+, \{{{coords}\}}\], \[barrier0\];",
            ptx,
        ), rank
        assert f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group" in ptx
    for form in (
        "mbarrier.init.shared.b64",
        "fence.proxy.async.shared::cta",
        "bar.sync",
        "mbarrier.expect_tx",
        "mbarrier.arrive.shared.b64",
        "mbarrier.try_wait.shared.b64",
        "mbarrier.try_wait.parity.shared.b64",
        "cp.async.bulk.commit_group",
        "cp.async.bulk.wait_group.read",
        "cp.async.bulk.wait_group",
    ):
        assert form in ptx, form
    assert ptx.count(".param .align 64 .b8") == 5
    assert compiled.cubin and compiled.resources.barriers == 1


@pytest.mark.ptxas
def test_im2col_loads_assemble_with_i16_offsets():
    compiled = every_im2col_rank.compile(
        (32, 1, 1), *_maps("f16", (3, 4, 5), "im2col"), cp.ScalarArg(0, u32), cp.ScalarArg(1, u32)
    )
    ptx = compiled.ptx
    for rank in (3, 4, 5):
        offsets = ", ".join(["%rs\\d+"] * (rank - 2))
        assert re.search(
            rf"cp\.async\.bulk\.tensor\.{rank}d\.shared::cluster\.global\.im2col\.mbarrier::complete_tx"
            rf"::bytes \[%r\d+\], \[%rd\d+, \{{[^}}]*\}}\], \[barrier0\], \{{{offsets}\}};",
            ptx,
        ), rank
    assert "mbarrier.arrive.expect_tx" not in ptx and "mbarrier.arrive.shared.b64" in ptx
    assert compiled.cubin
