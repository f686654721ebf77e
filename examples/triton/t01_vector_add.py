"""Triton tutorial 01, vector addition: ``out = x + y``, one cube per block of 1024 elements.

Triton's ``add_kernel`` runs one program per ``BLOCK_SIZE = 1024`` elements with its default 4 warps, so
each of its 128 threads owns 8 elements and a mask ``offsets < n_elements`` guards the ragged tail.  The
cubepy kernel is the same blocking written per unit: a cube of 128 units covers 1024 elements, unit ``u``
adds elements ``u, u + 128, ..., u + 896`` of its block (consecutive units touch consecutive addresses, so
every one of the eight loads is coalesced), and an ``if`` per element plays the mask.

``vector_add_lines`` is the vectorized form Triton picks when it can prove 16-byte alignment: each unit
adds two ``Line[f32]`` of 4, so the block is still 1024 elements, for lengths that are a multiple of 4.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Line, cube, f32
from examples.triton import SassCase

BLOCK_SIZE = 1024  # elements per cube, as the tutorial's BLOCK_SIZE
UNITS = 128  # Triton's default num_warps=4
PER_UNIT = BLOCK_SIZE // UNITS
LINE = 4


@cube(launch=True, launch_unchecked=True)
def vector_add(x: Array[f32], y: Array[f32], out: Array[f32]):
    """out[i] = x[i] + y[i]; a cube adds one block of BLOCK_SIZE elements."""
    start = CUBE_POS * BLOCK_SIZE + UNIT_POS
    n = out.len()
    for i in cp.unroll(range(PER_UNIT)):
        offset = start + i * UNITS
        if offset < n:
            out[offset] = x[offset] + y[offset]


@cube(launch=True, launch_unchecked=True)
def vector_add_lines(x: Array[Line[f32]], y: Array[Line[f32]], out: Array[Line[f32]]):
    """The same block as ``vector_add`` in lines of 4: each unit adds BLOCK_SIZE / (4 * 128) = 2 lines."""
    start = CUBE_POS * (BLOCK_SIZE // LINE) + UNIT_POS
    n = out.len()
    for i in cp.unroll(range(PER_UNIT // LINE)):
        offset = start + i * UNITS
        if offset < n:
            out[offset] = x[offset] + y[offset]


def cube_count(n: int) -> cp.CubeCount:
    """One cube per BLOCK_SIZE elements (Triton's ``triton.cdiv(n_elements, BLOCK_SIZE)`` programs)."""
    return cp.CubeCount(-(-n // BLOCK_SIZE))


def run(client, n: int = 98_432 + 7) -> dict[str, float]:
    """Add two random vectors of ``n`` elements (ragged: not a multiple of the block) and compare with numpy."""
    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    hx, hy, out = client.create(x), client.create(y), client.empty((n,), np.float32)
    args = (cp.ArrayArg(hx), cp.ArrayArg(hy), cp.ArrayArg(out))
    vector_add.launch(client, cube_count(n), cp.CubeDim(UNITS), *args)
    errors = {"vector add max error": float(np.max(np.abs(client.read(out) - (x + y))))}
    whole = n - n % LINE  # the line form needs a multiple of 4 elements
    lx, ly, lout = client.create(x[:whole]), client.create(y[:whole]), client.empty((whole,), np.float32)
    line_args = (cp.ArrayArg(lx, line_size=LINE), cp.ArrayArg(ly, line_size=LINE), cp.ArrayArg(lout, line_size=LINE))
    vector_add_lines.launch(client, cube_count(whole), cp.CubeDim(UNITS), *line_args)
    errors["vector add (lines) max error"] = float(np.max(np.abs(client.read(lout) - (x[:whole] + y[:whole]))))
    return errors


def _build(lines: bool):
    """A ``SassCase.build``: compile one of the kernels for 98_432 elements (Triton's size)."""

    def build(target: str = "sm_90a", **options):
        client = cp.client("interp")
        n = 98_432
        if lines:
            handles = [client.zeros((n,), np.float32) for _ in range(3)]
            args = [cp.ArrayArg(h, line_size=LINE) for h in handles]
            return vector_add_lines.compile(cp.CubeDim(UNITS), *args, target=target, **options)
        args = [cp.ArrayArg(client.zeros((n,), np.float32)) for _ in range(3)]
        return vector_add.compile(cp.CubeDim(UNITS), *args, target=target, **options)

    return build


SASS_CASES: list[SassCase] = [
    SassCase("01 vector add", "vector add, 8 f32 per unit", _build(False), "add_kernel", triton_ragged=True),
    SassCase("01 vector add", "vector add, 2 Line[f32]x4 per unit", _build(True), "add_kernel"),
]
