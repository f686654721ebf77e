"""Triton tutorial 04, low-memory dropout: the keep mask is drawn from ``(seed, offset)``, never stored.

Triton's ``_seeded_dropout`` runs one program per ``BLOCK_SIZE = 1024`` elements (4 warps) and keeps
``x[i] / (1 - p)`` where ``tl.rand(seed, i) > p``.  ``cp.rand(seed, offset)`` is ``tl.rand`` bit for bit
(Philox4x32-10 of the counter ``(offset, 0, 0, 0)`` under the key of the seed, word 0 made a uniform f32), so
this kernel drops exactly the elements Triton's does for the same seed.  The blocking is tutorial 01's: a
cube of 128 units, unit ``u`` taking elements ``u, u + 128, ..., u + 896`` of its block.  The seed is an
``i32`` as Triton passes a Python int (sign-extended into the key's high word, as Triton does).
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, cube, f32, i32
from examples.triton import SassCase

BLOCK_SIZE = 1024
UNITS = 128  # num_warps = 4
PER_UNIT = BLOCK_SIZE // UNITS


@cube(launch=True, launch_unchecked=True)
def seeded_dropout(x: Array[f32], out: Array[f32], p: f32, seed: i32):
    """out[i] = x[i] / (1 - p) where rand(seed, i) > p, else 0; a cube handles one block of BLOCK_SIZE."""
    start = CUBE_POS * BLOCK_SIZE + UNIT_POS
    n = out.len()
    for i in cp.unroll(range(PER_UNIT)):
        offset = start + i * UNITS
        if offset < n:
            keep = cp.rand(seed, offset) > p
            out[offset] = cp.select(keep, x[offset] / (1.0 - p), f32(0.0))


def dropout(client, x, p: float, seed: int):
    """Launch ``seeded_dropout`` on the f32 handle ``x``; a new handle with the result."""
    n = x.shape[0]
    out = client.empty((n,), np.float32)
    seeded_dropout.launch(
        client,
        cp.CubeCount(-(-n // BLOCK_SIZE)),
        cp.CubeDim(UNITS),
        cp.ArrayArg(x),
        cp.ArrayArg(out),
        cp.ScalarArg(p, f32),
        cp.ScalarArg(seed, i32),
    )
    return out


def philox_uniform(seed: int, offsets: np.ndarray) -> np.ndarray:
    """``tl.rand(seed, offsets)`` in numpy: word 0 of Philox4x32-10, as Triton turns it into an f32 in [0, 1)."""
    mask = np.uint64(0xFFFFFFFF)
    wide_seed = seed & (2**64 - 1)  # an i32 seed is sign-extended to 64 bits, then split into the key
    key = [np.uint64(wide_seed & 0xFFFFFFFF), np.uint64(wide_seed >> 32)]
    zero = np.zeros(offsets.shape, np.uint64)
    c = [offsets.astype(np.uint64), zero, zero, zero]
    for _ in range(10):
        lo_hi_a = np.uint64(0xD2511F53) * c[0]
        lo_hi_b = np.uint64(0xCD9E8D57) * c[2]
        c = [
            ((lo_hi_b >> np.uint64(32)) ^ c[1] ^ key[0]) & mask,
            lo_hi_b & mask,
            ((lo_hi_a >> np.uint64(32)) ^ c[3] ^ key[1]) & mask,
            lo_hi_a & mask,
        ]
        key = [(key[0] + np.uint64(0x9E3779B9)) & mask, (key[1] + np.uint64(0xBB67AE85)) & mask]
    signed = c[0].astype(np.uint32).view(np.int32)
    return np.where(signed < 0, ~signed, signed).astype(np.float32) * np.float32(4.6566127342e-10)


def run(client, n: int = 98_432 + 7, p: float = 0.5, seed: int = 123) -> dict[str, float]:
    """Dropout of ``n`` elements with ``seed`` (twice) and ``seed + 389``, checked against a numpy Philox."""
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    x[x == 0] = 1.0  # a dropped element is the only zero
    hx = client.create(x)
    first, again, other = (client.read(dropout(client, hx, p, s)) for s in (seed, seed, seed + 389))
    keep = philox_uniform(seed, np.arange(n)) > np.float32(p)
    expected = np.where(keep, x / np.float32(1.0 - p), np.float32(0.0))
    return {
        "dropout max error": float(np.max(np.abs(first - expected))),
        "same seed, elements dropped differently": float(np.count_nonzero((first == 0) != (again == 0))),
        "another seed, same mask": float(np.array_equal(first == 0, other == 0)),
    }


def _build(target: str = "sm_90a", **options):
    """A ``SassCase.build``: the kernel for 98_432 elements."""
    client = cp.client("interp")
    x, out = client.zeros((98_432,), np.float32), client.zeros((98_432,), np.float32)
    args = (cp.ArrayArg(x), cp.ArrayArg(out), cp.ScalarArg(0.5, f32), cp.ScalarArg(123, i32))
    return seeded_dropout.compile(cp.CubeDim(UNITS), *args, target=target, **options)


SASS_CASES: list[SassCase] = [
    SassCase("04 low-memory dropout", "seeded dropout, 8 f32 per unit", _build, "_seeded_dropout", triton_ragged=True),
]
