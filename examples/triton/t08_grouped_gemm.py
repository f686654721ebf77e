"""Triton tutorial 08, grouped GEMM: a fixed number of cubes walks the tiles of a whole list of ``C_g = A_g @ B_g``.

Triton's ``grouped_matmul_kernel`` receives device tables of matrix addresses, ``<M, N, K>`` sizes and leading
dimensions, launches ``NUM_SM`` programs and lets program ``p`` take tiles ``p, p + NUM_SM, ...`` of the
concatenated tile list, problem after problem.  cubepy has no device pointers, so every operand lives in one
*pooled* buffer (``a``, ``b``, ``c``: the problems' matrices one after the other) and a table ``problems`` gives,
per problem, ``M, N, K, lda, ldb, ldc`` and the item offsets of its three matrices in the pools.

Each tile is the tutorial's 64 x 64 x 32 block on sm_80 tensor cores, as ``cubepy_layouts.matmul.mma_sync``
computes it: 4 planes of 32 x 32, ``mma.sync.m16n8k16`` (f16 in, f32 accumulate), fragments read with
``ldmatrix``.  The K loop is pipelined like Triton's ``num_stages=3``: ``STAGES`` shared-memory slots filled by
16-byte ``cp.async`` copies (``cp.memcpy_async``), one commit group per K tile (empty groups past the last tile
keep ``cp.async_wait_group(STAGES - 2)`` a constant), so two tiles are in flight while the planes multiply the
oldest.  Unlike the tutorial ("assume full tile for now") the edges are handled: a 16-byte copy past ``M``,
``N`` or ``K`` reads nothing and zero-fills its chunk, and the epilogue writes only inside ``M x N``.  Every row
must start 16 bytes aligned for ``cp.async``: ``K`` and ``N`` (and the pool offsets) are multiples of 8, so a
chunk of 8 items is wholly in or wholly out; ``M`` is anything.

``gemm_tile`` is shared with ``t09_persistent_matmul``.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_COUNT, CUBE_POS, PLANE_POS, UNIT_POS, UNIT_POS_PLANE, Array, SharedMemory, cube, f16, f32, u32
from examples.triton import SassCase

SHAPE = "m16n8k16"
BM, BN, BK = 64, 64, 32  # the tutorial's 64 x 64 x 32 configuration
WARPS_M, WARPS_N = 2, 2
UNITS = 32 * WARPS_M * WARPS_N  # Triton's default num_warps=4
STAGES = 3  # Triton's default num_stages=3
CHUNK = 8  # f16 per 16-byte cp.async
PAD = 8  # items added to each shared row: the 8 row addresses of an ldmatrix fall in different banks
A_STRIDE, B_STRIDE = BK + PAD, BN + PAD
A_SIZE, B_SIZE = BM * A_STRIDE, BK * B_STRIDE  # one slot of each operand
WM, WN = BM // WARPS_M, BN // WARPS_N
M_TILES, N_TILES, K_STEPS = WM // 16, WN // 8, BK // 16
A_PER_ROW, B_PER_ROW = BK // CHUNK, BN // CHUNK
A_COPIES, B_COPIES = BM * BK // CHUNK // UNITS, BK * BN // CHUNK // UNITS
FIELDS = 9  # per problem: m, n, k, lda, ldb, ldc, a offset, b offset, c offset
NUM_SM = 84  # the tutorial's NUM_SM for this configuration


@cube
def chunk_source(src: Array[f16], base: u32, ld: u32, rows: u32, cols: u32, row: u32, col: u32):
    """The pooled slice behind the 8-item chunk at ``(row, col)`` of a ``rows x cols`` matrix, empty past its
    edges (``cp.memcpy_async`` zero-fills the chunk).  ``cols`` and ``col`` are multiples of 8, so a chunk is
    wholly inside or wholly outside."""
    valid = u32(0)
    if row < rows and col < cols:
        valid = u32(CHUNK)
    start = cp.select(valid > 0, base + row * ld + col, u32(0))  # an empty chunk reads nothing
    return src.slice(start, start + valid)


@cube
def load_stage(a, b, a_stage, b_stage, dims, tile_k: u32, row0: u32, col0: u32):
    """This unit's chunks of K tile ``tile_k`` of ``a`` and ``b`` into slot ``tile_k % STAGES``."""
    m, n, k, lda, ldb, a_base, b_base = dims
    slot = tile_k % STAGES
    for i in cp.unroll(range(A_COPIES)):
        q = UNIT_POS + i * UNITS
        r = q // A_PER_ROW
        c = (q % A_PER_ROW) * CHUNK
        d = slot * A_SIZE + r * A_STRIDE + c
        cp.memcpy_async(chunk_source(a, a_base, lda, m, k, row0 + r, tile_k * BK + c), a_stage[d : d + CHUNK])
    for i in cp.unroll(range(B_COPIES)):
        q = UNIT_POS + i * UNITS
        r = q // B_PER_ROW
        c = (q % B_PER_ROW) * CHUNK
        d = slot * B_SIZE + r * B_STRIDE + c
        cp.memcpy_async(chunk_source(b, b_base, ldb, k, n, tile_k * BK + r, col0 + c), b_stage[d : d + CHUNK])


@cube
def gemm_tile(a, b, c, a_stage, b_stage, dims, ldc: u32, c_base: u32, row0: u32, col0: u32):
    """``c[row0:row0+BM, col0:col0+BN] = a @ b`` for one problem; ``dims`` = (m, n, k, lda, ldb, a_base, b_base).

    Cube-uniform: every unit of the cube calls it with the same tile."""
    m, n, k, _lda, _ldb, _a_base, _b_base = dims
    warp_row = (PLANE_POS // WARPS_N) * WM
    warp_col = (PLANE_POS % WARPS_N) * WN
    lane = UNIT_POS_PLANE
    acc = []
    for _ in cp.unroll(range(M_TILES * N_TILES)):
        fragment = cp.mma_fragment(SHAPE, "c", f32)
        for i in cp.unroll(range(4)):
            fragment[i] = 0.0
        acc.append(fragment)
    # ldmatrix row addresses: lane 8j + r gives row r of matrix j
    a_row = (lane & 7) + ((lane >> 3) & 1) * 8
    a_col = (lane >> 4) * 8
    k_tiles = (k + (BK - 1)) // BK
    for p in cp.unroll(range(STAGES - 1)):  # prologue: K tiles 0 .. STAGES-2 in flight
        if u32(p) < k_tiles:
            load_stage(a, b, a_stage, b_stage, dims, u32(p), row0, col0)
        cp.async_commit_group()  # always one group per tile, empty or not: the wait below stays constant
    for t in range(k_tiles):
        cp.async_wait_group(STAGES - 2)  # K tile t has landed for this unit
        cp.sync_cube()  # ... for every unit; and every plane is done with tile t-1's slot
        ahead = t + (STAGES - 1)
        if ahead < k_tiles:
            load_stage(a, b, a_stage, b_stage, dims, ahead, row0, col0)
        cp.async_commit_group()
        a_slot = (t % STAGES) * A_SIZE
        b_slot = (t % STAGES) * B_SIZE
        for kk in cp.unroll(range(K_STEPS)):
            a_frags = []
            for mt in cp.unroll(range(M_TILES)):
                offset = a_slot + (warp_row + mt * 16 + a_row) * A_STRIDE + kk * 16 + a_col
                a_frags.append(cp.ldmatrix(a_stage, offset, 4))
            for nt in cp.unroll(range(N_TILES)):
                b_frag = cp.ldmatrix(b_stage, b_slot + (kk * 16 + a_row) * B_STRIDE + warp_col + nt * 8, 2, True)
                for mt in cp.unroll(range(M_TILES)):
                    tile = acc[mt * N_TILES + nt]
                    cp.mma_sync(SHAPE, a_frags[mt], b_frag, tile, out=tile)
    cp.async_wait_group(0)
    cp.sync_cube()  # the slots are free for the next tile's prologue
    for mt in cp.unroll(range(M_TILES)):
        for nt in cp.unroll(range(N_TILES)):
            for i in cp.unroll(range(4)):
                r, cc = cp.mma_fragment_index(SHAPE, "d", i)
                row = row0 + warp_row + mt * 16 + r
                col = col0 + warp_col + nt * 8 + cc
                if row < m and col < n:
                    c[c_base + row * ldc + col] = f16(acc[mt * N_TILES + nt][i])


@cube(launch=True, launch_unchecked=True)
def grouped_gemm(a: Array[f16], b: Array[f16], c: Array[f16], problems: Array[u32], group_size: u32):
    """Every ``C_g = A_g @ B_g`` of the table ``problems`` (``FIELDS`` u32 per problem), tile by tile."""
    a_stage = SharedMemory.aligned(f16, STAGES * A_SIZE, 16)
    b_stage = SharedMemory.aligned(f16, STAGES * B_SIZE, 16)
    tile_idx = CUBE_POS
    last_problem_end = u32(0)
    for g in range(group_size):
        entry = g * FIELDS
        gm = problems[entry]
        gn = problems[entry + 1]
        num_n_tiles = (gn + (BN - 1)) // BN
        num_tiles = ((gm + (BM - 1)) // BM) * num_n_tiles
        while tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles:
            dims = (gm, gn, problems[entry + 2], problems[entry + 3], problems[entry + 4])
            dims = (*dims, problems[entry + 6], problems[entry + 7])
            in_problem = tile_idx - last_problem_end
            row0 = (in_problem // num_n_tiles) * BM
            col0 = (in_problem % num_n_tiles) * BN
            gemm_tile(a, b, c, a_stage, b_stage, dims, problems[entry + 5], problems[entry + 8], row0, col0)
            tile_idx += CUBE_COUNT
        last_problem_end += num_tiles


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def pack(shapes: list[tuple[int, int, int]]) -> tuple[np.ndarray, tuple[int, int, int]]:
    """The problem table for ``(m, n, k)`` shapes of dense row-major matrices and the three pool sizes.

    Each matrix starts at a multiple of 8 items (16 bytes) in its pool."""
    table, sizes = [], [0, 0, 0]
    for m, n, k in shapes:
        if k % CHUNK or n % CHUNK:
            raise cp.LaunchError(f"grouped_gemm: K={k} and N={n} must be multiples of 8 (16-byte rows for cp.async)")
        offsets = list(sizes)
        sizes = [_round_up(s + extent, CHUNK) for s, extent in zip(sizes, (m * k, k * n, m * n), strict=True)]
        table += [m, n, k, k, n, n, *offsets]
    return np.asarray(table, np.uint32), (sizes[0], sizes[1], sizes[2])


def run(client, shapes: list[tuple[int, int, int]] | None = None, cubes: int = 4) -> dict[str, float]:
    """A grouped GEMM of ragged problems on ``cubes`` persistent cubes, each ``C_g`` against numpy."""
    shapes = shapes or [(37, 40, 24), (64, 72, 72), (100, 16, 40), (1, 8, 8), (130, 136, 64)]
    rng = np.random.default_rng(8)
    table, (a_size, b_size, c_size) = pack(shapes)
    a_pool, b_pool = np.zeros(a_size, np.float16), np.zeros(b_size, np.float16)
    refs = []
    for g, (m, n, k) in enumerate(shapes):
        a_off, b_off = int(table[g * FIELDS + 6]), int(table[g * FIELDS + 7])
        a = rng.standard_normal((m, k)).astype(np.float16)
        b = rng.standard_normal((k, n)).astype(np.float16)
        a_pool[a_off : a_off + m * k], b_pool[b_off : b_off + k * n] = a.ravel(), b.ravel()
        refs.append(a.astype(np.float64) @ b.astype(np.float64))
    ha, hb, hc = client.create(a_pool), client.create(b_pool), client.zeros((c_size,), np.float16)
    args = (cp.ArrayArg(ha), cp.ArrayArg(hb), cp.ArrayArg(hc), cp.ArrayArg(client.create(table)))
    grouped_gemm.launch(client, cp.CubeCount(cubes), cp.CubeDim(UNITS), *args, cp.ScalarArg(len(shapes), u32))
    out = client.read(hc).astype(np.float64)
    errors = {}
    for g, ((m, n, _k), ref) in enumerate(zip(shapes, refs, strict=True)):
        c_off = int(table[g * FIELDS + 8])
        errors[f"C_{g} ({m}x{n}) max error"] = float(np.max(np.abs(out[c_off : c_off + m * n].reshape(m, n) - ref)))
    return errors


def _build(target: str = "sm_80", **options):
    """A ``SassCase.build``: the grouped GEMM compiled for the tutorial's four square problems (1024 .. 128)."""
    client = cp.client("interp")
    table, sizes = pack([(s, s, s) for s in (1024, 512, 256, 128)])
    pools = [cp.ArrayArg(client.zeros((size,), np.float16)) for size in sizes]
    args = (*pools, cp.ArrayArg(client.create(table)), cp.ScalarArg(4, u32))
    return grouped_gemm.compile(cp.CubeDim(UNITS), *args, target=target, **options)


SASS_CASES: list[SassCase] = [
    SassCase("08 grouped GEMM", "64x64x32 tiles, mma.sync, 3 cp.async stages", _build, "grouped_matmul_kernel",
             target="sm_80", measure="loop"),
]  # fmt: skip
