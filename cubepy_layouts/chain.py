"""``Chain``: two layouts applied one after the other (CubeCL's ``Chain<L0, L1>``)."""

from __future__ import annotations

from cubepy import cube
from cubepy_layouts.layout import CompositeLayout


class Chain(CompositeLayout):
    """``outer`` maps view coordinates to ``inner``'s coordinates, ``inner`` maps those to the storage.

    ``Chain(inner, outer)`` mirrors CubeCL's ``Chain<L0, L1>``: L1 (``outer``) runs first.  In bounds when
    both are; the shape is ``outer``'s.
    """

    PARTS = ("inner", "outer")

    @cube
    def to_source_pos(self, pos):
        """``inner(outer(pos))``."""
        return self.inner.to_source_pos(self.outer.to_source_pos(pos))

    @cube
    def to_source_pos_checked(self, pos):
        """The source position, in bounds when both layouts agree."""
        middle, outer_ok = self.outer.to_source_pos_checked(pos)
        source, inner_ok = self.inner.to_source_pos_checked(middle)
        return (source, outer_ok and inner_ok)

    @cube
    def is_in_bounds(self, pos):
        """``pos`` in ``outer`` and its image in ``inner``."""
        return self.to_source_pos_checked(pos)[1]

    @cube
    def shape(self):
        """``outer``'s shape."""
        return self.outer.shape()
