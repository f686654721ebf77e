"""Coordinate aliases and element-wise helpers (CubeCL's ``Coordinates`` trait and ``Coords*`` aliases).

Coordinates are plain tuples of expand values (or Python ints); an alias is the tuple of element types a
coordinate of that kind holds, so it also serves as an argument spec for ``cp.testing.expand``.
"""

from __future__ import annotations

import cubepy as cp
from cubepy import cube, i32, u32, usize

Coords1d = usize
Coords1i = i32
Coords2d = (u32, u32)
Coords3d = (u32, u32, u32)
Coords4d = (u32, u32, u32, u32)
Coords5d = (u32, u32, u32, u32, u32)
Coords2i = (i32, i32)
Coords3i = (i32, i32, i32)
# (batch, row, col): the coordinates of the batched 2-D views a GEMM reads.
BatchedCoords = (usize, u32, u32)


def rank(coords) -> int:
    """The number of dimensions of ``coords`` (a scalar coordinate has rank 1)."""
    return len(coords) if isinstance(coords, tuple) else 1


@cube
def coords_add(a, b):
    """Element-wise ``a + b``."""
    if cp.comptime(isinstance(a, tuple)):
        return tuple(a[i] + b[i] for i in range(len(a)))
    return a + b


@cube
def coords_sub(a, b):
    """Element-wise ``a - b``."""
    if cp.comptime(isinstance(a, tuple)):
        return tuple(a[i] - b[i] for i in range(len(a)))
    return a - b


@cube
def coords_min(a, b):
    """Element-wise minimum."""
    if cp.comptime(isinstance(a, tuple)):
        return tuple(cp.min(a[i], b[i]) for i in range(len(a)))
    return cp.min(a, b)


@cube
def coords_max(a, b):
    """Element-wise maximum."""
    if cp.comptime(isinstance(a, tuple)):
        return tuple(cp.max(a[i], b[i]) for i in range(len(a)))
    return cp.max(a, b)


@cube
def coords_in_bounds(pos, bounds):
    """Whether every coordinate of ``pos`` is below the matching bound."""
    if cp.comptime(isinstance(pos, tuple)):
        result = pos[0] < bounds[0]
        for i in cp.unroll(range(1, len(pos))):
            result = result and pos[i] < bounds[i]
        return result
    return pos < bounds


@cube
def all_of(conditions):
    """The conjunction of a comptime list of runtime conditions (a runtime ``true`` when it is empty)."""
    if cp.comptime(len(conditions) == 0):
        return cp.runtime(True)
    result = conditions[0]
    for i in cp.unroll(range(1, len(conditions))):
        result = result and conditions[i]
    return result
