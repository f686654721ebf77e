"""Asynchronous races under ``sanitize=True``: shared bytes of a TMA copy touched without the barrier that orders them.

Two kinds (``cubepy.errors.SanitizerKind``), found whatever the schedule, because they follow what each unit
*knows* rather than when the bytes happened to land:

* ``TMA_UNCOVERED_ACCESS``: a unit reads or writes a byte a TMA load fills before it observed the completion
  of the barrier phase that load belongs to (the phase current at the load's issue).
* ``TMA_STAGE_REUSE``: a TMA load is issued into bytes that another unit read, and that unit's read is not
  ordered before the issue: the reader did not arrive on a barrier afterwards whose phase the issuing unit
  then observed complete (the consumer's release of the stage, ``empty[s]``, waited on by the producer).

A unit *observes* a phase of barrier ``b`` when its wait on ``b`` passes (it then knows every phase
completed so far); a ``sync_cube`` release gives every unit of the cube what any of them observed, and
orders every earlier read before every later copy (as it ends the race interval of the shared sanitizer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cubepy.errors import SanitizerKind

if TYPE_CHECKING:
    from cubepy.ir import Instruction
    from cubepy.runtime.interp.executor import Chunk

NOBODY = -1


def tracker(ctx: Chunk) -> AsyncRaces | None:
    """The chunk's tracker, made on first use; None when the sanitizer is off or there is no shared memory."""
    if ctx.sanitizer is None:
        return None
    found = ctx.state.async_races
    if found is None:
        found = ctx.state.async_races = AsyncRaces(ctx)
    return found


class AsyncRaces:
    """Per shared byte: the load that fills it (barrier, phase, unit, line) and its last reader since a release."""

    def __init__(self, ctx: Chunk) -> None:
        shape = (ctx.topology.cubes, ctx.program.shared_bytes)
        self.lanes = ctx.lanes
        self.copy_barrier = np.full(shape, NOBODY, dtype=np.int64)  # barrier var id of the load, or NOBODY
        self.copy_phase = np.zeros(shape, dtype=np.int64)
        self.copy_lane = np.zeros(shape, dtype=np.int64)
        self.copy_inst: list[Instruction] = []
        self.copy_which = np.zeros(shape, dtype=np.int64)  # index into copy_inst
        self.reader = np.full(shape, NOBODY, dtype=np.int64)  # chunk lane of the last reader
        self.read_seq = np.zeros(shape, dtype=np.int64)
        self.reader_inst = np.zeros(shape, dtype=np.int64)  # index into copy_inst (shared list of lines)
        self.seq = 0
        self.observed: dict[int, np.ndarray] = {}  # barrier id -> phases each lane observed complete
        self.arrival: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # barrier id -> (seq, phase) of last arrival

    def _lines(self, inst: Instruction) -> int:
        self.copy_inst.append(inst)
        return len(self.copy_inst) - 1

    def _observed(self, barrier: int) -> np.ndarray:
        found = self.observed.get(barrier)
        if found is None:
            found = self.observed[barrier] = np.zeros(self.lanes, dtype=np.int64)
        return found

    # -- events -----------------------------------------------------------------------------
    def waited(self, barrier: int, lanes: np.ndarray, phases: np.ndarray) -> None:
        """``lanes`` passed a wait on ``barrier`` whose cubes completed ``phases`` phases so far."""
        seen = self._observed(barrier)
        seen[lanes] = np.maximum(seen[lanes], phases)

    def arrived(self, barrier: int, lanes: np.ndarray, phases: np.ndarray) -> None:
        """``lanes`` arrived on ``barrier`` in phases ``phases``: their earlier reads are released there."""
        seq, phase = self.arrival.setdefault(
            barrier, (np.full(self.lanes, -1, dtype=np.int64), np.zeros(self.lanes, dtype=np.int64))
        )
        self.seq += 1
        seq[lanes] = self.seq
        phase[lanes] = phases

    def cube_released(self, cubes: np.ndarray, units: int) -> None:
        """A ``sync_cube`` released ``cubes``: shared knowledge of phases, and every earlier read is ordered."""
        for seen in self.observed.values():
            per_cube = seen.reshape(-1, units)
            per_cube[cubes] = per_cube[cubes].max(axis=1, keepdims=True)
        self.reader[cubes] = NOBODY

    def loaded(
        self, ctx: Chunk, inst: Instruction, barrier: int, lane: int, cube: int, start: int, nbytes: int, phase: int
    ) -> None:
        """A load by ``lane`` into ``[start, start + nbytes)`` of ``cube`` on ``barrier``'s phase ``phase``."""
        span = slice(start, start + nbytes)
        readers = self.reader[cube, span]
        others = (readers != NOBODY) & (readers != lane)
        if others.any():
            offsets = np.flatnonzero(others)
            for offset in offsets[:64].tolist():  # the first unordered reader is enough to report
                reader = int(readers[offset])
                if not self._released_to(reader, int(self.read_seq[cube, start + offset]), lane):
                    byte = start + offset
                    ctx.fail(
                        inst,
                        f"{SanitizerKind.TMA_STAGE_REUSE.value}: a TMA load overwrites shared byte {byte}, which "
                        f"{ctx.describe_lane(reader)} read at {_line(self.copy_inst[int(self.reader_inst[cube, byte])])} "
                        "with no release ordering that read before this load (no arrive on a barrier whose phase "
                        "the loading unit then waited for)",
                        lane,
                        kind=SanitizerKind.TMA_STAGE_REUSE,
                    )
        self.copy_barrier[cube, span] = barrier
        self.copy_phase[cube, span] = phase
        self.copy_lane[cube, span] = lane
        self.copy_which[cube, span] = self._lines(inst)
        self.reader[cube, span] = NOBODY

    def _released_to(self, reader: int, read_seq: int, lane: int) -> bool:
        """Whether ``reader`` arrived on some barrier after its read in a phase ``lane`` has observed complete."""
        for barrier, (seq, phase) in self.arrival.items():
            if seq[reader] > read_seq and self._observed(barrier)[lane] > phase[reader]:
                return True
        return False

    def accessed(
        self, ctx: Chunk, inst: Instruction, kind: str, lanes: np.ndarray, rows: np.ndarray, byte: np.ndarray
    ) -> None:
        """A plain ``kind`` access ("read", "write", "atomic") of bytes ``byte`` (n, item bytes) by ``lanes``."""
        barrier = self.copy_barrier[rows, byte]
        covered = barrier != NOBODY
        if covered.any():
            seen = np.zeros(byte.shape, dtype=np.int64)
            for bar in np.unique(barrier[covered]).tolist():
                here = barrier == bar
                seen[here] = np.broadcast_to(self._observed(bar)[lanes][:, None], byte.shape)[here]
            early = covered & (seen <= self.copy_phase[rows, byte])
            if early.any():
                k, item_byte = (int(v) for v in np.argwhere(early)[0])
                cube, at = int(rows[k, item_byte]), int(byte[k, item_byte])
                ctx.fail(
                    inst,
                    f"{SanitizerKind.TMA_UNCOVERED_ACCESS.value}: {'read' if kind == 'read' else 'write'} of shared "
                    f"byte {at}, which the TMA load of {ctx.describe_lane(int(self.copy_lane[cube, at]))} at "
                    f"{_line(self.copy_inst[int(self.copy_which[cube, at])])} fills, before this unit waited for "
                    f"the barrier phase {int(self.copy_phase[cube, at])} that covers the load",
                    int(lanes[k]),
                    kind=SanitizerKind.TMA_UNCOVERED_ACCESS,
                )
        if kind == "read":
            self.seq += 1
            self.reader[rows, byte] = lanes[:, None]
            self.read_seq[rows, byte] = self.seq
            self.reader_inst[rows, byte] = self._lines(inst)


def _line(inst: Instruction) -> str:
    return f"{inst.loc.file}:{inst.loc.line}" if inst.loc is not None else "an unknown line"
