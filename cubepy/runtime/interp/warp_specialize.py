"""Warp-specialization building blocks in the interp: named barriers, ``setmaxnreg``, ``try_wait_parity``.

Named barriers (PTX ``bar.sync id, n`` / ``bar.arrive id, n``).  Each cube has 16, each with a count of
arrived units; PTX counts a barrier per plane ("as if all the threads in a warp are active"), so every
plane that reaches one adds 32.  A barrier completes when its count reaches the expected ``units``; the
count then starts again from zero and the barrier's *generation* advances.  ``named_barrier_arrive``
adds its plane's arrivals and goes on; ``named_barrier_sync`` adds them and waits for completion.

The wait is expressed as a :class:`NamedBarrierWait` (these lanes need N more arrivals at barrier id),
handed to :func:`wait_for_arrivals`.  In lockstep every live unit of the cube runs an instruction
together, so arrivals that are not in yet can only come from units that are not here: the wait is
reported as the deadlock it is (``BARRIER_DEADLOCK``, naming the id, the units expected and arrived),
or as a possible deadlock when units of the cube are live elsewhere (another branch that lockstep runs
later).  A scheduler that suspends groups of planes blocks on the same record instead, and releases
it once :func:`arrivals_released` says the barrier's generation moved on.

Checks (every run, since a bad id cannot be executed; kind ``NAMED_BARRIER_MISUSE``): an id outside
[0, 16); a unit count that is not a positive multiple of 32 or exceeds the cube's planes; lanes of one
barrier passing different counts; more arrivals than the count in one completion.  With
``sanitize=True`` a plane that only partly reaches one (``bar.sync``'s ``.aligned`` form needs the
whole plane) is ``PARTIAL_PLANE``.  A completed named barrier ends the sanitizer's race interval of the
cube, as ``sync_cube`` does (accesses of units outside the barrier are not told apart: no false alarm,
possibly a missed race).  Barrier 0 is ``sync_cube``'s; the interp keeps ``sync_cube`` apart from
named barrier 0, so mixing them on one id is not modelled.

``setmaxnreg`` is a no-op: the interp has no register file to split between planes.

``try_wait_parity`` gives whether the phase of that parity completed (``mbarrier.parity_done``).  A
lockstep loop spinning on it cannot be helped by anyone: when every live unit of the cube is at the
test, it is false, and the barrier did not change since the same instruction last gave false there,
the spin is reported as ``BARRIER_DEADLOCK`` (or ``WRONG_PARITY``: ``mbarrier.stuck_parity_wait``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, ops
from cubepy.runtime.interp import mbarrier
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.tma_exec import barrier_state
from cubepy.runtime.interp.values import PLANE_SIZE, Mask

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk

_NAMED_KEY = "warp.named_barriers"
_SPIN_KEY = "warp.try_wait"


class NamedBarrierTable:
    """The 16 named barriers of every cube of a chunk: units arrived, units expected, generation."""

    def __init__(self, cubes: int) -> None:
        shape = (cubes, ops.NAMED_BARRIERS)
        self.arrived = np.zeros(shape, dtype=np.int64)
        self.expected = np.zeros(shape, dtype=np.int64)  # 0 while no unit arrived since the last completion
        self.generation = np.zeros(shape, dtype=np.int64)  # completions so far


@attrs.frozen
class NamedBarrierWait:
    """Lanes of one cube that wait at named barrier ``barrier_id`` until ``expected`` units arrived."""

    cube: int  # chunk-relative
    barrier_id: int
    lanes: np.ndarray = attrs.field(eq=False)
    expected: int
    arrived: int
    generation: int  # the barrier's generation the lanes wait to see end

    @property
    def missing(self) -> int:
        """How many more units must arrive."""
        return self.expected - self.arrived


def named_barriers(ctx: Chunk) -> NamedBarrierTable:
    """The chunk's named-barrier table."""
    table = ctx.extensions.get(_NAMED_KEY)
    if table is None:
        table = ctx.extensions[_NAMED_KEY] = NamedBarrierTable(ctx.topology.cubes)
    assert isinstance(table, NamedBarrierTable)
    return table


def arrivals_released(ctx: Chunk, wait: NamedBarrierWait) -> bool:
    """Whether the barrier ``wait`` blocks on has completed since (for a scheduler that suspends waits)."""
    return bool(named_barriers(ctx).generation[wait.cube, wait.barrier_id] > wait.generation)


def wait_for_arrivals(ctx: Chunk, inst: Instruction, wait: NamedBarrierWait) -> None:
    """Block ``wait.lanes`` until ``wait.missing`` more units arrive; in lockstep nobody else can: a deadlock."""
    units = ctx.topology.units
    lane = int(wait.lanes[0])
    here = np.zeros(units, dtype=bool)
    here[wait.lanes - wait.cube * units] = True
    elsewhere = ~ctx.returned[wait.cube * units : (wait.cube + 1) * units] & ~here
    counts = (
        f"named barrier {wait.barrier_id} expects {wait.expected} units and {wait.arrived} arrived "
        f"({wait.missing} missing)"
    )
    if not elsewhere.any():
        ctx.fail(
            inst,
            f"named_barrier_sync can never complete: {counts}; every live unit of the cube is here or has returned",
            lane,
            kind=SanitizerKind.BARRIER_DEADLOCK,
        )
    ctx.fail(
        inst,
        f"possible deadlock: named_barrier_sync is not complete ({counts}) and unit {int(np.argmax(elsewhere))} "
        "of this cube is live but elsewhere; the lockstep interp runs branches one after another and cannot "
        "suspend this wait until other units arrive (put the arriving branch first)",
        lane,
        kind=SanitizerKind.BARRIER_DEADLOCK,
    )


def _per_lane(ctx: Chunk, var, lanes: np.ndarray) -> np.ndarray:
    value = np.asarray(ctx.read(var))
    if value.ndim == 0:
        return np.full(lanes.size, int(value), dtype=np.int64)
    return value[lanes].astype(np.int64)


def _check_planes(ctx: Chunk, inst: Instruction, lanes: np.ndarray, ids: np.ndarray, counts: np.ndarray) -> None:
    """The whole plane reaches the barrier (sanitizer), with one id and one count."""
    units = ctx.topology.units
    plane_key = lanes // units * units + (lanes % units) // PLANE_SIZE * PLANE_SIZE  # first lane of the plane
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
        stop = min(start + PLANE_SIZE, cube_end)
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
    cube_planes = -(-units // PLANE_SIZE)
    for k in range(lanes.size):  # per lane: the first bad one names itself (cheap: planes are few)
        problem = ops.named_barrier_problem(int(ids[k]), int(counts[k]), cube_planes * PLANE_SIZE)
        if problem is not None:
            ctx.fail(inst, problem, int(lanes[k]), kind=SanitizerKind.NAMED_BARRIER_MISUSE)
    _check_planes(ctx, inst, lanes, ids, counts)
    table = named_barriers(ctx)
    cubes = lanes // units
    plane_of = cubes * cube_planes + (lanes % units) // PLANE_SIZE
    _, one_per_plane = np.unique(plane_of, return_index=True)
    counted = np.zeros(lanes.size, dtype=bool)  # one arrival of 32 per plane here (PTX counts warps)
    counted[one_per_plane] = True
    completed = np.zeros(ctx.topology.cubes, dtype=bool)
    for cube, barrier_id in sorted(set(zip(cubes.tolist(), ids.tolist()))):
        group = (cubes == cube) & (ids == barrier_id)
        expected = int(counts[group][0])
        open_count = int(table.expected[cube, barrier_id])
        if open_count and open_count != expected:
            ctx.fail(
                inst,
                f"named barrier {barrier_id} is reached with {expected} units while units already arrived "
                f"expecting {open_count}",
                int(lanes[np.argmax(group)]),
                kind=SanitizerKind.NAMED_BARRIER_MISUSE,
            )
        arrived = int(table.arrived[cube, barrier_id]) + PLANE_SIZE * int((group & counted).sum())
        if arrived > expected:
            ctx.fail(
                inst,
                f"{arrived} units arrive at named barrier {barrier_id}, which completes at {expected}",
                int(lanes[np.argmax(group)]),
                kind=SanitizerKind.NAMED_BARRIER_MISUSE,
            )
        if arrived == expected:
            table.arrived[cube, barrier_id] = 0
            table.expected[cube, barrier_id] = 0
            table.generation[cube, barrier_id] += 1
            completed[cube] = True
            continue
        table.arrived[cube, barrier_id] = arrived
        table.expected[cube, barrier_id] = expected
        if waits:
            wait = NamedBarrierWait(
                cube, barrier_id, lanes[group], expected, arrived, int(table.generation[cube, barrier_id])
            )
            wait_for_arrivals(ctx, inst, wait)
    if ctx.sanitizer is not None and completed.any():  # the barrier orders the cube's earlier accesses
        ctx.sanitizer.sync_cube(completed)


@implements(ops.NamedBarrierSync)
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


@implements(ops.BarrierTryWaitParity)
def barrier_try_wait_parity(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Whether the phase of the operand's parity completed; a spin nobody can end is a deadlock."""
    op = inst.operation
    assert isinstance(op, ops.BarrierTryWaitParity)
    lanes = np.flatnonzero(mask.bits)
    state = barrier_state(ctx, op.barrier)
    units = ctx.topology.units
    cubes = lanes // units
    phases = _per_lane(ctx, op.phase, lanes)
    try:
        done = mbarrier.parity_done(state, repr(op.barrier), cubes, phases)
    except mbarrier.BarrierFault as fault:
        ctx.fail(inst, fault.message, int(lanes[fault.index]), kind=fault.kind)
    result = np.zeros(ctx.lanes, dtype=bool)
    result[lanes] = done
    _check_spin(ctx, inst, state, repr(op.barrier), lanes, done)
    assert inst.out is not None  # the verifier requires the result
    ctx.write(inst.out, result, mask)


def _check_spin(
    ctx: Chunk, inst: Instruction, state: mbarrier.BarrierState, name: str, lanes: np.ndarray, done: np.ndarray
) -> None:
    """Report a false try_wait that every live unit of its cube repeats with no barrier change in between."""
    spins = ctx.extensions.setdefault(_SPIN_KEY, {})
    assert isinstance(spins, dict)
    units = ctx.topology.units
    here = np.zeros(ctx.lanes, dtype=bool)
    here[lanes] = True
    for cube in np.unique(lanes[~done] // units).tolist():
        key = (id(inst), cube)
        row = state.table[cube].copy()
        seen = spins.get(key)
        spins[key] = row
        stuck = ~ctx.returned[cube * units : (cube + 1) * units] & ~here[cube * units : (cube + 1) * units]
        if seen is None or not np.array_equal(seen, row) or stuck.any():
            continue
        lane = int(lanes[~done][np.argmax(lanes[~done] // units == cube)])
        wrong = mbarrier.stuck_parity_wait(state, name, cube)
        if wrong is not None:
            ctx.fail(inst, f"try_wait_parity spins: {wrong}; {state.describe(cube)}", lane, SanitizerKind.WRONG_PARITY)
        ctx.fail(
            inst,
            f"try_wait_parity on {name} spins and can never succeed: every live unit of the cube is testing it "
            f"and nothing changed the barrier since the last test; {state.describe(cube)}",
            lane,
            kind=SanitizerKind.BARRIER_DEADLOCK,
        )
