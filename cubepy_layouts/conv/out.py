"""``OutLayout``: the GEMM view of a convolution output ``(N, OH, OW, C_out)`` (cubek's ``OutLayout``).

``(row, col) = (output pixel (n, oh, ow), out channel)``: fprop's output (M x N); for wgrad the out-gradient
is the lhs (M x K) and this layout is wrapped in ``Transpose``, built with rows = K and cols = M.
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import Comptime, cube, i32, u32
from cubepy_layouts.conv.bounds import in_bounds_2d
from cubepy_layouts.conv.im2col import split_pixel
from cubepy_layouts.conv.nhwc import NhwcCoords
from cubepy_layouts.conv.problem import ConvolutionProblem
from cubepy_layouts.coords import Coords2d
from cubepy_layouts.layout import Layout, launchable


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class OutLayout(Layout):
    """``(pixel row, channel col) -> (n, oh, ow, col)`` of the output tensor."""

    rows: u32
    cols: u32
    out_h: u32
    out_w: u32
    check_rows: Comptime[bool] = True
    check_cols: Comptime[bool] = True

    Coordinates = Coords2d
    SourceCoordinates = NhwcCoords

    @cube
    def to_source_pos(self, pos):
        """The output element at ``(row, col)``."""
        row, col = pos
        n, oh, ow = split_pixel(row, self.out_h, self.out_w)
        return (n, i32(oh), i32(ow), col)

    @cube
    def is_in_bounds(self, pos):
        """``row < rows`` and ``col < cols``, as the comptime flags select."""
        return in_bounds_2d(pos, self.rows, self.cols, self.check_rows, self.check_cols)

    @cube
    def shape(self):
        """``(rows, cols)``."""
        return (self.rows, self.cols)

    @staticmethod
    def from_problem(problem: ConvolutionProblem, **checks) -> OutLayout.Launch:
        """The (pixel, out channel) view: fprop's output; wrap in ``Transpose`` for wgrad's lhs."""
        return OutLayout.Launch(problem.pixels, problem.out_channels, problem.out_h, problem.out_w, **checks)
