"""Triton tutorial 02, fused softmax: each row read once, its max, exponentials and sum kept on chip.

Triton's ``softmax_kernel`` is persistent: it launches as many programs as fit on the GPU at once (at most one
per row), and program ``p`` handles rows ``p, p + programs, ...``.  A row is one block of ``BLOCK_SIZE``
columns (the next power of two of ``n_cols``) over 8 warps, loaded with ``-inf`` past the row's end.

Here a cube of 256 units (8 planes) takes the same rows, and unit ``u`` holds the row's lines
``u, u + 256, ...`` (``BLOCK_SIZE / 256`` values, in registers: the loop over them is unrolled at expansion).
A row is read in 16-byte lines of 4 f32 when its length is a multiple of 4 (Triton vectorizes its loads the same
way when it knows the row length is a multiple of 16), else in lines of one item: the scalar kernel.
``cube_max`` and ``cube_sum`` of ``cubepy_layouts.reduce`` are the block reductions Triton's ``tl.max`` and
``tl.sum`` compile to (a plane reduction, one shared slot per plane, a second plane reduction).  ``exp(v)`` is
``exp2(v * log2(e))``, what Triton's ``tl.exp`` lowers to.
"""

from __future__ import annotations

import math

import numpy as np

import cubepy as cp
from cubepy import CUBE_COUNT, CUBE_POS, UNIT_POS, Comptime, Line, Tensor, cube, f32
from cubepy_layouts.reduce import cube_max, cube_sum
from examples.triton import SassCase

UNITS = 256  # the tutorial's num_warps = 8
LOG2E = 1.4426950408889634


@cube(launch=True, launch_unchecked=True)
def softmax_kernel(x: Tensor[Line[f32]], out: Tensor[Line[f32]], block: Comptime[int]):
    """out[r, :] = softmax(x[r, :]) for rows r = CUBE_POS, CUBE_POS + CUBE_COUNT, ...; ``block`` >= the row's
    items, a whole number of lines per unit."""
    lanes = x.line_size
    n_rows = x.shape(0)
    n_cols = x.shape(1) // lanes  # lines per row
    for row in range(CUBE_POS, n_rows, CUBE_COUNT):
        x_row = row * (x.stride(0) // lanes)
        values = []
        for i in cp.unroll(range(block // lanes // UNITS)):
            col = UNIT_POS + i * UNITS
            # Triton's other=-inf past the row: no effect on the max, and exp2 of it is 0
            values.append(x[x_row + col] if col < n_cols else Line(f32(-math.inf), lanes))
        local_max = f32(-math.inf)
        for v in values:
            for lane in cp.unroll(range(lanes)):
                local_max = cp.max(local_max, v[lane])
        row_max = cube_max(local_max)
        numerators = [cp.exp2((v - row_max) * LOG2E) for v in values]
        local_sum = f32(0.0)
        for e in numerators:
            local_sum += cp.vector_sum(e)
        denominator = cube_sum(local_sum)
        out_row = row * (out.stride(0) // lanes)
        for i in cp.unroll(range(block // lanes // UNITS)):
            col = UNIT_POS + i * UNITS
            if col < n_cols:
                out[out_row + col] = numerators[i] / denominator


def block_size(n_cols: int) -> int:
    """The tutorial's BLOCK_SIZE: the next power of two of ``n_cols``, here at least one column per unit."""
    return max(UNITS, 1 << (n_cols - 1).bit_length())


def line_size(n_cols: int) -> int:
    """4 f32 (16 bytes) per line when the rows and every unit's share of a block are whole lines, else 1."""
    return 4 if n_cols % 4 == 0 and block_size(n_cols) >= 4 * UNITS else 1


def softmax(client, x, programs: int = 132 * 4, lanes: int | None = None):
    """Launch ``softmax_kernel`` on handle ``x`` (rows x cols f32); a new handle with the row softmax.

    ``programs``: how many persistent cubes at most (Triton computes SMs x occupancy; 132 SMs x 4 by default);
    ``lanes``: the line size (None: ``line_size``)."""
    rows, cols = x.shape
    out = client.empty((rows, cols), np.float32)
    count = cp.CubeCount(max(1, min(programs, rows)))
    size = {"line_size": lanes or line_size(cols)}
    args = (cp.TensorArg(x, **size), cp.TensorArg(out, **size), block_size(cols))
    softmax_kernel.launch(client, count, cp.CubeDim(UNITS), *args)
    return out


def run(
    client, rows: int = 1823, cols: int = 781, programs: int = 132 * 4, lanes: int | None = None
) -> dict[str, float]:
    """Softmax of a random ``rows x cols`` matrix (the tutorial's ragged 1823 x 781) compared with numpy."""
    x = np.random.default_rng(2).standard_normal((rows, cols)).astype(np.float32)
    got = client.read(softmax(client, client.create(x), programs, lanes))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return {"softmax max error": float(np.max(np.abs(got - e / e.sum(axis=1, keepdims=True))))}


def _build(lanes: int):
    """A ``SassCase.build``: the kernel for 4096 x 1024 f32 rows (BLOCK_SIZE 1024) in lines of ``lanes``."""

    def build(target: str = "sm_90a", **options):
        client = cp.client("interp")
        x, out = (cp.TensorArg(client.zeros((4096, 1024), np.float32), line_size=lanes) for _ in range(2))
        return softmax_kernel.compile(cp.CubeDim(UNITS), x, out, block_size(1024), target=target, **options)

    return build


# Lines of 4 are Triton's 16-byte loads for 1024 columns; lines of 1 are the kernel a ragged row (781) runs.
SASS_CASES: list[SassCase] = [
    SassCase("02 fused softmax", "softmax, persistent rows, Line[f32]x4", _build(4), "softmax_kernel", measure="loop"),
    SassCase(
        "02 fused softmax",
        "softmax, persistent rows, f32 (lines of 1)",
        _build(1),
        "softmax_kernel",
        measure="loop",
        triton_ragged=True,
    ),
]
