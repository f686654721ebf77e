"""Plane operations right after an mbarrier wait or a ``wgmma`` on the compiled cpu runtime.

The unit whose arrival completes a barrier phase (and the warpgroup's last unit at a ``wgmma``, which runs
the product for all 128) passes its wait without suspending, while the units of its plane that tested
before it are suspended at the wait.  The cpu scheduler used to release that unit alone at the plane
operation after the wait, with an active mask of one lane: its shuffle read its own value, or nothing, and
a ``mma_sync`` there was a ``partial plane`` error.  On the interp (lockstep) and on a GPU the plane is
together there.  It now releases a plane only once polling its waiting units frees none of them.

Expected values are written by hand; cpu and interp results must also be bit-equal.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, LocalArray, SharedMemory, f16, f32, u32

Matrix, Ident, Layout = cp.cmma.Matrix, cp.cmma.MatrixIdent, cp.cmma.MatrixLayout


def _run(kernel, units: int, *arrays: np.ndarray) -> dict[str, list[np.ndarray]]:
    """Launch one cube of ``units`` on interp and cpu; every array after the first is an input."""
    results = {}
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        handles = [client.create(array) for array in arrays]
        kernel.launch(client, cp.CubeCount(1), cp.CubeDim(units), *(cp.ArrayArg(h) for h in handles))
        results[runtime] = [client.read(h) for h in handles]
    return results


@cp.cube(launch=True)
def arrive_wait_shuffle(out: Array[u32]):
    """Every unit arrives (the 32nd arrival completes the phase), waits, then swaps with its neighbour."""
    bar = cp.Barrier.shared(32, UNIT_POS == 0)
    bar.arrive()
    bar.wait_parity(0)
    out[UNIT_POS] = cp.plane_shuffle_xor(UNIT_POS, 1)


def test_the_unit_completing_a_phase_shuffles_with_its_whole_plane():
    results = _run(arrive_wait_shuffle, 32, np.zeros(32, np.uint32))
    expected = np.arange(32, dtype=np.uint32) ^ 1
    np.testing.assert_array_equal(results["interp"][0], expected)
    np.testing.assert_array_equal(results["cpu"][0], expected)


@cp.cube(launch=True)
def wgmmas_then_shuffle(ones: Array[f16], out: Array[f32]):
    """A wgmma of all-ones 64 x 16 and 16 x 8 tiles (each output 16, whatever the layout), then a shuffle."""
    a_tile = SharedMemory[f16](64 * 16, alignment=1024)
    b_tile = SharedMemory[f16](8 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 128):
        a_tile[i] = ones[i]
    b_tile[UNIT_POS] = ones[UNIT_POS]
    cp.sync_cube()
    acc = LocalArray[f32](4)
    a_desc = cp.wgmma_descriptor(a_tile, 16, 256, "32B")
    b_desc = cp.wgmma_descriptor(b_tile, 16, 256, "32B")
    cp.wgmma_fence()
    cp.wgmma_mma_async(acc, a_desc, b_desc, shape=(64, 8, 16), elem=f16, scale_d=False)
    cp.wgmma_commit_group()
    cp.wgmma_wait_group(0)
    mine = acc[0] + f32(UNIT_POS)
    out[UNIT_POS] = cp.plane_shuffle_xor(mine, 1)


def test_the_units_running_a_wgmma_shuffle_with_their_whole_plane():
    # unit 127, the last to publish, ran the product and went on to the shuffle alone, its neighbour still
    # suspended at the wgmma
    results = _run(wgmmas_then_shuffle, 128, np.ones(64 * 16, np.float16), np.zeros(128, np.float32))
    expected = 16.0 + (np.arange(128) ^ 1)
    np.testing.assert_array_equal(results["cpu"][1], expected)
    np.testing.assert_array_equal(results["cpu"][1], results["interp"][1])


@cp.cube(launch=True)
def arrive_wait_mma(a: Array[f16], out: Array[f32]):
    """A cmma product after a barrier the plane's own 32 arrivals complete."""
    bar = cp.Barrier.shared(32, UNIT_POS == 0)
    tile = SharedMemory[f16](256)
    for i in range(UNIT_POS, 256, 32):
        tile[i] = a[i]
    bar.arrive()
    bar.wait_parity(0)
    lhs = Matrix[f16].from_slice(Ident.A, 16, 16, 16, Layout.ROW_MAJOR, tile, 16)
    rhs = Matrix[f16].from_slice(Ident.B, 16, 16, 16, Layout.ROW_MAJOR, tile, 16)
    acc = Matrix[f32].from_value(Ident.ACCUMULATOR, 16, 16, 16, None, f32(0))
    cp.cmma.execute(lhs, rhs, acc, acc)
    cp.cmma.store(out, acc, 16, Layout.ROW_MAJOR)


def test_a_tensor_core_collective_after_the_wait_is_not_a_partial_plane():
    a = (np.arange(256) % 7 - 3).astype(np.float16)  # small integers: the products are exact
    results = _run(arrive_wait_mma, 32, a, np.zeros(256, np.float32))
    square = a.reshape(16, 16).astype(np.float64)
    np.testing.assert_array_equal(results["cpu"][1], (square @ square).ravel())
    np.testing.assert_array_equal(results["cpu"][1], results["interp"][1])


@cp.cube(launch=True)
def half_plane_waits_for_the_other(out: Array[u32]):
    """Lanes 16.. wait for the arrivals of lanes 0..15, which shuffle among themselves first: the cpu runtime
    must release the first half alone (a partial plane, as on the interp) rather than wait for the rest."""
    bar = cp.Barrier.shared(16, UNIT_POS == 0)
    if UNIT_POS < 16:
        out[UNIT_POS] = cp.plane_shuffle_xor(UNIT_POS, 1)
        bar.arrive()
    else:
        bar.wait_parity(0)
        out[UNIT_POS] = cp.plane_shuffle_xor(UNIT_POS, 1) + u32(100)


def test_a_plane_split_between_a_shuffle_and_a_wait_still_runs():
    results = _run(half_plane_waits_for_the_other, 32, np.zeros(32, np.uint32))
    lanes = np.arange(32, dtype=np.uint32)
    expected = np.where(lanes < 16, lanes ^ 1, (lanes ^ 1) + 100).astype(np.uint32)
    np.testing.assert_array_equal(results["interp"][0], expected)
    np.testing.assert_array_equal(results["cpu"][0], expected)


@cp.cube(launch=True)
def arrive_wait_shuffle_cube(out: Array[u32]):
    """Every unit of the cube arrives (the cube's last unit completes the phase), waits, then swaps."""
    bar = cp.Barrier.shared(cp.CUBE_DIM, UNIT_POS == 0)
    bar.arrive()
    bar.wait_parity(0)
    out[UNIT_POS] = cp.plane_shuffle_xor(UNIT_POS, 1)


@pytest.mark.parametrize("units", [64, 96])
def test_planes_behind_a_completed_phase_in_a_larger_cube(units):
    # the plane holding the completing unit is not the first one: every plane still shuffles whole
    results = _run(arrive_wait_shuffle_cube, units, np.zeros(units, np.uint32))
    expected = np.arange(units, dtype=np.uint32) ^ 1
    np.testing.assert_array_equal(results["cpu"][0], expected)
    np.testing.assert_array_equal(results["interp"][0], expected)
