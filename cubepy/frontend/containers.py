"""Memories inside kernels: buffers, ``SharedMemory``, ``LocalArray``, slices and atomic memories.

A memory is a ``MemoryExpand`` (a tensor parameter a ``TensorExpand``): indexing gives u32-indexed ``Index``
instructions, marked checked here on global buffers when the kernel was launched with ``launch`` (the
``checked_io`` pass then checks shared and local memories of such a kernel too); atomic memories index to an
``AtomicRef``.  ``a.slice(start, end)`` is a view (base, offset, length) that adds its offset to every index.
How a host array becomes a buffer parameter (``Array[T]``, ``Tensor[T]``) is ``cubepy.frontend.buffer_launch``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, cast

from cubepy import ir
from cubepy.frontend import operations, source
from cubepy.frontend.atomics import AtomicRef, AtomicType
from cubepy.frontend.elem import LineType, ScalarType, scalar_type, to_elem
from cubepy.frontend.state import current_scope, require_state
from cubepy.frontend.values import ExpandBase, ExpandElement, fail_needs_comptime
from cubepy.ir import Type, VarKind
from cubepy.ir import ops as irops
from cubepy.ir.variable import SHARED_MIN_ALIGN

if TYPE_CHECKING:
    from cubepy.frontend.peer import PeerMemory

MAX_LOCAL_BYTES = 512 * 1024  # local arrays per unit


def item_spec(item: object) -> tuple[ScalarType, int | None, bool]:
    """(element type, fixed line size or None for "set at launch", atomic) of a memory's item spec."""
    if isinstance(item, AtomicType):
        return item.elem, 1, True
    if isinstance(item, LineType):
        return item.elem, item.size, False
    if isinstance(item, ScalarType):
        return item, 1, False
    return scalar_type(to_elem(item)), 1, False


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

    __slots__ = ("known_rank", "unit_strides", "contiguous")

    def __init__(
        self,
        var: ir.Variable,
        atomic: bool = False,
        rank: int | None = None,
        unit_strides: tuple[bool, ...] = (),
        contiguous: bool = False,
    ) -> None:
        super().__init__(var, atomic)
        self.known_rank = rank  # the launch argument's rank (None when compiled without one)
        self.unit_strides = unit_strides  # per dimension: the launch found its stride 1 (part of the cache key)
        self.contiguous = contiguous  # rank 2, strides (shape(1), 1): the launch found so (part of the cache key)

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
        unit = self.unit_strides
        if self.contiguous and len(index) == 2:
            # the same words as stride(0) and stride(1) here, in the form the range analysis proves in bounds
            return _weighted_sum(index, [self.shape(1), 1])
        return _weighted_sum(index, [1 if k < len(unit) and unit[k] else self.stride(k) for k in range(len(index))])


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


def _declare(
    kind: VarKind,
    item: object,
    length: Any,
    line_size: Any,
    alignment: int | None,
    aliases: tuple[int, int] | None = None,
) -> MemoryExpand:
    elem, fixed, atomic = item_spec(item)
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
    if aliases is not None:  # a view is as aligned as its root and its offset allow
        root = next(v for v in state.shared_memories if v.id == aliases[0])
        root_align = max(root.alignment or 1, SHARED_MIN_ALIGN, root.type.size)
        alignment = min(root_align, aliases[1] & -aliases[1]) if aliases[1] else root_align
    var = state.declare_memory(kind, Type(elem.ir, cast(int, fixed)), count, alignment, aliases)
    total = sum((v.length or 0) * v.type.size for v in state.local_arrays) if kind is VarKind.LOCAL_ARRAY else 0
    if total > MAX_LOCAL_BYTES:  # the GPU's local memory per thread (sm_90); the cpu runtime keeps it too
        source.fail(
            f"local memory: this LocalArray of {count * var.type.size} bytes brings the kernel's local arrays to "
            f"{total} bytes per unit, over the limit of {MAX_LOCAL_BYTES} bytes (512 KiB per thread on the GPU); "
            f"use shared or global memory for larger data"
        )
    return MemoryExpand(var, atomic, shape)


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

    @staticmethod
    def alias(of: Any, item: object, length: Any, byte_offset: Any = 0, line_size: Any = None) -> MemoryExpand:
        """``length`` items of ``item`` over the bytes of the shared memory ``of`` from ``byte_offset`` (comptime):
        no new space, the same bytes seen as another type (an epilogue's tile over the pipeline's stages).

        Nothing orders the two views: what one writes, the other reads, as the units' accesses come; the
        sanitizer checks them as the same bytes."""
        if not isinstance(of, MemoryExpand) or of.var.kind is not VarKind.SHARED:
            source.fail(f"SharedMemory.alias: expected a shared memory to view, got {type(of).__name__}")
        offset = operations.comptime_value(byte_offset) if operations.is_comptime(byte_offset) else None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            source.fail(f"SharedMemory.alias: byte_offset must be a comptime int >= 0, got {byte_offset!r}")
        root_id, base = of.var.aliases or (of.var.id, 0)
        view = _declare(VarKind.SHARED, item, length, line_size, None, (root_id, base + offset))
        size, available = (view.var.length or 0) * view.var.type.size, (of.var.length or 0) * of.var.type.size
        # the item boundary is the root memory's (a view of a view starts ``base`` bytes into it), as the verifier's
        if (base + offset) % view.var.type.size or offset + size > available:
            source.fail(
                f"SharedMemory.alias: {view.var.length} items of {view.var.type.size} bytes from byte {offset} do not "
                f"fit the {available} bytes of {of.var!r} at an item boundary"
            )
        return view


class LocalArray:
    """``LocalArray[T](n)``: ``n`` items private to each unit."""

    def __class_getitem__(cls, item: object) -> _MemoryFactory:
        return _MemoryFactory(VarKind.LOCAL_ARRAY, item)
