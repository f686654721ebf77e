"""Vector add and axpy: the smallest kernels, one unit per element, with a tail guard."""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32


@cube
def axpy_one(a, x, y):
    """a * x + y for one element (a cube function, expanded inline where it is called)."""
    return a * x + y


@cube(launch=True, launch_unchecked=True)
def vector_add(lhs: Array[f32], rhs: Array[f32], out: Array[f32]):
    """out[i] = lhs[i] + rhs[i]."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = lhs[ABSOLUTE_POS] + rhs[ABSOLUTE_POS]


@cube(launch=True)
def axpy(a: f32, x: Array[f32], y: Array[f32], out: Array[f32]):
    """out[i] = a * x[i] + y[i]."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = axpy_one(a, x[ABSOLUTE_POS], y[ABSOLUTE_POS])


def run(client, n: int = 1000) -> dict:
    """Launch both kernels on ``n`` elements and compare with numpy."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    hx, hy, out = client.create(x), client.create(y), client.empty((n,), np.float32)
    cubes = cp.CubeCount((n + 255) // 256)
    vector_add.launch(client, cubes, cp.CubeDim(256), cp.ArrayArg(hx), cp.ArrayArg(hy), cp.ArrayArg(out))
    add_err = float(np.max(np.abs(client.read(out) - (x + y))))
    axpy.launch(client, cubes, cp.CubeDim(256), 2.0, cp.ArrayArg(hx), cp.ArrayArg(hy), cp.ArrayArg(out))
    axpy_err = float(np.max(np.abs(client.read(out) - (np.float32(2.0) * x + y))))
    return {"vector_add max error": add_err, "axpy max error": axpy_err}
