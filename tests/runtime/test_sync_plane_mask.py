"""``cp.sync_plane(mask)``: CUDA's ``__syncwarp(mask)`` on the lanes a u32 mask names."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import f32, u32
from cubepy.errors import SanitizerError


@cp.cube(launch=True)
def rotate_low_half(out: cp.Array[f32]):
    """Lanes 0..15 of each plane publish a value, meet at a masked barrier and read their neighbour's."""
    tile = cp.SharedMemory[f32](64)
    lane = cp.UNIT_POS_PLANE
    if lane < 16:
        tile[cp.UNIT_POS] = f32(cp.UNIT_POS) * 2.0
        cp.sync_plane(u32(0x0000FFFF))
        neighbour = cp.UNIT_POS - lane + (lane + 1) % 16
        out[cp.UNIT_POS] = tile[neighbour]


@cp.cube(launch=True)
def wrong_mask(out: cp.Array[f32], mask: u32):
    if cp.UNIT_POS_PLANE < 16:
        cp.sync_plane(mask)
        out[cp.UNIT_POS] = 1.0


def test_the_masked_lanes_see_each_others_writes(client):
    out = client.zeros((64,), np.float32)
    rotate_low_half.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(out))
    unit = np.arange(64)
    lane = unit % 32
    want = np.where(lane < 16, (unit - lane + (lane + 1) % 16) * 2.0, 0.0).astype(np.float32)
    np.testing.assert_array_equal(client.read(out), want)


def test_the_mask_reaches_bar_warp_sync():
    compiled = rotate_low_half.compile(cp.CubeDim(64), cp.ArrayArg(cp.client("interp").zeros((64,), np.float32)))
    assert "sync_plane 65535u32" in compiled.ir
    assert "bar.warp.sync \t65535;" in compiled.ptx or "bar.warp.sync 65535;" in compiled.ptx


@pytest.mark.parametrize(
    ("mask", "why"),
    [
        (0x000000FF, "lane 8 reaches this barrier but is not in its mask"),
        (0x0001FFFF, "lane 16 is in the mask and live but does not reach this barrier"),
    ],
)
def test_the_sanitizer_names_a_lane_the_mask_gets_wrong(mask, why):
    client = cp.client("interp", sanitize=True)
    out = client.zeros((32,), np.float32)
    with pytest.raises(SanitizerError, match=why) as failure:
        wrong_mask.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), mask)
    assert f"sync_plane(mask=0x{mask:08x})" in str(failure.value)
    assert "test_sync_plane_mask.py:28" in str(failure.value)


def test_a_correct_mask_passes_the_sanitizer():
    client = cp.client("interp", sanitize=True)
    out = client.zeros((32,), np.float32)
    wrong_mask.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), 0x0000FFFF)
    np.testing.assert_array_equal(client.read(out), np.where(np.arange(32) < 16, 1.0, 0.0))
