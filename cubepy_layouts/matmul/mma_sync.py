"""``mma_sync_matmul``: ``out = a @ b`` on sm_80 tensor cores with ``mma.sync.m16n8k16`` (f16/bf16 in, f32 accumulate).

One cube computes a ``64 x 64`` block of ``out`` with 4 planes (2 x 2), each plane a ``32 x 32`` warp tile
of 2 x 4 ``m16n8`` accumulator fragments.  Per ``k`` step of 32 the cube stages ``a``'s ``64 x 32`` and
``b``'s ``32 x 64`` tiles in shared memory (rows padded by 8 items so the 8 row addresses of an ``ldmatrix``
fall in different banks), reading global memory through checked ``View``s over ``RowMajorLayout`` (zeros
past ``M``, ``N`` or ``K``: any shape works), then every plane loads its ``a`` fragments with
``ldmatrix.x4`` and its ``b`` fragments with ``ldmatrix.x2.trans`` (``b`` is ``K x N`` row-major, the
``mma`` wants it column-major) and issues 16 ``mma.sync``.  The epilogue writes each fragment element
where ``cp.mma_fragment_index`` places it, through a checked view, converted to the output type.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import numpy as np

import cubepy as cp
from cubepy import (
    CUBE_POS_X,
    CUBE_POS_Y,
    PLANE_POS,
    UNIT_POS,
    UNIT_POS_PLANE,
    Array,
    SharedMemory,
    cube,
    f32,
    u32,
    usize,
)
from cubepy_layouts.coords import Coords1d, Coords2d
from cubepy_layouts.layout import Layout, launchable
from cubepy_layouts.view import View

SHAPE = "m16n8k16"
INPUT_DTYPES = {"float16": cp.f16, "bfloat16": cp.bf16}
OUTPUT_DTYPES = {"float16": cp.f16, "bfloat16": cp.bf16, "float32": cp.f32}


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class RowMajorLayout(Layout):
    """``(row, col) -> row * row_stride + col`` of a ``rows x cols`` matrix; in bounds when both are inside."""

    rows: u32
    cols: u32
    row_stride: u32

    Coordinates = Coords2d
    SourceCoordinates = Coords1d

    @cube
    def to_source_pos(self, pos):
        """The linear index of ``(row, col)``."""
        row, col = pos
        return usize(row * self.row_stride + col)

    @cube
    def is_in_bounds(self, pos):
        """``row < rows`` and ``col < cols``."""
        row, col = pos
        return row < self.rows and col < self.cols

    @cube
    def shape(self):
        """``(rows, cols)``."""
        return (self.rows, self.cols)

    @staticmethod
    def of(rows: int, cols: int) -> RowMajorLayout.Launch:
        """A dense row-major ``rows x cols`` matrix."""
        return RowMajorLayout.Launch(rows, cols, cols)


@attrs.frozen
class MmaSyncTiling:
    """The blocking: a ``block_m x block_n`` output block per cube in ``warps_m x warps_n`` planes, ``block_k`` per stage."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2
    pad: int = 8  # items added to each shared row (16 bytes: keeps rows 16-byte aligned for ldmatrix)

    def cube_count(self, m: int, n: int) -> cp.CubeCount:
        """One cube per output block."""
        return cp.CubeCount(-(-n // self.block_n), -(-m // self.block_m))

    def cube_dim(self) -> cp.CubeDim:
        """One plane per warp tile."""
        return cp.CubeDim(32 * self.warps_m * self.warps_n)


DEFAULT_TILING = MmaSyncTiling()


@functools.cache
def mma_sync_kernel(elem: cp.ScalarType, out_elem: cp.ScalarType, tiling: MmaSyncTiling):
    """The GEMM kernel for inputs of ``elem`` and output of ``out_elem``."""
    bm, bn, bk = tiling.block_m, tiling.block_n, tiling.block_k
    wm, wn = bm // tiling.warps_m, bn // tiling.warps_n
    m_tiles, n_tiles, k_steps = wm // 16, wn // 8, bk // 16
    a_stride, b_stride = bk + tiling.pad, bn + tiling.pad
    units = 32 * tiling.warps_m * tiling.warps_n

    @cube(launch=True)
    def mma_sync_gemm(
        a: Array[elem],
        b: Array[elem],
        out: Array[out_elem],
        a_layout: RowMajorLayout,
        b_layout: RowMajorLayout,
        out_layout: RowMajorLayout,
    ):
        lhs = View(a, a_layout)
        rhs = View(b, b_layout)
        result = View(out, out_layout)
        a_tile = SharedMemory.aligned(elem, bm * a_stride, 16)
        b_tile = SharedMemory.aligned(elem, bk * b_stride, 16)
        _m, k = lhs.shape()
        row0 = CUBE_POS_Y * bm
        col0 = CUBE_POS_X * bn
        warp_row = (PLANE_POS // tiling.warps_n) * wm
        warp_col = (PLANE_POS % tiling.warps_n) * wn
        lane = UNIT_POS_PLANE
        acc = []
        for _tile in cp.unroll(range(m_tiles * n_tiles)):
            fragment = cp.mma_fragment(SHAPE, "c", f32)
            for i in cp.unroll(range(4)):
                fragment[i] = 0.0
            acc.append(fragment)
        # ldmatrix row addresses: lane 8j + r gives row r of matrix j.
        a_row = (lane & 7) + ((lane >> 3) & 1) * 8  # x4: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15)
        a_col = (lane >> 4) * 8
        b_row = (lane & 7) + ((lane >> 3) & 1) * 8  # x2.trans: k rows 0-7, 8-15 (lanes 16-31 unused)
        for k0 in range(0, k, bk):
            for idx in range(UNIT_POS, bm * bk, units):
                r = idx // bk
                c = idx % bk
                a_tile[r * a_stride + c] = lhs.read_checked((row0 + r, k0 + c))
            for idx in range(UNIT_POS, bk * bn, units):
                r = idx // bn
                c = idx % bn
                b_tile[r * b_stride + c] = rhs.read_checked((k0 + r, col0 + c))
            cp.sync_cube()
            for kk in cp.unroll(range(k_steps)):
                a_frags = []
                for mt in cp.unroll(range(m_tiles)):
                    offset = (warp_row + mt * 16 + a_row) * a_stride + kk * 16 + a_col
                    a_frags.append(cp.ldmatrix(a_tile, offset, 4))
                for nt in cp.unroll(range(n_tiles)):
                    offset = (kk * 16 + b_row) * b_stride + warp_col + nt * 8
                    b_frag = cp.ldmatrix(b_tile, offset, 2, True)
                    for mt in cp.unroll(range(m_tiles)):
                        cp.mma_sync(SHAPE, a_frags[mt], b_frag, acc[mt * n_tiles + nt], out=acc[mt * n_tiles + nt])
            cp.sync_cube()
        for mt in cp.unroll(range(m_tiles)):
            for nt in cp.unroll(range(n_tiles)):
                for i in cp.unroll(range(4)):
                    r, c = cp.mma_fragment_index(SHAPE, "d", i)
                    position = (row0 + warp_row + mt * 16 + r, col0 + warp_col + nt * 8 + c)
                    result.write_checked(position, out_elem(acc[mt * n_tiles + nt][i]))

    return mma_sync_gemm


def _elem(handle, table: dict, what: str) -> cp.ScalarType:
    name = np.dtype(handle.dtype).name
    if name not in table:
        raise cp.LaunchError(f"mma_sync_matmul: {what} of {name}; expected one of {', '.join(table)}")
    return table[name]


@attrs.frozen
class MmaSyncLaunch:
    """Everything the GEMM is launched with."""

    kernel: Any  # the @cube(launch=True) kernel
    args: tuple
    cube_count: cp.CubeCount
    cube_dim: cp.CubeDim

    def launch(self, client) -> None:
        """Run the kernel."""
        self.kernel.launch(client, self.cube_count, self.cube_dim, *self.args)

    def compile(self, target: str = "sm_80"):
        """The compiled kernel (PTX and, with ptxas, its resources)."""
        return self.kernel.compile(self.cube_dim, *self.args, target=target)


def mma_sync_launch(a, b, out, tiling: MmaSyncTiling = DEFAULT_TILING) -> MmaSyncLaunch:
    """The launch of ``out (M x N) = a (M x K) @ b (K x N)`` for row-major handles."""
    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        raise cp.LaunchError("mma_sync_matmul takes 2-D a (M x K), b (K x N) and out (M x N)")
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b or tuple(out.shape) != (m, n):
        raise cp.LaunchError(f"mma_sync_matmul: shapes {tuple(a.shape)} @ {tuple(b.shape)} -> {tuple(out.shape)}")
    elem = _elem(a, INPUT_DTYPES, "a")
    if _elem(b, INPUT_DTYPES, "b") != elem:
        raise cp.LaunchError(f"mma_sync_matmul: a and b differ in dtype: {a.dtype} and {b.dtype}")
    kernel = mma_sync_kernel(elem, _elem(out, OUTPUT_DTYPES, "out"), tiling)
    args = (
        cp.ArrayArg(a),
        cp.ArrayArg(b),
        cp.ArrayArg(out),
        RowMajorLayout.of(m, k),
        RowMajorLayout.of(k, n),
        RowMajorLayout.of(m, n),
    )
    return MmaSyncLaunch(kernel, args, tiling.cube_count(m, n), tiling.cube_dim())


def mma_sync_matmul(client, a, b, out_dtype=np.float32, tiling: MmaSyncTiling = DEFAULT_TILING):
    """``a @ b`` for f16/bf16 handles ``a`` (M x K) and ``b`` (K x N); a new ``out_dtype`` handle (M x N)."""
    out = client.zeros((a.shape[0], b.shape[1]), out_dtype)
    mma_sync_launch(a, b, out, tiling).launch(client)
    return out
