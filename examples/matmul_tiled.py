"""A shared-memory tiled matmul: each cube computes a TILE x TILE block of C = A @ B."""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS_X, CUBE_POS_Y, UNIT_POS_X, UNIT_POS_Y, Comptime, SharedMemory, Tensor, cube, f32


@cube(launch=True)
def matmul(a: Tensor[f32], b: Tensor[f32], c: Tensor[f32], tile: Comptime[int]):
    """c = a @ b for row-major a (m x k), b (k x n), c (m x n); k a multiple of ``tile``."""
    a_tile = SharedMemory[f32](tile * tile)
    b_tile = SharedMemory[f32](tile * tile)
    row = CUBE_POS_Y * tile + UNIT_POS_Y
    col = CUBE_POS_X * tile + UNIT_POS_X
    m = a.shape(0)
    k = a.shape(1)
    n = b.shape(1)
    acc = f32(0.0)
    for k0 in range(0, k, tile):
        a_tile[UNIT_POS_Y * tile + UNIT_POS_X] = a[row * k + k0 + UNIT_POS_X]
        b_tile[UNIT_POS_Y * tile + UNIT_POS_X] = b[(k0 + UNIT_POS_Y) * n + col]
        cp.sync_cube()
        for kk in cp.unroll(range(tile)):
            acc += a_tile[UNIT_POS_Y * tile + kk] * b_tile[kk * tile + UNIT_POS_X]
        cp.sync_cube()
    if row < m and col < n:
        c[row * n + col] = acc


def run(client, m: int = 64, k: int = 64, n: int = 64, tile: int = 16) -> dict:
    """Multiply random matrices and compare with numpy."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ha, hb, hc = client.create(a), client.create(b), client.zeros((m, n), np.float32)
    matmul.launch(
        client,
        cp.CubeCount((n + tile - 1) // tile, (m + tile - 1) // tile),
        cp.CubeDim(tile, tile),
        cp.TensorArg(ha),
        cp.TensorArg(hb),
        cp.TensorArg(hc),
        tile,
    )
    err = float(np.max(np.abs(client.read(hc) - a.astype(np.float64) @ b)))
    return {"matmul max error": err}
