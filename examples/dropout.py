"""Seeded dropout (Triton's "low-memory dropout" tutorial): the mask is recomputed from (seed, offset), never stored.

``cp.rand(seed, offset)`` is Triton's ``tl.rand`` bit for bit, so the same seed drops the same elements
as the Triton kernel would.  The numpy check below recomputes the Philox4x32-10 stream by hand.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32, u32


@cube(launch=True)
def seeded_dropout(x: Array[f32], out: Array[f32], p: f32, seed: u32):
    """out[i] = x[i] / (1 - p) where rand(seed, i) > p, else 0."""
    i = ABSOLUTE_POS
    if i < x.len():
        keep = cp.rand(seed, i) > p
        out[i] = cp.select(keep, x[i] / (1.0 - p), f32(0.0))


def _philox_first_word(seed: int, offsets: np.ndarray) -> np.ndarray:
    """Word 0 of Philox4x32-10 of the counter (offset, 0, 0, 0) under the key (seed, 0), in numpy."""
    mask = np.uint64(0xFFFFFFFF)
    c = [offsets.astype(np.uint64), np.zeros_like(offsets, np.uint64), np.zeros_like(offsets, np.uint64)]
    c.append(np.zeros_like(offsets, np.uint64))
    k0, k1 = np.uint64(seed), np.uint64(0)
    for _ in range(10):
        a, b = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [((b >> np.uint64(32)) ^ c[1] ^ k0) & mask, b & mask, ((a >> np.uint64(32)) ^ c[3] ^ k1) & mask, a & mask]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return c[0].astype(np.uint32)


def _uniform(words: np.ndarray) -> np.ndarray:
    """Triton's u32 -> f32 in [0, 1)."""
    x = words.view(np.int32)
    return np.where(x < 0, ~x, x).astype(np.float32) * np.float32(4.6566127342e-10)


def run(client, n: int = 1000, p: float = 0.5, seed: int = 123) -> dict:
    """Dropout of a random vector, twice with one seed (same mask) and once with another, checked with numpy."""
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32) + 3.0  # no zeros in x
    hx = client.create(x)
    outs = []
    for s in (seed, seed, seed + 1):
        ho = client.empty(n, np.float32)
        seeded_dropout.launch(
            client,
            cp.CubeCount((n + 127) // 128),
            cp.CubeDim(128),
            cp.ArrayArg(hx),
            cp.ArrayArg(ho),
            cp.ScalarArg(p, cp.f32),
            cp.ScalarArg(s, cp.u32),
        )
        outs.append(client.read(ho))
    keep = _uniform(_philox_first_word(seed, np.arange(n))) > np.float32(p)
    expected = np.where(keep, x / np.float32(1.0 - p), np.float32(0.0))
    return {
        "dropout max error": float(np.max(np.abs(outs[0] - expected))),
        "same seed, different masks": float(np.count_nonzero((outs[0] == 0) != (outs[1] == 0))),
        "another seed keeps the same mask": float(np.array_equal(outs[0] == 0, outs[2] == 0)),
    }
