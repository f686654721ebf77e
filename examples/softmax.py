"""Row softmax with one plane (32 units) per row: plane_max and plane_sum do the reductions."""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Tensor, cube, f32


@cube(launch=True)
def softmax_rows(x: Tensor[f32], out: Tensor[f32]):
    """out[r, :] = softmax(x[r, :]); one cube of 32 units per row."""
    row = CUBE_POS
    cols = x.shape(1)
    base = row * x.stride(0)
    local_max = f32(-3.0e38)
    for c in range(UNIT_POS, cols, 32):
        local_max = cp.max(local_max, x[base + c])
    row_max = cp.plane_max(local_max)
    local_sum = f32(0.0)
    for c in range(UNIT_POS, cols, 32):
        local_sum += cp.exp(x[base + c] - row_max)
    row_sum = cp.plane_sum(local_sum)
    for c in range(UNIT_POS, cols, 32):
        out[base + c] = cp.exp(x[base + c] - row_max) / row_sum


def run(client, rows: int = 16, cols: int = 100) -> dict:
    """Softmax of a random matrix compared with numpy."""
    x = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    hx, ho = client.create(x), client.empty((rows, cols), np.float32)
    softmax_rows.launch(client, cp.CubeCount(rows), cp.CubeDim(32), cp.TensorArg(hx), cp.TensorArg(ho))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    err = float(np.max(np.abs(client.read(ho) - e / e.sum(axis=1, keepdims=True))))
    return {"softmax max error": err}
