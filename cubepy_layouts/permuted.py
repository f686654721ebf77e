"""``PermutedLayout``: a linear index over a tensor of rank <= 4 with arbitrary strides (CubeCL's ``PermutedLayout``).

Strides may be 0, which broadcasts a dimension (how CubeCL's reference shape is realised).
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import Comptime, cube, u32, usize
from cubepy_layouts.coords import Coords1d
from cubepy_layouts.layout import Layout, launchable

MAX_RANK = 4


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class PermutedLayout(Layout):
    """Linear (row-major) index over ``shape_0..`` mapped through ``stride_0..``; ``rank`` dims are used."""

    shape_0: u32
    shape_1: u32
    shape_2: u32
    shape_3: u32
    stride_0: u32
    stride_1: u32
    stride_2: u32
    stride_3: u32
    rank: Comptime[int] = MAX_RANK

    Coordinates = Coords1d
    SourceCoordinates = Coords1d

    @cube
    def to_source_pos(self, pos):
        """Split ``pos`` into per-dimension indices (last fastest) and sum them times the strides."""
        remaining = u32(pos)
        offset = u32(0)
        for dim in cp.unroll(range(self.rank - 1, -1, -1)):
            extent = getattr(self, f"shape_{dim}")
            if cp.comptime(dim == 0):
                # the outermost index needs no modulo: it is what is left.
                offset += remaining * self.stride_0
            else:
                offset += (remaining % extent) * getattr(self, f"stride_{dim}")
                remaining = remaining // extent
        return usize(offset)

    @cube
    def shape(self):
        """The element count (product of the used extents) as a ``usize``."""
        count = self.shape_0
        for dim in cp.unroll(range(1, self.rank)):
            count = count * getattr(self, f"shape_{dim}")
        return usize(count)

    @cube
    def is_in_bounds(self, pos):
        """``pos`` below the element count."""
        return pos < self.shape()

    @staticmethod
    def from_shape_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> PermutedLayout.Launch:
        """The runtime argument for a tensor of ``shape`` with element ``strides`` (numpy order)."""
        if not 1 <= len(shape) <= MAX_RANK or len(strides) != len(shape):
            raise cp.LaunchError(
                f"PermutedLayout takes 1..{MAX_RANK} dims with one stride each, got shape {shape} and strides {strides}"
            )
        pad = MAX_RANK - len(shape)
        return PermutedLayout.Launch(*shape, *(1,) * pad, *strides, *(0,) * pad, len(shape))
