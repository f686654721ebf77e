"""What a launch finds about its buffer arguments taken together, marked on their compilation arguments.

Each buffer argument's own facts (its length's divisibility, alignment, line size) come from its type
(``cubepy.frontend.buffer_launch``); these relate one argument to the others: memory two of them share (then
neither may be read through the GPU's non-coherent path) and lengths or shapes that are equal (then a guard on
one proves the checked accesses of another).  The cache keeps one kernel per pattern.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import attrs

from cubepy.frontend.buffer_launch import BufferCompilationArg
from cubepy.frontend.launch import ScalarCompilationArg

Factor = tuple[int, str, int]  # (argument index, "scalar" | "shape" | "len", dim): one value a launch passes
ProductPlan = tuple[tuple[int, str], ...]  # (argument index, "array" | "tensor" | "u32") of the candidates
# (array index, (outer, inner)): len = outer * (inner // line), each factor every argument value equal to it
ProductFact = tuple[int, tuple[tuple[Factor, ...], tuple[Factor, ...]]]
_U32_END = 1 << 32


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
        count = math.prod(shape)
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
    marked_args = comp_args if out is None else tuple(out)
    return mark_products(marked_args, args)


def product_plan(comp_args: tuple[Any, ...]) -> ProductPlan:
    """The arguments ``find_products`` looks at, from their compilation arguments: buffers whose ``len`` is their
    buffer's ("array", "tensor"), other tensors of known rank (their extents only: "extents"), u32 scalars."""
    plan: list[tuple[int, str]] = []
    for index, comp in enumerate(comp_args):
        if isinstance(comp, BufferCompilationArg):
            if comp.rank is not None:
                plan.append((index, "tensor" if comp.len_is_buffer_len else "extents"))
            elif comp.len_is_buffer_len:
                plan.append((index, "array"))
        elif isinstance(comp, ScalarCompilationArg) and comp.elem == "u32":
            plan.append((index, "u32"))
    return tuple(plan)


def _int_value(arg: Any) -> int | None:
    """A scalar argument's integer value (a Python or numpy integer, or a ``ScalarArg`` of one), else None."""
    value = getattr(arg, "value", arg)
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        return None
    return int(value)


def find_products(plan: ProductPlan, args: tuple[Any, ...]) -> tuple[ProductFact, ...]:
    """``(buffer index, (outer, inner))`` for each array or tensor of ``plan`` whose ``len`` (in lines of ``L``) is
    ``outer * (inner // L)`` for two values among the tensors' extents, the arrays' lengths and the u32 scalars of
    ``plan``, each at least 2 (a factor of 1 would tie every buffer to every scalar), ``inner`` a multiple of
    ``L``: the first value in argument order that divides the length so, and its cofactor.  Each factor lists
    every argument with its value (``m`` and ``n`` of a square matmul both), so the kernel may multiply by any of
    them; a tensor's own extents count, but for a tensor only a product with a scalar among its factors is
    recorded (``t.shape(0) * t.shape(1)``, and lengths equal to extents, checked mode knows already).  A kernel then proves ``m[r * inner + c]`` under ``r < outer`` and ``c < inner``
    (``cubepy.ir.product_bounds``): a matmul's ``c[row * n + col]`` of an ``m * n`` output with ``m`` and ``n``
    scalars, a layer norm's partial rows ``dw[(row % group) * n + col]``."""
    values: list[tuple[int, Factor]] = []
    targets: list[tuple[int, int, int]] = []  # (index, len in lines, line size)
    for index, kind in plan:
        arg = args[index]
        if kind == "u32":
            value = _int_value(arg)
            if value is not None and 2 <= value < _U32_END:
                values.append((value, (index, "scalar", 0)))
            continue
        shape = getattr(arg, "shape", None)
        if shape is None:
            continue
        count = math.prod(shape)
        line = getattr(arg, "line_size", 1)
        if kind == "array":
            if count // line >= 2:
                values.append((count // line, (index, "len", 0)))
        else:
            values.extend((extent, (index, "shape", dim)) for dim, extent in enumerate(shape) if extent >= 2)
        if kind != "extents":
            targets.append((index, count // line, line))
    if not values or not targets:
        return ()
    kinds = dict(plan)
    alike: dict[int, list[Factor]] = {}  # value -> every factor with it, in argument order
    for value, factor in values:
        alike.setdefault(value, []).append(factor)
    found = []
    for index, length, line in targets:
        for value, factors in alike.items():
            per_row = value // line
            if value % line or length % per_row:
                continue
            # an array's own len is no factor of it (its cofactor would be 1); a tensor's extents are
            inner = tuple(f for f in factors if f[:2] != (index, "len"))
            outer = tuple(f for f in alike.get(length // per_row, ()) if f[:2] != (index, "len"))
            if inner and outer and (kinds[index] == "array" or any(f[1] == "scalar" for f in inner + outer)):
                found.append((index, (outer, inner)))
                break
    return tuple(found)


def _factor_value(factor: Factor, args: tuple[Any, ...]) -> int | None:
    """The value ``factor`` names in ``args``: a scalar's, a tensor's extent, an array's ``len()``."""
    index, kind, dim = factor
    arg = args[index]
    if kind == "scalar":
        return arg if type(arg) is int else _int_value(arg)
    shape = getattr(arg, "shape", None)
    if shape is None:
        return None
    if kind == "shape":
        return int(shape[dim])
    return int(math.prod(shape)) // getattr(arg, "line_size", 1)


def product_holds(fact: ProductFact, args: tuple[Any, ...]) -> bool:
    """Whether ``args`` still make the array's ``len()`` the product ``fact`` names, each factor's arguments still
    equal (a warm launch's check: the launch signature keeps a scalar's divisibility, not its value)."""
    index, (outer, inner) = fact
    length, line = _factor_value((index, "len", 0), args), getattr(args[index], "line_size", 1)
    outer_value, inner_value = _alike_value(outer, args), _alike_value(inner, args)
    if length is None or outer_value is None or inner_value is None or inner_value % line:
        return False
    return outer_value >= 1 and length == outer_value * (inner_value // line)


def _alike_value(factors: tuple[Factor, ...], args: tuple[Any, ...]) -> int | None:
    """The value every factor of ``factors`` names, or None when they differ."""
    value = _factor_value(factors[0], args)
    for factor in factors[1:]:
        if _factor_value(factor, args) != value:
            return None
    return value


def products_hold(facts: tuple[ProductFact, ...], args: tuple[Any, ...]) -> bool:
    """Whether every fact of ``facts`` still holds for ``args`` (``product_holds``)."""
    for fact in facts:
        if not product_holds(fact, args):
            return False
    return True


def mark_products(comp_args: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``comp_args`` with ``len_as_product`` on every array ``find_products`` finds a product of two arguments."""
    found = find_products(product_plan(comp_args), args)
    if not found:
        return comp_args
    out = list(comp_args)
    for index, factors in found:
        out[index] = _len_as_product(out[index], factors)
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _len_as_product(
    comp: BufferCompilationArg, factors: tuple[tuple[Factor, ...], tuple[Factor, ...]]
) -> BufferCompilationArg:
    """``comp`` marked as long as the product of ``factors`` (cached, as ``_same_len``)."""
    return attrs.evolve(comp, len_as_product=factors)


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


def mark_cube_count(comp_args: tuple[Any, ...], args: tuple[Any, ...], cubes: int) -> tuple[Any, ...]:
    """``comp_args`` with ``cube_count_dims`` on every tensor with extents equal to ``cubes`` (a launch's number of
    cubes), ``(0,)`` on every array whose ``len()`` is, and ``cube_count`` on every u32 scalar that is: ``CUBE_POS``
    is then below each, and a row picked by ``CUBE_POS`` of a tensor with that many rows needs no check
    (``cubepy.ir.ranges``).  The cache keeps one kernel per pattern; a warm launch re-checks it
    (``cube_count_holds``)."""
    if cubes < 2:  # one cube: CUBE_POS is 0, which the range analysis knows below any length of 1 or more
        return comp_args
    out = None
    for index, comp in enumerate(comp_args):
        arg = args[index]
        marked = comp
        if isinstance(comp, BufferCompilationArg):
            shape = getattr(arg, "shape", None)
            if shape is None:
                continue
            if comp.rank is not None:
                dims = tuple(dim for dim, extent in enumerate(shape) if extent == cubes)
            else:
                dims = (0,) if comp.len_is_buffer_len and _factor_value((index, "len", 0), args) == cubes else ()
            if dims:
                marked = _counting(comp, dims)
        elif isinstance(comp, ScalarCompilationArg) and comp.elem == "u32" and _int_value(arg) == cubes:
            marked = _counting_scalar(comp)
        if marked is not comp:
            if out is None:
                out = list(comp_args)
            out[index] = marked
    return comp_args if out is None else tuple(out)


def cube_count_holds(marks: tuple[tuple[int, str, int], ...], args: tuple[Any, ...], cubes: int) -> bool:
    """Whether every value ``marks`` names (``(argument index, kind, dim)``, as a product's factor) still equals
    ``cubes``: a warm launch's check, its signature holding neither the cube count nor a scalar's value."""
    for mark in marks:
        if _factor_value(mark, args) != cubes:
            return False
    return True


def cube_count_marks(comp_args: tuple[Any, ...]) -> tuple[tuple[int, str, int], ...]:
    """The values ``mark_cube_count`` marked in ``comp_args``, as ``(argument index, kind, dim)``."""
    marks: list[tuple[int, str, int]] = []
    for index, comp in enumerate(comp_args):
        if isinstance(comp, BufferCompilationArg) and comp.cube_count_dims:
            kind = "shape" if comp.rank is not None else "len"
            marks.extend((index, kind, dim) for dim in comp.cube_count_dims)
        elif isinstance(comp, ScalarCompilationArg) and comp.cube_count:
            marks.append((index, "scalar", 0))
    return tuple(marks)


@functools.lru_cache(maxsize=1024)
def _counting(comp: BufferCompilationArg, dims: tuple[int, ...]) -> BufferCompilationArg:
    """``comp`` with ``dims`` marked as the launch's cube count (cached, as ``_same_len``)."""
    return attrs.evolve(comp, cube_count_dims=dims)


@functools.lru_cache(maxsize=64)
def _counting_scalar(comp: ScalarCompilationArg) -> ScalarCompilationArg:
    """``comp`` marked as the launch's cube count (cached, as ``_same_len``)."""
    return attrs.evolve(comp, cube_count=True)
