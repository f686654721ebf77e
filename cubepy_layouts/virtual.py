"""``VirtualLayout``: a type-erased layout (CubeCL's ``VirtualLayout<C, S>``).

Code that takes a ``VirtualLayout`` is written once for any wrapped layout; dispatch happens while
expanding, so erasure costs nothing at run time.
"""

from __future__ import annotations

from cubepy import cube
from cubepy_layouts.layout import CompositeLayout


class VirtualLayout(CompositeLayout):
    """Forwards every layout method to ``inner``, whatever its type."""

    PARTS = ("inner",)

    @cube
    def to_source_pos(self, pos):
        """``inner.to_source_pos``."""
        return self.inner.to_source_pos(pos)

    @cube
    def to_source_pos_checked(self, pos):
        """``inner.to_source_pos_checked``."""
        return self.inner.to_source_pos_checked(pos)

    @cube
    def is_in_bounds(self, pos):
        """``inner.is_in_bounds``."""
        return self.inner.is_in_bounds(pos)

    @cube
    def shape(self):
        """``inner.shape``."""
        return self.inner.shape()
