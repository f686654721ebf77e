"""Asynchronous barriers and TMA copies in the lockstep interp: handlers of ``cubepy.ir.ops.tma``.

Model (docs/semantics/tma.md, "Barriers"; PTX ``mbarrier``):

* Each barrier holds, per cube, its arrival count, the arrivals still pending in the current phase,
  a signed transaction count (bytes expected minus bytes delivered) and the number of completed
  phases.  A phase completes when no arrival is pending and the transaction count is zero; the
  pending count then resets to the arrival count.  A copy may complete before its bytes are expected
  (CubeCL issues the load before ``arrive_and_expect_tx``), so the transaction count may go negative.
* A token is the index of the phase its arrival belonged to; ``wait(token)`` is done once that phase
  completed, ``wait_parity(p)`` once the current phase's parity differs from ``p`` (the hardware rule).
* TMA loads complete at issue: the bytes land in the cube's shared memory through the exact emulation
  of ``interp.tma`` and are credited to the barrier at once.  TMA stores write global memory at issue
  too, so ``tma_group_commit``/``tma_group_wait``/``tma_group_wait_read`` have nothing left to do.
* Lockstep runs every active unit through an instruction together, so a wait that is not done when
  it runs can only be completed by units that are not here.  When every live unit of the cube is at
  the wait nobody can arrive any more: a ``SanitizerError`` "deadlock".  When some live units are
  elsewhere (another branch), the interp cannot suspend this one: also a ``SanitizerError``, saying so.
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

from typing import TYPE_CHECKING, NoReturn

import numpy as np

from cubepy.errors import SanitizerKind, TensorMapError, TmaMisuseError
from cubepy.ir import Instruction, Variable, ops
from cubepy.ir.variable import describe_memory
from cubepy.runtime.interp import mbarrier, sync, tma
from cubepy.runtime.interp.mbarrier import BarrierState
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk

_EXTENSION_KEY = "tma.barriers"


# -- helpers -----------------------------------------------------------------------------------------------
def barrier_state(ctx: Chunk, var: Variable) -> BarrierState:
    """The state of barrier ``var`` in every cube of the chunk (shared with ``interp.warp_specialize``)."""
    return _state(ctx, var)


def _state(ctx: Chunk, var: Variable) -> BarrierState:
    states = ctx.extensions.setdefault(_EXTENSION_KEY, {})
    state = states.get(var.id)
    if state is None:
        state = states[var.id] = BarrierState.fresh(ctx.topology.cubes)
    return state


def _active_lanes(mask: Mask) -> np.ndarray:
    return np.flatnonzero(mask.bits)


def _per_lane(ctx: Chunk, var: Variable, lanes: np.ndarray) -> np.ndarray:
    """The int64 value of ``var`` on each of ``lanes``."""
    value = np.asarray(ctx.read(var))
    if value.ndim == 0:
        return np.full(lanes.size, int(value), dtype=np.int64)
    return value[lanes].astype(np.int64)


def _cube_of(ctx: Chunk, lanes: np.ndarray) -> np.ndarray:
    return lanes // ctx.topology.units


def _run(ctx: Chunk, inst: Instruction, lanes: np.ndarray, step):
    """``step()``, a ``BarrierFault`` becoming the SanitizerError of the unit it names."""
    try:
        return step()
    except mbarrier.BarrierFault as fault:
        ctx.fail(inst, fault.message, int(lanes[fault.index]), kind=fault.kind)


def _wait(
    ctx: Chunk,
    inst: Instruction,
    state: BarrierState,
    var: Variable,
    lanes: np.ndarray,
    done: np.ndarray,
    parity_wait: bool = False,
) -> None:
    """Fail unless every waiting lane's phase is complete (nothing can complete it later in lockstep).

    A stuck parity wait may be a wrong parity (``mbarrier.stuck_parity_wait``).
    """
    if done.all():
        return
    lane = int(lanes[np.argmax(~done)])
    cube = lane // ctx.topology.units
    units = ctx.topology.units
    here = np.zeros(ctx.lanes, dtype=bool)
    here[lanes] = True
    elsewhere = ~ctx.returned[cube * units : (cube + 1) * units] & ~here[cube * units : (cube + 1) * units]
    if not elsewhere.any():
        if parity_wait:
            wrong = mbarrier.stuck_parity_wait(state, repr(var), cube)
            if wrong is not None:
                ctx.fail(inst, f"{wrong}; {state.describe(cube)}", lane, kind=SanitizerKind.WRONG_PARITY)
        ctx.fail(
            inst,
            f"wait on {var!r} can never complete: every live unit of the cube is waiting "
            f"and no copy is in flight; {state.describe(cube)}",
            lane,
            kind=SanitizerKind.BARRIER_DEADLOCK,
        )
    absent = int(np.argmax(elsewhere))
    ctx.fail(
        inst,
        f"possible deadlock: wait on {var!r} is not complete ({state.describe(cube)}) and unit "
        f"{absent} of this cube is live but elsewhere; the lockstep interp runs branches one after "
        "another and cannot suspend this wait until other units arrive",
        lane,
        kind=SanitizerKind.BARRIER_DEADLOCK,
    )


def _misuse(ctx: Chunk, inst: Instruction, lane: int, error: Exception) -> NoReturn:
    where = f"{inst.loc.file}:{inst.loc.line}: " if inst.loc is not None else ""
    kind = SanitizerKind.TMA_MISUSE
    raise TmaMisuseError(
        f"{where}{kind.value}: {error}, by {ctx.describe_lane(lane)}\n  in instruction: {inst}", kind
    ) from error


def _shared_box(ctx: Chunk, inst: Instruction, op, lane: int, nbytes: int) -> int:
    """The byte address of ``smem[offset]``, after checking that ``nbytes`` fit the slice and the memory."""
    offset = int(_per_lane(ctx, op.offset, np.array([lane]))[0])
    length = int(_per_lane(ctx, op.length, np.array([lane]))[0])
    try:
        return tma.slice_address(
            op.name,
            repr(op.smem),
            op.smem.length,
            op.smem.type.size,
            ctx.shared_offset(op.smem),
            offset,
            length,
            nbytes,
        )
    except TensorMapError as error:
        _misuse(ctx, inst, lane, error)


def _tensor_map(ctx: Chunk, op):
    return ctx.launch.bindings.tensor_maps[op.tensor_map.id]


def _box_bytes(ctx: Chunk, inst: Instruction, lane: int, tm, mode: str, rank: int) -> int:
    try:
        return tma.box_bytes(tm, inst.op, mode, rank)
    except TensorMapError as error:
        _misuse(ctx, inst, lane, error)


# -- barriers ---------------------------------------------------------------------------------------------
@implements(ops.BarrierInit)
def barrier_init(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Elected units initialise the barrier of their cube (every cube that runs this resets it)."""
    op: ops.BarrierInit = inst.operation
    lanes = _active_lanes(mask)
    elected = np.broadcast_to(np.asarray(ctx.read(op.is_elected), dtype=bool), (ctx.lanes,))[lanes]
    counts = _per_lane(ctx, op.arrival_count, lanes)[elected]
    state = _state(ctx, op.barrier)
    chosen = lanes[elected]
    _run(ctx, inst, chosen, lambda: mbarrier.initialize(state, repr(op.barrier), _cube_of(ctx, chosen), counts))
    sync.sync_cube(ctx, inst, mask)  # the init ends with a cube-wide barrier (bar.sync 0)


@implements(ops.BarrierArrive)
def barrier_arrive(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Arrive once per unit; the token is the phase arrived on."""
    op: ops.BarrierArrive = inst.operation
    lanes = _active_lanes(mask)
    ones = np.ones(lanes.size, dtype=np.int64)
    state, cubes = _state(ctx, op.barrier), _cube_of(ctx, lanes)
    tokens = _run(ctx, inst, lanes, lambda: mbarrier.arrive(state, repr(op.barrier), cubes, ones, np.zeros_like(ones)))
    _write_tokens(ctx, inst, mask, lanes, tokens)


@implements(ops.BarrierArriveExpectTx)
def barrier_arrive_expect_tx(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Expect the bytes, then arrive; the token is the phase arrived on."""
    op: ops.BarrierArriveExpectTx = inst.operation
    lanes = _active_lanes(mask)
    arrivals = _per_lane(ctx, op.arrivals, lanes)
    tx_bytes = _per_lane(ctx, op.tx_bytes, lanes)
    state, cubes = _state(ctx, op.barrier), _cube_of(ctx, lanes)
    tokens = _run(ctx, inst, lanes, lambda: mbarrier.arrive(state, repr(op.barrier), cubes, arrivals, tx_bytes))
    _write_tokens(ctx, inst, mask, lanes, tokens)


def _write_tokens(ctx: Chunk, inst: Instruction, mask: Mask, lanes: np.ndarray, tokens: np.ndarray) -> None:
    values = np.zeros(ctx.lanes, dtype=np.uint64)
    values[lanes] = tokens.astype(np.uint64)
    ctx.write(inst.out, values, mask)


@implements(ops.BarrierExpectTx)
def barrier_expect_tx(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Raise the current phase's expected transaction bytes."""
    op: ops.BarrierExpectTx = inst.operation
    lanes = _active_lanes(mask)
    state, cubes = _state(ctx, op.barrier), _cube_of(ctx, lanes)
    tx_bytes = _per_lane(ctx, op.tx_bytes, lanes)
    _run(ctx, inst, lanes, lambda: mbarrier.expect_tx(state, repr(op.barrier), cubes, tx_bytes))


@implements(ops.BarrierWait)
def barrier_wait(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Done when the token's phase has completed."""
    op: ops.BarrierWait = inst.operation
    lanes = _active_lanes(mask)
    state, cubes = _state(ctx, op.barrier), _cube_of(ctx, lanes)
    tokens = _per_lane(ctx, op.token, lanes)
    done = _run(ctx, inst, lanes, lambda: mbarrier.token_done(state, repr(op.barrier), cubes, tokens))
    _wait(ctx, inst, state, op.barrier, lanes, done)


@implements(ops.BarrierWaitParity)
def barrier_wait_parity(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Done when the current phase's parity differs from the one waited for."""
    op: ops.BarrierWaitParity = inst.operation
    lanes = _active_lanes(mask)
    state, cubes = _state(ctx, op.barrier), _cube_of(ctx, lanes)
    phases = _per_lane(ctx, op.phase, lanes)
    done = _run(ctx, inst, lanes, lambda: mbarrier.parity_done(state, repr(op.barrier), cubes, phases))
    _wait(ctx, inst, state, op.barrier, lanes, done, parity_wait=True)


# -- copies -----------------------------------------------------------------------------------------------
def _coords(ctx: Chunk, variables: tuple[Variable, ...], lane: int) -> list[int]:
    here = np.array([lane])
    return [int(_per_lane(ctx, var, here)[0]) for var in variables]


def _issue_loads(ctx: Chunk, inst: Instruction, mask: Mask, mode: str, copy) -> None:
    """Each issuing unit runs ``copy(tm, lane, cube_shared, dst)`` and credits the barrier's bytes."""
    op = inst.operation
    lanes = _active_lanes(mask)
    state, cubes = _state(ctx, op.barrier), _cube_of(ctx, lanes)
    _run(ctx, inst, lanes, lambda: mbarrier.require_initialized(state, repr(op.barrier), cubes))
    arena = ctx.shared_arena()
    tm = _tensor_map(ctx, op)
    delivered = np.zeros(lanes.size, dtype=np.int64)
    for k, (lane, cube) in enumerate(zip(lanes.tolist(), cubes.tolist())):
        nbytes = _box_bytes(ctx, inst, lane, tm, mode, op.rank)
        dst = _shared_box(ctx, inst, op, lane, nbytes)
        try:
            delivered[k] = copy(tm, lane, arena[cube], dst)
        except TensorMapError as error:
            _misuse(ctx, inst, lane, error)
        if ctx.coverage is not None:
            ctx.coverage.record_copy(ctx, op, tm, lane, "read")
        if ctx.sanitizer is not None:  # async-proxy bytes: a TMA store may read them without a proxy fence
            ctx.sanitizer.proxy.async_write(cube, dst, nbytes)
    _run(ctx, inst, lanes, lambda: mbarrier.complete_tx(state, repr(op.barrier), cubes, delivered))


@implements(ops.TmaLoad)
def tma_load(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each issuing unit copies its box into its cube's shared memory and credits the barrier."""
    op: ops.TmaLoad = inst.operation
    _issue_loads(
        ctx,
        inst,
        mask,
        "tiled",
        lambda tm, lane, smem, dst: tma.tiled_load(tm, _coords(ctx, op.coords, lane), smem, dst),
    )


@implements(ops.TmaLoadIm2col)
def tma_load_im2col(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each issuing unit runs the im2col pixel walk into its cube's shared memory and credits the barrier."""
    op: ops.TmaLoadIm2col = inst.operation
    _issue_loads(
        ctx,
        inst,
        mask,
        "im2col",
        lambda tm, lane, smem, dst: tma.im2col_load(
            tm, _coords(ctx, op.coords, lane), _coords(ctx, op.offsets, lane), smem, dst
        ),
    )


@implements(ops.TmaStore)
def tma_store(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Each issuing unit writes its shared box to global memory now (the async store completes at issue)."""
    op: ops.TmaStore = inst.operation
    arena = ctx.shared_arena()
    tm = _tensor_map(ctx, op)
    lanes = _active_lanes(mask)
    for lane, cube in zip(lanes.tolist(), _cube_of(ctx, lanes).tolist()):
        nbytes = _box_bytes(ctx, inst, lane, tm, "tiled", op.rank)
        src = _shared_box(ctx, inst, op, lane, nbytes)
        if ctx.sanitizer is not None:
            memory = (describe_memory(op.smem), ctx.shared_offset(op.smem), op.smem.type.size)
            ctx.sanitizer.proxy.check_store(ctx, inst, lane, src, nbytes, memory)
        try:
            tma.tiled_store(tm, _coords(ctx, op.coords, lane), arena[cube], src)
        except TensorMapError as error:
            _misuse(ctx, inst, lane, error)
        if ctx.coverage is not None:
            ctx.coverage.record_copy(ctx, op, tm, lane, "write")


@implements(ops.TmaGroupCommit, ops.TmaGroupWait, ops.TmaGroupWaitRead)
def tma_group(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Stores completed at issue: committing and waiting on bulk groups has nothing left to do."""
