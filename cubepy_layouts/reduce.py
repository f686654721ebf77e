"""Cube-wide reductions: the sum, maximum or minimum of one value per unit, returned to every unit.

``cube_sum(x)``, ``cube_max(x)`` and ``cube_min(x)`` are cube functions.  Every unit of the cube must
call them together (they contain ``sync_cube``), in cube-uniform control flow, with a scalar ``x`` of an
integer or float type.  They are the hand-written two-level tree:

1. each plane reduces its units' values (``plane_sum``/``plane_max``/``plane_min``);
2. lane 0 of each plane writes its plane's result to a 32-slot shared array (a cube has at most 1024
   units, so at most 32 planes), then ``sync_cube``;
3. every plane reads the slots and reduces them again with plane shuffles, so every unit holds the total
   without a second shared-memory round trip: when the planes are whole and a power of two of them, lane ``i`` reads
   slot ``i % planes`` and ``log2(planes)`` butterfly steps finish (a cube of 4 planes: 2 shuffles, as
   Triton's reductions); otherwise lane ``i`` reads plane ``i``'s result and one whole-plane reduction does;
4. a closing ``sync_cube``, so a following reduction (or the next iteration of a loop) may reuse the slots.

Any cube shape works, including unit counts that are not a multiple of the plane width: the last plane
is partial, and lanes past the number of planes contribute the operation's identity (0 for the sum; a
copy of a real plane's result for max and min).  Float sums are summed in tree order, so they round
differently from a sequential sum.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import cubepy as cp
from cubepy import CUBE_DIM, PLANE_POS, UNIT_POS_PLANE, SharedMemory, cube

PLANE_WIDTH = 32
MAX_PLANES = 1024 // PLANE_WIDTH  # CUDA's 1024 units per cube


def _refuse(message: str) -> None:
    """Raise ``ExpandError`` at the kernel line that called the reduction (the first frame outside cubepy)."""
    here = Path(__file__).resolve().parent
    library = (here, here.parent / "cubepy", Path(os.__file__).resolve().parent)
    for frame in inspect.stack()[1:]:
        path = Path(frame.filename).resolve()
        if not any(path.is_relative_to(root) for root in library):
            raise cp.ExpandError(message, frame.filename, frame.lineno)
    raise cp.ExpandError(message)


@cube
def _plane_reduce(value, op):  # op: a comptime str, "sum", "max" or "min"
    if op == "sum":
        return cp.plane_sum(value)
    if op == "max":
        return cp.plane_max(value)
    return cp.plane_min(value)


@cube
def _cube_reduce(x, op):
    if not isinstance(x, cp.ExpandElement) or x.type.is_line:
        _refuse(f"cube_{op} reduces one scalar runtime value per unit, got {x!r}")
    slots = SharedMemory[x.elem](MAX_PLANES)
    partial = _plane_reduce(x, op)
    if UNIT_POS_PLANE == 0:
        slots[PLANE_POS] = partial
    cp.sync_cube()
    planes = (CUBE_DIM + (PLANE_WIDTH - 1)) // PLANE_WIDTH
    if planes & (planes - 1) == 0 and CUBE_DIM % PLANE_WIDTH == 0:
        # Whole planes, a power of two of them (the cube shape is compiled in, so this test and the ones below
        # fold away): lane i reads slot i % planes, so every aligned group of ``planes`` lanes holds each slot
        # once, and a butterfly over offsets below ``planes`` gives every lane the total in log2(planes)
        # steps.  (A partial plane lacks the lanes some butterflies read.)
        total = slots[UNIT_POS_PLANE & (planes - 1)]
        for bit in cp.unroll(range(PLANE_WIDTH.bit_length() - 1)):  # offsets 1, 2, 4, 8, 16 at most
            if (1 << bit) < planes:
                total = _combine(total, cp.plane_shuffle_xor(total, 1 << bit), op)
    else:
        value = slots[cp.min(UNIT_POS_PLANE, planes - 1)]
        if op == "sum":
            value = cp.select(UNIT_POS_PLANE < planes, value, 0)
        total = _plane_reduce(value, op)
    cp.sync_cube()
    return total


@cube
def _combine(a, b, op):
    if op == "sum":
        return a + b
    if op == "max":
        return cp.max(a, b)
    return cp.min(a, b)


@cube
def cube_sum(x):
    """The sum of ``x`` over every unit of the cube, returned to every unit (all units must call it)."""
    return _cube_reduce(x, "sum")


@cube
def cube_max(x):
    """The maximum of ``x`` over every unit of the cube, returned to every unit (all units must call it)."""
    return _cube_reduce(x, "max")


@cube
def cube_min(x):
    """The minimum of ``x`` over every unit of the cube, returned to every unit (all units must call it)."""
    return _cube_reduce(x, "min")
