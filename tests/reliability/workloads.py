"""Small kernels with known results, for the concurrency tests (kernels must live in a file)."""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, Array, Comptime, cube, f32, u32


@cube(launch=True)
def saxpy(a: f32, x: Array[f32], y: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = a * x[ABSOLUTE_POS] + y[ABSOLUTE_POS]


@cube(launch=True)
def block_sum(x: Array[u32], out: Array[u32], units: Comptime[int]):
    partial = cp.SharedMemory[u32](units)
    partial[UNIT_POS] = x[ABSOLUTE_POS]
    cp.sync_cube()
    if UNIT_POS == 0:
        total = u32(0)
        for i in range(units):
            total += partial[i]
        out[cp.CUBE_POS] = total


def run_saxpy(client, n: int, a: float, seed: int) -> bool:
    """Launch ``saxpy`` on fresh data and check the result; True when right."""
    rng = np.random.default_rng(seed)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = client.empty((n,), np.float32)
    saxpy.launch(
        client,
        cp.CubeCount(-(-n // 32)),
        cp.CubeDim(32),
        a,
        cp.ArrayArg(client.create(x)),
        cp.ArrayArg(client.create(y)),
        cp.ArrayArg(out),
    )
    return bool(np.allclose(client.read(out), np.float32(a) * x + y))


def run_block_sum(client, units: int, cubes: int, seed: int) -> bool:
    """Launch ``block_sum`` with ``units`` per cube (a comptime specialization) and check it."""
    x = np.random.default_rng(seed).integers(0, 100, units * cubes).astype(np.uint32)
    out = client.empty((cubes,), np.uint32)
    block_sum.launch(
        client, cp.CubeCount(cubes), cp.CubeDim(units), cp.ArrayArg(client.create(x)), cp.ArrayArg(out), units
    )
    return bool((client.read(out) == x.reshape(cubes, units).sum(axis=1)).all())
