"""``TmaIm2colLayout``: wgrad/fprop im2col coordinates to the corner and offsets of a TMA im2col load (cubek's).

A load at ``(row, col)`` fetches pixels ``row..`` (linear over images, as the hardware walks them) of one
filter tap and a run of channels.  The corner is the top-left input pixel of output pixel ``row``, the
offsets are the tap's ``(kh * d, kw * d)``.  Bounds are always true: the hardware zero-fills.  With
``check_kernel``, a column past the last tap moves the channel far out of range, so the whole box is
zero-filled instead of wrapping into valid but wrong data.
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import Comptime, cube, i32, u32
from cubepy_layouts.conv.im2col import split_pixel
from cubepy_layouts.conv.problem import ConvolutionProblem, ConvParams
from cubepy_layouts.conv.tma_layout import TmaLayout
from cubepy_layouts.coords import BatchedCoords
from cubepy_layouts.layout import launchable

# A channel no tensor has: a box starting here is entirely out of bounds.
OUT_OF_RANGE_CHANNEL = 0x7FFFFF00


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class TmaIm2colLayout(TmaLayout):
    """``(batch, row, col) -> ((n, oh*s - p, ow*s - p, channel), (kh*d, kw*d))``."""

    rows: u32
    cols: u32
    out_h: u32
    out_w: u32
    channels: u32
    params: Comptime[ConvParams]
    check_kernel: Comptime[bool] = False

    Coordinates = BatchedCoords
    # ((n, h, w, c) corner, (h, w) kernel offsets)
    SourceCoordinates = ((u32, i32, i32, u32), (u32, u32))

    @cube
    def to_source_pos(self, pos):
        """The im2col load's corner and kernel offsets for the tile starting at ``(row, col)``."""
        _batch, row, col = pos
        params = self.params
        n, oh, ow = split_pixel(row, self.out_h, self.out_w)
        channel = col % self.channels
        tap = col // self.channels
        kh = tap // params.kernel[1]
        kw = tap % params.kernel[1]
        h = i32(oh * params.stride[0]) - params.padding[0]
        w = i32(ow * params.stride[1]) - params.padding[1]
        if cp.comptime(self.check_kernel):
            channel = cp.select(tap < params.kernel[0] * params.kernel[1], channel, u32(OUT_OF_RANGE_CHANNEL))
        return ((n, h, w, channel), (kh * params.dilation[0], kw * params.dilation[1]))

    @staticmethod
    def from_problem(problem: ConvolutionProblem, kind: str, check_kernel: bool = False) -> TmaIm2colLayout.Launch:
        """The input view of GEMM ``kind``: (rows, cols) = (M, K) for fprop, (K, N) for wgrad."""
        m, n, k = problem.gemm(kind)
        rows, cols = (m, k) if kind == "fprop" else (k, n)
        return TmaIm2colLayout.Launch(
            rows, cols, problem.out_h, problem.out_w, problem.in_channels, problem.params, check_kernel
        )
