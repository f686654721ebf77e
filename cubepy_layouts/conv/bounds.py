"""The bounds check the 2-D GEMM views of a convolution share."""

from __future__ import annotations

import cubepy as cp
from cubepy import cube


@cube
def in_bounds_2d(pos, rows, cols, check_rows, check_cols):
    """``row < rows`` and ``col < cols``, testing only what the comptime flags ask (else a runtime ``true``)."""
    row, col = pos
    if cp.comptime(check_rows and check_cols):
        return row < rows and col < cols
    if cp.comptime(check_rows):
        return row < rows
    if cp.comptime(check_cols):
        return col < cols
    return cp.runtime(True)
