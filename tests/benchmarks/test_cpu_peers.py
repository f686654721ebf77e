"""The cubepy kernels of ``benchmarks.cpu_peers`` that no example covers, on small inputs against numpy.

(The suite's fixture also compiles each for sm_90a and assembles it with ptxas.)
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from benchmarks.cpu_peers import SUM_PER_UNIT, block_sums, row_softmax, stencil5


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_block_sums_add_every_value_once(runtime):
    client = cp.client(runtime)
    values = np.random.default_rng(0).integers(-8, 9, 3 * 256 * SUM_PER_UNIT - 5).astype(np.float32)
    cubes = -(-values.size // (256 * SUM_PER_UNIT))
    partial = client.zeros((cubes,), np.float32)
    block_sums.launch(
        client,
        cp.CubeCount(cubes),
        cp.CubeDim(256),
        cp.ArrayArg(client.create(values)),
        cp.ArrayArg(partial),
        SUM_PER_UNIT,
    )
    # small integers: every partial sum is exact in f32, so the per-cube sums equal numpy's
    expected = np.add.reduceat(values, np.arange(0, values.size, 256 * SUM_PER_UNIT))
    np.testing.assert_array_equal(client.read(partial), expected)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_stencil5_is_the_laplacian_inside_and_a_copy_on_the_border(runtime):
    client = cp.client(runtime)
    grid = np.random.default_rng(1).integers(-8, 9, (24, 40)).astype(np.float32)
    out = client.zeros(grid.shape, np.float32)
    stencil5.launch(
        client,
        cp.CubeCount(40 // 32 + 1, 24 // 8),
        cp.CubeDim(32, 8),
        cp.TensorArg(client.create(grid)),
        cp.TensorArg(out),
    )
    expected = grid.copy()
    expected[1:-1, 1:-1] = grid[:-2, 1:-1] + grid[2:, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:] - 4 * grid[1:-1, 1:-1]
    np.testing.assert_array_equal(client.read(out), expected)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_row_softmax_matches_numpy(runtime):
    """(``exp`` is within its stated ulp bound on each runtime, not bit-identical across them.)"""
    client = cp.client(runtime)
    x = np.random.default_rng(2).standard_normal((5, 77)).astype(np.float32)
    out = client.zeros(x.shape, np.float32)
    row_softmax.launch(client, cp.CubeCount(5), cp.CubeDim(32), cp.TensorArg(client.create(x)), cp.TensorArg(out))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(client.read(out), e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-7)
