"""``View``: storage read and written through a layout (CubeCL's ``View``/``ViewMut``).

Every call runs the layout stack at expansion time, so what reaches the IR is the index arithmetic and
one indexed load or store; the view itself leaves nothing behind.  Storage is anything indexable by the
layout's source coordinates (arrays, tensors, shared memory, slices), or a tensor map for
``tensor_map_load``.
"""

from __future__ import annotations

import cubepy as cp
from cubepy import cube, i32, u16
from cubepy_layouts.chain import Chain
from cubepy_layouts.slice import SliceLayout


class View:
    """``storage`` seen through ``layout``: ``read``/``write`` at the layout's coordinates."""

    def __init__(self, storage, layout) -> None:
        self.storage = storage
        self.layout = layout

    @cube
    def read(self, pos):
        """The element at ``pos`` (no bounds check)."""
        return self.storage[self.layout.to_source_pos(pos)]

    @cube
    def read_checked(self, pos):
        """The element at ``pos``, or zero out of bounds."""
        return self.read_masked(pos, 0)

    @cube
    def read_masked(self, pos, fill):
        """The element at ``pos``, or ``fill`` out of bounds."""
        source, in_bounds = self.layout.to_source_pos_checked(pos)
        # branch-free: an out-of-bounds position reads index 0 (always valid), then the value is masked.
        value = self.storage[cp.select(in_bounds, source, 0)]
        return cp.select(in_bounds, value, fill)

    @cube
    def write(self, pos, value):
        """Store ``value`` at ``pos`` (no bounds check)."""
        self.storage[self.layout.to_source_pos(pos)] = value

    @cube
    def write_checked(self, pos, value):
        """Store ``value`` at ``pos`` when it is in bounds."""
        source, in_bounds = self.layout.to_source_pos_checked(pos)
        if in_bounds:
            self.storage[source] = value

    @cube
    def shape(self):
        """The layout's shape."""
        return self.layout.shape()

    @cube
    def is_in_bounds(self, pos):
        """Whether ``pos`` is in the layout's bounds."""
        return self.layout.is_in_bounds(pos)

    @cube
    def slice(self, pos, size):
        """The window ``[pos, pos + size)`` of this view, bounds-checked against ``size`` and the layout."""
        return View(self.storage, Chain(self.layout, SliceLayout(pos, size, True)))

    @cube
    def slice_unchecked(self, pos, size):
        """The window ``[pos, pos + size)`` without its own bounds check."""
        return View(self.storage, Chain(self.layout, SliceLayout(pos, size, False)))

    @cube
    def view(self, layout):
        """This view seen through one more layout (``layout`` runs first)."""
        return View(self.storage, Chain(self.layout, layout))

    @cube
    def tensor_map_load(self, barrier, shared, pos):
        """TMA-load the box at ``pos`` into ``shared`` through ``barrier`` (the storage is a tensor map).

        A tiled source position is a tuple of coordinates, outermost first; an im2col source position
        is ``(corner, offsets)`` with corner ``(n, h, w, c)`` and offsets ``(h_off, w_off)``.
        """
        source = self.layout.to_source_pos(pos)
        if cp.comptime(isinstance(source[0], tuple)):
            corner, offsets = source
            coords = tuple(i32(v) for v in corner)
            kernel_offsets = tuple(u16(v) for v in offsets)
            rank = len(corner)
            getattr(barrier, f"tma_load_im2col_{rank}d")(self.storage, shared, *coords, *kernel_offsets)
        else:
            coords = tuple(i32(v) for v in source)
            getattr(barrier, f"tma_load_{len(coords)}d")(self.storage, shared, *coords)
