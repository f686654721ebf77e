"""The cpu runtime's parameter packing, worked out once per compiled kernel (a warm launch's largest host cost).

``params.ParamPacker`` packs the block the cuda runtime hands the driver: per launch it walks the layout's
slots, checks every value, computes the metadata words (``abi.pack_metadata``) and allocates an aligned block.
``KernelPacker`` gives the same bytes with less work per launch: the slots' sources (which address, which
metadata word of which buffer, which scalar) are listed when the kernel is first launched; a launch collects
the values in one pass and packs them with the layout's ``struct`` format into a block taken from a small
free list (its address read once), returned when the launch ends.  ``struct`` refuses a value that does not
fit its field (a negative address, a length past u32); that launch, and any launch whose binding counts or
ranks differ from the kernel's, goes through ``ParamPacker`` instead, which raises the usual ``LaunchError``.
Scalars and tensor maps keep ``params.scalar_bytes`` (numpy's conversion rules) and their 128 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from cubepy.compiler import abi
from cubepy.compiler.abi import METADATA_ROLE
from cubepy.runtime import params as kparams
from cubepy.runtime.bindings import BufferBinding

__all__ = ["KernelPacker"]

FREE_BLOCKS = 4  # blocks kept per kernel for the next launches (one per launch in flight)


class KernelPacker:
    """The parameter block of one kernel's launches (``ParamPacker``'s bytes, fewer steps per launch)."""

    def __init__(self, layout: abi.ParamLayout, kernel_name: str) -> None:
        self.slow = kparams.ParamPacker(layout)
        self.kernel_name = kernel_name
        self.total_bytes = layout.total_bytes
        self.counts = self.slow.counts
        # per slot: (kind, index, field, dim, rank); kind "a" address, "m" metadata, "s" scalar, "t" tensor map
        self.plan: list[tuple[str, int, str, int, int]] = []
        for slot in layout.slots:
            if slot.role in ("array", "tensor"):
                self.plan.append(("a", slot.kind_index, "", 0, 0))
            elif slot.role == METADATA_ROLE:
                word = slot.word
                assert word is not None
                self.plan.append(("m", word.buffer, word.field, word.dim, word.rank))
            elif slot.role == "scalar":
                self.plan.append(("s", slot.kind_index, "", 0, 0))
            else:
                self.plan.append(("t", slot.kind_index, "", 0, 0))
        self.scalar_slots = {slot.kind_index: slot for slot in layout.slots if slot.role == "scalar"}
        # A scalar bound as a numpy scalar of its parameter's own type (what the launch's conversion gives) is
        # its ``tobytes()``, padded: ``scalar_bytes`` would convert it to the same bytes, 5 us slower.
        self.scalar_types: dict[int, tuple[type, int]] = {}
        for index, slot in self.scalar_slots.items():
            ty = slot.type
            if ty is not None and ty.line == 1 and not ty.elem.is_bool:
                self.scalar_types[index] = (ty.elem.numpy.type, abi.scalar_size_align(ty)[0])
        # per scalar slot: (position among the block's values, scalar index, exact numpy type or None, size)
        self.scalar_plan: list[tuple[int, int, type | None, int]] = []
        for position, slot in enumerate(layout.slots):
            if slot.role == "scalar":
                exact = self.scalar_types.get(slot.kind_index)
                self.scalar_plan.append(
                    (position, slot.kind_index, None if exact is None else exact[0], 0 if exact is None else exact[1])
                )
        self.map_slots = {slot.kind_index: slot for slot in layout.slots if slot.role == "tensor_map"}
        self._free: list[tuple[np.ndarray, int]] = []

    def pack(
        self,
        addresses: Callable[[], Sequence[int]],
        buffers: Sequence[BufferBinding],
        scalars: Sequence[Any],
        maps: Sequence[bytes],
        memo: dict[object, object] | None = None,
    ) -> tuple[np.ndarray, int]:
        """A filled block and its address for one launch; hand both to ``release`` once the launch returned.

        ``addresses`` gives the buffers' first addresses (called only when the words it feeds are not known);
        ``memo`` (``Bindings.memo``) keeps the words that follow from the buffers alone for the next launch."""
        fixed = memo.get(self) if memo is not None else None
        if fixed is None:
            fixed = self._fixed_values(addresses(), buffers, maps)
            if fixed is None:
                return self._slow(addresses(), buffers, scalars, maps)
            if memo is not None:
                memo[self] = fixed
        values = list(cast(list[Any], fixed))
        if len(scalars) != len(self.scalar_plan):
            return self._slow(addresses(), buffers, scalars, maps)
        for position, index, exact, size in self.scalar_plan:
            value = scalars[index]
            if exact is not None and type(value) is exact:
                data = value.tobytes()  # type: ignore[attr-defined]  # exact is a numpy scalar type
                values[position] = data + bytes(size - len(data)) if len(data) < size else data
            else:
                slot = self.scalar_slots[index]
                assert slot.type is not None
                values[position] = kparams.scalar_bytes(value, slot.type, slot.name)
        block, address = self._take()
        try:
            self.slow.format.pack_into(block, 0, *values)  # type: ignore[arg-type]  # a writable uint8 array
        except struct.error:  # a value that does not fit: ParamPacker raises the LaunchError naming it
            self.release(block, address)
            return self._slow(addresses(), buffers, scalars, maps)
        return block, address

    def _fixed_values(
        self, addresses: Sequence[int], buffers: Sequence[BufferBinding], maps: Sequence[bytes]
    ) -> list[Any] | None:
        """The block's values that do not depend on a scalar (None in the scalars' places); None where the
        bindings do not fit the kernel's layout (``ParamPacker`` then says how)."""
        counts = self.counts
        if len(buffers) != counts["buffer"] or len(maps) != counts["tensor_map"] or len(addresses) != len(buffers):
            return None
        values: list[Any] = []
        for kind, index, field, dim, rank in self.plan:
            if kind == "a":
                values.append(addresses[index])
            elif kind == "m":
                binding = buffers[index]
                if field == "len":
                    values.append(binding.len)
                elif field == "buffer_len":
                    values.append(binding.buffer_len)
                else:
                    dims = binding.shape if field == "shape" else binding.strides
                    if len(binding.shape) != rank or len(binding.strides) != rank:
                        return None
                    values.append(dims[dim])
            elif kind == "s":
                values.append(None)
            else:
                data = bytes(maps[index])
                if len(data) != self.map_slots[index].size:
                    return None
                values.append(data)
        return values

    def release(self, block: np.ndarray, address: int) -> None:
        """Give a launch's block back for the next launch (the compiled code no longer reads it)."""
        if len(self._free) < FREE_BLOCKS:  # two launches may both append: a block more, never one shared
            self._free.append((block, address))

    def _take(self) -> tuple[np.ndarray, int]:
        try:
            return self._free.pop()  # atomic: two launches never take the same block
        except IndexError:
            block = kparams._aligned_zeros(max(self.total_bytes, 1), kparams.BLOCK_ALIGN)
            return block, int(block.ctypes.data)

    def _slow(
        self, addresses: Sequence[int], buffers: Sequence[BufferBinding], scalars: Sequence[Any], maps: Sequence[bytes]
    ) -> tuple[np.ndarray, int]:
        """``ParamPacker``'s checks (its ``LaunchError``s) and bytes."""
        metadata = self.slow.metadata(buffers, self.kernel_name)
        packed = self.slow.pack(addresses, scalars, maps, metadata)
        return packed.block, int(packed.block.ctypes.data)
