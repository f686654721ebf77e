"""Triton tutorial 07, extern functions: ``y = asin(x)`` elementwise through libdevice.

Triton's tutorial calls ``libdevice.asin`` on a block of 1024 elements per program (4 warps, 8 elements per
thread, masked at the tail).  In cubepy ``cp.asin`` needs no extern-library plumbing: the operation's record
names its libdevice function (``__nv_asinf``), the NVPTX lowering links just that function out of libdevice,
the cpu runtime calls the C library's ``asinf`` and the interp evaluates numpy's ``arcsin``.  The blocking is
the tutorial's: one cube of 128 units per 1024 elements, unit ``u`` taking elements ``u, u + 128, ...`` of its
block.  ``asin_lines`` is the same block read and written as ``Line[f32]`` of 4 (what Triton does when it can
prove the length is a multiple of 16).
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Line, cube, f32
from examples.triton import SassCase

BLOCK_SIZE = 1024  # elements per cube: the tutorial's BLOCK_SIZE
UNITS = 128  # Triton's default num_warps=4
PER_UNIT = BLOCK_SIZE // UNITS
LINE = 4


@cube(launch=True, launch_unchecked=True)
def asin_kernel(x: Array[f32], y: Array[f32]):
    """y[i] = asin(x[i]); a cube covers one block of BLOCK_SIZE elements."""
    start = CUBE_POS * BLOCK_SIZE + UNIT_POS
    n = y.len()
    for i in cp.unroll(range(PER_UNIT)):
        offset = start + i * UNITS
        if offset < n:
            y[offset] = cp.asin(x[offset])


@cube(launch=True, launch_unchecked=True)
def asin_lines(x: Array[Line[f32]], y: Array[Line[f32]]):
    """The same block in lines of 4: each unit takes BLOCK_SIZE / (4 * 128) = 2 lines."""
    start = CUBE_POS * (BLOCK_SIZE // LINE) + UNIT_POS
    n = y.len()
    for i in cp.unroll(range(PER_UNIT // LINE)):
        offset = start + i * UNITS
        if offset < n:
            y[offset] = cp.asin(x[offset])


def cube_count(n: int) -> cp.CubeCount:
    """One cube per BLOCK_SIZE elements (the tutorial's ``triton.cdiv(n_elements, BLOCK_SIZE)``)."""
    return cp.CubeCount(-(-n // BLOCK_SIZE))


def run(client, n: int = 98_432 + 5) -> dict[str, float]:
    """asin of ``n`` uniform values in [-1, 1] (the ends included), against numpy's float64 ``arcsin``."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
    x[:4] = [-1.0, 1.0, 0.0, -0.0]
    expected = np.arcsin(x.astype(np.float64))
    hx, hy = client.create(x), client.empty((n,), np.float32)
    asin_kernel.launch(client, cube_count(n), cp.CubeDim(UNITS), cp.ArrayArg(hx), cp.ArrayArg(hy))
    errors = {"asin max error": float(np.max(np.abs(client.read(hy) - expected)))}
    whole = n - n % LINE
    lx, ly = client.create(x[:whole]), client.empty((whole,), np.float32)
    line_args = (cp.ArrayArg(lx, line_size=LINE), cp.ArrayArg(ly, line_size=LINE))
    asin_lines.launch(client, cube_count(whole), cp.CubeDim(UNITS), *line_args)
    errors["asin (lines) max error"] = float(np.max(np.abs(client.read(ly) - expected[:whole])))
    return errors


def _build(lines: bool):
    """A ``SassCase.build``: one of the kernels compiled for 98_432 elements (the tutorial's size)."""

    def build(target: str = "sm_90a", **options):
        client = cp.client("interp")
        n = 98_432
        handles = [client.zeros((n,), np.float32) for _ in range(2)]
        if lines:
            args = [cp.ArrayArg(h, line_size=LINE) for h in handles]
            return asin_lines.compile(cp.CubeDim(UNITS), *args, target=target, **options)
        return asin_kernel.compile(cp.CubeDim(UNITS), *(cp.ArrayArg(h) for h in handles), target=target, **options)

    return build


SASS_CASES: list[SassCase] = [
    SassCase("07 extern functions", "asin, 8 f32 per unit", _build(False), "asin_kernel", triton_ragged=True),
    SassCase("07 extern functions", "asin, 2 Line[f32]x4 per unit", _build(True), "asin_kernel"),
]
