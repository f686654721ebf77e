"""TMA copies and mbarriers on the compiled cpu runtime (``cp.client("cpu")``), checked against numpy.

The expected buffers are plain numpy indexing of the sources, written here by hand; the results must
also equal the interp's bit for bit (both call the same emulation).
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, CUBE_POS, UNIT_POS, Array, Comptime, TensorMap, f32, i32, u32

UNITS = 32


@cp.cube(launch=True)
def tile_im2col_store(
    src_map: TensorMap[f32], img_map: TensorMap[f32], dst_map: TensorMap[f32], cols_out: Array[f32], shift: i32
):
    """Per cube: a 16x16 tiled load and an 8-pixel im2col load on one barrier, then the tile doubled and
    written back with a TMA store; the im2col rows go to ``cols_out``."""
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    tile = cp.SharedMemory.aligned(f32, 256, 1024)
    cols = cp.SharedMemory.aligned(f32, 64, 128)
    cube = i32(CUBE_POS)
    if UNIT_POS == 0:
        bar.tma_load_2d(src_map, tile, cube * 16 - shift, shift)
        linear = cube * 8  # first output pixel of this cube: 16 per image, 4 per row
        bar.tma_load_im2col_4d(img_map, cols, linear // 16, (linear % 16) // 4 - 1, i32(-1), i32(0), u32(1), u32(2))
        bar.arrive_and_expect_tx(1, 256 * 4 + 64 * 4)
    else:
        bar.arrive()
    bar.wait_parity(0)
    for i in range(UNIT_POS, 64, CUBE_DIM):
        cols_out[CUBE_POS * 64 + i] = cols[i]
    for i in range(UNIT_POS, 256, CUBE_DIM):
        tile[i] = tile[i] * 2.0
    cp.sync_async_proxy_shared()
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(tile, dst_map, cube * 16, i32(0))
        cp.tma_group_commit()
        cp.tma_group_wait(0)


def _launch(client, cubes: int, shift: int):
    rng = np.random.default_rng(7)
    src = rng.standard_normal((16 * cubes, 24)).astype(np.float32)
    img = rng.standard_normal((cubes // 2 + 1, 4, 4, 8)).astype(np.float32)
    hsrc, himg = client.create(src), client.create(img)
    hdst = client.create(np.full((16 * cubes, 12), -1.0, np.float32))
    cols = client.zeros((cubes * 64,), np.float32)
    img_map = cp.TensorMapArg.im2col(
        cp.TensorArg(himg),
        channels_per_pixel=8,
        pixels_per_column=8,
        lower_corner=(-1, -1),
        upper_corner=(-1, -1),  # 3x3 filter, padding 1
    )
    tile_im2col_store.launch(
        client,
        cp.CubeCount(cubes),
        cp.CubeDim(UNITS),
        cp.TensorMapArg.tiled(cp.TensorArg(hsrc), (16, 16)),
        img_map,
        cp.TensorMapArg.tiled(cp.TensorArg(hdst), (16, 16)),
        cp.ArrayArg(cols),
        shift,
    )
    return src, img, client.read(hdst), client.read(cols)


def _expected(src, img, cubes: int, shift: int):
    """The stored tiles and the im2col rows, element by element."""
    dst = np.full((16 * cubes, 12), -1.0, np.float32)
    cols = np.zeros((cubes, 8, 8), np.float32)
    for c in range(cubes):
        for r in range(16):
            for k in range(16):
                y, x = c * 16 - shift + r, shift + k
                value = src[y, x] if 0 <= y < src.shape[0] and 0 <= x < src.shape[1] else 0.0
                if k < 12:  # the store clips at the destination's 12 columns
                    dst[c * 16 + r, k] = 2 * value
        for r in range(8):
            linear = c * 8 + r
            n, oh, ow = linear // 16, (linear % 16) // 4, linear % 4
            h, w = oh - 1 + 1, ow - 1 + 2  # base (oh - 1, ow - 1) plus the offsets (1, 2)
            if n < img.shape[0] and 0 <= h < 4 and 0 <= w < 4:
                cols[c, r] = img[n, h, w]
    return dst, cols.reshape(-1)


@pytest.mark.parametrize(("cubes", "shift"), [(2, 4), (130, 9)], ids=["one-thread", "threaded"])
def test_tiled_im2col_and_store_match_numpy(cubes, shift):
    src, img, dst, cols = _launch(cp.client("cpu"), cubes, shift)
    want_dst, want_cols = _expected(src, img, cubes, shift)
    np.testing.assert_array_equal(dst, want_dst)
    np.testing.assert_array_equal(cols, want_cols)


def test_bit_identical_with_the_interp():
    cpu = _launch(cp.client("cpu"), 4, 5)
    interp = _launch(cp.client("interp"), 4, 5)
    for ours, theirs in zip(cpu[2:], interp[2:]):
        assert ours.tobytes() == theirs.tobytes()


@cp.cube(launch=True)
def consumer_waits_first(out: Array[u32], rounds: Comptime[int]):
    """The last unit produces; the others reach the wait first (the driver runs units in order), suspend, and
    resume once its arrival completes the phase."""
    full = cp.Barrier.shared(1, UNIT_POS == 0)
    data = cp.SharedMemory[u32](1)
    for k in cp.unroll(range(rounds)):
        if UNIT_POS == CUBE_DIM - 1:
            data[0] = u32(k + 10)
            full.arrive()
        else:
            full.wait_parity(k % 2)
        out[UNIT_POS * rounds + k] = data[0]
        cp.sync_cube()


def test_waiting_units_suspend_until_the_phase_completes():
    client = cp.client("cpu")
    out = client.zeros((UNITS * 3,), np.uint32)
    consumer_waits_first.launch(client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(out), 3)
    np.testing.assert_array_equal(client.read(out).reshape(UNITS, 3), np.tile([10, 11, 12], (UNITS, 1)))


@cp.cube(launch=True)
def waits_for_a_unit_at_sync_cube(out: Array[f32]):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    if UNIT_POS == 0:
        cp.sync_cube()  # never released: the other units wait at the mbarrier, not here
    bar.arrive_and_wait()
    out[UNIT_POS] = f32(1.0)


def test_wait_behind_a_sync_cube_is_a_deadlock_naming_the_barrier():
    client = cp.client("cpu")
    out = client.zeros((UNITS,), np.float32)
    with pytest.raises(cp.SanitizerError, match=r"deadlock: wait on .*barrier.* can never complete") as info:
        waits_for_a_unit_at_sync_cube.launch(client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(out))
    assert "test_tma_on_cpu.py:" in str(info.value)
    assert "1 of 32 arrivals pending" in str(info.value)
    assert not client.read(out).any()


def test_a_deadlocked_launch_leaves_no_fault_for_the_next_one():
    # The cube contexts of a kernel are kept between launches; one that faulted is dropped, not reused.
    client = cp.client("cpu")
    out = client.zeros((UNITS,), np.float32)
    for _ in range(2):
        with pytest.raises(cp.SanitizerError, match="deadlock"):
            waits_for_a_unit_at_sync_cube.launch(client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(out))
    rounds = client.zeros((UNITS * 3,), np.uint32)
    for _ in range(2):  # the second launch runs in the first one's (reused) context
        consumer_waits_first.launch(client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(rounds), 3)
        np.testing.assert_array_equal(client.read(rounds).reshape(UNITS, 3), np.tile([10, 11, 12], (UNITS, 1)))
