"""The kernel ABI of the PTX back end: the entry parameters a CUDA runtime must pass, all by value.

Entry parameters, in ``KernelDefinition.params`` order:

* array / tensor   -> ``ptr addrspace(1)`` (``noalias readonly`` only for an exclusive, never-written buffer);
* scalar           -> its LLVM type (``bool`` as ``i8``; a line as a vector);
* tensor_map       -> ``ptr byval([128 x i8]) align 64 "nvvm.grid_constant"`` (the 128-byte CUtensorMap
  passed by value in parameter space, so TMA reads it without a local copy);

then the **metadata words**, one ``u32`` parameter each, in buffer-slot order (``metadata_words``): for
every buffer its ``buffer_len`` and ``len`` (in items), then, when the kernel reads its rank, shape or
strides, ``shape[0..rank)`` and ``strides[0..rank)`` (in elements, outermost first).  The rank itself is
a compile-time value (``Param.rank``, part of the cache key), so every word sits at a fixed place in
parameter space and the kernel reads it from the constant bank: no global load precedes the first
data access.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cubepy.errors import CompileError, LaunchError
from cubepy.ir import KernelDefinition, Param, Type, ops, walk

TRIPLE = "nvptx64-nvidia-cuda"
# Exactly str(target_machine.target_data) for this triple with ``--nvptx-short-ptr``: 64-bit generic and
# global pointers, 32-bit shared (3, and shared::cluster 7), constant (4) and local (5) ones, as nvcc emits.
DATA_LAYOUT = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
BLOCK_ALIGN = TENSOR_MAP_ALIGN  # a packed parameter block starts here: the strictest alignment of any parameter
_U32_MAX = 2**32 - 1
POINTER_BYTES = 8
WORD_BYTES = 4
METADATA_ROLE = "metadata"
LENGTH_FIELDS = ("buffer_len", "len")


class BufferMetadata(Protocol):
    """What ``pack_metadata`` reads of a buffer binding (``cubepy.runtime.bindings.BufferBinding``)."""

    @property
    def buffer_len(self) -> int: ...

    @property
    def len(self) -> int: ...

    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class MetadataWord:
    """One u32 metadata parameter: ``field`` ("buffer_len", "len", "shape", "stride") of buffer slot ``buffer``.

    ``dim`` indexes shape and stride words; ``rank`` is the rank the kernel was compiled for (0 for lengths).
    """

    buffer: int
    field: str
    dim: int = 0
    rank: int = 0

    @property
    def name(self) -> str:
        """The parameter's name suffix, as the PTX entry declares it."""
        return self.field if self.field in LENGTH_FIELDS else f"{self.field}{self.dim}"


def shaped_buffers(definition: KernelDefinition) -> set[int]:
    """Buffer slots whose rank, shape or strides the kernel reads (they get shape and stride words)."""
    return {
        inst.operation.memory.id
        for inst in walk(definition.body)
        if isinstance(inst.operation, (ops.Rank, ops.Shape, ops.Stride))
    }


def static_rank(definition: KernelDefinition, param: Param) -> int:
    """The rank a buffer parameter was compiled for; CompileError when the compilation left it open."""
    if param.role == "array":
        return 1
    if param.rank is None:
        raise CompileError(
            f"kernel {definition.name}: tensor parameter {param.name!r} reads its rank, shape or strides, but "
            "its rank is fixed only by a launch: compile it with a runtime argument (a cp.TensorArg) or a "
            "BufferCompilationArg with rank=N"
        )
    return param.rank


def metadata_words(definition: KernelDefinition) -> list[MetadataWord]:
    """The metadata parameters of ``definition``'s entry, in order."""
    shaped = shaped_buffers(definition)
    words: list[MetadataWord] = []
    for param in definition.buffers:
        slot = param.var.id
        words += [MetadataWord(slot, field) for field in LENGTH_FIELDS]
        if slot in shaped:
            rank = static_rank(definition, param)
            words += [MetadataWord(slot, field, dim, rank) for field in ("shape", "stride") for dim in range(rank)]
    return words


def pack_metadata(words: Sequence[MetadataWord], buffers: Sequence[BufferMetadata]) -> list[int]:
    """The value of every metadata word for these buffer bindings (slot order); LaunchError when one does not fit."""
    values = []
    for word in words:
        binding = buffers[word.buffer]
        if word.field in LENGTH_FIELDS:
            value = binding.buffer_len if word.field == "buffer_len" else binding.len
        else:
            shape, strides = tuple(binding.shape), tuple(binding.strides)
            if len(shape) != word.rank or len(strides) != word.rank:
                raise LaunchError(
                    f"buffer {word.buffer}: shape {shape} and strides {strides} do not have the rank "
                    f"{word.rank} the kernel was compiled for"
                )
            value = (shape if word.field == "shape" else strides)[word.dim]
        values.append(_u32(value, word.buffer, word.name))
    return values


def _u32(value: int, slot: int, what: str) -> int:
    value = int(value)
    if not 0 <= value <= _U32_MAX:
        raise LaunchError(f"buffer {slot}: {what} = {value} does not fit the u32 metadata of the kernel ABI")
    return value


# -- the parameter block: where each entry parameter sits (PTX .param space; the cpu runtime reads the same block)
@dataclass(frozen=True)
class ParamSlot:
    """One entry parameter: its role, index within its kind, and place in parameter space.

    For a metadata word ``kind_index`` is its position in ``metadata_words`` and ``word`` says what it holds.
    """

    name: str
    role: str  # "array" | "tensor" | "scalar" | "tensor_map" | "metadata"
    kind_index: int  # slot among the parameters of its kind (buffers, scalars, tensor maps, metadata words)
    size: int
    align: int
    offset: int
    type: Type | None = None  # the item type of a scalar
    word: MetadataWord | None = None


@dataclass(frozen=True)
class ParamLayout:
    """Every entry parameter of a kernel, in order, and the size of the whole parameter space."""

    slots: tuple[ParamSlot, ...]
    total_bytes: int

    @property
    def words(self) -> list[MetadataWord]:
        """The metadata words, in order (what ``pack_metadata`` fills)."""
        return [slot.word for slot in self.slots if slot.word is not None]


def _round_up(value: int, align: int) -> int:
    return -(-value // align) * align


def scalar_size_align(ty: Type) -> tuple[int, int]:
    """Bytes and alignment of a scalar parameter: an element is natural; a line is an LLVM vector.

    LLVM aligns a vector to its size rounded up to a power of two and pads it to that alignment, so
    ``f32x3`` takes 16 bytes aligned 16 and ``u8x3`` 4 bytes aligned 4 (as NVPTX declares them).
    """
    size = ty.elem.size * ty.line
    if ty.line == 1:
        return size, size
    align = 1 << (size - 1).bit_length()
    return align, align


def param_layout(definition: KernelDefinition) -> ParamLayout:
    """The parameter-space layout of ``definition``'s entry, the metadata words included."""
    slots: list[ParamSlot] = []
    counters = {"buffer": 0, "scalar": 0, "tensor_map": 0}
    offset = 0

    def place(name: str, role: str, index: int, size: int, align: int, **extra: Any) -> None:
        nonlocal offset
        offset = _round_up(offset, align)
        slots.append(ParamSlot(name, role, index, size, align, offset, **extra))
        offset += size

    def count(kind: str) -> int:
        counters[kind] += 1
        return counters[kind] - 1

    for param in definition.params:
        if param.role in ("array", "tensor"):
            place(param.name, param.role, count("buffer"), POINTER_BYTES, POINTER_BYTES)
        elif param.role == "scalar":
            size, align = scalar_size_align(param.var.type)
            place(param.name, "scalar", count("scalar"), size, align, type=param.var.type)
        elif param.role == "tensor_map":
            place(param.name, "tensor_map", count("tensor_map"), TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN)
        else:
            raise LaunchError(f"kernel {definition.name}: parameter {param.name!r} has unknown role {param.role!r}")
    names = {param.var.id: param.name for param in definition.buffers}
    for index, word in enumerate(metadata_words(definition)):
        place(f"{names[word.buffer]}.{word.name}", METADATA_ROLE, index, WORD_BYTES, WORD_BYTES, word=word)
    return ParamLayout(tuple(slots), offset)
