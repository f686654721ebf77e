"""``Transpose``: swaps the last two coordinates before the wrapped layout (cubek-matmul's ``Transpose``)."""

from __future__ import annotations

from cubepy import cube
from cubepy_layouts.layout import CompositeLayout


@cube
def swap_last_two(pos):
    """``(.., a, b) -> (.., b, a)``."""
    return pos[:-2] + (pos[-1], pos[-2])


class Transpose(CompositeLayout):
    """The transpose of ``inner``: ``(row, col)`` (or ``(batch, row, col)``) reads ``inner`` at ``(col, row)``."""

    PARTS = ("inner",)

    @cube
    def to_source_pos(self, pos):
        """``inner`` at the swapped position."""
        return self.inner.to_source_pos(swap_last_two(pos))

    @cube
    def to_source_pos_checked(self, pos):
        """``inner``'s checked position at the swapped position."""
        return self.inner.to_source_pos_checked(swap_last_two(pos))

    @cube
    def is_in_bounds(self, pos):
        """``inner``'s bounds at the swapped position."""
        return self.inner.is_in_bounds(swap_last_two(pos))

    @cube
    def shape(self):
        """``inner``'s shape with the last two extents swapped."""
        return swap_last_two(self.inner.shape())
