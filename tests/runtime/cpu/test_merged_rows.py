"""Consecutive cubes along x run as one row on the cpu runtime when nothing but ``absolute_pos`` tells them apart.

``host_plain.merges_cubes_along_x`` decides; the driver then runs a run of cubes of one x-row (cut at the end of
the row, of the launch's chunk and at ``MERGED_UNITS``) as one cube, ``tid.x`` spanning the run.  Every unit must
see the builtins of its own cube: the expected values below are numpy formulas of the grid, and the launches
cross chunk boundaries in the middle of rows (spread over the worker threads) and the cut of long runs.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import (
    ABSOLUTE_POS,
    ABSOLUTE_POS_X,
    ABSOLUTE_POS_Y,
    ABSOLUTE_POS_Z,
    CUBE_POS_Y,
    UNIT_POS_X,
    UNIT_POS_Y,
    Array,
    Tensor,
    cube,
    f32,
    u32,
)
from cubepy.compiler.emit_host import compile_host
from cubepy.compiler.targets.host_plain import MERGED_UNITS
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.cpu.backend import CpuBackend


@cube(launch=True)
def grid_code(out: Tensor[u32]):
    """out[y, x] = x + 4096 * y + 2**24 * (cube_pos_y + unit_pos_y), inside the tensor."""
    x = ABSOLUTE_POS_X
    y = ABSOLUTE_POS_Y
    if y < out.shape(0) and x < out.shape(1):
        out[y, x] = x + u32(4096) * y + u32(1 << 24) * (CUBE_POS_Y + UNIT_POS_Y)


@cube(launch=True)
def linear_code(out: Array[u32], n: u32):
    """out[i] = i * 3 + 1 for i = absolute_pos below n."""
    if ABSOLUTE_POS < n:
        out[ABSOLUTE_POS] = ABSOLUTE_POS * u32(3) + u32(1)


@cube(launch=True)
def volume_code(out: Array[u32]):
    """out[absolute_pos] = x + 256 * y + 65536 * z (a 3-D grid of 3-D cubes)."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = ABSOLUTE_POS_X + u32(256) * ABSOLUTE_POS_Y + u32(65536) * ABSOLUTE_POS_Z


@cube(launch=True)
def unit_code(out: Array[u32]):
    """Reads unit_pos_x: its cubes must not merge."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = UNIT_POS_X


@cube(launch=True)
def scaled_stencil(grid: Tensor[f32], out: Tensor[f32]):
    """A 3-point horizontal stencil inside, a copy on the border (a body with a read on each side)."""
    i = ABSOLUTE_POS_Y
    j = ABSOLUTE_POS_X
    if i < grid.shape(0) and j < grid.shape(1):
        if j > 0 and j + 1 < grid.shape(1):
            out[i, j] = grid[i, j - 1] + grid[i, j + 1] - f32(2.0) * grid[i, j]
        else:
            out[i, j] = grid[i, j]


@pytest.fixture(params=[1, 2], ids=["one thread", "two threads"])
def cpu(request):
    return ComputeClient("cpu", CpuBackend(threads=request.param))


def _host(kernel, dim, *args):
    return compile_host(kernel.compile(dim, *args).definition)


def test_which_kernels_merge():
    client = cp.client("cpu")
    tensor = cp.TensorArg(client.zeros((4, 4), np.uint32))
    array = cp.ArrayArg(client.zeros(16, np.uint32))
    assert _host(grid_code, cp.CubeDim(8, 4), tensor).merged_rows
    assert _host(linear_code, cp.CubeDim(64), array, 16).merged_rows
    assert not _host(unit_code, cp.CubeDim(64), array).merged_rows


@pytest.mark.parametrize(("rows", "cols", "dim"), [(37, 61, (8, 4)), (64, 300, (32, 8)), (5, 1000, (1, 1))])
def test_a_grid_of_merged_rows_writes_each_units_own_position(cpu, rows, cols, dim):
    out = cpu.zeros((rows, cols), np.uint32)
    count = (-(-cols // dim[0]), -(-rows // dim[1]))
    for _ in range(3):  # the first launches try both ways of spreading the cubes over the threads
        grid_code.launch(cpu, cp.CubeCount(*count), cp.CubeDim(*dim), cp.TensorArg(out))
        y, x = np.mgrid[0:rows, 0:cols].astype(np.uint64)
        expected = x + 4096 * y + (1 << 24) * ((y // dim[1]) + (y % dim[1]))
        np.testing.assert_array_equal(cpu.read(out), expected.astype(np.uint32))


def test_a_run_longer_than_the_cut_and_a_ragged_end(cpu):
    cubes = MERGED_UNITS // 256 + 44  # one x-row of cubes: a merged run is cut once
    n = cubes * 256 - 100
    out = cpu.zeros(cubes * 256, np.uint32)
    for _ in range(3):
        linear_code.launch(cpu, cp.CubeCount(cubes), cp.CubeDim(256), cp.ArrayArg(out), n)
        expected = np.zeros(cubes * 256, np.uint32)
        expected[:n] = np.arange(n, dtype=np.uint32) * 3 + 1
        np.testing.assert_array_equal(cpu.read(out), expected)


def test_one_dimensional_cubes_in_a_two_dimensional_grid(cpu):
    # absolute_pos of a cube of one row is cube_pos * cube_dim_x + unit_pos_x, cube_pos linear over the grid
    count = (7, 5)
    total = count[0] * count[1] * 64
    out = cpu.zeros(total, np.uint32)
    for _ in range(3):
        linear_code.launch(cpu, cp.CubeCount(*count), cp.CubeDim(64), cp.ArrayArg(out), total)
        np.testing.assert_array_equal(cpu.read(out), np.arange(total, dtype=np.uint32) * 3 + 1)


def test_three_dimensional_cubes_and_grid(cpu):
    dim, count = (4, 2, 2), (5, 3, 2)
    size = [d * c for d, c in zip(dim, count)]
    out = cpu.zeros(size[0] * size[1] * size[2], np.uint32)
    volume_code.launch(cpu, cp.CubeCount(*count), cp.CubeDim(*dim), cp.ArrayArg(out))
    z, y, x = np.mgrid[0 : size[2], 0 : size[1], 0 : size[0]].astype(np.uint32)
    np.testing.assert_array_equal(cpu.read(out), (x + 256 * y + 65536 * z).reshape(-1))


def test_a_kernel_that_reads_unit_pos_x_keeps_its_cubes(cpu):
    out = cpu.zeros(5 * 64, np.uint32)
    unit_code.launch(cpu, cp.CubeCount(5), cp.CubeDim(64), cp.ArrayArg(out))
    np.testing.assert_array_equal(cpu.read(out), np.tile(np.arange(64, dtype=np.uint32), 5))


def test_a_merged_stencil_equals_the_interp_bit_for_bit(cpu):
    rng = np.random.default_rng(7)
    grid = rng.standard_normal((45, 203)).astype(np.float32)
    interp = cp.client("interp")
    results = []
    for client in (cpu, interp):
        source, out = client.create(grid), client.zeros(grid.shape, np.float32)
        scaled_stencil.launch(client, cp.CubeCount(7, 6), cp.CubeDim(32, 8), cp.TensorArg(source), cp.TensorArg(out))
        results.append(client.read(out))
    np.testing.assert_array_equal(results[0].view(np.uint32), results[1].view(np.uint32))
    expected = grid.copy()
    expected[:, 1:-1] = grid[:, :-2] + grid[:, 2:] - np.float32(2.0) * grid[:, 1:-1]
    np.testing.assert_allclose(results[0], expected, rtol=1e-6, atol=1e-6)
