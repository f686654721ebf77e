"""What a launch finds about its buffer arguments taken together, marked on their compilation arguments.

Each buffer argument's own facts (its length's divisibility, alignment, line size) come from its type
(``cubepy.frontend.buffer_launch``); these relate one argument to the others: memory two of them share (then
neither may be read through the GPU's non-coherent path) and lengths or shapes that are equal (then a guard on
one proves the checked accesses of another).  The cache keeps one kernel per pattern.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from cubepy.frontend.buffer_launch import BufferCompilationArg


def _memory_range(arg: object) -> tuple[int, int, int] | None:
    """(storage identity, first byte, end byte) of the memory a buffer or tensor-map argument names, or None."""
    handle = getattr(arg, "handle", None)
    storage = getattr(handle, "storage", None)
    if handle is None or storage is None:
        return None
    itemsize = handle.dtype.itemsize
    return id(storage), handle.offset * itemsize, (handle.offset + handle.size) * itemsize


def mark_overlaps(comp_args: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``comp_args`` with ``exclusive=False`` on every buffer whose memory overlaps another buffer's or a
    tensor map's: the kernel may then not read it through the GPU's non-coherent path.  Cheap on the warm path:
    nothing is compared unless two arguments share a storage."""
    storages = [id(handle.storage) for arg in args if (handle := getattr(arg, "handle", None)) is not None]
    if len(set(storages)) == len(storages):  # the warm path: distinct allocations, nothing to compare
        return comp_args
    ranges = [_memory_range(arg) for arg in args]
    out = list(comp_args)
    for i, (comp, mine) in enumerate(zip(comp_args, ranges)):
        if mine is None or not isinstance(comp, BufferCompilationArg):
            continue
        for j, other in enumerate(ranges):
            if j != i and other is not None and other[0] == mine[0] and other[1] < mine[2] and mine[1] < other[2]:
                out[i] = attrs.evolve(comp, exclusive=False)
                break
    return tuple(out)


def mark_equal_lengths(comp_args: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``comp_args`` with ``same_len_as`` on every buffer whose ``len()`` equals an earlier buffer's, and
    ``len_as_shape`` on every array whose item count equals an extent of an earlier tensor, and ``same_shape_as``
    on every tensor whose shape equals an earlier tensor's.

    The compiled kernel then reads one length for both, so a guard on one buffer's length proves the checked
    accesses of the others; a guard ``col < x.shape(1) // lanes`` proves ``w[col]`` of a ``w`` as long as a
    row of ``x`` (the cache holds one kernel per pattern of equal lengths, as Triton specializes on its
    arguments' divisibility).  Arguments given as compilation arguments (``kernel.compile``) have no length
    and are left alone.
    """
    first: dict[int, int] = {}  # len -> the index of the first buffer argument with it
    shapes: dict[tuple[int, ...], int] = {}  # shape -> the index of the first tensor argument with it
    extents: dict[int, tuple[int, int]] = {}  # items -> (argument index, dimension) of the first tensor extent
    out = None
    for index, (comp, arg) in enumerate(zip(comp_args, args)):
        if not isinstance(comp, BufferCompilationArg):
            continue
        shape = getattr(arg, "shape", None)
        if shape is None:
            continue
        count = 1
        for extent in shape:
            count *= extent
        marked = comp
        earlier = first.setdefault(count // comp.line_size, index)
        if earlier != index:
            marked = _same_len(marked, earlier)
        if comp.rank is not None:  # a launched tensor: its extents, for the arrays after it
            for dim, extent in enumerate(shape):
                extents.setdefault(extent, (index, dim))
            same = shapes.setdefault(tuple(shape), index)
            if same != index:
                marked = _same_shape(marked, same)
        elif comp.len_is_buffer_len and count in extents:
            marked = _len_as_shape(marked, extents[count])
        if marked is not comp:
            if out is None:
                out = list(comp_args)
            out[index] = marked
    return comp_args if out is None else tuple(out)


@functools.lru_cache(maxsize=1024)
def _same_len(comp: BufferCompilationArg, earlier: int) -> BufferCompilationArg:
    """``comp`` marked as long as argument ``earlier`` (cached: the warm launch makes no new objects)."""
    return attrs.evolve(comp, same_len_as=earlier)


@functools.lru_cache(maxsize=1024)
def _same_shape(comp: BufferCompilationArg, earlier: int) -> BufferCompilationArg:
    """``comp`` marked as shaped like the tensor argument ``earlier`` (cached, as ``_same_len``)."""
    return attrs.evolve(comp, same_shape_as=earlier)


@functools.lru_cache(maxsize=1024)
def _len_as_shape(comp: BufferCompilationArg, extent: tuple[int, int]) -> BufferCompilationArg:
    """``comp`` marked as holding ``shape(dim)`` items of the tensor argument ``extent = (index, dim)``."""
    return attrs.evolve(comp, len_as_shape=extent)
