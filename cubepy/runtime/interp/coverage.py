"""Optional record of the global elements each cube of an interp launch reads and writes.

Off unless a ``Recorder`` is active (``cp.coverage(client)`` sets ``ACTIVE`` for its ``with`` block):
each chunk then holds it as ``ctx.coverage`` and the global loads, stores and TMA copies report the
storage elements they touch.  When off the cost is one ``is not None`` test per global access.
Atomics are not recorded.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from cubepy.runtime.interp import tma

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.values import Mask

__all__ = ["ACTIVE", "BufferCoverage", "Recorder"]

NO_CUBE = np.iinfo(np.int64).max
ACTIVE: ContextVar[Recorder | None] = ContextVar("cubepy_interp_coverage", default=None)


class BufferCoverage:
    """Per storage element of one allocation: read and write counts, and the lowest and highest cube that did
    each (-1 where none did)."""

    def __init__(self, storage: np.ndarray) -> None:
        self.storage = storage
        size = storage.size
        self.counts = {kind: np.zeros(size, np.int64) for kind in ("read", "write")}
        self.lowest = {kind: np.full(size, NO_CUBE, np.int64) for kind in ("read", "write")}
        self.highest = {kind: np.full(size, -1, np.int64) for kind in ("read", "write")}

    def add(self, elements: np.ndarray, cubes: np.ndarray, kind: str) -> None:
        """Count one ``kind`` access of ``elements`` (storage indices) by ``cubes`` (one per element)."""
        if elements.size == 0:
            return
        np.add.at(self.counts[kind], elements, 1)
        np.minimum.at(self.lowest[kind], elements, cubes)
        np.maximum.at(self.highest[kind], elements, cubes)

    def cubes(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and highest cube per storage element (-1 for both where no cube did ``kind``)."""
        lowest = np.where(self.counts[kind] > 0, self.lowest[kind], -1)
        return lowest, self.highest[kind]


class Recorder:
    """Collects ``BufferCoverage`` for every allocation of ``client`` that a launch touches."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.buffers: dict[int, BufferCoverage] = {}

    def _buffer(self, handle: Any) -> BufferCoverage | None:
        if handle.client is not self.client:
            return None
        entry = self.buffers.get(id(handle.storage))
        if entry is None or entry.storage is not handle.storage:
            entry = self.buffers[id(handle.storage)] = BufferCoverage(handle.storage)
        return entry

    def record(self, ctx: Chunk, var: Any, idx: Any, valid: Any, mask: Mask, kind: str) -> None:
        """A global load or store of items ``idx`` (per lane, from ``memory.locate``) on the active lanes."""
        binding = ctx.launch.bindings.buffers[var.id]
        entry = self._buffer(binding.handle)
        if entry is None:
            return
        active = mask.bits if valid is True else mask.bits & np.broadcast_to(valid, mask.bits.shape)
        lanes = np.flatnonzero(active)
        items = np.broadcast_to(np.asarray(idx, np.int64), (ctx.lanes,))[lanes]
        line = binding.line_size
        elements = (binding.handle.offset + items[:, None] * line + np.arange(line)).ravel()
        cubes = np.repeat(ctx.topology.first_cube + lanes // ctx.topology.units, line)
        entry.add(elements, cubes, kind)

    def record_copy(self, ctx: Chunk, op: Any, tm: Any, lane: int, kind: str) -> None:
        """The global elements a TMA copy (``op``, issued by ``lane``) read or wrote, from the emulator's own walk."""
        entry = self._buffer(tm.handle)
        if entry is None:
            return
        coords = [int(np.broadcast_to(ctx.read(v), (ctx.lanes,))[lane]) for v in op.coords]
        es = tm.dtype.itemsize
        strides = np.array([1, *(s // es for s in tm.global_strides)], np.int64)  # elements, driver order
        if tm.mode == "im2col":
            offsets = [int(np.broadcast_to(ctx.read(v), (ctx.lanes,))[lane]) for v in op.offsets]
            n, pix, row_ok, ch, ch_ok = tma.im2col_rows(tm, coords, offsets)
            rows = n[row_ok] * strides[-1]
            for j in range(tm.rank - 2):
                rows = rows + pix[j][row_ok] * strides[1 + j]
            elements = (rows[:, None] + ch[ch_ok][None, :]).ravel()
        else:
            where, valid = tma.tiled_box(tm, coords)
            elements = where[valid] @ strides
        elements = elements + tm.global_address // es
        cube = ctx.topology.first_cube + lane // ctx.topology.units
        entry.add(elements.astype(np.int64), np.full(elements.size, cube, np.int64), kind)
