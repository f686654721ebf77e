"""``PlainLayout``: a contiguous 1-D buffer read as itself (CubeCL's ``PlainLayout``)."""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import cube, u32, usize
from cubepy_layouts.coords import Coords1d
from cubepy_layouts.layout import Layout, launchable


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class PlainLayout(Layout):
    """Index ``pos`` maps to ``pos``; in bounds below ``len``."""

    len: u32

    Coordinates = Coords1d
    SourceCoordinates = Coords1d

    @cube
    def to_source_pos(self, pos):
        """The same index."""
        return pos

    @cube
    def is_in_bounds(self, pos):
        """``pos < len``."""
        return pos < usize(self.len)

    @cube
    def shape(self):
        """``len``, as a ``usize``."""
        return usize(self.len)

    @staticmethod
    def for_length(length: int) -> PlainLayout.Launch:
        """The runtime argument for a buffer of ``length`` elements."""
        return PlainLayout.Launch(length)
