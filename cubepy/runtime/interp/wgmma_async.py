"""The asynchronous half of the interp's ``wgmma``: when a started wgmma reads shared memory, and what may not
touch its operands until the ``wgmma_wait_group`` that covers it.

A ``wgmma_mma_async`` only *starts* the product.  The hardware reads its shared-memory tiles at some point
before the wait that covers its group, and writes the accumulator then; ordinary code sees the
accumulator only after that wait.  The interp models it with one ``Started`` record per warpgroup and
instruction, kept in issue order:

* at issue: the descriptors, ``scale_d``, A's registers and the accumulator's registers are taken (the
  program may change them after ``wgmma_fence``'s rules allow it); the tile addresses are checked;
* at *delivery* the shared tiles are read and the product computed (in issue order within a warpgroup, so
  chained accumulators see their predecessor's result).  When depends on the schedule: ``lockstep`` at
  issue, ``random`` at a random turn before the wait (it is one of the in-flight copies the schedule may
  land), ``adversarial`` at the wait itself (the latest moment the ISA allows);
* ``wgmma_wait_group(n)`` delivers and retires every group but the ``n`` newest: groups complete in order,
  so after it exactly the groups committed before the ``n`` newest are visible.

Under the sanitizer (``sanitize=True``) a ``wgmma operand overwrite`` names both lines when

* a unit's store or a TMA load is issued into shared bytes a started, not yet retired wgmma reads (in the
  interp's order of events, whatever the schedule's timing gave to the values);
* a TMA load is issued into bytes a *retired* wgmma read, by a unit the wait is not ordered before: not
  of that warpgroup, and no unit of that warpgroup arrived on an mbarrier after the wait in a phase the
  loading unit then waited for (the consumer's release of the stage), and no ``sync_cube`` came in
  between.  This finds an early release even when the interp happened to run the wait first (lockstep,
  two consumer warpgroups and one issuing unit).  It needs ``interp.async_races``' record of arrivals;
  cluster launches skip it (an ``arrive_cluster`` is not recorded there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, Variable
from cubepy.runtime.interp import async_races

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.memory import Value
    from cubepy.runtime.interp.values import Mask

WARPGROUP = 128
NOBODY = -1


class Started:
    """One warpgroup's started ``wgmma_mma_async``: its inputs at issue and, once delivered, its ``values``."""

    def __init__(
        self,
        inst: Instruction,
        var: Variable,
        lanes: np.ndarray,
        group: int,
        cube: int,
        reads: np.ndarray,
        compute: Callable[[np.ndarray], np.ndarray],
        accumulator: np.ndarray,
    ) -> None:
        self.inst, self.var, self.lanes, self.cube = inst, var, lanes, cube
        self.group = group  # the commit group it belongs to (the count of commits before it)
        self.reads = reads  # sorted shared bytes of the cube its tiles occupy
        self.compute = compute  # the accumulator it adds to -> its new values (reads the tiles)
        self.accumulator = accumulator  # the accumulator registers at issue
        self.values: np.ndarray | None = None
        self.land: Callable[[], None] | None = None  # its entry among the schedule's in-flight copies


class WgmmaState:
    """Each lane's committed-group count and the chunk's started, not yet retired wgmmas in issue order."""

    def __init__(self, lanes: int) -> None:
        self.committed = np.zeros(lanes, dtype=np.int64)
        self.started: list[Started] = []
        self.retired: Retired | None = None  # the sanitizer's record of retired reads

    def latest(self, entry: Started) -> np.ndarray:
        """The accumulator ``entry`` adds to: the newest earlier started one of its warpgroup, else its registers."""
        previous = entry.accumulator
        for other in self.started:
            if other is entry:
                break
            if other.var.id == entry.var.id and other.lanes[0] == entry.lanes[0]:
                assert other.values is not None  # delivered in issue order
                previous = other.values
        return previous


def state(ctx: Chunk) -> WgmmaState:
    """The chunk's wgmma state, made on first use (with the sanitizer's hooks when it is on)."""
    found = ctx.state.wgmma
    if found is None:
        found = ctx.state.wgmma = WgmmaState(ctx.lanes)
        if ctx.launch.sanitize:
            ctx.state.check_local_read = check_pending_read
            ctx.state.check_shared_write = check_shared_write  # the sanitizer's writes and TMA loads call it
            if int(np.prod(ctx.topology.cluster)) == 1:
                found.retired = Retired(ctx)
                ctx.state.on_cube_release = found.retired.released  # each sync_cube release (interp.sync)
    return found


def deliver(ctx: Chunk, entry: Started) -> None:
    """Read the tiles and compute ``entry`` and every earlier undelivered wgmma of its warpgroup, in order."""
    wgmma = state(ctx)
    for other in wgmma.started:
        if other.lanes[0] == entry.lanes[0] and other.values is None:
            other.values = other.compute(wgmma.latest(other))
        if other is entry:
            return


def start(ctx: Chunk, entry: Started) -> None:
    """Record a started wgmma and schedule its delivery: now, at a random turn, or at its wait."""
    wgmma = state(ctx)
    wgmma.started.append(entry)
    name = ctx.picker.schedule.name
    if name == "lockstep":
        deliver(ctx, entry)
    elif name == "random":
        entry.land = lambda: deliver(ctx, entry)
        ctx.in_flight.add(int(entry.lanes[0]), False, entry.land)


def wait(ctx: Chunk, lanes: np.ndarray, pending: int, wait_inst: Instruction) -> None:
    """``wgmma_wait_group(pending)`` on ``lanes`` (whole warpgroups): deliver and retire all but the newest groups."""
    wgmma = state(ctx)
    kept: list[Started] = []
    for entry in list(wgmma.started):
        if lanes[entry.lanes[0]] and entry.group < wgmma.committed[entry.lanes[0]] - pending:
            deliver(ctx, entry)
            assert entry.values is not None
            ctx.memory(entry.var).items[entry.lanes] = entry.values
            _forget_landing(ctx, entry)
            for later in wgmma.started:  # a wgmma started while this one ran chains on its result
                if later.values is None and later.var.id == entry.var.id and later.lanes[0] == entry.lanes[0]:
                    later.accumulator = entry.values
            if wgmma.retired is not None:
                wgmma.retired.record(ctx, entry, wait_inst)
        else:
            kept.append(entry)
    wgmma.started = kept


def _forget_landing(ctx: Chunk, entry: Started) -> None:
    if entry.land is not None:
        ctx.in_flight.copies[:] = [copy for copy in ctx.in_flight.copies if copy[2] is not entry.land]
        entry.land = None


class Retired:
    """Per warpgroup and shared byte of each cube: when its last retired wgmma read the byte (sanitizer only)."""

    def __init__(self, ctx: Chunk) -> None:
        self.units = ctx.topology.units
        shape = (ctx.topology.cubes, self.units // WARPGROUP, ctx.program.shared_bytes)
        self.seq = np.zeros(shape, dtype=np.int64)  # the race tracker's sequence number at the wait; 0: none
        self.which = np.zeros(shape, dtype=np.int32)  # index into lines
        self.lines: list[tuple[Instruction, Instruction]] = []  # (wgmma, wait)

    def record(self, ctx: Chunk, entry: Started, wait_inst: Instruction) -> None:
        """``entry``'s warpgroup read its bytes until ``wait_inst`` retired it."""
        races = async_races.tracker(ctx)
        if races is None or not entry.reads.size:
            return
        races.seq += 1  # arrivals after this point release the reads
        self.lines.append((entry.inst, wait_inst))
        group = int(entry.lanes[0]) % self.units // WARPGROUP
        self.seq[entry.cube, group, entry.reads] = races.seq
        self.which[entry.cube, group, entry.reads] = len(self.lines) - 1

    def released(self, cubes: np.ndarray) -> None:
        """A ``sync_cube`` ordered every earlier read of ``cubes`` (bool per chunk cube)."""
        self.seq[cubes] = 0

    def check_load(self, ctx: Chunk, inst: Instruction, lane: int, cube: int, byte: np.ndarray) -> None:
        """Report a TMA load by ``lane`` into ``byte`` of ``cube`` a retired wgmma read with no ordering; then forget."""
        races = ctx.state.async_races
        same_cube = lane // self.units == cube
        for group in range(self.seq.shape[1]):
            if same_cube and group == lane % self.units // WARPGROUP:
                continue  # the loading unit ran that wait itself
            read = self.seq[cube, group, byte]
            first = cube * self.units + group * WARPGROUP
            for seq in np.unique(read[read > 0]).tolist():  # one check per wait that retired a read here
                if races is not None and _released(races, first, seq, lane):
                    continue
                at = int(byte[int(np.argmax(read == seq))])
                wgmma, wait_inst = self.lines[int(self.which[cube, group, at])]
                ctx.fail(
                    inst,
                    f"a TMA load writes shared byte {at}, which the wgmma started at {_where(wgmma)} by "
                    f"{ctx.describe_lane(first)}'s warpgroup read until its wait at {_where(wait_inst)}; nothing "
                    "orders that wait before this load (no unit of that warpgroup arrived on a barrier after it "
                    "in a phase the loading unit then waited for, no sync_cube)",
                    lane,
                    kind=SanitizerKind.WGMMA_OPERAND_OVERWRITE,
                )
        self.seq[cube, :, byte] = 0


def _released(races: async_races.AsyncRaces, group: int, seq: int, lane: int) -> bool:
    """Whether a unit of the warpgroup starting at ``group`` arrived after ``seq`` in a phase ``lane`` observed."""
    units = slice(group, group + WARPGROUP)
    for barrier, (arrival_seq, phase) in races.arrival.items():
        later = arrival_seq[units] > seq
        if (later & (races._observed(barrier)[lane] > phase[units])).any():
            return True
    return False


# -- sanitizer hooks --------------------------------------------------------------------------------------
def _where(inst: Instruction | None) -> str:
    return f"{inst.loc.file}:{inst.loc.line}" if inst is not None and inst.loc is not None else "an unknown line"


def check_shared_write(ctx: Chunk, inst: Instruction, lanes: np.ndarray, rows: np.ndarray, byte: np.ndarray) -> None:
    """Report a write of shared bytes ``(rows, byte)`` (one row per lane of ``lanes``) a started wgmma still reads."""
    wgmma = ctx.state.wgmma
    if wgmma is None:
        return
    is_load = inst.operation.__class__.__name__.startswith("Tma")
    for entry in wgmma.started:
        hit = (rows == entry.cube) & np.isin(byte, entry.reads)
        if hit.any():
            k, column = (int(v) for v in np.argwhere(hit)[0])
            writer = "a TMA load" if is_load else "a store"
            ctx.fail(
                inst,
                f"{writer} writes shared byte {int(byte[k, column])}, which the wgmma started at {_where(entry.inst)} "
                f"by {ctx.describe_lane(int(entry.lanes[0]))}'s warpgroup may still read: no wgmma_wait_group "
                "covering its group ran before this write (the wgmma reads its shared operands asynchronously, "
                "any time until that wait)",
                int(lanes[k]),
                kind=SanitizerKind.WGMMA_OPERAND_OVERWRITE,
            )
    if is_load and wgmma.retired is not None:
        wgmma.retired.check_load(ctx, inst, int(lanes[0]), int(rows[0, 0]), byte[0])


def check_pending_read(ctx: Chunk, inst: Instruction, var: Variable, index: Value, mask: Mask) -> None:
    """Report a read of an accumulator whose wgmma result is still in flight (sanitizer only)."""
    wgmma = ctx.state.wgmma
    assert wgmma is not None  # the hook is set with the state
    for entry in wgmma.started:
        if entry.var.id != var.id:
            continue
        hit = mask.bits[entry.lanes]
        if hit.any():
            lane = int(entry.lanes[int(np.argmax(hit))])
            ctx.fail(
                inst,
                f"reads accumulator {var!r} while the wgmma started at {_where(entry.inst)} has not completed "
                "(no wgmma_wait_group covered its group); the read gives the value from before that wgmma",
                lane,
                kind=SanitizerKind.WGMMA_PENDING_READ,
            )
