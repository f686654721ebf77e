"""``Im2colLayout``: the implicit-GEMM view of a convolution input (cubek's ``Im2colLayout``).

Row ``r`` is an output pixel ``(n, oh, ow)`` (row-major over all images); column ``c`` is a filter tap and
input channel ``(kh, kw, ci)``, channels fastest.  The same mapping serves fprop (rows, cols) = (M, K) and
wgrad (K, N).  Only rows and columns are checked here; whether the input pixel lies in the padding is
``NhwcLayout``'s spatial check further down the chain.
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import Comptime, cube, i32, u32
from cubepy_layouts.conv.bounds import in_bounds_2d
from cubepy_layouts.conv.nhwc import NhwcCoords
from cubepy_layouts.conv.problem import ConvolutionProblem, ConvParams
from cubepy_layouts.coords import Coords2d
from cubepy_layouts.layout import Layout, launchable


@cube
def split_pixel(row, out_h, out_w):
    """Output pixel index -> ``(n, oh, ow)``."""
    ow = row % out_w
    rest = row // out_w
    return (rest // out_h, rest % out_h, ow)


@cube
def split_patch(col, channels, kernel_w: int):
    """Patch column -> ``(kh, kw, channel)`` (channels fastest, then kernel width)."""
    channel = col % channels
    tap = col // channels
    return (tap // kernel_w, tap % kernel_w, channel)


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class Im2colLayout(Layout):
    """``(pixel row, patch col) -> (n, oh*s + kh*d - p, ow*s + kw*d - p, channel)`` of the input."""

    rows: u32
    cols: u32
    out_h: u32
    out_w: u32
    channels: u32
    params: Comptime[ConvParams]
    check_rows: Comptime[bool] = True
    check_cols: Comptime[bool] = True

    Coordinates = Coords2d
    SourceCoordinates = NhwcCoords

    @cube
    def to_source_pos(self, pos):
        """The input pixel and channel read at ``(row, col)``."""
        row, col = pos
        params = self.params
        n, oh, ow = split_pixel(row, self.out_h, self.out_w)
        kh, kw, channel = split_patch(col, self.channels, params.kernel[1])
        h = i32(oh * params.stride[0] + kh * params.dilation[0]) - params.padding[0]
        w = i32(ow * params.stride[1] + kw * params.dilation[1]) - params.padding[1]
        return (n, h, w, channel)

    @cube
    def is_in_bounds(self, pos):
        """``row < rows`` and ``col < cols``, as the comptime flags select."""
        return in_bounds_2d(pos, self.rows, self.cols, self.check_rows, self.check_cols)

    @cube
    def shape(self):
        """``(rows, cols)``."""
        return (self.rows, self.cols)

    @staticmethod
    def from_problem(problem: ConvolutionProblem, kind: str, **checks) -> Im2colLayout.Launch:
        """The input view of GEMM ``kind``: (M, K) for fprop, (K, N) for wgrad."""
        m, n, k = problem.gemm(kind)
        rows, cols = (m, k) if kind == "fprop" else (k, n)
        return Im2colLayout.Launch(
            rows, cols, problem.out_h, problem.out_w, problem.in_channels, problem.params, **checks
        )
