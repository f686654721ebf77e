"""Row-major strides: the layout of a dense buffer, shared by handles and the DLPack exchange."""

from __future__ import annotations


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a dense array of ``shape``."""
    strides = []
    acc = 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= max(int(dim), 1)
    return tuple(reversed(strides))
