"""Sum reductions three ways: a shared-memory tree with sync_cube, plane (warp) sums, and the library's
``cube_sum`` (plane sums, then one plane reduces the planes' results through shared memory)."""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, CUBE_DIM, CUBE_POS, UNIT_POS, Array, Comptime, SharedMemory, cube, f32
from cubepy_layouts.reduce import cube_sum


@cube(launch=True)
def block_sum(data: Array[f32], partial: Array[f32], block: Comptime[int]):
    """partial[cube] = sum of the cube's slice of data (a shared-memory tree reduction)."""
    tile = SharedMemory[f32](block)
    value = f32(0.0)
    if ABSOLUTE_POS < data.len():
        value = data[ABSOLUTE_POS]
    tile[UNIT_POS] = value
    cp.sync_cube()
    stride = block // 2
    while stride > 0:
        if UNIT_POS < stride:
            tile[UNIT_POS] = tile[UNIT_POS] + tile[UNIT_POS + stride]
        cp.sync_cube()
        stride = stride // 2
    if UNIT_POS == 0:
        partial[CUBE_POS] = tile[0]


@cube(launch=True)
def plane_sum_kernel(data: Array[f32], partial: Array[f32]):
    """partial[plane] = sum over the plane's 32 units (plane_sum), one atomic add per plane."""
    value = f32(0.0)
    if ABSOLUTE_POS < data.len():
        value = data[ABSOLUTE_POS]
    total = cp.plane_sum(value)
    if cp.UNIT_POS_PLANE == 0:
        partial[CUBE_POS * (CUBE_DIM // 32) + cp.PLANE_POS] = total


@cube(launch=True)
def cube_sum_kernel(data: Array[f32], partial: Array[f32]):
    """partial[cube] = sum of the cube's slice of data, with ``cubepy_layouts.reduce.cube_sum``."""
    value = f32(0.0)
    if ABSOLUTE_POS < data.len():
        value = data[ABSOLUTE_POS]
    total = cube_sum(value)
    if UNIT_POS == 0:
        partial[CUBE_POS] = total


def run(client, n: int = 4096, block: int = 256) -> dict:
    """Reduce ``n`` numbers both ways and compare with numpy in float64."""
    data = np.random.default_rng(1).random(n).astype(np.float32)
    handle = client.create(data)
    cubes = (n + block - 1) // block
    partial = client.zeros((cubes,), np.float32)
    block_sum.launch(client, cp.CubeCount(cubes), cp.CubeDim(block), cp.ArrayArg(handle), cp.ArrayArg(partial), block)
    tree = float(client.read(partial).sum())
    planes = client.zeros((cubes * block // 32,), np.float32)
    plane_sum_kernel.launch(client, cp.CubeCount(cubes), cp.CubeDim(block), cp.ArrayArg(handle), cp.ArrayArg(planes))
    plane = float(client.read(planes).sum())
    cube_sum_kernel.launch(client, cp.CubeCount(cubes), cp.CubeDim(block), cp.ArrayArg(handle), cp.ArrayArg(partial))
    library = float(client.read(partial).sum())
    exact = float(data.astype(np.float64).sum())
    return {
        "block_sum rel error": abs(tree - exact) / exact,
        "plane_sum rel error": abs(plane - exact) / exact,
        "cube_sum rel error": abs(library - exact) / exact,
    }
