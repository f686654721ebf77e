"""Asynchronous barriers and TMA copies in the lockstep interp: handlers of ``cubepy.ir.ops.tma``.

Model (docs/semantics/tma.md, "Barriers"; PTX ``mbarrier``):

* Each barrier holds, per cube, its arrival count, the arrivals still pending in the current phase,
  a signed transaction count (bytes expected minus bytes delivered) and the number of completed
  phases.  A phase completes when no arrival is pending and the transaction count is zero; the
  pending count then resets to the arrival count.  A copy may complete before its bytes are expected
  (CubeCL issues the load before ``arrive_and_expect_tx``), so the transaction count may go negative.
* A token is the index of the phase its arrival belonged to; ``wait(token)`` is done once that phase
  completed, ``wait_parity(p)`` once the current phase's parity differs from ``p`` (the hardware rule).
* A TMA copy is checked and its coordinates read at issue; its bytes move when it *lands*, through the
  exact emulation of ``interp.tma``, and a load credits its barrier then.  The lockstep schedule lands
  every copy at issue; the others keep it in flight (``ctx.in_flight``) until they choose to land it,
  at the latest when nothing else can run.  A store reads shared memory when it lands, so a unit that
  overwrites its source before ``tma_group_wait_read`` races with it; ``tma_group_wait`` and
  ``tma_group_wait_read`` land every store their units issued (landing sooner than needed is legal).
* A wait whose phase is not complete suspends the waiting units (``ctx.block``): other groups go on,
  and the waiters go on once an arrival or a landing copy completes the phase.  When every group waits
  and no copy is in flight nothing can complete it: the executor reports a ``SanitizerError``
  "deadlock" naming the barrier, its pending arrivals and bytes.
* Misuse (a destination that is not 128-byte aligned, a box larger than its shared slice, coordinates
  out of the instruction's range, a wrong map for the copy) raises ``TmaMisuseError`` (kind
  ``TMA_MISUSE``) with the source line and unit: it is both a ``SanitizerError`` and a ``TensorMapError``.
* Barrier bugs are ``SanitizerError`` of kind ``BARRIER_MISUSE`` (used before init, arrival count out
  of range, two different counts), ``BARRIER_OVERFLOW`` (more arrivals than the phase waits for),
  ``TX_COUNT_RANGE`` (a transaction count outside the PTX range), ``WRONG_PARITY`` (a parity other than
  0/1, or a parity wait stuck on a phase nothing reached: ``mbarrier.stuck_parity_wait``) or
  ``BARRIER_DEADLOCK`` (a wait that cannot complete).
* Under ``sanitize=True`` a TMA store checks that ordinary writes of its source were fenced for the
  async proxy (``interp.async_proxy``); a TMA load's bytes count as async-proxy writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import numpy as np

from cubepy.errors import SanitizerKind, TensorMapError, TmaMisuseError
from cubepy.ir import Instruction, Variable, ops
from cubepy.ir.variable import describe_memory
from cubepy.runtime.interp import async_races, mbarrier, sync, tma
from cubepy.runtime.interp.groups import Wait
from cubepy.runtime.interp.mbarrier import BarrierState
from cubepy.runtime.interp.registry import blocking, implements
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.tensormap import TensorMapArg

    _LoadOp = ops.TmaLoad | ops.TmaLoadIm2col
    _CopyOp = ops.TmaLoad | ops.TmaLoadIm2col | ops.TmaStore
    _Write = Callable[[np.ndarray], int]  # ``write(smem)``: a load's byte move, returning the bytes delivered

OP_FAMILIES = ("tma",)  # the IR op families handled here

_T = TypeVar("_T")


# -- helpers -----------------------------------------------------------------------------------------------
def barrier_state(ctx: Chunk, var: Variable) -> BarrierState:
    """The state of barrier ``var`` in every cube of the chunk (shared with ``interp.cluster``): one row
    per cube, or for an array of n barriers n rows per cube (``barrier_rows``)."""
    return _state(ctx, var)


def _state(ctx: Chunk, var: Variable) -> BarrierState:
    states = ctx.state.mbarriers
    state = states.get(var.id)
    if state is None:
        state = states[var.id] = BarrierState.fresh(ctx.topology.cubes * (var.length or 1))
    return state


def barrier_rows(
    ctx: Chunk, inst: Instruction, var: Variable, index: Variable | None, lanes: np.ndarray, cubes: np.ndarray
) -> np.ndarray:
    """Per lane of ``lanes``: the row of the barrier it names in ``var``'s state (``cubes[k] * n + index``).

    An index outside the array fails at once, sanitizer or not: on a GPU it names other shared memory."""
    count = var.length or 1
    if index is None:
        return cubes * count
    elements = _per_lane(ctx, index, lanes)
    outside = (elements < 0) | (elements >= count)
    if outside.any():
        k = int(np.argmax(outside))
        problem = mbarrier.index_problem(repr(var), int(elements[k]), count)
        ctx.fail(inst, problem, int(lanes[k]), kind=SanitizerKind.OUT_OF_BOUNDS)
    return cast(np.ndarray, cubes * count + elements)


def barrier_name(var: Variable, rows: np.ndarray, indexed: bool) -> str:
    """How messages name the barrier of ``rows``: ``var``, or the element(s) ``var[i]`` an indexed operation names."""
    if not indexed:
        return repr(var)
    elements = np.unique(rows % (var.length or 1)).tolist()
    if len(elements) == 1:
        return mbarrier.element_name(repr(var), elements[0], indexed)
    return f"{var!r}[{', '.join(str(e) for e in elements[:4])}{', ...' if len(elements) > 4 else ''}]"  # lanes apart


def race_key(var: Variable, element: int) -> int:
    """The race tracker's identity of element ``element`` of ``var`` (its id for a single barrier)."""
    return var.id if (var.length or 1) == 1 else var.id + ((element + 1) << 32)


def op_barrier_rows(ctx: Chunk, inst: Instruction, op: Any, lanes: np.ndarray) -> tuple[BarrierState, np.ndarray, str]:
    """The state of ``op``'s barrier, the row of each of ``lanes`` and the name messages give it (shared with
    ``interp.warp_specialize``)."""
    rows = barrier_rows(ctx, inst, op.barrier, op.index, lanes, _cube_of(ctx, lanes))
    return _state(ctx, op.barrier), rows, barrier_name(op.barrier, rows, op.index is not None)


def _active_lanes(mask: Mask) -> np.ndarray:
    return np.flatnonzero(mask.bits)


def _per_lane(ctx: Chunk, var: Variable, lanes: np.ndarray) -> np.ndarray:
    """The int64 value of ``var`` on each of ``lanes``."""
    value = np.asarray(ctx.read(var))
    if value.ndim == 0:
        return np.full(lanes.size, int(value), dtype=np.int64)
    return cast(np.ndarray, value[lanes].astype(np.int64))


def _cube_of(ctx: Chunk, lanes: np.ndarray) -> np.ndarray:
    return lanes // ctx.topology.units


def per_chunk_lane(ctx: Chunk, lanes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (one per lane of ``lanes``) spread over every lane of the chunk, 0 elsewhere: a wait's record."""
    out = np.zeros(ctx.lanes, dtype=np.int64)
    out[lanes] = values
    return out


def run_barrier_step(ctx: Chunk, inst: Instruction, lanes: np.ndarray, step: Callable[[], _T]) -> _T:
    """``step()``, a ``BarrierFault`` becoming the SanitizerError of the unit it names."""
    try:
        return step()
    except mbarrier.BarrierFault as fault:
        ctx.fail(inst, fault.message, int(lanes[fault.index]), kind=fault.kind)


class BarrierPhaseWait(Wait):
    """Lanes waiting for an mbarrier phase: ``done(rows, values)`` says which have seen it complete."""

    def __init__(
        self, inst: Instruction, state: BarrierState, var: Variable, rows: np.ndarray, values: np.ndarray, parity: bool
    ) -> None:
        self.inst = inst
        self.state = state
        self.var = var
        self.rows = rows  # per chunk lane: the row of the barrier it waits on (its cube's, its element's)
        self.values = values  # per chunk lane: the token (phase index) or the parity waited on
        self.parity = parity

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The waiting lanes whose phase has completed."""
        lanes = np.flatnonzero(bits)
        rows = self.rows[lanes]
        name = self._name(rows)
        if self.parity:
            done = mbarrier.parity_done(self.state, name, rows, self.values[lanes])
        else:
            done = mbarrier.token_done(self.state, name, rows, self.values[lanes])
        ready = np.zeros_like(bits)
        ready[lanes[done]] = True
        return ready

    def resume(self, ctx: Chunk, mask: Mask) -> None:
        """The lanes that go on have observed the phases completed so far (for the async race checks)."""
        lanes = np.flatnonzero(mask.bits)
        _note_waited(ctx, self.var, self.state, lanes, self.rows[lanes])

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """Which barrier, and the state of the phase the first waiting lane needs (or why its parity is wrong)."""
        row = int(self.rows[int(np.argmax(bits))])
        wrong = self._wrong_parity(row)
        if wrong is not None:
            return f"{wrong}; {self.state.describe(row)}"
        name = self._name(np.array([row]))
        return f"wait on {name} can never complete: {self.state.describe(row)} ({int(bits.sum())} units wait)"

    def deadlock_kind(self, ctx: Chunk, bits: np.ndarray) -> SanitizerKind:
        """``WRONG_PARITY`` when the parity names a phase nothing reached (``mbarrier.stuck_parity_wait``)."""
        row = int(self.rows[int(np.argmax(bits))])
        return SanitizerKind.BARRIER_DEADLOCK if self._wrong_parity(row) is None else SanitizerKind.WRONG_PARITY

    def _name(self, rows: np.ndarray) -> str:
        return barrier_name(self.var, rows, (self.var.length or 1) > 1)

    def _wrong_parity(self, row: int) -> str | None:
        return mbarrier.stuck_parity_wait(self.state, self._name(np.array([row])), row) if self.parity else None


def _wait(
    ctx: Chunk,
    inst: Instruction,
    state: BarrierState,
    var: Variable,
    lanes: np.ndarray,
    rows: np.ndarray,
    done: np.ndarray,
    values: np.ndarray,
    parity: bool,
) -> None:
    """Suspend the lanes whose phase is not complete until another group (or a landing copy) completes it."""
    _note_waited(ctx, var, state, lanes[done], rows[done])
    if done.all():
        return
    waiting = np.zeros(ctx.lanes, dtype=bool)
    waiting[lanes[~done]] = True
    wait = BarrierPhaseWait(
        inst, state, var, per_chunk_lane(ctx, lanes, rows), per_chunk_lane(ctx, lanes, values), parity
    )
    ctx.block(waiting, wait)


def _misuse(ctx: Chunk, inst: Instruction, lane: int, error: Exception) -> NoReturn:
    where = f"{inst.loc.file}:{inst.loc.line}: " if inst.loc is not None else ""
    kind = SanitizerKind.TMA_MISUSE
    raise TmaMisuseError(
        f"{where}{kind.value}: {error}, by {ctx.describe_lane(lane)}\n  in instruction: {inst}", kind
    ) from error


def _shared_box(ctx: Chunk, inst: Instruction, op: _CopyOp, lane: int, nbytes: int) -> int:
    """The byte address of ``smem[offset]``, after checking that ``nbytes`` fit the slice and the memory."""
    offset = int(_per_lane(ctx, op.offset, np.array([lane]))[0])
    length = int(_per_lane(ctx, op.length, np.array([lane]))[0])
    try:
        return tma.slice_address(
            op.name,
            repr(op.smem),
            cast(int, op.smem.length),  # a shared memory always has a length
            op.smem.type.size,
            ctx.shared_offset(op.smem),
            offset,
            length,
            nbytes,
        )
    except TensorMapError as error:
        _misuse(ctx, inst, lane, error)


def _tensor_map(ctx: Chunk, op: _CopyOp) -> TensorMapArg:
    return ctx.launch.bindings.tensor_maps[op.tensor_map.id]


def _box_bytes(ctx: Chunk, inst: Instruction, lane: int, tm: TensorMapArg, mode: str, rank: int) -> int:
    try:
        return tma.box_bytes(tm, inst.op, mode, rank)
    except TensorMapError as error:
        _misuse(ctx, inst, lane, error)


# -- barriers ---------------------------------------------------------------------------------------------
@implements(ops.BarrierInit)
@blocking
def barrier_init(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Elected units initialise the barrier of their cube (every cube that runs this resets it)."""
    op = cast(ops.BarrierInit, inst.operation)
    lanes = _active_lanes(mask)
    elected = np.broadcast_to(np.asarray(ctx.read(op.is_elected), dtype=bool), (ctx.lanes,))[lanes]
    counts = _per_lane(ctx, op.arrival_count, lanes)[elected]
    state = _state(ctx, op.barrier)
    chosen = lanes[elected]
    count = op.barrier.length or 1  # every element of an array
    rows = (_cube_of(ctx, chosen)[:, None] * count + np.arange(count)).ravel()
    run_barrier_step(
        ctx,
        inst,
        np.repeat(chosen, count),
        lambda: mbarrier.initialize(state, repr(op.barrier), rows, np.repeat(counts, count)),
    )
    sync.sync_cube(ctx, inst, mask)  # the init ends with a cube-wide barrier (bar.sync 0)


@implements(ops.BarrierArrive)
def barrier_arrive(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Arrive once per unit; the token is the phase arrived on."""
    op = cast(ops.BarrierArrive, inst.operation)
    lanes = _active_lanes(mask)
    ones = np.ones(lanes.size, dtype=np.int64)
    state, rows, name = op_barrier_rows(ctx, inst, op, lanes)
    tokens = run_barrier_step(ctx, inst, lanes, lambda: mbarrier.arrive(state, name, rows, ones, np.zeros_like(ones)))
    _note_arrival(ctx, op.barrier, lanes, rows, tokens)
    _write_tokens(ctx, inst, mask, lanes, tokens)


@implements(ops.BarrierArriveExpectTx)
def barrier_arrive_expect_tx(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Expect the bytes, then arrive; the token is the phase arrived on."""
    op = cast(ops.BarrierArriveExpectTx, inst.operation)
    lanes = _active_lanes(mask)
    arrivals = _per_lane(ctx, op.arrivals, lanes)
    tx_bytes = _per_lane(ctx, op.tx_bytes, lanes)
    state, rows, name = op_barrier_rows(ctx, inst, op, lanes)
    tokens = run_barrier_step(ctx, inst, lanes, lambda: mbarrier.arrive(state, name, rows, arrivals, tx_bytes))
    _note_arrival(ctx, op.barrier, lanes, rows, tokens)
    _write_tokens(ctx, inst, mask, lanes, tokens)


def _elements(var: Variable, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The race-tracker key of each barrier ``rows`` name, with the positions in ``rows`` that name it."""
    count = var.length or 1
    if count == 1:
        return [(race_key(var, 0), np.arange(rows.size))]
    elements = rows % count
    return [(race_key(var, e), np.flatnonzero(elements == e)) for e in np.unique(elements).tolist()]


def _note_arrival(ctx: Chunk, var: Variable, lanes: np.ndarray, rows: np.ndarray, tokens: np.ndarray) -> None:
    races = async_races.tracker(ctx)
    if races is not None:
        for key, at in _elements(var, rows):
            races.arrived(key, lanes[at], tokens[at])


def _note_waited(ctx: Chunk, var: Variable, state: BarrierState, lanes: np.ndarray, rows: np.ndarray) -> None:
    """``lanes`` passed a wait on the barriers of ``rows``: they observed the phases completed so far."""
    races = async_races.tracker(ctx)
    if races is not None and lanes.size:
        for key, at in _elements(var, rows):
            races.waited(key, lanes[at], state.phase[rows[at]])
        exits = ctx.state.peer_exits  # interp.cluster's peer accesses: the waiting cubes exit after them
        if exits is not None:
            exits.waited(ctx, lanes)


def _write_tokens(ctx: Chunk, inst: Instruction, mask: Mask, lanes: np.ndarray, tokens: np.ndarray) -> None:
    values = np.zeros(ctx.lanes, dtype=np.uint64)
    values[lanes] = tokens.astype(np.uint64)
    assert inst.out is not None
    ctx.write(inst.out, values, mask)


@implements(ops.BarrierExpectTx)
def barrier_expect_tx(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Raise the current phase's expected transaction bytes."""
    op = cast(ops.BarrierExpectTx, inst.operation)
    lanes = _active_lanes(mask)
    state, rows, name = op_barrier_rows(ctx, inst, op, lanes)
    tx_bytes = _per_lane(ctx, op.tx_bytes, lanes)
    run_barrier_step(ctx, inst, lanes, lambda: mbarrier.expect_tx(state, name, rows, tx_bytes))


@implements(ops.BarrierWait)
@blocking
def barrier_wait(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Done when the token's phase has completed."""
    op = cast(ops.BarrierWait, inst.operation)
    lanes = _active_lanes(mask)
    state, rows, name = op_barrier_rows(ctx, inst, op, lanes)
    tokens = _per_lane(ctx, op.token, lanes)
    done = run_barrier_step(ctx, inst, lanes, lambda: mbarrier.token_done(state, name, rows, tokens))
    _wait(ctx, inst, state, op.barrier, lanes, rows, done, tokens, False)


@implements(ops.BarrierWaitParity)
@blocking
def barrier_wait_parity(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Done when the current phase's parity differs from the one waited for."""
    op = cast(ops.BarrierWaitParity, inst.operation)
    lanes = _active_lanes(mask)
    state, rows, name = op_barrier_rows(ctx, inst, op, lanes)
    phases = _per_lane(ctx, op.phase, lanes)
    done = run_barrier_step(ctx, inst, lanes, lambda: mbarrier.parity_done(state, name, rows, phases))
    _wait(ctx, inst, state, op.barrier, lanes, rows, done, phases, True)


# -- copies -----------------------------------------------------------------------------------------------
def _coords(ctx: Chunk, variables: tuple[Variable, ...], lane: int) -> list[int]:
    here = np.array([lane])
    return [int(_per_lane(ctx, var, here)[0]) for var in variables]


def _issue_loads(
    ctx: Chunk, inst: Instruction, mask: Mask, mode: str, copy: Callable[[TensorMapArg, int, int], _Write]
) -> None:
    """Each issuing unit starts ``copy(tm, lane, cube_shared, dst)``; when it lands it credits the barrier's bytes.

    The destination and the box are checked at issue; the coordinates are read at issue too.  The lockstep
    schedule lands each copy at once, the others when they choose (``schedule``).
    """
    op = cast("_LoadOp", inst.operation)
    lanes = _active_lanes(mask)
    cubes = _cube_of(ctx, lanes)
    state, rows, name = op_barrier_rows(ctx, inst, op, lanes)
    run_barrier_step(ctx, inst, lanes, lambda: mbarrier.require_initialized(state, name, rows))
    count = op.barrier.length or 1
    arena = ctx.shared_arena()
    tm = _tensor_map(ctx, op)
    eager = ctx.picker.land_eagerly()
    races = async_races.tracker(ctx)
    for lane, issuer, element in zip(lanes.tolist(), cubes.tolist(), (rows % count).tolist()):
        nbytes = _box_bytes(ctx, inst, lane, tm, mode, op.rank)
        dst = _shared_box(ctx, inst, op, lane, nbytes)
        if ctx.coverage is not None:
            ctx.coverage.record_copy(ctx, op, tm, lane, "read")
        where = (element, mbarrier.element_name(repr(op.barrier), element, op.index is not None))
        for cube in _destinations(ctx, inst, op, lane, issuer, state, where):
            row = cube * count + element
            if races is not None:
                races.loaded(ctx, inst, race_key(op.barrier, element), lane, cube, dst, nbytes, int(state.phase[row]))
            overwrite = ctx.state.check_shared_write  # a started wgmma may still read the bytes
            if overwrite is not None:
                span = np.arange(dst, dst + nbytes)[None, :]
                overwrite(ctx, inst, np.array([lane]), np.full(span.shape, cube), span)
            write = copy(tm, lane, dst)
            land = _load_landing(
                ctx, inst, state, (row, where[1]), write, lane, arena[cube], cube, (dst, nbytes), not eager
            )
            if ctx.sanitizer is not None:  # async-proxy bytes: a TMA store may read them without a proxy fence
                ctx.sanitizer.proxy.async_write(cube, dst, nbytes)
            if eager:
                land()
            else:
                ctx.in_flight.add(lane, False, land)
    if eager:
        state.settle()


def _destinations(
    ctx: Chunk, inst: Instruction, op: _LoadOp, lane: int, cube: int, state: BarrierState, element: tuple[int, str]
) -> list[int]:
    """The chunk cubes a load lands in: the issuer's, or those of the cluster ranks of its multicast mask
    (``element``: the index and name of the barrier it completes on, which each of them must have initialised)."""
    multicast = getattr(op, "multicast", None)
    if multicast is None:
        return [cube]
    mask = int(_per_lane(ctx, multicast, np.array([lane]))[0])
    size = int(np.prod(ctx.topology.cluster))
    if mask <= 0 or mask >> size:
        problem = f"multicast mask {mask:#x} names no cube or cubes outside the cluster of {size}"
        _misuse(ctx, inst, lane, TensorMapError(problem))
    ranks = np.array([rank for rank in range(size) if mask >> rank & 1], dtype=np.int64)
    targets = ctx.topology.peer_cube(np.full(ranks.size, cube, dtype=np.int64), ranks)
    lanes = np.full(targets.size, lane, dtype=np.int64)
    rows = targets * (op.barrier.length or 1) + element[0]
    run_barrier_step(ctx, inst, lanes, lambda: mbarrier.require_initialized(state, element[1], rows))
    return cast("list[int]", targets.tolist())


def _load_landing(
    ctx: Chunk,
    inst: Instruction,
    state: BarrierState,
    barrier: tuple[int, str],
    write: _Write,
    lane: int,
    smem: np.ndarray,
    cube: int,
    box: tuple[int, int],
    settle: bool,
) -> Callable[[], None]:
    """The landing of one load: ``write(smem)`` moves the bytes, the barrier (its row of ``state``, its name) of
    ``cube`` is credited.

    ``box`` is the destination's (first byte, byte count): under the sanitizer they count as written in
    ``cube`` from then on (a multicast destination that issued nothing included).

    Copies that land together at issue (lockstep) settle the barrier once, after the last of them.
    """

    dst, nbytes = box

    def land() -> None:
        try:
            delivered = write(smem)
        except TensorMapError as error:
            _misuse(ctx, inst, lane, error)
        if ctx.sanitizer is not None:  # the destination cube's bytes are initialized once the copy lands
            ctx.sanitizer.mark_written(np.array([cube]), dst, nbytes)
        row, name = barrier
        credit = lambda: mbarrier.complete_tx(state, name, np.array([row]), np.array([delivered]), settle)  # noqa: E731
        run_barrier_step(ctx, inst, np.array([lane]), credit)

    return land


@implements(ops.TmaLoad)
def tma_load(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each issuing unit copies its box into its cube's shared memory and credits the barrier."""
    op = cast(ops.TmaLoad, inst.operation)
    _issue_loads(
        ctx,
        inst,
        mask,
        "tiled",
        lambda tm, lane, dst: _bind(tma.tiled_load, tm, _coords(ctx, op.coords, lane), dst),
    )


@implements(ops.TmaLoadIm2col)
def tma_load_im2col(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each issuing unit runs the im2col pixel walk into its cube's shared memory and credits the barrier."""
    op = cast(ops.TmaLoadIm2col, inst.operation)
    _issue_loads(
        ctx,
        inst,
        mask,
        "im2col",
        lambda tm, lane, dst: _bind_im2col(tm, _coords(ctx, op.coords, lane), _coords(ctx, op.offsets, lane), dst),
    )


def _bind(
    load: Callable[[Any, Sequence[int], np.ndarray, int], int], tm: TensorMapArg, coords: list[int], dst: int
) -> _Write:
    """``write(smem)`` running a tiled load of the coordinates read at issue."""
    return lambda smem: load(tm, coords, smem, dst)


def _bind_im2col(tm: TensorMapArg, coords: list[int], offsets: list[int], dst: int) -> _Write:
    """``write(smem)`` running an im2col load of the coordinates and offsets read at issue."""
    return lambda smem: tma.im2col_load(tm, coords, offsets, smem, dst)


@implements(ops.TmaStore)
def tma_store(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each issuing unit starts a store of its shared box; it reads shared memory and writes global memory when it lands."""
    op = cast(ops.TmaStore, inst.operation)
    arena = ctx.shared_arena()
    tm = _tensor_map(ctx, op)
    lanes = _active_lanes(mask)
    eager = ctx.picker.land_eagerly()
    for lane, cube in zip(lanes.tolist(), _cube_of(ctx, lanes).tolist()):
        nbytes = _box_bytes(ctx, inst, lane, tm, "tiled", op.rank)
        src = _shared_box(ctx, inst, op, lane, nbytes)
        if ctx.sanitizer is not None:
            memory = (describe_memory(op.smem), ctx.shared_offset(op.smem), op.smem.type.size)
            ctx.sanitizer.proxy.check_store(ctx, inst, lane, src, nbytes, memory)
        land = _store_landing(ctx, inst, tm, _coords(ctx, op.coords, lane), arena[cube], src, lane)
        if ctx.coverage is not None:
            ctx.coverage.record_copy(ctx, op, tm, lane, "write")
        if eager:
            land()
        else:
            ctx.in_flight.add(lane, True, land)


def _store_landing(
    ctx: Chunk, inst: Instruction, tm: TensorMapArg, coords: list[int], smem: np.ndarray, src: int, lane: int
) -> Callable[[], None]:
    """The landing of one store: it reads the shared box then and writes the tensor."""

    def land() -> None:
        try:
            tma.tiled_store(tm, coords, smem, src)
        except TensorMapError as error:
            _misuse(ctx, inst, lane, error)

    return land


@implements(ops.TmaGroupCommit)
def tma_group_commit(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Bulk groups only bound what a wait covers; a wait lands every store of its units (legal: sooner is allowed)."""


@implements(ops.TmaGroupWait, ops.TmaGroupWaitRead)
def tma_group_wait(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Land the stores the waiting units issued: their reads of shared memory and writes are done after the wait."""
    if ctx.in_flight.copies:
        ctx.in_flight.land_stores_of(mask.bits)
