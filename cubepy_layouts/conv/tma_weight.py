"""``TmaWeightLayout``: fprop's rhs ``(k = (tap, channel), n = out channel)`` as a tiled TMA box of the filter.

The filter ``(C_out, KH, KW, C_in)`` is seen as a 3-D ``(C_out, KH*KW, C_in)`` tensor; a box at
``(n, tap, channel)`` of ``[16 out channels, 1 tap, 16 channels]`` is a ``k x n`` tile stored column-major.
Channels are padded per tap to the tile, so a tile never straddles two taps; padded channels and
taps past the end are out of bounds and zero-filled, so every position is in bounds here.
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import cube, u32
from cubepy_layouts.conv.problem import ConvolutionProblem
from cubepy_layouts.conv.tma_layout import TmaLayout
from cubepy_layouts.coords import BatchedCoords, Coords3d
from cubepy_layouts.layout import launchable


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class TmaWeightLayout(TmaLayout):
    """``(batch, k, n) -> (n, k / channels, k % channels)``; always in bounds; shape ``(1, rows, cols)``."""

    rows: u32
    cols: u32
    channels: u32

    Coordinates = BatchedCoords
    SourceCoordinates = Coords3d

    @cube
    def to_source_pos(self, pos):
        """The box corner ``(out channel, tap, channel)`` of the tile at ``(k, n)``."""
        _batch, row, col = pos
        return (col, row // self.channels, row % self.channels)

    @staticmethod
    def from_problem(problem: ConvolutionProblem, padded_channels: int) -> TmaWeightLayout.Launch:
        """rows = taps * padded channels (fprop's K), cols = C_out (fprop's N)."""
        taps = problem.kernel[0] * problem.kernel[1]
        return TmaWeightLayout.Launch(taps * padded_channels, problem.out_channels, padded_channels)
