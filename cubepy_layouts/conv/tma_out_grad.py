"""``TmaOutGradLayout``: the out-gradient as one consolidated ``(N*OH*OW, C_out)`` matrix for TMA (cubek's).

Weight backwards needs a consolidated layout across the combined k dimension: TMA im2col walks output
pixels linearly across rows and images without padding, so the out-gradient rows must line up with that
walk; padding OW to a tile multiple would not.  The tiled tensor map zero-fills out-of-bounds boxes, so
every position is in bounds and the mapping is free.
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import cube, u32
from cubepy_layouts.conv.problem import ConvolutionProblem
from cubepy_layouts.conv.tma_layout import TmaLayout
from cubepy_layouts.coords import BatchedCoords, Coords2d
from cubepy_layouts.layout import launchable


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class TmaOutGradLayout(TmaLayout):
    """``(batch, row, col) -> (row, col)``; always in bounds; shape ``(1, rows, cols)``."""

    rows: u32
    cols: u32

    Coordinates = BatchedCoords
    SourceCoordinates = Coords2d

    @cube
    def to_source_pos(self, pos):
        """``(row, col)``: the batch is always 0 (one consolidated matrix)."""
        _batch, row, col = pos
        return (row, col)

    @staticmethod
    def from_problem(problem: ConvolutionProblem) -> TmaOutGradLayout.Launch:
        """rows = N*OH*OW (wgrad's K), cols = C_out (wgrad's M)."""
        return TmaOutGradLayout.Launch(problem.pixels, problem.out_channels)
