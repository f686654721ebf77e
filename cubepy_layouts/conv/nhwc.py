"""``NhwcLayout``: NHWC coordinates ``(batch, h, w, channel)`` to a linear index of a strided tensor.

Spatial coordinates are i32 because padding makes them negative.  Which coordinates are bounds-checked
is comptime, so an unchecked dimension costs nothing.
"""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import Comptime, cube, i32, u32, usize
from cubepy_layouts.coords import Coords1d, all_of
from cubepy_layouts.layout import Layout, launchable

# (batch, h, w, channel); h and w are signed.
NhwcCoords = (u32, i32, i32, u32)


@launchable
@cp.derive(cp.CubeType, cp.CubeLaunch)
@attrs.frozen
class NhwcLayout(Layout):
    """``batch * stride_n + h * stride_h + w * stride_w + channel * stride_c`` over an NHWC tensor."""

    shape_n: u32
    shape_h: u32
    shape_w: u32
    shape_c: u32
    stride_n: u32
    stride_h: u32
    stride_w: u32
    stride_c: u32
    check_batch: Comptime[bool] = False
    check_spatial: Comptime[bool] = False
    check_channel: Comptime[bool] = False

    Coordinates = NhwcCoords
    SourceCoordinates = Coords1d

    @cube
    def to_source_pos(self, pos):
        """The linear element index (garbage for negative h or w: callers check or mask)."""
        batch, h, w, channel = pos
        offset = batch * self.stride_n + u32(h) * self.stride_h + u32(w) * self.stride_w
        return usize(offset + channel * self.stride_c)

    @cube
    def is_in_bounds(self, pos):
        """The comptime-selected checks: batch, spatial (``0 <= h < H``, ``0 <= w < W``), channel."""
        batch, h, w, channel = pos
        checks = []
        if cp.comptime(self.check_batch):
            checks.append(batch < self.shape_n)
        if cp.comptime(self.check_spatial):
            # one unsigned compare per dim also rejects negatives (they wrap to huge values).
            checks.append(u32(h) < self.shape_h)
            checks.append(u32(w) < self.shape_w)
        if cp.comptime(self.check_channel):
            checks.append(channel < self.shape_c)
        return all_of(checks)

    @cube
    def shape(self):
        """``(N, H, W, C)``, spatial extents as i32."""
        return (self.shape_n, i32(self.shape_h), i32(self.shape_w), self.shape_c)

    @staticmethod
    def for_tensor(
        shape, strides=None, *, batch: bool = False, spatial: bool = False, channel: bool = False
    ) -> NhwcLayout.Launch:
        """The runtime argument for an NHWC tensor of ``shape`` (element ``strides``, contiguous by default)."""
        if strides is None:
            strides = (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1)
        return NhwcLayout.Launch(*shape, *strides, batch, spatial, channel)
