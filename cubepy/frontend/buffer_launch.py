"""The launch protocol for buffers: how a host array becomes a kernel's ``Array``/``Tensor`` argument.

``Array[T]`` and ``Tensor[T]`` (``Array[Line[f16]]``, ``Array[Atomic[u32]]``) in a kernel's signature are
``BufferType`` objects implementing the launch protocol (``cubepy.frontend.launch``): ``compilation_arg``
checks an ``ArrayArg``/``TensorArg`` against the annotation and keeps its compile-relevant part (a
``BufferCompilationArg``: element type, line size, rank and the divisibility the launch found),
``register`` binds its handle, and ``expand`` declares the parameter, giving the kernel body a memory
(``cubepy.frontend.containers``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from cubepy import ir
from cubepy.errors import LaunchError
from cubepy.frontend import generics
from cubepy.frontend.containers import MemoryExpand, TensorExpand, item_spec
from cubepy.frontend.elem import LineType, elem_of_dtype
from cubepy.ir import Type

if TYPE_CHECKING:
    from cubepy.frontend.state import KernelBuilder
    from cubepy.runtime.bindings import Bindings


@attrs.frozen(cache_hash=True)  # hashed on every warm launch (the cache key)
class BufferCompilationArg:
    """The compile-relevant part of a buffer argument: element type, line size, and whether ``len() == buffer_len()``.

    ``len_is_buffer_len`` holds for every ``ArrayArg``, every ``TensorArg`` of a whole handle or handle view;
    only a ``TensorArg.from_raw_parts`` whose shape does not cover its allocation differs.  Checked mode
    then compares against the word ``len()`` reads (the same value), so LLVM can merge the check with
    the kernel's own ``i < a.len()`` guard.
    """

    elem: str
    line_size: int
    len_is_buffer_len: bool = True  # what an ArrayArg gives; a launch always computes it from its argument
    # no other buffer or tensor-map argument of the launch overlaps this one's memory (``Kernel.compilation_args``)
    exclusive: bool = True
    # a tensor's number of dimensions (fixed by the launch, so its shape and strides are by-value parameters
    # at fixed places); None for an array (always 1) and for a tensor compiled without a launch
    rank: int | None = None
    # the argument index of the first earlier buffer argument whose ``len()`` equals this one's (the launch
    # compared them, ``Kernel.compilation_args``); checked accesses of both then compare against one word
    same_len_as: int | None = None
    # ``(argument index, dim)`` of the first earlier tensor argument whose ``shape(dim)`` equals this array's item
    # count (``Kernel.compilation_args``): a guard on that extent proves this array's checked accesses
    len_as_shape: tuple[int, int] | None = None
    # the argument index of the first earlier tensor argument of the same rank and the same shape
    # (``Kernel.compilation_args``): a guard on that tensor's extents proves this one's checked accesses
    same_shape_as: int | None = None
    # ``DIVISIBILITY`` when the launch found ``len()`` a multiple of it, else 1: a copy of 16-byte chunks
    # against the buffer's end then copies all of a chunk or none of it (``cubepy.ir.ranges``)
    len_multiple_of: int = 1
    # a tensor's shape and strides alike, per dimension (empty for an array): ``t[r * t.shape(1) + c]`` with
    # ``c = k0 + UNIT_POS_X``, ``k0`` a multiple of 16 below a shape that is one, stays inside the row
    shape_multiple_of: tuple[int, ...] = ()
    stride_multiple_of: tuple[int, ...] = ()
    # per dimension of a tensor, whether its stride is 1 (Triton specializes integer arguments equal to 1 the
    # same way): ``t[i, j]`` then indexes ``i * stride(0) + j``, which the back ends see as contiguous
    unit_strides: tuple[bool, ...] = ()
    # a rank-2 tensor of single items whose strides are ``(shape(1), 1)`` (row-major, no gaps): ``t[i, j]`` then
    # indexes ``i * t.shape(1) + j``, which the range analysis proves inside ``len`` under ``i < t.shape(0)``
    # and ``j < t.shape(1)`` (``cubepy.ir.ranges``)
    contiguous: bool = False
    # ``DIVISIBILITY`` when the launch found the first element's address (bytes) a multiple of it, else 1: two
    # adjacent items at an even index then store as one aligned word (``cubepy.ir.store_pairs``)
    address_multiple_of: int = 1
    # an array's or tensor's ``len`` as the product of two argument values, ``outer * (inner // line_size)``
    # (``cubepy.frontend.argument_facts.find_products``): each factor the ``(argument index, kind, dim)`` of every
    # argument value equal to it, kind "scalar" (a u32), "shape" (a tensor's extent) or "len" (a buffer's);
    # ``m[r * inner + c]`` under ``r < outer`` and ``c < inner`` is then in bounds
    len_as_product: tuple[tuple[tuple[int, str, int], ...], tuple[tuple[int, str, int], ...]] | None = None
    # the dimensions of a tensor whose extent the launch found equal to its number of cubes, ``(0,)`` for an array
    # whose ``len()`` is (``cubepy.frontend.argument_facts.mark_cube_count``): ``CUBE_POS`` is below them
    cube_count_dims: tuple[int, ...] = ()


DIVISIBILITY = 16  # the multiple integer scalars and buffer lengths are specialized on (Triton's tt.divisibility)
_NO_DIMS: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # an array's shape and stride multiples


def _multiples(values: Iterable[int]) -> tuple[int, ...]:
    """``DIVISIBILITY`` or 1 for each of a tensor's shape or stride values."""
    return tuple([DIVISIBILITY if v % DIVISIBILITY == 0 else 1 for v in values])


def _logical_len(arg: Any, line: int) -> int:
    """The argument's ``len()``: its shape's items, in lines of ``line``."""
    return int(math.prod(arg.shape)) // line


class NoLaunchSignature(Exception):
    """An argument the warm launch's memo cannot summarize (``launch_signature``): the launch takes the full path."""


class BufferType:
    """``Array[T]`` / ``Tensor[T]`` as a parameter annotation; implements the launch protocol."""

    role = "array"
    kind_name = "Array"

    def __init__(self, item: Any) -> None:
        self.item = item
        self.elem, self.fixed_line, self.atomic = item_spec(item)
        self.lined = isinstance(item, LineType)
        # (dtype, line size, covering, rank, len multiple, shape and stride multiples) -> argument, for warm launches
        self._accepted: dict[tuple[object, ...], BufferCompilationArg] = {}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.item == self.item

    def __hash__(self) -> int:
        return hash((self.kind_name, self.item))

    def __repr__(self) -> str:
        return f"{self.kind_name}[{self.item!r}]"

    # -- launch protocol ------------------------------------------------------------------------
    def compilation_arg(self, arg: Any) -> BufferCompilationArg:
        """Validate a runtime buffer argument; its element type and line size."""
        handle = getattr(arg, "handle", None)
        line = getattr(arg, "line_size", None)
        if handle is None or line is None:
            raise LaunchError(f"expected cp.ArrayArg/cp.TensorArg(handle) for {self!r}, got {type(arg).__name__}")
        address = handle.first_address()
        if line != 1:
            _check_divides(arg, handle, line)
            _check_line_alignment(arg, handle, line, address)
        length = _logical_len(arg, line)
        covering = length == handle.size // line  # the shape's items are the allocation's
        rank = len(arg.shape) if self.role == "tensor" else None
        multiple = DIVISIBILITY if length % DIVISIBILITY == 0 else 1
        dims = (_multiples(arg.shape), _multiples(arg.strides)) if rank is not None else _NO_DIMS
        unit_strides = tuple([s == 1 for s in arg.strides]) if rank is not None else ()
        contiguous = rank == 2 and line == 1 and tuple(arg.strides) == (arg.shape[1], 1)
        aligned = DIVISIBILITY if address is not None and address % DIVISIBILITY == 0 else 1
        key = (handle.dtype, line, covering, rank, multiple, dims, unit_strides, contiguous, aligned)
        cached = self._accepted.get(key)
        if cached is not None:
            return cached
        dtype_elem = elem_of_dtype(handle.dtype)
        if dtype_elem != self.elem.ir and not (self.elem.ir is ir.USIZE and dtype_elem is ir.U64):
            raise LaunchError(f"expected {self.elem!r} elements for {self!r}, got a buffer of dtype {handle.dtype}")
        if self.fixed_line is not None and line != self.fixed_line:
            if self.lined:
                raise LaunchError(f"{self!r} needs line_size={self.fixed_line}, got line_size={line}")
            raise LaunchError(
                f"{self!r} takes line_size=1, got line_size={line}; annotate "
                f"{self.kind_name}[Line[{self.elem!r}]] to read lines"
            )
        comp_arg = BufferCompilationArg(
            self.elem.name,
            line,
            covering,
            rank=rank,
            len_multiple_of=multiple,
            shape_multiple_of=dims[0],
            stride_multiple_of=dims[1],
            unit_strides=unit_strides,
            contiguous=contiguous,
            address_multiple_of=aligned,
        )
        self._accepted[key] = comp_arg
        return comp_arg

    def register(self, arg: Any, bindings: Bindings) -> None:
        """Bind the buffer for one launch."""
        bindings.add_buffer(arg)

    def launch_signature(self, arg: Any) -> tuple[int, int, Any, Any]:
        """All that ``compilation_arg`` and ``register`` read of ``arg``: its handle (by identity; a handle's dtype,
        storage and offset never change), line size, shape and strides.  The client checks the handle's identity
        (``ComputeClient.launch``)."""
        return (id(arg.handle), arg.line_size, arg.shape, arg.strides)

    def expand(self, comp_arg: BufferCompilationArg, builder: KernelBuilder) -> MemoryExpand:
        """Declare the buffer parameter; the value the kernel body receives."""
        ty = Type(self.elem.ir, comp_arg.line_size)
        var = builder.register(
            self.role,
            ty,
            comp_arg.len_is_buffer_len,
            comp_arg.exclusive,
            comp_arg.rank,
            comp_arg.same_len_as,
            len_as_shape=comp_arg.len_as_shape,
            multiple_of=comp_arg.len_multiple_of,
            shape_multiple_of=comp_arg.shape_multiple_of,
            stride_multiple_of=comp_arg.stride_multiple_of,
            unit_strides=comp_arg.unit_strides,
            contiguous=comp_arg.contiguous,
            same_shape_as=comp_arg.same_shape_as,
            address_multiple_of=comp_arg.address_multiple_of,
            len_as_product=comp_arg.len_as_product,
            cube_count_dims=comp_arg.cube_count_dims,
        )
        if self.role == "tensor":
            return TensorExpand(var, self.atomic, comp_arg.rank, comp_arg.unit_strides, comp_arg.contiguous)
        return self.expand_type(var, self.atomic)

    expand_output = expand

    def default_compilation_arg(self) -> BufferCompilationArg:
        """The compilation argument used when inspecting without a launch (line size 1 unless fixed)."""
        return BufferCompilationArg(self.elem.name, self.fixed_line or 1)

    def is_compilation_arg(self, value: object) -> bool:
        """Whether ``value`` is already this parameter's compilation argument."""
        return isinstance(value, BufferCompilationArg)

    @property
    def expand_type(self) -> type[MemoryExpand]:
        return MemoryExpand


class TensorType(BufferType):
    """``Tensor[T]``: a buffer with shape and strides (runtime metadata)."""

    role = "tensor"
    kind_name = "Tensor"

    @property
    def expand_type(self) -> type[MemoryExpand]:
        return TensorExpand


class Array:
    """``Array[T]`` / ``Array[Line[T]]`` / ``Array[Atomic[T]]``: a global buffer parameter."""

    def __class_getitem__(cls, item: Any) -> BufferType | generics.GenericBuffer:
        if generics.unbound_var(item) is not None:
            return generics.GenericBuffer(cls, item)
        return BufferType(generics.resolve_item(item))


class Tensor:
    """``Tensor[T]``: a global buffer with shape and strides."""

    def __class_getitem__(cls, item: Any) -> TensorType | generics.GenericBuffer:
        if generics.unbound_var(item) is not None:
            return generics.GenericBuffer(cls, item)
        return TensorType(generics.resolve_item(item))


def _check_divides(arg: Any, handle: Any, line: int) -> None:
    """A line size must divide the elements a buffer argument covers, or its last elements are out of reach."""
    counts = [("buffer", handle.size)]
    if len(getattr(arg, "shape", ())) > 1 or tuple(getattr(arg, "shape", ())) != (handle.size,):
        view = 1
        for dim in arg.shape:
            view *= dim
        counts.append(("view (shape " + "x".join(map(str, arg.shape)) + ")", view))
    for what, count in counts:
        if count % line:
            raise LaunchError(
                f"a {what} of {count} elements is passed with line_size={line}, which does not "
                f"divide it: the last {count % line} element(s) would never be read or written; "
                f"use a line size that divides {count}, or pad the buffer to a multiple of {line}"
            )


def _check_line_alignment(arg: Any, handle: Any, line: int, address: int | None) -> None:
    """Lines are read and written as vectors aligned to the line's size (its largest power-of-two divisor), as
    the GPU requires: the first element and every row a stride reaches must start at such an address.  A
    view that starts mid-line (``handle[1:]``) would fault on the GPU and crash the cpu runtime's process.
    ``address``: the first element's (``Handle.first_address``; None: not known, not checked)."""
    size = line * handle.dtype.itemsize
    align = size & -size
    if address is not None and address % align:
        raise LaunchError(
            f"{arg!r} is read in lines of {line} ({size} bytes, aligned to {align}) but its first element is at "
            f"an address {address % align} bytes past a multiple of {align} (a view or an imported buffer that "
            f"starts mid-line); pass a view whose offset is a multiple of {line} elements, or line_size=1"
        )
    for axis, (extent, stride) in enumerate(zip(arg.shape, arg.strides, strict=True)):
        if extent > 1 and stride != 1 and stride % line:
            raise LaunchError(
                f"{arg!r} is read in lines of {line} but the stride of axis {axis} is {stride} elements, not a "
                f"multiple of {line}: its rows would start mid-line; pad the rows to a multiple of {line} "
                f"elements, or pass line_size=1"
            )
