"""The interp's sanitizer: shared-memory races and uninitialized reads, plus hooks for barrier checks.

Enabled by ``cp.client("interp", sanitize=True)`` or ``CUBEPY_SANITIZE=1``; when it is off a chunk's
``sanitizer`` is None and the memory handlers pay one attribute test per access.

What it tracks, per cube and per byte of the shared arena, since the cube's last ``sync_cube``:
- whether the byte was ever written (a plain read of a never-written byte is ``uninitialized read``);
- the last writer (unit, instruction, whether by an atomic) and the readers (one unit, or *several*);
- per plane, how many ``sync_plane`` it passed, so that accesses of one plane ordered by a
  ``sync_plane`` do not race (CUDA orders a warp's memory accesses at ``__syncwarp``).
A plain access conflicts with an unordered access of another unit where at least one writes.
An asynchronous barrier orders them too, as CUDA's ``mbarrier.arrive`` (release) and passing wait
(acquire) do: the earlier unit arrived on a barrier after its access, in a phase the later unit then
observed complete (``async_races``: a wait or ``try_wait_parity`` that passed).  Only the last arrival
of a unit on each barrier is kept, and accesses of *several* readers are not told apart, so such an
order through an older arrival, or after several units' reads, is still reported.
Lockstep runs every unit of an interval before the barrier ends it, so every pair of accesses of one
interval is seen, whichever order a GPU would pick.  Atomics do not race with atomics; they race
with plain accesses.  Two writes of the same bytes race only when the values differ (benign
same-value writes, such as every unit storing the same flag, are not reported; CUDA's racecheck
does the same).

Each report is a ``SanitizerError`` whose ``kind`` is a ``cubepy.errors.SanitizerKind`` and whose
message names the kind, the unit(s) (unit and cube positions), the memory, index and byte, and the
source line(s) of both accesses.

Other op families that touch shared memory (TMA copies, cmma fragments) are *foreign*: unless their
operation class is in ``SELF_REPORTING``, the executor counts every byte of each shared memory among
their operands as written, in the cubes that ran them (no false "uninitialized read" after a TMA
load; such ops are not race-checked).  A TMA load also marks its box written in every cube it lands in
(``tma_exec``), so a cube that only receives a multicast load reads initialized bytes; a peer store
(``cluster``) marks the peer's bytes.  To be checked precisely, add the class to ``SELF_REPORTING``
and call the hooks below from the handler.

Hooks for other op families (TMA, mbarriers) — call them only when ``ctx.sanitizer`` is not None,
except ``report`` which works either way:
- ``ctx.sanitizer.mark_written(cubes, start, nbytes)``: an asynchronous copy filled shared bytes
  ``[start, start + nbytes)`` of the chunk-relative cube rows ``cubes`` (no unit owns the write; a
  barrier wait orders it);
- ``ctx.sanitizer.check_initialized(ctx, inst, cubes, start, nbytes, lane)``: a copy out of shared
  memory reads those bytes (reports ``uninitialized read``);
- ``report(ctx, inst, kind, message, lane)`` (or ``ctx.fail(inst, message, lane, kind=kind)``): raise
  a ``SanitizerError`` of ``kind`` (a ``SanitizerKind``) naming the unit of ``lane`` and the source line.
  The asynchronous barriers (``tma_exec``) report ``BARRIER_DEADLOCK`` (a wait on a phase that cannot
  complete), ``BARRIER_OVERFLOW`` (more arrivals than the phase expects), ``BARRIER_MISUSE`` (used
  before init, bad arrival count), ``WRONG_PARITY``, ``TX_COUNT_RANGE`` (``interp.mbarrier``) and
  ``TMA_MISUSE`` (a copy that breaks a tensor-map rule); named barriers (``warp_specialize``) report
  ``NAMED_BARRIER_MISUSE`` and ``BARRIER_DEADLOCK``.
- ``ctx.sanitizer.proxy`` (``interp.async_proxy``): ordinary writes not yet fenced for the async proxy;
  a TMA store that reads one is ``MISSING_PROXY_FENCE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.interp.async_proxy import ProxyFenceTracker

if TYPE_CHECKING:
    from cubepy.ir import Instruction, Variable
    from cubepy.ir.ops.base import Operation
    from cubepy.runtime.interp.async_races import AsyncRaces
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.memory import MemoryRef

SELF_REPORTING: set[type] = set()  # foreign op classes whose handlers call the hooks themselves

NOBODY = -1  # no access of that kind since the last sync_cube
SEVERAL = -2  # readers: more than one unit; writers: atomics of more than one unit


def report(ctx: Chunk, inst: Instruction, kind: SanitizerKind, message: str, lane: int) -> NoReturn:
    """Raise the ``SanitizerError`` of ``kind`` found at ``inst`` by ``lane`` of the chunk."""
    ctx.fail(inst, message, lane, kind=kind)


def foreign_shared_operands(operation: Operation) -> tuple[Variable, ...]:
    """The shared memories ``operation`` touches outside the sanitizer's view (empty for core ops)."""
    from cubepy.ir import VarKind, ops

    if (
        isinstance(operation, (ops.Index, ops.IndexAssign, ops.AtomicOp, ops.AtomicCompareExchange))
        or type(operation) in SELF_REPORTING
    ):
        return ()
    return tuple({var.id: var for var in operation.operands() if var.kind is VarKind.SHARED}.values())


def _where(inst: Instruction | None) -> str:
    if inst is None or inst.loc is None:
        return "an unknown line"
    return f"{inst.loc.file}:{inst.loc.line}"


class SharedSanitizer:
    """Access history of one chunk's shared arena, reset per cube at each ``sync_cube``."""

    def __init__(self, cubes: int, arena_bytes: int, units: int) -> None:
        shape = (cubes, arena_bytes)
        self.units = units
        self.written = np.zeros(shape, dtype=bool)
        self.writer = np.full(shape, NOBODY, dtype=np.int32)
        self.writer_inst = np.zeros(shape, dtype=np.int32)
        self.writer_epoch = np.zeros(shape, dtype=np.int32)  # sync_plane count of the writer's plane
        self.writer_seq = np.zeros(shape, dtype=np.int64)  # async_races' sequence number at the write
        self.atomic = np.zeros(shape, dtype=bool)  # the last writes were atomics
        self.reader = np.full(shape, NOBODY, dtype=np.int32)
        self.reader_inst = np.zeros(shape, dtype=np.int32)
        self.reader_plane = np.full(shape, NOBODY, dtype=np.int32)  # NOBODY when readers span planes
        self.reader_epoch = np.zeros(shape, dtype=np.int32)
        self.reader_seq = np.zeros(shape, dtype=np.int64)
        planes = -(-units // PLANE_WIDTH)
        self.plane_epoch = np.zeros((cubes, planes), dtype=np.int32)
        self.instructions: list[Instruction | None] = [None]  # index 0: no instruction
        self._inst_ids: dict[int, int] = {}
        self.proxy = ProxyFenceTracker(cubes, arena_bytes)  # ordinary writes a TMA store may not read yet

    # -- barriers ------------------------------------------------------------------------------
    def sync_cube(self, cubes: np.ndarray) -> None:
        """A ``sync_cube`` ends the interval of the cubes ``cubes`` (bool per chunk cube)."""
        self.writer[cubes] = NOBODY
        self.reader[cubes] = NOBODY
        self.atomic[cubes] = False
        self.proxy.barrier(cubes)

    def sync_plane(self, planes: np.ndarray) -> None:
        """A ``sync_plane`` orders the earlier accesses of the planes ``planes`` (bool (cubes, planes))."""
        self.plane_epoch += planes.astype(np.int32)

    # -- hooks for other op families -----------------------------------------------------------
    def mark_written(self, cubes: np.ndarray, start: int, nbytes: int) -> None:
        """Bytes ``[start, start + nbytes)`` of cube rows ``cubes`` were filled by an asynchronous copy."""
        self.written[cubes, start : start + nbytes] = True

    def check_initialized(
        self, ctx: Chunk, inst: Instruction, cubes: np.ndarray, start: int, nbytes: int, lane: int
    ) -> None:
        """Report an ``uninitialized read`` if a copy out of those shared bytes finds one never written."""
        region = self.written[cubes, start : start + nbytes]
        if not region.all():
            byte = start + int(np.argmax(~region.reshape(-1)) % max(nbytes, 1))
            report(
                ctx, inst, SanitizerKind.UNINITIALIZED_READ, f"a copy reads shared byte {byte} that no unit wrote", lane
            )

    def record_async_write(self, rows: np.ndarray, byte: np.ndarray, units: np.ndarray, inst: Instruction) -> None:
        """Units ``units`` (per byte) now know that ``inst``, their asynchronous copy, wrote those bytes.

        Recorded as their plain write at this point, so another unit's access needs a ``sync_cube`` after it.
        """
        planes = units // PLANE_WIDTH
        epoch = self.plane_epoch[rows, planes]
        self._record("write", rows, byte, units, planes, epoch, self._inst_id(inst))

    # -- plain and atomic accesses -------------------------------------------------------------
    def mark_access(
        self,
        ctx: Chunk,
        inst: Instruction,
        ref: MemoryRef,
        lanes: np.ndarray,
        idx: np.ndarray,
        kind: str,
        value: np.ndarray | None = None,
    ) -> None:
        """Check and record an access of ``kind`` ("read", "write", "atomic") by ``lanes`` at items ``idx``.

        ``value`` is the written items per lane (for a write), used to let same-value writes pass.
        """
        if lanes.size == 0:
            return
        item_bytes = ref.items.dtype.itemsize * ref.line
        assert ref.owner is not None and ref.shared_offset is not None  # a shared memory
        cube = ref.owner[lanes]
        unit = (lanes % self.units).astype(np.int32)
        plane = unit // PLANE_WIDTH
        first = ref.shared_offset + idx.astype(np.int64) * item_bytes
        byte = first[:, None] + np.arange(item_bytes)  # (n, item_bytes)
        rows = np.broadcast_to(cube[:, None], byte.shape)
        units = np.broadcast_to(unit[:, None], byte.shape)
        planes = np.broadcast_to(plane[:, None], byte.shape)
        epoch = self.plane_epoch[rows, planes]
        me = self._inst_id(inst)
        # the async_races tracker, once a barrier or TMA load ran
        races = ctx.state.async_races
        if races is not None:
            races.accessed(ctx, inst, kind, lanes, rows, byte)
            races.seq += 1  # orders this access against later arrivals
        seq = races.seq if races is not None else 0
        overwrite = ctx.state.check_shared_write if kind != "read" else None  # wgmma_async
        if overwrite is not None:
            overwrite(ctx, inst, lanes, rows, byte)
        copies = ctx.state.async_copy_races  # cp.async copies not yet waited for
        if copies is not None:
            copies.accessed(ctx, inst, kind, lanes, rows, byte)
        if kind == "read" and not self.written[rows, byte].all():
            bad = int(np.argmax(~self.written[rows, byte].all(axis=1)))
            report(
                ctx,
                inst,
                SanitizerKind.UNINITIALIZED_READ,
                f"{ref.label} index {int(idx[bad])} (shared byte {int(first[bad])}) is read but no unit "
                "of this cube wrote it",
                int(lanes[bad]),
            )
        # Against the last writer: reads and writes conflict with a plain write of another unit,
        # plain accesses with atomics of another unit.
        writer = self.writer[rows, byte]
        ordered = ((writer // PLANE_WIDTH) == planes) & (epoch > self.writer_epoch[rows, byte])
        other = (writer == SEVERAL) | ((writer >= 0) & (writer != units) & ~ordered)
        if kind == "atomic":
            other &= ~self.atomic[rows, byte]
        elif kind == "write" and value is not None:
            new = self._bytes(value, lanes.size, item_bytes)
            other &= ctx.shared_arena()[rows, byte] != new
        other = self._unreleased(races, other, rows, writer, self.writer_seq[rows, byte], lanes)
        self._raise_if(
            ctx,
            inst,
            ref,
            other,
            lanes,
            idx,
            first,
            writer,
            self.writer_inst[rows, byte],
            f"{kind} after an unsynchronized write",
        )
        if kind != "read":
            reader = self.reader[rows, byte]
            read_ordered = (self.reader_plane[rows, byte] == planes) & (epoch > self.reader_epoch[rows, byte])
            conflict = ((reader == SEVERAL) | ((reader >= 0) & (reader != units))) & ~read_ordered
            conflict = self._unreleased(races, conflict, rows, reader, self.reader_seq[rows, byte], lanes)
            self._raise_if(
                ctx,
                inst,
                ref,
                conflict,
                lanes,
                idx,
                first,
                reader,
                self.reader_inst[rows, byte],
                f"{kind} after an unsynchronized read",
            )
        if kind == "write" and lanes.size > 1:
            self._check_one_instruction(
                ctx,
                inst,
                ref,
                lanes,
                idx,
                first,
                rows,
                byte,
                units,
                self._bytes(value, lanes.size, item_bytes) if value is not None else None,
            )
        self._record(kind, rows, byte, units, planes, epoch, me)
        (self.reader_seq if kind == "read" else self.writer_seq)[rows, byte] = seq

    def _unreleased(
        self,
        races: AsyncRaces | None,
        conflict: np.ndarray,
        rows: np.ndarray,
        other: np.ndarray,
        seq: np.ndarray,
        lanes: np.ndarray,
    ) -> np.ndarray:
        """``conflict`` less the accesses of one other unit that an arrive, then this unit's wait, ordered."""
        if races is None or not conflict.any():
            return conflict
        conflict = conflict.copy()
        for row, col in np.argwhere(conflict & (other >= 0)).tolist():
            earlier = int(rows[row, col]) * self.units + int(other[row, col])  # that unit's chunk lane
            if races._released_to(earlier, int(seq[row, col]), int(lanes[row])):
                conflict[row, col] = False
        return conflict

    def _check_one_instruction(
        self,
        ctx: Chunk,
        inst: Instruction,
        ref: MemoryRef,
        lanes: np.ndarray,
        idx: np.ndarray,
        first: np.ndarray,
        rows: np.ndarray,
        byte: np.ndarray,
        units: np.ndarray,
        new: np.ndarray | None,
    ) -> None:
        """Units of one store instruction writing different values to one byte race with each other."""
        flat = (rows.astype(np.int64) * self.written.shape[1] + byte).reshape(-1)
        order = np.argsort(flat, kind="stable")
        sorted_flat = flat[order]
        same = sorted_flat[1:] == sorted_flat[:-1]
        if not same.any():
            return
        sorted_units = units.reshape(-1)[order]
        clash = same & (sorted_units[1:] != sorted_units[:-1])
        if new is not None:
            sorted_new = new.reshape(-1)[order]
            clash &= sorted_new[1:] != sorted_new[:-1]
        if not clash.any():
            return
        position = int(np.argmax(clash))
        a, b = int(order[position]) // byte.shape[1], int(order[position + 1]) // byte.shape[1]
        ctx.fail(
            inst,
            f"data race: {ref.label} index {int(idx[b])} (shared byte {int(first[b])}) is written "
            f"with different values by {ctx.describe_lane(int(lanes[a]))} and by "
            f"{ctx.describe_lane(int(lanes[b]))} in one store at {_where(inst)}",
            int(lanes[b]),
            kind=SanitizerKind.DATA_RACE,
        )

    def _record(
        self,
        kind: str,
        rows: np.ndarray,
        byte: np.ndarray,
        units: np.ndarray,
        planes: np.ndarray,
        epoch: np.ndarray,
        me: int,
    ) -> None:
        target = (rows, byte)
        if kind == "read":
            reader = self.reader[target]
            # Several units reading one byte in this instruction, or another unit before: SEVERAL.
            flat = (rows.astype(np.int64) * self.written.shape[1] + byte).reshape(-1)
            many = np.zeros(flat.shape, dtype=bool)
            if flat.size > 1:
                order = np.argsort(flat, kind="stable")
                sorted_flat, sorted_units = flat[order], units.reshape(-1)[order]
                dup = (sorted_flat[1:] == sorted_flat[:-1]) & (sorted_units[1:] != sorted_units[:-1])
                hit = np.zeros(flat.shape, dtype=bool)
                hit[order[1:][dup]] = True
                hit[order[:-1][dup]] = True
                # Mark every occurrence of a clashing address, not just the clashing pair.
                many = np.isin(flat, flat[hit])
            many = many.reshape(units.shape) | ((reader >= 0) & (reader != units)) | (reader == SEVERAL)
            old_plane = self.reader_plane[target]
            same_plane = (reader == NOBODY) | (old_plane == planes)
            self.reader[target] = np.where(many, SEVERAL, units)
            self.reader_plane[target] = np.where(same_plane, planes, NOBODY)
            self.reader_epoch[target] = epoch
            self.reader_inst[target] = me
            return
        if kind == "atomic":
            writer = self.writer[target]
            single = (writer == NOBODY) | (writer == units)
            self.writer[target] = np.where(single, units, SEVERAL)
            self.atomic[target] = True
        else:
            self.writer[target] = units
            self.atomic[target] = False
            self.reader[target] = NOBODY
        self.written[target] = True
        self.writer_epoch[target] = epoch
        self.writer_inst[target] = me
        self.proxy.generic_write(rows, byte, units, me)

    def _raise_if(
        self,
        ctx: Chunk,
        inst: Instruction,
        ref: MemoryRef,
        conflict: np.ndarray,
        lanes: np.ndarray,
        idx: np.ndarray,
        first: np.ndarray,
        other_unit: np.ndarray,
        other_inst: np.ndarray,
        what: str,
    ) -> None:
        if not conflict.any():
            return
        row, col = np.unravel_index(int(np.argmax(conflict)), conflict.shape)
        lane = int(lanes[row])
        earlier = int(other_unit[row, col])
        cube_first_lane = lane - lane % self.units
        by = "several units" if earlier == SEVERAL else ctx.describe_lane(cube_first_lane + earlier)
        ctx.fail(
            inst,
            f"data race: {what} of {ref.label} index {int(idx[row])} (shared byte "
            f"{int(first[row]) + int(col)}); the earlier access was by {by} at "
            f"{_where(self.instructions[int(other_inst[row, col])])} with no sync_cube between; "
            f"this access at {_where(inst)}",
            lane,
            kind=SanitizerKind.DATA_RACE,
        )

    def _inst_id(self, inst: Instruction) -> int:
        found = self._inst_ids.get(id(inst))
        if found is None:
            found = self._inst_ids[id(inst)] = len(self.instructions)
            self.instructions.append(inst)
        return found

    @staticmethod
    def _bytes(value: np.ndarray, count: int, item_bytes: int) -> np.ndarray:
        """The bytes of ``count`` written items as ``(count, item_bytes)`` uint8."""
        items = np.ascontiguousarray(value)
        return items.reshape(-1).view(np.uint8).reshape(count, item_bytes)
