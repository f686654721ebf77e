"""Warp-specialization building blocks in the interp: named barriers, ``setmaxnreg``, ``try_wait_parity``.

Named barriers (PTX ``bar.sync id, n`` / ``bar.arrive id, n``).  Each cube has 16, each with a count of
arrived units; PTX counts a barrier per plane ("as if all the threads in a warp are active"), so every
plane that reaches one adds 32.  A barrier completes when its count reaches the expected ``units``; the
count then starts again from zero and the barrier's *generation* advances.  ``named_barrier_arrive``
adds its plane's arrivals and goes on; ``named_barrier_sync`` adds them and waits for completion.

A ``named_barrier_sync`` that does not complete the barrier suspends its units (``ctx.block`` with a
:class:`NamedBarrierWait`) until the barrier's generation moves on; other groups (another branch, other
planes under a random schedule) run meanwhile and bring the missing arrivals.  When nothing can, the
executor reports the deadlock (``BARRIER_DEADLOCK``, naming the id, the units expected and arrived).

Checks (every run, since a bad id cannot be executed; kind ``NAMED_BARRIER_MISUSE``): an id outside
[0, 16); a unit count that is not a positive multiple of 32 or exceeds the cube's planes; lanes of one
barrier passing different counts; more arrivals than the count in one completion.  With
``sanitize=True`` a plane that only partly reaches one (``bar.sync``'s ``.aligned`` form needs the
whole plane) is ``PARTIAL_PLANE``.  A completed named barrier ends the sanitizer's race interval of the
cube, as ``sync_cube`` does (accesses of units outside the barrier are not told apart: no false alarm,
possibly a missed race).  Barrier 0 is ``sync_cube``'s; the interp keeps ``sync_cube`` apart from
named barrier 0, so mixing them on one id is not modelled.

``setmaxnreg`` is a no-op: the interp has no register file to split between planes.

``try_wait_parity`` gives whether the phase of that parity completed (``mbarrier.parity_done``).  A unit
that gets ``False`` yields: it goes on (with ``False``) only once the barrier changed, so that a spin loop
lets the producer run instead of spinning the interp forever (the PTX ISA lets ``try_wait`` suspend the
unit for a time it does not fix; the interp picks "until the barrier changes, or until every unit waits",
the second at most once per barrier state and instruction).  A spin that nothing can
end is reported by the executor as ``BARRIER_DEADLOCK`` (or ``WRONG_PARITY``: ``mbarrier.stuck_parity_wait``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, Variable, ops
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.interp import mbarrier
from cubepy.runtime.interp.groups import Wait
from cubepy.runtime.interp.registry import blocking, implements
from cubepy.runtime.interp.tma_exec import _note_waited, op_barrier_rows, per_chunk_lane
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk


OP_FAMILIES = ("sync", "tma")  # the IR op families handled here


class NamedBarrierTable:
    """The 16 named barriers of every cube of a chunk: units arrived, units expected, generation."""

    def __init__(self, cubes: int) -> None:
        shape = (cubes, ops.NAMED_BARRIERS)
        self.arrived = np.zeros(shape, dtype=np.int64)
        self.expected = np.zeros(shape, dtype=np.int64)  # 0 while no unit arrived since the last completion
        self.generation = np.zeros(shape, dtype=np.int64)  # completions so far


def never_completes_text(barrier_id: int, expected: int, arrived: int) -> str:
    """A ``named_barrier_sync`` deadlock, as every runtime words it."""
    return (
        f"named_barrier_sync can never complete: named barrier {barrier_id} expects {expected} units "
        f"and {arrived} arrived ({expected - arrived} missing)"
    )


def arrival_problem(barrier_id: int, expected: int, open_count: int, arrived: int) -> str | None:
    """What is wrong with arrivals that bring barrier ``barrier_id`` to ``arrived`` units expecting ``expected``
    (``open_count``: what the units already there expect, 0 for none); None when nothing is."""
    if open_count and open_count != expected:
        return (
            f"named barrier {barrier_id} is reached with {expected} units while units already arrived "
            f"expecting {open_count}"
        )
    if arrived > expected:
        return f"{arrived} units arrive at named barrier {barrier_id}, which completes at {expected}"
    return None


class NamedBarrierWait(Wait):
    """Lanes that wait at named barriers (of their cubes) until the barrier's generation moves on."""

    def __init__(self, inst: Instruction, lanes: int) -> None:
        self.inst = inst
        self.cube = np.zeros(lanes, dtype=np.int64)  # per chunk lane: its cube, its barrier id and
        self.barrier_id = np.zeros(lanes, dtype=np.int64)  # the generation it waits to see end
        self.generation = np.zeros(lanes, dtype=np.int64)
        self.expected = np.zeros(lanes, dtype=np.int64)

    def add(self, lanes: np.ndarray, cube: int, barrier_id: int, generation: int, expected: int) -> None:
        """Wait ``lanes`` (indices) at barrier ``barrier_id`` of ``cube`` for the end of ``generation``."""
        self.cube[lanes], self.barrier_id[lanes] = cube, barrier_id
        self.generation[lanes], self.expected[lanes] = generation, expected

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The waiting lanes whose barrier completed."""
        now = named_barriers(ctx).generation[self.cube, self.barrier_id]
        return bits & (now > self.generation)

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """The barrier's id, and the units it expects and has (for the first waiting lane)."""
        lane = int(np.argmax(bits))
        cube, barrier_id, expected = int(self.cube[lane]), int(self.barrier_id[lane]), int(self.expected[lane])
        return never_completes_text(barrier_id, expected, int(named_barriers(ctx).arrived[cube, barrier_id]))


def named_barriers(ctx: Chunk) -> NamedBarrierTable:
    """The chunk's named-barrier table."""
    table = ctx.state.named_barriers
    if table is None:
        table = ctx.state.named_barriers = NamedBarrierTable(ctx.topology.cubes)
    return table


def _per_lane(ctx: Chunk, var: Variable, lanes: np.ndarray) -> np.ndarray:
    value = np.asarray(ctx.read(var))
    if value.ndim == 0:
        return np.full(lanes.size, int(value), dtype=np.int64)
    return cast(np.ndarray, value[lanes].astype(np.int64))


def _check_planes(ctx: Chunk, inst: Instruction, lanes: np.ndarray, ids: np.ndarray, counts: np.ndarray) -> None:
    """The whole plane reaches the barrier (sanitizer), with one id and one count."""
    units = ctx.topology.units
    plane_key = lanes // units * units + (lanes % units) // PLANE_WIDTH * PLANE_WIDTH  # first lane of the plane
    first = np.unique(plane_key, return_index=True)[1]
    lead = np.repeat(np.arange(first.size), np.diff(np.append(first, lanes.size)))
    differs = (ids != ids[first][lead]) | (counts != counts[first][lead])
    if differs.any():
        k = int(np.argmax(differs))
        ctx.fail(
            inst,
            f"units of one plane pass different named barriers: ({ids[k]}, {counts[k]}) here and "
            f"({ids[first][lead][k]}, {counts[first][lead][k]}) at its first unit",
            int(lanes[k]),
            kind=SanitizerKind.NAMED_BARRIER_MISUSE,
        )
    if not ctx.launch.sanitize:
        return
    here = np.zeros(ctx.lanes, dtype=bool)
    here[lanes] = True
    for start in plane_key[first].tolist():
        cube_end = (start // units + 1) * units
        stop = min(start + PLANE_WIDTH, cube_end)
        missing = ~here[start:stop] & ~ctx.returned[start:stop]
        if missing.any():
            ctx.fail(
                inst,
                f"named barrier reached by part of a plane: unit {(start % units) + int(np.argmax(missing))} of the "
                "plane is live but not here (bar.sync/bar.arrive are .aligned: the whole plane executes them)",
                start + int(np.argmax(here[start:stop])),
                kind=SanitizerKind.PARTIAL_PLANE,
            )


def _arrive(ctx: Chunk, inst: Instruction, mask: Mask, waits: bool) -> None:
    op = inst.operation
    assert isinstance(op, (ops.NamedBarrierSync, ops.NamedBarrierArrive))
    lanes = np.flatnonzero(mask.bits)
    if lanes.size == 0:
        return
    units = ctx.topology.units
    ids = _per_lane(ctx, op.barrier_id, lanes)
    counts = _per_lane(ctx, op.units, lanes)
    cube_planes = -(-units // PLANE_WIDTH)
    for k in range(lanes.size):  # per lane: the first bad one names itself (cheap: planes are few)
        problem = ops.named_barrier_problem(int(ids[k]), int(counts[k]), cube_planes * PLANE_WIDTH)
        if problem is not None:
            ctx.fail(inst, problem, int(lanes[k]), kind=SanitizerKind.NAMED_BARRIER_MISUSE)
    _check_planes(ctx, inst, lanes, ids, counts)
    table = named_barriers(ctx)
    cubes = lanes // units
    plane_of = cubes * cube_planes + (lanes % units) // PLANE_WIDTH
    _, one_per_plane = np.unique(plane_of, return_index=True)
    counted = np.zeros(lanes.size, dtype=bool)  # one arrival of 32 per plane here (PTX counts warps)
    counted[one_per_plane] = True
    completed = np.zeros(ctx.topology.cubes, dtype=bool)
    # One wait for every cube here: the executor keeps one pending block per instruction.
    blocked = np.zeros(ctx.lanes, dtype=bool)
    wait = NamedBarrierWait(inst, ctx.lanes)
    for cube, barrier_id in sorted(set(zip(cubes.tolist(), ids.tolist()))):
        group = (cubes == cube) & (ids == barrier_id)
        expected = int(counts[group][0])
        open_count = int(table.expected[cube, barrier_id])
        arrived = int(table.arrived[cube, barrier_id]) + PLANE_WIDTH * int((group & counted).sum())
        problem = arrival_problem(barrier_id, expected, open_count, arrived)
        if problem is not None:
            ctx.fail(inst, problem, int(lanes[np.argmax(group)]), kind=SanitizerKind.NAMED_BARRIER_MISUSE)
        if arrived == expected:
            table.arrived[cube, barrier_id] = 0
            table.expected[cube, barrier_id] = 0
            table.generation[cube, barrier_id] += 1
            completed[cube] = True
            continue
        table.arrived[cube, barrier_id] = arrived
        table.expected[cube, barrier_id] = expected
        if waits:
            blocked[lanes[group]] = True
            wait.add(lanes[group], cube, barrier_id, int(table.generation[cube, barrier_id]), expected)
    if ctx.sanitizer is not None and completed.any():  # the barrier orders the cube's earlier accesses
        ctx.sanitizer.sync_cube(completed)
    if blocked.any():
        ctx.block(blocked, wait)


@implements(ops.NamedBarrierSync)
@blocking
def named_barrier_sync(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """``bar.sync id, units``: arrive, and wait until the barrier completes."""
    _arrive(ctx, inst, mask, waits=True)


@implements(ops.NamedBarrierArrive)
def named_barrier_arrive(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """``bar.arrive id, units``: arrive and go on."""
    _arrive(ctx, inst, mask, waits=False)


@implements(ops.SetMaxNReg)
def setmaxnreg(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """No registers to hand over on the CPU: nothing to do (the verifier checked the count)."""


class TryWaitYield(Wait):
    """Lanes whose ``try_wait_parity`` gave False: they go on once the barrier they tested changed."""

    def __init__(self, inst: Instruction, state: mbarrier.BarrierState, name: str, rows: np.ndarray) -> None:
        self.inst = inst
        self.state = state
        self.name = name
        self.snapshot = state.table.copy()  # every row of the barrier as the lanes saw it
        self.rows = rows  # per chunk lane: the row it tested (its cube's barrier, or its element of an array)

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The lanes whose barrier changed since their test."""
        changed = (self.state.table != self.snapshot).any(axis=1)
        return cast(np.ndarray, bits & changed[self.rows])

    def on_idle(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """Everyone is stuck: let the lanes go on with their False once per barrier state (a second
        false test of this instruction with nothing changed in between is a spin nobody can end)."""
        seen = ctx.state.try_wait_idle
        ready = np.zeros_like(bits)
        for row in np.unique(self.rows[bits]).tolist():
            now = self.state.table[row]
            key = (id(self.inst), row)
            entry = seen.get(key)
            if entry is None or not np.array_equal(entry[0], now):
                entry = seen[key] = (now.copy(), np.zeros_like(bits))
            fresh = bits & (self.rows == row) & ~entry[1]  # lanes not yet let go at this barrier state
            entry[1][fresh] = True
            ready |= fresh
        return ready

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """Why the spin can never succeed."""
        row = int(self.rows[int(np.argmax(bits))])
        wrong = mbarrier.stuck_parity_wait(self.state, self.name, row)
        if wrong is not None:
            return f"try_wait_parity spins: {wrong}; {self.state.describe(row)}"
        return f"try_wait_parity on {self.name} spins and can never succeed: {self.state.describe(row)}"

    def deadlock_kind(self, ctx: Chunk, bits: np.ndarray) -> SanitizerKind:
        """``WRONG_PARITY`` when the parity names a phase nothing reached."""
        row = int(self.rows[int(np.argmax(bits))])
        stuck = mbarrier.stuck_parity_wait(self.state, self.name, row)
        return SanitizerKind.BARRIER_DEADLOCK if stuck is None else SanitizerKind.WRONG_PARITY


@implements(ops.BarrierTryWaitParity)
@blocking
def barrier_try_wait_parity(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Whether the phase of the operand's parity completed; a unit told False yields until the barrier changes."""
    op = inst.operation
    assert isinstance(op, ops.BarrierTryWaitParity)
    lanes = np.flatnonzero(mask.bits)
    state, rows, name = op_barrier_rows(ctx, inst, op, lanes)
    phases = _per_lane(ctx, op.phase, lanes)
    try:
        done = mbarrier.parity_done(state, name, rows, phases)
    except mbarrier.BarrierFault as fault:
        ctx.fail(inst, fault.message, int(lanes[fault.index]), kind=fault.kind)
    result = np.zeros(ctx.lanes, dtype=bool)
    result[lanes] = done
    _note_waited(ctx, op.barrier, state, lanes[done], rows[done])  # a passing test acquires, as a wait does
    assert inst.out is not None  # the verifier requires the result
    ctx.write(inst.out, result, mask)
    if not done.all():
        waiting = np.zeros(ctx.lanes, dtype=bool)
        waiting[lanes[~done]] = True
        ctx.block(waiting, TryWaitYield(inst, state, name, per_chunk_lane(ctx, lanes, rows)))
