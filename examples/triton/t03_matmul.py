"""Triton tutorial 03, matrix multiplication: ``c = a @ b`` in f16 with an f32 accumulator, on sm_80 tensor cores.

The blocking is one of the tutorial's: ``BLOCK_SIZE_M = BLOCK_SIZE_N = 64``, ``BLOCK_SIZE_K = 32``, 4 warps,
``GROUP_SIZE_M = 8`` and ``num_stages = 4``.  As Triton compiles ``tl.dot`` for sm_80, each warp owns a
``32 x 32`` quarter of the cube's block as 2 x 4 ``mma.sync.m16n8k16`` accumulators, reads its operands from
shared memory with ``ldmatrix`` (``a`` as ``x4``, ``b`` transposed as ``x2.trans``), and the K loop is
software-pipelined: ``STAGES - 1`` tiles of ``a`` and ``b`` are in flight as ``cp.async`` copies (16 bytes
each, two per unit per operand) while the cube computes on the oldest one (``cp.Pipeline``; see
``cubepy_layouts/matmul/async_tiled.py`` for the same loop in f32).

Cubes are numbered along one axis and mapped to output blocks in Triton's grouped order (``GROUP_SIZE_M``
block rows at a time, column by column inside a group) so neighbouring cubes share tiles in L2.

Ragged shapes: a copy past ``M``, ``N`` or ``K`` is cut short and zero-filled (``cp.async``'s source size), and
the epilogue stores only inside ``M x N``.  ``cp.async`` moves 16-byte chunks from 16-byte aligned addresses,
so the leading dimensions ``lda`` and ``ldb`` (Triton's ``stride_am`` and ``stride_bk``) must be multiples of
8 items: ``run`` stores a ragged matrix with padded rows, as a BLAS caller would.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS, PLANE_POS, UNIT_POS, UNIT_POS_PLANE, Array, SharedMemory, cube, f16, f32, u32
from examples.triton import SassCase

BM, BN, BK = 64, 64, 32  # BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K
GROUP_M = 8  # GROUP_SIZE_M
STAGES = 4  # num_stages
WARPS_M, WARPS_N = 2, 2  # num_warps = 4
UNITS = 32 * WARPS_M * WARPS_N
CHUNK = 8  # f16 per 16-byte cp.async
PAD = 8  # items added to each shared row: the 8 row addresses of one ldmatrix fall in different banks
A_STRIDE, B_STRIDE = BK + PAD, BN + PAD
A_SIZE, B_SIZE = BM * A_STRIDE, BK * B_STRIDE  # one stage of each operand, in items
WM, WN = BM // WARPS_M, BN // WARPS_N  # a warp's tile
M_TILES, N_TILES, K_STEPS = WM // 16, WN // 8, BK // 16
SHAPE = "m16n8k16"


@cube
def chunk_of(src: Array[f16], rows: u32, cols: u32, ld: u32, row: u32, col: u32):
    """The source of the 16-byte chunk at ``(row, col)`` of a ``rows x cols`` matrix: short or empty past its
    edges (the copy zero-fills the rest)."""
    valid = u32(0)
    if row < rows and col < cols:
        valid = cp.min(cols - col, u32(CHUNK))
    start = cp.select(valid > 0, row * ld + col, u32(0))  # an empty chunk reads nothing
    return src.slice(start, start + valid)


@cube
def load_tiles(a, b, a_smem, b_smem, pipe, m: u32, n: u32, k: u32, lda: u32, ldb: u32, tile: u32, row0, col0):
    """This unit's chunks of the K tile ``tile`` of ``a`` (BM x BK) and ``b`` (BK x BN) into its stage's slot."""
    slot = tile % STAGES
    k0 = tile * BK
    for i in cp.unroll(range(BM * BK // CHUNK // UNITS)):
        q = UNIT_POS + i * UNITS
        r = q // (BK // CHUNK)
        c = (q % (BK // CHUNK)) * CHUNK
        d = slot * A_SIZE + r * A_STRIDE + c
        pipe.memcpy_async(chunk_of(a, m, k, lda, row0 + r, k0 + c), a_smem[d : d + CHUNK])
    for i in cp.unroll(range(BK * BN // CHUNK // UNITS)):
        q = UNIT_POS + i * UNITS
        r = q // (BN // CHUNK)
        c = (q % (BN // CHUNK)) * CHUNK
        d = slot * B_SIZE + r * B_STRIDE + c
        pipe.memcpy_async(chunk_of(b, k, n, ldb, k0 + r, col0 + c), b_smem[d : d + CHUNK])


@cube(launch=True, launch_unchecked=True)
def matmul_kernel(a: Array[f16], b: Array[f16], c: Array[f16], m: u32, n: u32, k: u32, lda: u32, ldb: u32, ldc: u32):
    """c (m x n) = a (m x k) @ b (k x n), row-major with leading dimensions lda, ldb, ldc; one 64 x 64 block
    of c per cube, cubes in grouped order."""
    # Triton's grouped ordering of the program id
    blocks_m = (m + (BM - 1)) // BM
    blocks_n = (n + (BN - 1)) // BN
    in_group = GROUP_M * blocks_n
    first_m = (CUBE_POS // in_group) * GROUP_M
    group_rows = cp.min(blocks_m - first_m, u32(GROUP_M))
    block_m = first_m + (CUBE_POS % in_group) % group_rows
    block_n = (CUBE_POS % in_group) // group_rows
    row0 = block_m * BM
    col0 = block_n * BN

    a_smem = SharedMemory.aligned(f16, STAGES * A_SIZE, 16)
    b_smem = SharedMemory.aligned(f16, STAGES * B_SIZE, 16)
    pipe = cp.Pipeline(STAGES)
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
    a_row = (lane & 7) + ((lane >> 3) & 1) * 8  # x4: rows 0-7 | 8-15 of columns 0-7 | 8-15
    a_col = (lane >> 4) * 8
    b_row = (lane & 7) + ((lane >> 3) & 1) * 8  # x2.trans: k rows 0-7 | 8-15 (lanes 16-31 unused)

    k_tiles = (k + (BK - 1)) // BK
    for p in cp.unroll(range(STAGES - 1)):  # the prologue: the first STAGES - 1 tiles in flight
        if u32(p) < k_tiles:
            pipe.producer_acquire()
            load_tiles(a, b, a_smem, b_smem, pipe, m, n, k, lda, ldb, u32(p), row0, col0)
            pipe.producer_commit()
    for t in range(k_tiles):
        pipe.consumer_wait()  # tile t has landed for this unit
        cp.sync_cube()  # ... for every unit, and every unit is done with tile t - 1's slot
        ahead = t + (STAGES - 1)
        if ahead < k_tiles:  # refill the slot of tile t - 1
            pipe.producer_acquire()
            load_tiles(a, b, a_smem, b_smem, pipe, m, n, k, lda, ldb, ahead, row0, col0)
            pipe.producer_commit()
        a_base = (t % STAGES) * A_SIZE
        b_base = (t % STAGES) * B_SIZE
        for kk in cp.unroll(range(K_STEPS)):
            a_frags = []
            for mt in cp.unroll(range(M_TILES)):
                offset = a_base + (warp_row + mt * 16 + a_row) * A_STRIDE + kk * 16 + a_col
                a_frags.append(cp.ldmatrix(a_smem, offset, 4))
            for nt in cp.unroll(range(N_TILES)):
                b_frag = cp.ldmatrix(b_smem, b_base + (kk * 16 + b_row) * B_STRIDE + warp_col + nt * 8, 2, True)
                for mt in cp.unroll(range(M_TILES)):
                    tile = acc[mt * N_TILES + nt]
                    cp.mma_sync(SHAPE, a_frags[mt], b_frag, tile, out=tile)
        pipe.consumer_release()

    for mt in cp.unroll(range(M_TILES)):
        for nt in cp.unroll(range(N_TILES)):
            for i in cp.unroll(range(4)):
                r, col = cp.mma_fragment_index(SHAPE, "d", i)
                row = row0 + warp_row + mt * 16 + r
                column = col0 + warp_col + nt * 8 + col
                if row < m and column < n:
                    c[row * ldc + column] = f16(acc[mt * N_TILES + nt][i])


def padded(rows: int, cols: int) -> int:
    """The leading dimension of a ``rows x cols`` f16 matrix for this kernel: ``cols`` rounded up to 8."""
    return -(-cols // CHUNK) * CHUNK


def matmul(client, a: np.ndarray, b: np.ndarray, fill: float = np.nan) -> np.ndarray:
    """``a @ b`` of two f16 numpy matrices through ``matmul_kernel``: rows padded to 16 bytes with ``fill``
    (NaN by default, which would show in the result if the kernel read it)."""
    (m, k), (_, n) = a.shape, b.shape
    lda, ldb = padded(m, k), padded(k, n)
    a_store = np.full((m, lda), fill, np.float16)
    a_store[:, :k] = a
    b_store = np.full((k, ldb), fill, np.float16)
    b_store[:, :n] = b
    ha, hb = client.create(a_store), client.create(b_store)
    hc = client.zeros((m, n), np.float16)
    count = cp.CubeCount(-(-m // BM) * -(-n // BN))
    scalars = [cp.ScalarArg(v, u32) for v in (m, n, k, lda, ldb, n)]
    matmul_kernel.launch(client, count, cp.CubeDim(UNITS), cp.ArrayArg(ha), cp.ArrayArg(hb), cp.ArrayArg(hc), *scalars)
    return client.read(hc)


def run(client, shapes: tuple[tuple[int, int, int], ...] = ((37, 29, 21), (256, 256, 256))) -> dict[str, float]:
    """``a @ b`` at each ``(M, N, K)`` against numpy in float32 (from the same f16 inputs); the result is f16,
    so the error is relative to the largest output (f16 keeps 11 bits)."""
    errors = {}
    rng = np.random.default_rng(3)
    for m, n, k in shapes:
        a = rng.standard_normal((m, k)).astype(np.float16)
        b = rng.standard_normal((k, n)).astype(np.float16)
        want = a.astype(np.float32) @ b.astype(np.float32)
        got = matmul(client, a, b).astype(np.float32)
        errors[f"matmul {m}x{n}x{k} max relative error"] = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    return errors


def _build(target: str = "sm_80", **options):
    """A ``SassCase.build``: the kernel for 512 x 512 x 512 (the tutorial's unit test)."""
    client = cp.client("interp")
    arrays = [cp.ArrayArg(client.zeros((512, 512), np.float16)) for _ in range(3)]
    scalars = [cp.ScalarArg(512, u32) for _ in range(6)]
    return matmul_kernel.compile(cp.CubeDim(UNITS), *arrays, *scalars, target=target, **options)


SASS_CASES: list[SassCase] = [
    SassCase(
        "03 matrix multiplication",
        "mma.sync 64x64x32, 4 warps, 4 cp.async stages",
        _build,
        "matmul_kernel",
        target="sm_80",
        measure="loop",
    ),
    SassCase(
        "03 matrix multiplication",
        "mma.sync 64x64x32, 4 warps, 4 cp.async stages",
        _build,
        "matmul_kernel",
        target="sm_80",
    ),
]
