"""Kernel parameters as the driver takes them: the byte layout of the ABI and the ``kernelParams`` array.

One module for every runtime that calls compiled code: the cuda runtime hands the block to ``cuLaunchKernel``,
the cpu runtime passes the same block to the host object code, so both follow one ABI.

The ABI (``cubepy.compiler.abi``): in ``KernelDefinition.params`` order, a buffer is a 64-bit global
pointer, a scalar its value (bool as one byte, a line as an LLVM vector), a tensor map the 128-byte
``CUtensorMap`` by value (64-byte aligned); then the u32 metadata words (lengths, and the shape and
strides the kernel reads), each a parameter of its own.

``param_layout`` places each parameter as the PTX ``.param`` space does (each at a multiple of its
alignment), ``pack_params`` writes the values into one 64-byte-aligned host block and builds the array
of pointers into it that ``cuLaunchKernel`` reads.  Both are pure: no device is needed to test them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubepy.compiler import abi
from cubepy.compiler.abi import (  # noqa: F401  (the layout is the compiler ABI's; re-exported here)
    METADATA_ROLE,
    POINTER_BYTES,
    ParamLayout,
    ParamSlot,
    param_layout,
    scalar_size_align,
)
from cubepy.errors import LaunchError
from cubepy.ir import Type

BLOCK_ALIGN = abi.BLOCK_ALIGN


@dataclass(frozen=True)
class PackedParams:
    """A filled parameter block and the ``void*[]`` of pointers into it; keep it alive until the launch returns."""

    block: np.ndarray  # uint8, 64-byte aligned, laid out as the layout says
    pointers: np.ndarray  # uint64, one address per parameter, into ``block``

    @property
    def address(self) -> int:
        """The ``kernelParams`` argument of ``cuLaunchKernel``: the address of the pointer array."""
        return int(self.pointers.ctypes.data)


def scalar_bytes(value: Any, ty: Type, name: str = "scalar") -> bytes:
    """The exact parameter bytes of one scalar value of item type ``ty`` (padding included).

    A line takes ``ty.line`` values (a single value is splat to every lane); bool is one byte, 0 or 1.
    """
    dtype = ty.elem.numpy
    try:
        if ty.elem.is_bool:
            lanes = np.asarray(value).astype(bool).astype(np.uint8).reshape(-1)
        else:
            lanes = np.asarray(value).astype(dtype, copy=False).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise LaunchError(f"scalar parameter {name!r}: {value!r} is not a {ty!r}: {exc}") from None
    if lanes.size == 1 and ty.line > 1:
        lanes = np.repeat(lanes, ty.line)
    if lanes.size != ty.line:
        raise LaunchError(f"scalar parameter {name!r} is a {ty!r}: expected {ty.line} value(s), got {lanes.size}")
    size, _ = scalar_size_align(ty)
    data = lanes.tobytes()
    return data + bytes(size - len(data))


def pack_params(
    layout: ParamLayout,
    buffer_addresses: Sequence[int],
    scalars: Sequence[Any],
    tensor_maps: Sequence[bytes],
    metadata: Sequence[int],
) -> PackedParams:
    """Write every parameter's bytes at its offset and point the ``kernelParams`` array at them.

    ``buffer_addresses`` are device addresses of element 0 of each buffer (allocation + offset),
    ``scalars`` the bound values, ``tensor_maps`` the encoded 128-byte descriptors, each in slot order;
    ``metadata`` the u32 words ``abi.pack_metadata(layout.words, buffers)`` gives.  A launcher that packs
    the same layout again and again keeps a ``ParamPacker`` instead.
    """
    return ParamPacker(layout).pack(buffer_addresses, scalars, tensor_maps, metadata)


class ParamPacker:
    """``pack_params`` for one layout, its byte format worked out once (a launch then costs one ``pack_into``).

    Pointers and metadata words are packed by ``struct``; scalars go through ``scalar_bytes`` (numpy's
    conversion rules, bool as one byte, lines splat), tensor maps as their 128 bytes.
    """

    def __init__(self, layout: ParamLayout) -> None:
        self.layout = layout
        self.counts = {"buffer": 0, "scalar": 0, "tensor_map": 0, METADATA_ROLE: 0}
        fields, cursor = ["<"], 0
        for slot in layout.slots:
            kind = "buffer" if slot.role in ("array", "tensor") else slot.role
            self.counts[kind] += 1
            if slot.offset > cursor:
                fields.append(f"{slot.offset - cursor}x")
            fields.append({"buffer": "Q", METADATA_ROLE: "I"}.get(kind, f"{slot.size}s"))
            cursor = slot.offset + slot.size
        if layout.total_bytes > cursor:
            fields.append(f"{layout.total_bytes - cursor}x")
        self.format = struct.Struct("".join(fields))
        self.offsets = np.array([slot.offset for slot in layout.slots], dtype=np.uint64)
        self.words = layout.words

    def metadata(self, buffers: Sequence[abi.BufferMetadata], kernel_name: str) -> list[int]:
        """The metadata words for the bound buffers; LaunchError when the kernel takes another number of them."""
        expected = self.counts["buffer"]
        if len(buffers) != expected:
            raise LaunchError(f"kernel {kernel_name} takes {expected} buffer(s) but {len(buffers)} were bound")
        return abi.pack_metadata(self.words, buffers)

    def pack(
        self,
        buffer_addresses: Sequence[int],
        scalars: Sequence[Any],
        tensor_maps: Sequence[bytes],
        metadata: Sequence[int],
    ) -> PackedParams:
        """The filled block and pointer array for one launch (see ``pack_params``)."""
        given = {
            "buffer": len(buffer_addresses),
            "scalar": len(scalars),
            "tensor_map": len(tensor_maps),
            METADATA_ROLE: len(metadata),
        }
        for kind, count in given.items():
            if count != self.counts[kind]:
                raise LaunchError(f"the kernel takes {self.counts[kind]} {kind} parameter(s) but {count} were bound")
        values: list[Any] = []
        for slot in self.layout.slots:
            if slot.role in ("array", "tensor"):
                values.append(_address(buffer_addresses[slot.kind_index], slot.name))
            elif slot.role == METADATA_ROLE:
                values.append(_u32(metadata[slot.kind_index], slot.name))
            elif slot.role == "scalar":
                assert slot.type is not None
                values.append(scalar_bytes(scalars[slot.kind_index], slot.type, slot.name))
            else:
                data = bytes(tensor_maps[slot.kind_index])
                if len(data) != slot.size:
                    raise LaunchError(f"parameter {slot.name!r}: {len(data)} bytes for a {slot.size}-byte slot")
                values.append(data)
        block = _aligned_zeros(self.layout.total_bytes, BLOCK_ALIGN)
        self.format.pack_into(block, 0, *values)  # type: ignore[arg-type]  # numpy declares __buffer__ for 3.12+ only
        return PackedParams(block, self.offsets + np.uint64(block.ctypes.data))


def _address(address: int, name: str) -> int:
    address = int(address)
    if not 0 <= address < 2**64:
        raise LaunchError(f"parameter {name!r}: address {address:#x} is not a 64-bit device address")
    return address


def _u32(value: int, name: str) -> int:
    value = int(value)
    if not 0 <= value < 2**32:
        raise LaunchError(f"parameter {name!r}: {value} does not fit a u32")
    return value


def _aligned_zeros(nbytes: int, align: int) -> np.ndarray:
    """A zeroed uint8 array whose first byte sits at a multiple of ``align`` (a view into a larger one)."""
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    start = (-int(raw.ctypes.data)) % align
    return raw[start : start + nbytes]
