# mypy: disable-error-code="attr-defined, index, misc, operator, type-arg, valid-type"
# (kernel code: ``Array[f32]``, ``LocalArray[f32](n)`` are values of the kernel language, not Python types)
"""``async_tiled_matmul``: ``out = a @ b`` in f32, the tiles staged by a multi-stage ``cp.Pipeline`` of ``cp.async`` copies.

One cube computes a ``block_m x block_n`` block of ``out``; each unit a ``4 x 4`` micro-tile of it, with FMAs.
Per ``k`` step of ``block_k`` the cube stages ``a``'s ``block_m x block_k`` and ``b``'s ``block_k x block_n``
tiles in one of ``stages`` shared-memory slots.  Every unit copies its share of both tiles as 16-byte
``cp.async`` chunks (4 f32 of one row), zero-filled past ``M``, ``N`` or ``K`` (any ``M``; ``K`` and ``N``
must be multiples of 4 so every row starts 16-byte aligned).  The pipeline keeps ``stages - 1`` tiles in
flight while the cube computes on the oldest one:

    prologue: copy tiles 0 .. stages-2, one commit group each
    for each k tile t:
        consumer_wait (tile t has landed for this unit); sync_cube (and for every unit; and every unit
        is done reading the slot of tile t-1)
        copy tile t + stages - 1 into that slot, commit
        compute on tile t; consumer_release
"""

from __future__ import annotations

import functools

import attrs
import numpy as np

import cubepy as cp
from cubepy import CUBE_POS_X, CUBE_POS_Y, UNIT_POS, Array, LocalArray, SharedMemory, cube, f32, u32
from cubepy_layouts.matmul.mma_sync import MmaSyncLaunch

CHUNK = 4  # f32 per 16-byte cp.async
MICRO = 4  # rows and columns of a unit's micro-tile


@attrs.frozen
class AsyncTiledConfig:
    """The blocking: ``block_m x block_n`` outputs per cube, ``block_k`` per stage, ``stages`` slots (2 to 8)."""

    block_m: int = 32
    block_n: int = 32
    block_k: int = 16
    stages: int = 3

    def __attrs_post_init__(self) -> None:
        if self.block_m % MICRO or self.block_n % MICRO or self.block_k % CHUNK:
            raise cp.LaunchError(f"AsyncTiledConfig: block_m, block_n must be multiples of 4 and block_k of 4: {self}")
        if not 2 <= self.stages <= 8:
            raise cp.LaunchError(f"AsyncTiledConfig: stages={self.stages}, expected 2 to 8")
        if (self.block_m * self.block_k // CHUNK) % self.units or (self.block_k * self.block_n // CHUNK) % self.units:
            raise cp.LaunchError(
                f"AsyncTiledConfig: the tiles' 16-byte chunks do not split evenly over {self.units} units"
            )

    @property
    def units(self) -> int:
        """Units per cube: one per micro-tile."""
        return (self.block_m // MICRO) * (self.block_n // MICRO)

    def cube_count(self, m: int, n: int) -> cp.CubeCount:
        """One cube per output block."""
        return cp.CubeCount(-(-n // self.block_n), -(-m // self.block_m))

    def cube_dim(self) -> cp.CubeDim:
        """One unit per micro-tile."""
        return cp.CubeDim(self.units)


DEFAULT_CONFIG = AsyncTiledConfig()


@functools.cache
def async_tiled_kernel(config: AsyncTiledConfig):
    """The kernel of ``config`` (one per configuration)."""
    bm, bn, bk, stages = config.block_m, config.block_n, config.block_k, config.stages
    units = config.units
    units_n = bn // MICRO
    a_size, b_size = bm * bk, bk * bn
    a_per_row, b_per_row = bk // CHUNK, bn // CHUNK
    a_copies, b_copies = a_size // CHUNK // units, b_size // CHUNK // units

    @cube
    def load_chunk(src: Array[f32], rows: u32, cols: u32, row: u32, col: u32):
        """The source slice of the chunk at ``(row, col)`` of a ``rows x cols`` matrix: empty past its edges."""
        valid = u32(0)
        if row < rows and col < cols:
            valid = cp.min(cols - col, u32(CHUNK))
        start = cp.select(valid > 0, row * cols + col, u32(0))  # nothing is read from an empty chunk
        return src.slice(start, start + valid)

    @cube
    def load_stage(a, b, a_stage, b_stage, pipe, m: u32, n: u32, k: u32, tile: u32, row0: u32, col0: u32):
        """This unit's chunks of ``a``'s and ``b``'s tiles number ``tile`` into slot ``tile % stages``."""
        slot = tile % stages
        for i in cp.unroll(range(a_copies)):
            q = UNIT_POS + i * units
            r = q // a_per_row
            c = (q % a_per_row) * CHUNK
            d = slot * a_size + r * bk + c
            pipe.memcpy_async(load_chunk(a, m, k, row0 + r, tile * bk + c), a_stage[d : d + CHUNK])
        for i in cp.unroll(range(b_copies)):
            q = UNIT_POS + i * units
            r = q // b_per_row
            c = (q % b_per_row) * CHUNK
            d = slot * b_size + r * bn + c
            pipe.memcpy_async(load_chunk(b, k, n, tile * bk + r, col0 + c), b_stage[d : d + CHUNK])

    @cube(launch=True)
    def async_tiled_matmul(a: Array[f32], b: Array[f32], out: Array[f32], m: u32, n: u32, k: u32):
        a_stage = SharedMemory.aligned(f32, stages * a_size, 16)
        b_stage = SharedMemory.aligned(f32, stages * b_size, 16)
        pipe = cp.Pipeline(stages)
        row0 = CUBE_POS_Y * bm
        col0 = CUBE_POS_X * bn
        ty = UNIT_POS // units_n
        tx = UNIT_POS % units_n
        k_tiles = (k + (bk - 1)) // bk
        acc = LocalArray[f32](MICRO * MICRO)
        for i in cp.unroll(range(MICRO * MICRO)):
            acc[i] = f32(0)
        for p in cp.unroll(range(stages - 1)):
            if u32(p) < k_tiles:
                pipe.producer_acquire()
                load_stage(a, b, a_stage, b_stage, pipe, m, n, k, u32(p), row0, col0)
                pipe.producer_commit()
        for t in range(k_tiles):
            pipe.consumer_wait()
            cp.sync_cube()
            ahead = t + (stages - 1)
            if ahead < k_tiles:
                pipe.producer_acquire()
                load_stage(a, b, a_stage, b_stage, pipe, m, n, k, ahead, row0, col0)
                pipe.producer_commit()
            slot = t % stages
            for kk in range(bk):
                rows = LocalArray[f32](MICRO)
                for i in cp.unroll(range(MICRO)):
                    rows[i] = a_stage[slot * a_size + (ty * MICRO + i) * bk + kk]
                for j in cp.unroll(range(MICRO)):
                    value = b_stage[slot * b_size + kk * bn + tx * MICRO + j]
                    for i in cp.unroll(range(MICRO)):
                        acc[i * MICRO + j] += rows[i] * value
            pipe.consumer_release()
        for i in cp.unroll(range(MICRO)):
            for j in cp.unroll(range(MICRO)):
                row = row0 + ty * MICRO + i
                col = col0 + tx * MICRO + j
                if row < m and col < n:
                    out[row * n + col] = acc[i * MICRO + j]

    return async_tiled_matmul


class AsyncTiledLaunch(MmaSyncLaunch):
    """Everything the GEMM is launched with (``.launch(client)``, ``.compile(target)``), as for ``mma_sync``."""


def async_tiled_launch(a, b, out, config: AsyncTiledConfig = DEFAULT_CONFIG) -> AsyncTiledLaunch:
    """The launch of ``out (M x N) = a (M x K) @ b (K x N)`` for row-major f32 handles (K, N multiples of 4)."""
    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        raise cp.LaunchError("async_tiled_matmul takes 2-D a (M x K), b (K x N) and out (M x N)")
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b or tuple(out.shape) != (m, n):
        raise cp.LaunchError(f"async_tiled_matmul: shapes {tuple(a.shape)} @ {tuple(b.shape)} -> {tuple(out.shape)}")
    for name, handle in (("a", a), ("b", b), ("out", out)):
        if np.dtype(handle.dtype) != np.float32:
            raise cp.LaunchError(f"async_tiled_matmul: {name} is {np.dtype(handle.dtype).name}, expected float32")
    if k % CHUNK or n % CHUNK:
        raise cp.LaunchError(
            f"async_tiled_matmul: K={k} and N={n} must be multiples of 4 (rows of a and b start 16-byte aligned "
            "for cp.async); pad them with zeros"
        )
    args = (
        cp.ArrayArg(a),
        cp.ArrayArg(b),
        cp.ArrayArg(out),
        cp.ScalarArg(m, u32),
        cp.ScalarArg(n, u32),
        cp.ScalarArg(k, u32),
    )
    return AsyncTiledLaunch(async_tiled_kernel(config), args, config.cube_count(m, n), config.cube_dim())


def async_tiled_matmul(client, a, b, config: AsyncTiledConfig = DEFAULT_CONFIG):
    """``a @ b`` for f32 handles ``a`` (M x K) and ``b`` (K x N); a new f32 handle (M x N)."""
    out = client.zeros((a.shape[0], b.shape[1]), np.float32)
    async_tiled_launch(a, b, out, config).launch(client)
    return out


# The blockings ``tuned_async_tiled_matmul`` times (plain ints: a chosen config is stored as JSON).
TUNING_CONFIGS = (
    {"block_m": 32, "block_n": 32, "block_k": 16, "stages": 3},
    {"block_m": 32, "block_n": 32, "block_k": 16, "stages": 2},
    {"block_m": 64, "block_n": 32, "block_k": 16, "stages": 3},
    {"block_m": 32, "block_n": 64, "block_k": 32, "stages": 2},
)


@cp.autotune(configs=list(TUNING_CONFIGS), key=lambda a, b: (tuple(a.shape), tuple(b.shape)))
def tuned_async_tiled_matmul(client, a, b, **blocking):
    """``async_tiled_matmul`` with the blocking chosen by timing ``TUNING_CONFIGS`` once per shape and client
    (``tuned_async_tiled_matmul.best(client, a, b)`` says which; ``CUBEPY_AUTOTUNE=0`` takes the first)."""
    return async_tiled_matmul(client, a, b, AsyncTiledConfig(**blocking))
