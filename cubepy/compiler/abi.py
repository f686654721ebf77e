"""The kernel ABI of the PTX back end: entry parameters and the info buffer a CUDA runtime must build.

Entry parameters, in ``KernelDefinition.params`` order:

* array / tensor   -> ``ptr addrspace(1)``; buffers may alias (``noalias`` is never assumed);
* scalar           -> its LLVM type (``bool`` as ``i8``; a line as a vector);
* tensor_map       -> ``ptr byval([128 x i8]) align 64 "nvvm.grid_constant"`` (the 128-byte CUtensorMap
  passed by value in parameter space, so TMA reads it without a local copy);

then one last ``ptr addrspace(1)``: the **info** buffer of ``u32`` words.  For buffer slot ``b``:

* ``info[3*b + 0]`` = ``buffer_len`` (items of the whole allocation from the handle's offset),
* ``info[3*b + 1]`` = ``len`` (items of the logical view),
* ``info[3*b + 2]`` = the index in ``info`` of the buffer's *extended block* ``[rank, shape..., strides...]``
  (shape and strides in elements, outermost first), or 0 when it has none (arrays, unless the kernel
  reads their rank, shape or stride: ``extended_flags`` says which slots need one).

Extended blocks follow the ``3 * n_buffers`` header words, in slot order.  Index 0 can never be a
block's start (the header is there), which is why 0 means "none".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cubepy.errors import LaunchError
from cubepy.ir import KernelDefinition, Type, ops, walk

WORDS_PER_BUFFER = 3
BUFFER_LEN_WORD = 0
LEN_WORD = 1
EXTENDED_WORD = 2
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
_U32_MAX = 2**32 - 1
POINTER_BYTES = 8
INFO_ROLE = "info"


class BufferMetadata(Protocol):
    """What ``pack_info`` reads of a buffer binding (``cubepy.runtime.bindings.BufferBinding``)."""

    @property
    def buffer_len(self) -> int: ...

    @property
    def len(self) -> int: ...

    shape: tuple[int, ...]
    strides: tuple[int, ...]


def extended_flags(definition: KernelDefinition) -> list[bool]:
    """Per buffer slot, whether the info buffer needs its extended block: tensors, and arrays whose
    rank/shape/stride the kernel reads."""
    shaped = {
        inst.operation.memory.id
        for inst in walk(definition.body)
        if isinstance(inst.operation, (ops.Rank, ops.Shape, ops.Stride))
    }
    return [param.role == "tensor" or param.var.id in shaped for param in definition.buffers]


def info_word_count(buffers: Sequence[BufferMetadata], extended: Sequence[bool]) -> int:
    """Number of u32 words of the info buffer for these bindings."""
    words = WORDS_PER_BUFFER * len(buffers)
    for binding, has_block in zip(buffers, extended):
        if has_block:
            words += 1 + 2 * len(binding.shape)
    return max(words, 1)


def pack_info(buffers: Sequence[BufferMetadata], extended: Sequence[bool] | None = None) -> np.ndarray:
    """The info buffer (``np.uint32``) for buffer bindings in slot order.

    ``extended[b]`` says whether slot ``b`` gets an ``[rank, shape..., strides...]`` block; by default
    every buffer gets one (always correct; unread blocks cost a few words).  Use
    ``extended_flags(definition)`` to follow the kernel's roles exactly.  A kernel without buffers
    still gets one word, so the parameter is never a null allocation.
    """
    if extended is None:
        extended = [True] * len(buffers)
    if len(extended) != len(buffers):
        raise ValueError(f"pack_info: {len(buffers)} buffers but {len(extended)} extended flags")
    info = np.zeros(info_word_count(buffers, extended), dtype=np.uint32)
    cursor = WORDS_PER_BUFFER * len(buffers)
    for slot, (binding, has_block) in enumerate(zip(buffers, extended)):
        base = WORDS_PER_BUFFER * slot
        info[base + BUFFER_LEN_WORD] = _u32(binding.buffer_len, slot, "buffer_len")
        info[base + LEN_WORD] = _u32(binding.len, slot, "len")
        if not has_block:
            continue
        shape, strides = tuple(binding.shape), tuple(binding.strides)
        if len(shape) != len(strides):
            raise LaunchError(f"buffer {slot}: shape {shape} and strides {strides} differ in rank")
        info[base + EXTENDED_WORD] = cursor
        info[cursor] = len(shape)
        for dim, (size, stride) in enumerate(zip(shape, strides)):
            info[cursor + 1 + dim] = _u32(size, slot, f"shape[{dim}]")
            info[cursor + 1 + len(shape) + dim] = _u32(stride, slot, f"stride[{dim}]")
        cursor += 1 + 2 * len(shape)
    return info


def _u32(value: int, slot: int, what: str) -> int:
    value = int(value)
    if not 0 <= value <= _U32_MAX:
        raise LaunchError(f"buffer {slot}: {what} = {value} does not fit the u32 info ABI")
    return value


# -- the parameter block: where each entry parameter sits (PTX .param space; the cpu runtime reads the same block)
@dataclass(frozen=True)
class ParamSlot:
    """One entry parameter: its role, index within its kind, and place in parameter space."""

    name: str
    role: str  # "array" | "tensor" | "scalar" | "tensor_map" | "info"
    kind_index: int  # slot among the parameters of its kind (buffers, scalars, tensor maps)
    size: int
    align: int
    offset: int
    type: Type | None = None  # the item type of a scalar


@dataclass(frozen=True)
class ParamLayout:
    """Every entry parameter of a kernel, in order, and the size of the whole parameter space."""

    slots: tuple[ParamSlot, ...]
    total_bytes: int


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
    """The parameter-space layout of ``definition``'s entry, the trailing info pointer included."""
    slots: list[ParamSlot] = []
    counters = {"buffer": 0, "scalar": 0, "tensor_map": 0}
    offset = 0

    def place(name: str, role: str, kind: str, size: int, align: int, ty: Type | None = None) -> None:
        nonlocal offset
        offset = _round_up(offset, align)
        slots.append(ParamSlot(name, role, counters[kind], size, align, offset, ty))
        counters[kind] += 1
        offset += size

    for param in definition.params:
        if param.role in ("array", "tensor"):
            place(param.name, param.role, "buffer", POINTER_BYTES, POINTER_BYTES)
        elif param.role == "scalar":
            size, align = scalar_size_align(param.var.type)
            place(param.name, "scalar", "scalar", size, align, param.var.type)
        elif param.role == "tensor_map":
            place(param.name, "tensor_map", "tensor_map", TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN)
        else:
            raise LaunchError(f"kernel {definition.name}: parameter {param.name!r} has unknown role {param.role!r}")
    offset = _round_up(offset, POINTER_BYTES)
    slots.append(ParamSlot(INFO_ROLE, INFO_ROLE, 0, POINTER_BYTES, POINTER_BYTES, offset))
    return ParamLayout(tuple(slots), offset + POINTER_BYTES)
