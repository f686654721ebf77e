"""Checked reads of a contiguous rank-2 tensor at neighbouring rows and columns (a stencil's ``g[i - 1, j]``,
``g[i, j + 1]``) proven in bounds by the kernel's own guards (``launch_bounds.in_tensor_bounds``): the launch
found the strides ``(shape(1), 1)``, so ``g[r, c]`` is ``r * g.shape(1) + c``, inside ``len`` whenever
``r < g.shape(0)`` and ``c < g.shape(1)``."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from benchmarks.cpu_peers import stencil5 as laplacian  # the 5-point Laplacian inside, the border copied
from cubepy import Tensor, f32
from cubepy.compiler.passes import run_passes
from cubepy.ir import ops
from cubepy.ir.printer import format_kernel
from cubepy.ir.scope import walk


@cp.cube(launch=True)
def shifted_up(g: Tensor[f32], out: Tensor[f32]):
    """out[i, j] = g[i - 1, j] with no ``i > 0`` guard: at row 0 the read wraps past the end, a checked miss."""
    i = cp.ABSOLUTE_POS_Y
    j = cp.ABSOLUTE_POS_X
    if i < g.shape(0) and j < g.shape(1):
        out[i, j] = g[i - 1, j]


def _checked_reads(kernel, client, *arrays) -> int:
    args = [cp.TensorArg(a) for a in arrays]
    definition, _ = run_passes(kernel.compile(cp.CubeDim(8, 4), *args).definition)
    return sum(isinstance(i.operation, ops.Index) and i.operation.checked for i in walk(definition.body))


def test_the_stencils_reads_are_proven_and_a_read_without_its_lower_guard_is_not():
    client = cp.client("interp")
    square = [client.zeros((16, 16), np.float32) for _ in range(2)]
    assert _checked_reads(laplacian, client, *square) == 0
    assert _checked_reads(shifted_up, client, *square) == 1
    # padded rows (strides (20, 1)): r * stride(0) + c may pass len, so every read stays checked
    padded = client.zeros((16, 20), np.float32)
    view = cp.TensorArg.from_raw_parts(padded, strides=(20, 1), shape=(16, 16))
    definition, _ = run_passes(laplacian.compile(cp.CubeDim(8, 4), view, cp.TensorArg(square[1])).definition)
    assert sum(isinstance(i.operation, ops.Index) and i.operation.checked for i in walk(definition.body)) == 6


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("shape", [(16, 16), (13, 22)])
def test_the_stencil_and_the_unguarded_shift_give_numpys_values(runtime, shape):
    client = cp.client(runtime)
    rng = np.random.default_rng(4)
    grid = rng.standard_normal(shape).astype(np.float32)
    hg, out, shifted = client.create(grid), client.zeros(shape, np.float32), client.zeros(shape, np.float32)
    count = cp.CubeCount(-(-shape[1] // 8), -(-shape[0] // 4))
    laplacian.launch(client, count, cp.CubeDim(8, 4), cp.TensorArg(hg), cp.TensorArg(out))
    expected = grid.copy()
    inner = grid[:-2, 1:-1] + grid[2:, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:]
    expected[1:-1, 1:-1] = (inner - np.float32(4.0) * grid[1:-1, 1:-1]).astype(np.float32)
    np.testing.assert_allclose(client.read(out), expected, rtol=1e-6, atol=1e-6)
    shifted_up.launch(client, count, cp.CubeDim(8, 4), cp.TensorArg(hg), cp.TensorArg(shifted))
    want = np.zeros(shape, np.float32)
    want[1:] = grid[:-1]  # row 0 reads index -1 mod 2**32: past the end, a checked read gives 0
    np.testing.assert_array_equal(client.read(shifted), want)


def _checked_writes(kernel, *args) -> int:
    definition, _ = run_passes(kernel.compile(cp.CubeDim(8, 4), *args).definition)
    return sum(isinstance(i.operation, ops.IndexAssign) and i.operation.checked for i in walk(definition.body))


def test_an_output_shaped_like_the_grid_is_written_unchecked_under_the_grids_guards():
    client = cp.client("interp")
    grid, same, wider = (client.zeros(s, np.float32) for s in ((16, 16), (16, 16), (16, 32)))
    compiled = laplacian.compile(cp.CubeDim(8, 4), cp.TensorArg(grid), cp.TensorArg(same))
    assert "shape = shape global[0]" in format_kernel(compiled.definition)  # the launch fact, in the printed IR
    assert _checked_writes(laplacian, cp.TensorArg(grid), cp.TensorArg(same)) == 0
    # another shape: the guards on the grid's extents say nothing about out's, both stores stay checked
    assert _checked_writes(laplacian, cp.TensorArg(grid), cp.TensorArg(wider)) == 2


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_smaller_output_keeps_its_checked_stores_and_the_cache_keeps_two_kernels(runtime):
    client = cp.client(runtime)
    grid = np.random.default_rng(6).standard_normal((12, 12)).astype(np.float32)
    hg = client.create(grid)
    count = cp.CubeCount(2, 3)
    full = client.zeros((12, 12), np.float32)
    laplacian.launch(client, count, cp.CubeDim(8, 4), cp.TensorArg(hg), cp.TensorArg(full))
    # 8 x 12 items past the first 8 rows' worth of out: a store at row i >= 8 indexes past out's end
    small = client.create(np.full((8, 12), 5.0, np.float32))
    laplacian.launch(client, count, cp.CubeDim(8, 4), cp.TensorArg(hg), cp.TensorArg(small))
    np.testing.assert_array_equal(client.read(small), client.read(full)[:8])
