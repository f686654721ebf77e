"""Triton tutorial 09, persistent matmul: as many cubes as the GPU has SMs, each looping over output tiles.

Triton's ``matmul_kernel_persistent`` launches ``min(NUM_SMS, tiles)`` programs; program ``p`` computes tiles
``p, p + NUM_SMS, ...`` (``tl.range(start_pid, num_tiles, NUM_SMS)``), each mapped to ``(pid_m, pid_n)`` in
groups of ``GROUP_SIZE_M`` rows of tiles so that neighbouring programs share ``B`` columns in L2.  In cubepy the
tile loop is a plain ``range(CUBE_POS, num_tiles, CUBE_COUNT)``: the cube count is chosen at launch, the loop
reads it back.  Each tile is the 64 x 64 x 32 tensor-core block of ``t08_grouped_gemm.gemm_tile`` (``mma.sync``
on sm_80, the K loop pipelined through 3 ``cp.async`` stages, zero-filled at the edges), so any ``M`` works;
``K`` and ``N`` are multiples of 8 (16-byte rows for ``cp.async``).  This is the tutorial's pointer form; its
TMA form (``matmul_kernel_descriptor_persistent``) is not ported here.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_COUNT, CUBE_POS, Array, SharedMemory, cube, f16, u32
from examples.triton import SassCase
from examples.triton.t08_grouped_gemm import A_SIZE, B_SIZE, BM, BN, CHUNK, STAGES, UNITS, gemm_tile

GROUP_SIZE_M = 8  # the tutorial's GROUP_SIZE_M


@cube(launch=True, launch_unchecked=True)
def matmul_persistent(a: Array[f16], b: Array[f16], c: Array[f16], m: u32, n: u32, k: u32):
    """c (m x n) = a (m x k) @ b (k x n), row-major; each cube takes every CUBE_COUNT-th output tile."""
    a_stage = SharedMemory.aligned(f16, STAGES * A_SIZE, 16)
    b_stage = SharedMemory.aligned(f16, STAGES * B_SIZE, 16)
    num_pid_m = (m + (BM - 1)) // BM
    num_pid_n = (n + (BN - 1)) // BN
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    dims = (m, n, k, k, n, u32(0), u32(0))
    for tile_id in range(CUBE_POS, num_pid_m * num_pid_n, CUBE_COUNT):
        first_pid_m = (tile_id // num_pid_in_group) * GROUP_SIZE_M
        group_size_m = cp.min(num_pid_m - first_pid_m, u32(GROUP_SIZE_M))
        pid_m = first_pid_m + tile_id % group_size_m
        pid_n = (tile_id % num_pid_in_group) // group_size_m
        gemm_tile(a, b, c, a_stage, b_stage, dims, n, u32(0), pid_m * BM, pid_n * BN)


def launch(client, a, b, c, cubes: int) -> None:
    """``c = a @ b`` for f16 handles on ``min(cubes, tiles)`` cubes (Triton's grid)."""
    (m, k), n = a.shape, b.shape[1]
    if k % CHUNK or n % CHUNK:
        raise cp.LaunchError(f"matmul_persistent: K={k} and N={n} must be multiples of 8 (16-byte rows for cp.async)")
    tiles = -(-m // BM) * -(-n // BN)
    args = (cp.ArrayArg(a), cp.ArrayArg(b), cp.ArrayArg(c), cp.ScalarArg(m, u32), cp.ScalarArg(n, u32))
    matmul_persistent.launch(client, cp.CubeCount(min(cubes, tiles)), cp.CubeDim(UNITS), *args, cp.ScalarArg(k, u32))


def run(client, m: int = 301, n: int = 136, k: int = 72, cubes: int = 5) -> dict[str, float]:
    """A ragged f16 product on a few persistent cubes (each takes several tiles), against numpy."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    ha, hb, hc = client.create(a), client.create(b), client.zeros((m, n), np.float16)
    launch(client, ha, hb, hc, cubes)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return {"persistent matmul max error": float(np.max(np.abs(client.read(hc).astype(np.float64) - ref)))}


def _build(target: str = "sm_80", **options):
    """A ``SassCase.build``: the kernel compiled for f16 8192 x 8192 x 512 (the tutorial's benchmark shape)."""
    client = cp.client("interp")
    m, n, k = 8192, 8192, 512
    # sizes are runtime; what a launch at this shape compiles in is whether each length is a multiple of 16 and
    # that c holds m * n items (its stores then need no check: cubepy.ir.product_bounds)
    handles = [client.zeros((size,), np.float16) for size in (m * k, k * n, m * n)]
    args = [cp.ArrayArg(h) for h in handles] + [cp.ScalarArg(v, u32) for v in (m, n, k)]
    return matmul_persistent.compile(cp.CubeDim(UNITS), *args, target=target, **options)


SASS_CASES: list[SassCase] = [
    SassCase("09 persistent matmul", "64x64x32 tiles, mma.sync, 3 cp.async stages", _build,
             "matmul_kernel_persistent", target="sm_80", measure="loop"),
]  # fmt: skip
