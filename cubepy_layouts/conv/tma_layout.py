"""The base of the layouts that read a ``(rows, cols)`` operand through a TMA tensor map."""

from __future__ import annotations

import cubepy as cp
from cubepy import cube, usize
from cubepy_layouts.layout import Layout


class TmaLayout(Layout):
    """A batched ``(1, rows, cols)`` layout that is always in bounds: TMA zero-fills outside the tensor.

    Subclasses declare the ``rows`` and ``cols`` fields and ``to_source_pos``; ``to_source_pos_checked``
    comes from ``Layout`` and is ``(to_source_pos(pos), true)``.
    """

    @cube
    def is_in_bounds(self, pos):
        """Always ``true``: the hardware zero-fills out-of-bounds boxes."""
        return cp.runtime(True)

    @cube
    def shape(self):
        """``(1, rows, cols)``."""
        return (usize(1), self.rows, self.cols)
