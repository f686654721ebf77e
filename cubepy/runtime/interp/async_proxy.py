"""The sanitizer's proxy-fence rule: a TMA store must not read shared bytes ordinary stores left unfenced.

PTX has two views of shared memory: the *generic proxy* (ordinary loads and stores, atomics) and the
*async proxy* (TMA copies, ``cp.async.bulk``).  A write through one proxy is not seen by the other unless
a proxy fence, ``fence.proxy.async.shared::cta`` (``cp.fence_proxy_async`` /
``cp.sync_async_proxy_shared``), orders it: a kernel that fills a stage with ordinary stores and then
TMA-stores it without the fence may store stale bytes on a GPU, yet gives the right answer on a CPU.

What is tracked, per cube and per byte of the shared arena (only with ``sanitize=True``):

* an ordinary write marks the byte *unfenced*, with its unit and instruction;
* a cube barrier (``sync_cube``, a completed named barrier) marks every unfenced byte *synced*: from
  then on the write is ordered before every unit's later operations, so a fence by any unit covers it
  (PTX's proxy ordering holds along a causality path: write, barrier, then the fence by the unit that
  issues the copy; CUTLASS's epilogues rely on it);
* a proxy fence by a unit clears the unfenced bytes that unit wrote itself, and every synced byte of its
  cube;
* a TMA load (an async-proxy write) clears the bytes it fills;
* a TMA store whose source box holds an unfenced byte is reported as ``MISSING_PROXY_FENCE``, naming
  the store's unit and line, the shared memory, index and byte, and the unit and line of the write.

A fence that comes before the write in program order does not cover it, whatever unit runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cubepy.errors import SanitizerKind

if TYPE_CHECKING:
    from cubepy.ir import Instruction
    from cubepy.runtime.interp.executor import Chunk


class ProxyFenceTracker:
    """Which shared bytes of each cube hold ordinary writes not yet fenced for the async proxy."""

    def __init__(self, cubes: int, arena_bytes: int) -> None:
        shape = (cubes, arena_bytes)
        self.unfenced = np.zeros(shape, dtype=bool)
        self.synced = np.zeros(shape, dtype=bool)  # a cube barrier came after the (unfenced) write
        self.writer = np.zeros(shape, dtype=np.int32)  # unit of the last ordinary write
        self.writer_inst = np.zeros(shape, dtype=np.int32)  # its instruction (the sanitizer's index)

    def generic_write(self, rows: np.ndarray, byte: np.ndarray, units: np.ndarray, inst_index: int) -> None:
        """Ordinary writes (stores, atomics) by ``units`` of bytes ``(rows, byte)``."""
        self.unfenced[rows, byte] = True
        self.synced[rows, byte] = False
        self.writer[rows, byte] = units
        self.writer_inst[rows, byte] = inst_index

    def async_write(self, cube: int, start: int, nbytes: int) -> None:
        """A TMA load filled bytes ``[start, start + nbytes)`` of chunk cube ``cube`` through the async proxy."""
        self.unfenced[cube, start : start + nbytes] = False

    def barrier(self, cubes: np.ndarray) -> None:
        """A barrier of the whole cube ran in the cubes ``cubes`` (bool per chunk cube)."""
        self.synced[cubes] |= self.unfenced[cubes]

    def fence(self, fencing: np.ndarray) -> None:
        """``fence.proxy.async`` by the units ``fencing`` (bool, (cubes, units))."""
        for cube in np.flatnonzero(fencing.any(axis=1)).tolist():
            pending = self.unfenced[cube]
            if not pending.any():
                continue
            own = fencing[cube][self.writer[cube]]
            self.unfenced[cube] &= ~(self.synced[cube] | own)

    def check_store(
        self, ctx: Chunk, inst: Instruction, lane: int, start: int, nbytes: int, memory: tuple[str, int, int]
    ) -> None:
        """Report the first unfenced byte of ``[start, start + nbytes)`` a TMA store by ``lane`` reads.

        ``memory`` is the source shared memory's (label, arena offset, item bytes), to name the index.
        """
        cube = lane // ctx.topology.units
        region = self.unfenced[cube, start : start + nbytes]
        if not region.any():
            return
        byte = start + int(np.argmax(region))
        label, offset, item = memory
        sanitizer = ctx.sanitizer
        assert sanitizer is not None
        writer_lane = cube * ctx.topology.units + int(self.writer[cube, byte])
        write = sanitizer.instructions[int(self.writer_inst[cube, byte])]
        ctx.fail(
            inst,
            f"TMA store reads {label} index {(byte - offset) // item} (shared byte {byte}) written by {ctx.describe_lane(writer_lane)} with an "
            f"ordinary store at {_where(write)} and no fence_proxy_async (sync_async_proxy_shared) after that write; "
            f"the store at {_where(inst)} may read stale bytes on a GPU",
            lane,
            kind=SanitizerKind.MISSING_PROXY_FENCE,
        )


def _where(inst: Instruction | None) -> str:
    if inst is None or inst.loc is None:
        return "an unknown line"
    return f"{inst.loc.file}:{inst.loc.line}"
