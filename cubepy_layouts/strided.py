"""``StridedLayout``: a linear index over a row-pitched 2-D buffer (CubeCL's ``StridedLayout``)."""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import cube, u32, usize
from cubepy_layouts.coords import Coords1d
from cubepy_layouts.layout import Layout, launchable


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class StridedLayout(Layout):
    """Linear index ``pos`` of a ``rows x cols`` matrix stored with ``row_stride`` between rows."""

    rows: u32
    cols: u32
    row_stride: u32

    Coordinates = Coords1d
    SourceCoordinates = Coords1d

    @cube
    def to_source_pos(self, pos):
        """``(pos / cols) * row_stride + pos % cols``."""
        linear = u32(pos)
        return usize((linear // self.cols) * self.row_stride + linear % self.cols)

    @cube
    def is_in_bounds(self, pos):
        """``pos < rows * cols``."""
        return pos < usize(self.rows * self.cols)

    @cube
    def shape(self):
        """``rows * cols`` as a ``usize``."""
        return usize(self.rows * self.cols)
