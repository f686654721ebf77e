"""A persistent wgmma GEMM in the style of Gluon's Hopper tutorials: one warpgroup per cube walks output tiles,
its TMA ring indexed by a running stage counter.

``out = a @ b_t.T`` (f16 in, f32 out; ``b_t`` is N x K, so both operands are K-major).  Run it with
``python -m examples.persistent_wgmma``.  Cube ``c`` takes output
tiles ``c, c + cubes, ...`` of 64 x ``TILE_N``.  Two counters run across every tile the cube takes: ``issued``
(TMA loads started) and ``consumed`` (stages multiplied); stage ``counter % stages`` and its phase
``(counter // stages) % 2`` name the slot and the barrier phase, so the loop over k is rolled and its stage is
a run-time value, which ``cp.Barrier.shared_array`` and run-time ``SharedMemory.slice`` offsets allow.

Per k tile: wait for the stage, issue its four 64 x TILE_N x 16 wgmmas, wait until at most this group is in
flight (so the previous stage is free), then refill that stage with the k tile ``stages - 1`` ahead.  The same
warpgroup loads and multiplies (no warp specialization), as Gluon's persistent tutorial does.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import (
    CUBE_COUNT,
    CUBE_POS,
    UNIT_POS,
    Array,
    Comptime,
    LocalArray,
    SharedMemory,
    TensorMap,
    cube,
    f16,
    f32,
    u32,
    u64,
)

TILE_M, TILE_K = 64, 64  # rows per tile (one warpgroup's wgmma M), K per stage (128 bytes of f16 per row)
TILE_N = 128
WARPGROUP = 128


@cube
def issue(a_map, b_map, a_st, b_st, ready, counter, m0, n0, k0, tile_n: Comptime[int]):
    """Unit 0 starts the TMA loads of k tile ``k0`` into stage ``counter % stages``."""
    stages = len(ready)
    s = counter % stages
    if UNIT_POS == 0:
        ready[s].arrive_and_expect_tx(1, (TILE_M + tile_n) * TILE_K * 2)
        ready[s].tma_load_2d(a_map, a_st.slice(s * TILE_M * TILE_K, (s + 1) * TILE_M * TILE_K), m0, k0)
        ready[s].tma_load_2d(b_map, b_st.slice(s * tile_n * TILE_K, (s + 1) * tile_n * TILE_K), n0, k0)


@cube(launch=True)
def persistent_gemm(
    a_map: TensorMap[f16], b_map: TensorMap[f16], out: Array[f32], m: u32, n: u32, k: u32, stages: Comptime[int]
):
    """``out[m x n] = a @ b_t.T`` through tiles of 64 x TILE_N, ``stages`` TMA stages in a ring."""
    a_st = SharedMemory.aligned(f16, stages * TILE_M * TILE_K, 1024)
    b_st = SharedMemory.aligned(f16, stages * TILE_N * TILE_K, 1024)
    ready = cp.Barrier.shared_array(stages, 1, UNIT_POS == 0)
    acc = LocalArray[f32](TILE_N // 2)
    tiles_n = (n + (TILE_N - 1)) // TILE_N
    k_tiles = (k + (TILE_K - 1)) // TILE_K
    issued = u32(0)
    consumed = u32(0)
    for tile in range(CUBE_POS, ((m + (TILE_M - 1)) // TILE_M) * tiles_n, CUBE_COUNT):
        m0 = (tile // tiles_n) * TILE_M
        n0 = (tile % tiles_n) * TILE_N
        for i in cp.unroll(range(TILE_N // 2)):
            acc[i] = f32(0.0)
        for kk in range(cp.min(k_tiles, u32(stages - 1))):  # the prologue: stages - 1 tiles in flight
            issue(a_map, b_map, a_st, b_st, ready, issued, m0, n0, kk * TILE_K, TILE_N)
            issued += 1
        for kk in range(k_tiles):
            s = consumed % stages
            ready[s].wait_parity((consumed // stages) % 2)
            a_desc = cp.wgmma_descriptor(a_st.slice(s * TILE_M * TILE_K, (s + 1) * TILE_M * TILE_K), 16, 1024, "128B")
            b_desc = cp.wgmma_descriptor(b_st.slice(s * TILE_N * TILE_K, (s + 1) * TILE_N * TILE_K), 16, 1024, "128B")
            cp.wgmma_fence()
            for step in cp.unroll(range(TILE_K // 16)):
                cp.wgmma_mma_async(
                    acc, a_desc + u64(2 * step), b_desc + u64(2 * step), shape=(64, TILE_N, 16), elem=f16
                )
            cp.wgmma_commit_group()
            cp.wgmma_wait_group(1)  # the previous stage's group is complete: its stage may be refilled
            consumed += 1
            if kk + (stages - 1) < k_tiles:
                issue(a_map, b_map, a_st, b_st, ready, issued, m0, n0, (kk + (stages - 1)) * TILE_K, TILE_N)
                issued += 1
        cp.wgmma_wait_group(0)
        for i in cp.unroll(range(TILE_N // 2)):
            row, col = cp.wgmma_accumulator_position(UNIT_POS, i)
            if m0 + row < m and n0 + col < n:
                out[(m0 + row) * n + n0 + col] = acc[i]


def matmul(client, a: np.ndarray, b_t: np.ndarray, cubes: int = 3, stages: int = 3):
    """``a @ b_t.T`` (f16 in, f32 out) through ``persistent_gemm`` on ``cubes`` cubes; a handle of the result."""
    (m, k), (n, _) = a.shape, b_t.shape
    maps = [
        cp.TensorMapArg.tiled(cp.TensorArg(client.create(x)), box, swizzle="128B")
        for x, box in ((a, (TILE_M, TILE_K)), (b_t, (TILE_N, TILE_K)))
    ]
    out = client.zeros((m * n,), np.float32)
    sizes = (cp.ScalarArg(m, u32), cp.ScalarArg(n, u32), cp.ScalarArg(k, u32))
    persistent_gemm.launch(client, cp.CubeCount(cubes), cp.CubeDim(WARPGROUP), *maps, cp.ArrayArg(out), *sizes, stages)
    return out


def run(client, m: int = 150, n: int = 200, k: int = 200) -> dict[str, float]:
    """Multiply ragged random matrices (6 tiles for 3 cubes, a partial last k tile); the largest error against
    numpy's float64 product."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b_t = rng.standard_normal((n, k)).astype(np.float16)
    got = client.read(matmul(client, a, b_t)).reshape(m, n)
    return {
        "persistent wgmma GEMM max error": float(np.max(np.abs(got - a.astype(np.float64) @ b_t.astype(np.float64).T)))
    }


if __name__ == "__main__":
    print(run(cp.client("interp", sanitize=True)))
