"""``WeightLayout``: the GEMM view of a filter ``(C_out, KH, KW, C_in)`` (cubek's ``WeightLayout``).

``(row, col) = (patch index (kh, kw, ci), out channel)``: fprop's rhs (K x N) directly; for wgrad it is the
output (M x N) and is wrapped in ``Transpose``, built with rows = N and cols = M.
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import Comptime, cube, i32, u32
from cubepy_layouts.conv.bounds import in_bounds_2d
from cubepy_layouts.conv.im2col import split_patch
from cubepy_layouts.conv.nhwc import NhwcCoords
from cubepy_layouts.conv.problem import ConvolutionProblem, ConvParams
from cubepy_layouts.coords import Coords2d
from cubepy_layouts.layout import Layout, launchable


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class WeightLayout(Layout):
    """``(patch row, out-channel col) -> (col, kh, kw, channel)`` of the filter tensor."""

    rows: u32
    cols: u32
    channels: u32
    params: Comptime[ConvParams]
    check_rows: Comptime[bool] = True
    check_cols: Comptime[bool] = True

    Coordinates = Coords2d
    SourceCoordinates = NhwcCoords

    @cube
    def to_source_pos(self, pos):
        """The filter element at ``(row, col)``."""
        row, col = pos
        kh, kw, channel = split_patch(row, self.channels, self.params.kernel[1])
        return (col, i32(kh), i32(kw), channel)

    @cube
    def is_in_bounds(self, pos):
        """``row < rows`` and ``col < cols``, as the comptime flags select."""
        return in_bounds_2d(pos, self.rows, self.cols, self.check_rows, self.check_cols)

    @cube
    def shape(self):
        """``(rows, cols)``."""
        return (self.rows, self.cols)

    @staticmethod
    def from_problem(problem: ConvolutionProblem, **checks) -> WeightLayout.Launch:
        """The (patch, out channel) view: fprop's rhs; wrap in ``Transpose`` for wgrad's output."""
        return WeightLayout.Launch(problem.patch, problem.out_channels, problem.in_channels, problem.params, **checks)
