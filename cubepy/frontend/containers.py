"""Memories inside kernels: ``Array``, ``Tensor``, ``SharedMemory``, ``LocalArray``, slices and atomics.

Annotations (``Array[f32]``, ``Tensor[Line[f16]]``, ``Array[Atomic[u32]]``) are ``BufferType``
objects that also implement the launch protocol (``compilation_arg``, ``register``, ``expand``).
Inside kernels a memory is a ``MemoryExpand``: indexing gives u32-indexed ``Index`` instructions,
marked checked here on global buffers when the kernel was launched with ``launch`` (the ``checked_io``
pass then checks shared and local memories of such a kernel too); atomic memories index to an ``AtomicRef``.  ``a.slice(start, end)`` is a view (base,
offset, length) that adds its offset to every index.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn, cast

import attrs

from cubepy import ir
from cubepy.errors import LaunchError
from cubepy.frontend import generics, operations, source
from cubepy.frontend.atomics import AtomicRef, AtomicType
from cubepy.frontend.elem import LineType, ScalarType, elem_of_dtype, scalar_type, to_elem
from cubepy.frontend.mutability import fail_needs_comptime
from cubepy.frontend.state import current_scope, require_state
from cubepy.frontend.values import ExpandBase, ExpandElement
from cubepy.ir import Type, VarKind

if TYPE_CHECKING:
    from cubepy.frontend.peer import PeerMemory
    from cubepy.frontend.state import KernelBuilder
    from cubepy.runtime.bindings import Bindings
from cubepy.ir import ops as irops

MAX_LOCAL_BYTES = 512 * 1024  # local arrays per unit


def _item(item: object) -> tuple[ScalarType, int | None, bool]:
    """(element type, fixed line size or None for "set at launch", atomic) of a memory's item spec."""
    if isinstance(item, AtomicType):
        return item.elem, 1, True
    if isinstance(item, LineType):
        return item.elem, item.size, False
    if isinstance(item, ScalarType):
        return item, 1, False
    return scalar_type(to_elem(item)), 1, False


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
    # ``DIVISIBILITY`` when the launch found ``len()`` a multiple of it, else 1: a copy of 16-byte chunks
    # against the buffer's end then copies all of a chunk or none of it (``cubepy.ir.ranges``)
    len_multiple_of: int = 1
    # a tensor's shape and strides alike, per dimension (empty for an array): ``t[r * t.shape(1) + c]`` with
    # ``c = k0 + UNIT_POS_X``, ``k0`` a multiple of 16 below a shape that is one, stays inside the row
    shape_multiple_of: tuple[int, ...] = ()
    stride_multiple_of: tuple[int, ...] = ()


DIVISIBILITY = 16  # the multiple integer scalars and buffer lengths are specialized on (Triton's tt.divisibility)
_NO_DIMS: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # an array's shape and stride multiples


def _multiples(values: Iterable[int]) -> tuple[int, ...]:
    """``DIVISIBILITY`` or 1 for each of a tensor's shape or stride values."""
    return tuple([DIVISIBILITY if v % DIVISIBILITY == 0 else 1 for v in values])


def _logical_len(arg: Any, line: int) -> int:
    """The argument's ``len()``: its shape's items, in lines of ``line``."""
    count = 1
    for extent in arg.shape:
        count *= extent
    return count // line


class BufferType:
    """``Array[T]`` / ``Tensor[T]`` as a parameter annotation; implements the launch protocol."""

    role = "array"
    kind_name = "Array"

    def __init__(self, item: Any) -> None:
        self.item = item
        self.elem, self.fixed_line, self.atomic = _item(item)
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
        if line != 1:
            _check_divides(arg, handle, line)
        length = _logical_len(arg, line)
        covering = length == handle.size // line  # the shape's items are the allocation's
        rank = len(arg.shape) if self.role == "tensor" else None
        multiple = DIVISIBILITY if length % DIVISIBILITY == 0 else 1
        dims = (_multiples(arg.shape), _multiples(arg.strides)) if rank is not None else _NO_DIMS
        key = (handle.dtype, line, covering, rank, multiple, dims)
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
        )
        self._accepted[key] = comp_arg
        return comp_arg

    def register(self, arg: Any, bindings: Bindings) -> None:
        """Bind the buffer for one launch."""
        bindings.add_buffer(arg)

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
        )
        if self.role == "tensor":
            return TensorExpand(var, self.atomic, comp_arg.rank)
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


def _add_offset(offset: Any, index: Any) -> Any:
    if isinstance(offset, int) and offset == 0:
        return index
    if isinstance(index, int) and not isinstance(index, bool) and index == 0:
        return offset
    return operations.binary(
        "add",
        operations.element(operations.to_index(offset, "slice offset")),
        operations.element(operations.to_index(index)),
    )


class MemoryExpand:
    """A memory inside a kernel: a global buffer, shared memory or local array."""

    __slots__ = ("var", "atomic", "dims")

    def __init__(self, var: ir.Variable, atomic: bool = False, shape: tuple[int, ...] | None = None) -> None:
        self.var = var
        self.atomic = atomic
        self.dims = shape  # (rows, cols, ...) of a multi-dimensional shared/local memory, else None

    @property
    def elem(self) -> ScalarType:
        """The element type (``cp.f32``)."""
        return scalar_type(self.var.type.elem)

    @property
    def line_size(self) -> int:
        """Lanes per item (comptime)."""
        return self.var.type.line

    @property
    def checked(self) -> bool:
        """Whether indexing is bounds-checked (global buffers of a ``launch``ed kernel)."""
        return self.var.kind is VarKind.GLOBAL and require_state().checked

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            if index.step not in (None, 1):
                source.fail("memory slices take no step")
            return self.slice(
                0 if index.start is None else index.start, self.len() if index.stop is None else index.stop
            )
        return self.read_item(self.item_index(index))

    def __setitem__(self, index: Any, value: Any) -> None:
        self.write_item(self.item_index(index), value)

    def item_index(self, index: Any) -> Any:
        """The item index of ``m[index]``: one index, or one per dimension of a multi-dimensional memory."""
        if isinstance(index, tuple):
            return self._flat_index(index)
        if self.dims is not None:
            source.fail(
                f"{self.describe()} has shape {self.dims}: expected {len(self.dims)} indices, got 1 (index it "
                f"m[{', '.join('ijkl'[: len(self.dims)])}]; a slice m[a:b] is a flat view)"
            )
        return index

    def read_item(self, index: Any) -> Any:
        """Read item ``index`` (a flat index, no rank check: slices come here)."""
        idx = operations.to_index(index)
        if self.atomic:
            return AtomicRef(self, idx)
        return operations.emit(irops.Index(self.var, idx, self.checked), self.var.type)

    def write_item(self, index: Any, value: Any) -> None:
        """Write item ``index`` (a flat index, no rank check: slices come here)."""
        idx = operations.to_index(index)
        if self.atomic:
            AtomicRef(self, idx).store(value)
            return
        converted = operations.convert(value, self.var.type, f"store into {self.describe()}")
        current_scope().append(irops.IndexAssign(self.var, idx, converted, self.checked))

    def peer(self, rank: Any) -> PeerMemory:
        """This shared memory in the cube ``rank`` of the cluster (distributed shared memory, sm_90).

        ``smem.peer(r)[i]`` reads and ``smem.peer(r)[i] = v`` writes item ``i`` of cube ``r``'s copy (PTX
        ``mapa`` + ``ld/st.shared::cluster``); ``r`` is a ``CUBE_POS_CLUSTER`` value (u32)."""
        if self.var.kind is not VarKind.SHARED:
            source.fail(f"{self.describe()} has no peers: only a shared memory is shared across a cluster")
        from cubepy.frontend.peer import PeerMemory

        return PeerMemory(self, operations.to_index(rank, "cube rank"))

    def _flat_index(self, index: tuple[Any, ...]) -> object:
        """``m[i, j, ...]``: the row-major item index of a multi-dimensional shared/local memory."""
        if self.dims is None:
            source.fail(
                f"{self.describe()} is one-dimensional: index it with one index (declare "
                f"SharedMemory[T]((rows, cols)) or LocalArray[T]((rows, cols)) to index with several)"
            )
        if len(index) != len(self.dims):
            source.fail(f"{self.describe()} has shape {self.dims}: expected {len(self.dims)} indices, got {len(index)}")
        return _weighted_sum(index, [_row_major_stride(self.dims, k) for k in range(len(self.dims))])

    def describe(self) -> str:
        """What this memory is, for messages."""
        kind = {
            VarKind.GLOBAL: "buffer",
            VarKind.SHARED: "shared memory",
            VarKind.LOCAL_ARRAY: "local array",
            VarKind.CONST_TABLE: "constant table",
        }.get(self.var.kind, "memory")
        return f"a {kind} of {self.var.type!r}"

    def len(self) -> Any:
        """Number of items: a runtime u32 for buffers, a comptime int for shared/local memory."""
        if self.var.kind is VarKind.GLOBAL:
            return operations.emit(irops.Len(self.var))
        return self.var.length

    def buffer_len(self) -> Any:
        """Items in the whole allocation (u32 for buffers, comptime int for shared/local memory)."""
        if self.var.kind is VarKind.GLOBAL:
            return operations.emit(irops.BufferLen(self.var))
        return self.var.length

    def slice(self, start: Any, end: Any) -> SliceExpand:
        """The view ``[start, end)`` of this memory."""
        return SliceExpand(self, start, _length(start, end))

    def __len__(self) -> int:
        if self.var.kind is VarKind.GLOBAL:
            source.fail("len() of a buffer is a runtime value; use `.len()`")
        return cast(int, self.var.length)

    def __iter__(self) -> NoReturn:
        source.fail("cannot iterate over a memory; loop with `for i in range(a.len())` and index it")

    def __repr__(self) -> str:
        return f"<{self.describe()} {self.var!r}>"


def _row_major_stride(shape: tuple[int, ...], dim: int) -> int:
    stride = 1
    for extent in shape[dim + 1 :]:
        stride *= extent
    return stride


def _weighted_sum(index: tuple[Any, ...], strides: list[Any]) -> object:
    """``sum(index[k] * strides[k])``: the same u32 arithmetic a kernel writes by hand (comptime parts fold)."""
    total = None
    for position, stride in zip(index, strides):
        if isinstance(stride, int) and stride == 0:
            continue
        term = (
            position
            if isinstance(stride, int) and stride == 1
            else operations.binary("mul", operations.element(operations.to_index(position)), stride)
        )
        total = (
            term
            if total is None
            else operations.binary(
                "add", operations.element(operations.to_index(total)), operations.element(operations.to_index(term))
            )
        )
    return 0 if total is None else total


def _length(start: Any, end: Any) -> Any:
    if not isinstance(start, ExpandBase) and not isinstance(end, ExpandBase):
        return end - start
    return operations.binary(
        "sub",
        operations.element(operations.to_index(end, "slice end")),
        operations.element(operations.to_index(start, "slice start")),
    )


class TensorExpand(MemoryExpand):
    """A tensor parameter: a buffer plus ``shape(d)``, ``stride(d)`` and ``rank()`` (all u32)."""

    __slots__ = ("known_rank",)

    def __init__(self, var: ir.Variable, atomic: bool = False, rank: int | None = None) -> None:
        super().__init__(var, atomic)
        self.known_rank = rank  # the launch argument's rank (None when compiled without one)

    def shape(self, dim: Any) -> ExpandElement:
        """The size of dimension ``dim`` (outermost first)."""
        return operations.emit(irops.Shape(self.var, operations.to_index(dim, "dimension")), Type(ir.U32))

    def stride(self, dim: Any) -> ExpandElement:
        """The stride of dimension ``dim`` in elements."""
        return operations.emit(irops.Stride(self.var, operations.to_index(dim, "dimension")), Type(ir.U32))

    def rank(self) -> ExpandElement:
        """The number of dimensions."""
        return cast(ExpandElement, operations.emit(irops.Rank(self.var)))

    def _flat_index(self, index: tuple[Any, ...]) -> object:
        """``t[i, j, ...]``: ``i * stride(0) + j * stride(1) + ...`` (a checked launch bounds the whole buffer)."""
        if self.line_size != 1:
            source.fail(
                f"{self.describe()} holds lines: index it with one item index (multi-dimensional "
                "indexing goes through element strides)"
            )
        if self.known_rank is not None and len(index) != self.known_rank:
            source.fail(
                f"{self.describe()} has rank {self.known_rank}: expected {self.known_rank} indices, got "
                f"{len(index)} (or one flat item index)"
            )
        return _weighted_sum(index, [self.stride(k) for k in range(len(index))])


class SliceExpand:
    """A view ``[offset, offset + length)`` of a memory; indexing adds the offset."""

    __slots__ = ("base", "offset", "length")

    def __init__(self, base: MemoryExpand, offset: Any, length: Any) -> None:
        self.base = base
        self.offset = offset
        self.length = length

    @property
    def var(self) -> ir.Variable:
        """The underlying memory variable."""
        return self.base.var

    @property
    def line_size(self) -> int:
        """Lanes per item."""
        return self.base.line_size

    @property
    def elem(self) -> ScalarType:
        """The element type."""
        return self.base.elem

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index.start or 0, self.length if index.stop is None else index.stop)
        return self.base.read_item(_add_offset(self.offset, self._one(index)))

    def __setitem__(self, index: Any, value: Any) -> None:
        self.base.write_item(_add_offset(self.offset, self._one(index)), value)

    @staticmethod
    def _one(index: Any) -> Any:
        if isinstance(index, tuple):
            source.fail(f"a slice is one-dimensional: index it with one index, got {len(index)}")
        return index

    def len(self) -> Any:
        """The slice length (u32, or a comptime int when both ends were comptime)."""
        return self.length

    def slice(self, start: Any, end: Any) -> SliceExpand:
        """A sub-view ``[start, end)`` of this view."""
        offset = start if isinstance(self.offset, int) and self.offset == 0 else _add_offset(self.offset, start)
        return SliceExpand(self.base, offset, _length(start, end))

    def __iter__(self) -> NoReturn:
        source.fail("cannot iterate over a slice; loop with `for i in range(s.len())` and index it")

    def __repr__(self) -> str:
        return f"<slice of {self.base!r}>"


def _declare(kind: VarKind, item: object, length: Any, line_size: Any, alignment: int | None) -> MemoryExpand:
    elem, fixed, atomic = _item(item)
    if isinstance(item, LineType) and fixed is None:
        if line_size is None:
            source.fail(
                f"{item!r} in shared/local memory needs a line size: pass line_size=N or write Line[{elem!r}, N]"
            )
        fixed = operations.comptime_value(line_size)
    shape = None
    if isinstance(length, tuple):  # (rows, cols, ...): indexed m[i, j, ...], row-major
        shape = tuple(operations.comptime_value(e) if operations.is_comptime(e) else e for e in length)
        if not shape or any(not isinstance(e, int) or isinstance(e, bool) or e <= 0 for e in shape):
            source.fail(f"a shared/local memory shape must be comptime positive ints, got {length!r}")
        length = 1
        for extent in shape:
            length *= extent
        if len(shape) == 1:
            shape = None
    count = operations.comptime_value(length) if operations.is_comptime(length) else None
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        message = f"a shared/local memory length must be a comptime positive int, got {length!r}"
        if count is None:
            fail_needs_comptime(length, message)
        source.fail(message)
    if alignment is not None and (alignment <= 0 or alignment & (alignment - 1)):
        source.fail(f"alignment {alignment} is not a power of two")
    state = require_state()
    var = state.declare_memory(kind, Type(elem.ir, cast(int, fixed)), count, alignment)
    total = sum((v.length or 0) * v.type.size for v in state.local_arrays) if kind is VarKind.LOCAL_ARRAY else 0
    if total > MAX_LOCAL_BYTES:  # the GPU's local memory per thread (sm_90); the cpu runtime keeps it too
        source.fail(
            f"local memory: this LocalArray of {count * var.type.size} bytes brings the kernel's local arrays to "
            f"{total} bytes per unit, over the limit of {MAX_LOCAL_BYTES} bytes (512 KiB per thread on the GPU); "
            f"use shared or global memory for larger data"
        )
    return MemoryExpand(var, atomic, shape)


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


class _MemoryFactory:
    __slots__ = ("kind", "item")

    def __init__(self, kind: VarKind, item: object) -> None:
        self.kind = kind
        self.item = item

    def __call__(self, length: Any, line_size: Any = None, alignment: int | None = None) -> MemoryExpand:
        return _declare(self.kind, self.item, length, line_size, alignment)

    def __repr__(self) -> str:
        name = "SharedMemory" if self.kind is VarKind.SHARED else "LocalArray"
        return f"{name}[{self.item!r}]"


class SharedMemory:
    """``SharedMemory[T](n)``: ``n`` items per cube, shared by its units.

    Indexing follows the launch mode, as for buffers: under ``launch`` an out-of-bounds read gives 0 and an
    out-of-bounds write is dropped; under ``launch_unchecked`` it is raw (undefined on a GPU, a
    ``SanitizerError`` on the interp and cpu runtimes).  The sanitizer reports both.
    """

    def __class_getitem__(cls, item: object) -> _MemoryFactory:
        return _MemoryFactory(VarKind.SHARED, item)

    @staticmethod
    def aligned(item: object, length: Any, alignment: int, line_size: Any = None) -> MemoryExpand:
        """Shared memory whose absolute address is a multiple of ``alignment`` bytes."""
        return _declare(VarKind.SHARED, item, length, line_size, alignment)


class LocalArray:
    """``LocalArray[T](n)``: ``n`` items private to each unit."""

    def __class_getitem__(cls, item: object) -> _MemoryFactory:
        return _MemoryFactory(VarKind.LOCAL_ARRAY, item)
