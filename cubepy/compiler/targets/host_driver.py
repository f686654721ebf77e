"""The host target's cube driver: ``cubepy_run_cubes(params, cube, first, last)`` runs cubes ``[first, last)``.

For each linear cube index it writes ``ctaid`` into the cube context and runs every unit: in a plain
loop when the kernel has no suspension points, else as the round-robin coroutine scheduler described in
``cubepy.compiler.targets.host``.  The scheduler has only the parts the kernel's suspension kinds need: a
kernel whose units wait only at ``sync_cube`` resumes every unit not done, round after round (each
round takes the whole cube from one barrier to the next), with no plane or mbarrier bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import llvmlite.ir as ir

from cubepy.compiler import abi
from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower_control import vectorize_hints
from cubepy.compiler.targets.host_abi import (
    AT_BARRIER,
    AT_MBARRIER,
    AT_PLANE,
    CTX_AXIS_BYTES,
    CTX_CTAID,
    CTX_EPOCH,
    CTX_FAULT,
    CTX_FRAMES,
    CTX_HANDLES,
    CTX_MASK,
    CTX_NCTAID,
    CTX_PUBLISH,
    CTX_SHARED,
    CTX_SITE,
    CTX_SNAPSHOT,
    CTX_STATE,
    DONE,
    DRIVER_NAME,
    RUNNABLE,
    frame_allocator,
)
from cubepy.compiler.targets.host_plain import MERGED_UNITS, plain_units, streaming_vector_width, umin
from cubepy.ir import KernelDefinition, ops, walk
from cubepy.ir.variable import PLANE_WIDTH

_REDUCING = (ops.SyncCubeCount, ops.SyncCubeAnd, ops.SyncCubeOr)  # barriers whose units get a reduction

I1, I8, I32, I64, PTR = lt.I1, ir.IntType(8), lt.I32, lt.I64, lt.GENERIC_PTR


def _const(value: int, ty: ir.Type = I32) -> ir.Constant:
    return ir.Constant(ty, value)


class _Emitter:
    """Structured loops and ifs over an IRBuilder, with loop counters in entry-block allocas."""

    def __init__(self, function: ir.Function) -> None:
        self.function = function
        self.entry = ir.IRBuilder(function.append_basic_block("entry"))
        self.b = ir.IRBuilder(function.append_basic_block("start"))
        self.count = 0

    def block(self, hint: str) -> ir.Block:
        self.count += 1
        return self.function.append_basic_block(f"{hint}{self.count}")

    def var(self, ty: ir.Type, init: ir.Value, name: str) -> ir.Value:
        slot = self.entry.alloca(ty, name=name)
        slot.type = PTR
        self.b.store(init, slot)
        return slot

    def load(self, slot: ir.Value, ty: ir.Type = I32) -> ir.Value:
        return self.b.load(slot, typ=ty)

    def loop(
        self,
        start: ir.Value,
        stop: ir.Value,
        body: Callable[[ir.Value], None],
        *,
        vectorize: bool = False,
        scalar: bool = False,
        width: int | None = None,
    ) -> None:
        """``for i in range(start, stop): body(i)``; ``vectorize``: ask LLVM to vectorize it (a short loop over
        units is otherwise unrolled whole before the vectorizer sees it), ``width`` items per vector when given;
        ``scalar``: ask it not to (a rare path whose vector form would only add code)."""
        b = self.b

        def next_index(index: ir.Value) -> ir.Value:
            body(index)
            return b.add(index, _const(1), flags=["nsw"])

        back_edge = self.stepped_loop(start, stop, next_index)
        if vectorize or scalar:
            vectorize_hints(self.function.module, back_edge, enable=not scalar, width=None if scalar else width)

    def stepped_loop(self, start: ir.Value, stop: ir.Value, body: Callable[[ir.Value], ir.Value]) -> ir.Instruction:
        """``i = start; while i < stop: i = body(i)`` (``body`` returns the next index, past ``i``); the back edge."""
        b = self.b
        counter = self.var(I32, start, "i")
        head, step, done = self.block("loop"), self.block("body"), self.block("after")
        b.branch(head)
        b.position_at_end(head)
        index = self.load(counter)
        b.cbranch(b.icmp_signed("<", index, stop), step, done)
        b.position_at_end(step)
        b.store(body(index), counter)
        back_edge = b.branch(head)
        b.position_at_end(done)
        return back_edge

    def when(self, condition: ir.Value, body: Callable[[], None]) -> None:
        b = self.b
        then, done = self.block("then"), self.block("endif")
        b.cbranch(condition, then, done)
        b.position_at_end(then)
        body()
        b.branch(done)
        b.position_at_end(done)

    def element(self, base: ir.Value, index: ir.Value, ty: ir.Type) -> ir.Value:
        return self.b.gep(base, [self.b.zext(index, I64)], source_etype=ty)


def emit_driver(
    module: ir.Module,
    unit: ir.Function,
    definition: KernelDefinition,
    suspends: frozenset[str],
    param_bytes: int,
    barrier_rows: tuple[int, int] = (0, 0),
    whole_cube: tuple[int, tuple[int, ...]] | None = None,
    plain_buffers: tuple[tuple[int, bool], ...] | None = None,
    row_guard: bool = False,
    merge_x: bool = False,
) -> ir.Function:
    """Define ``cubepy_run_cubes`` in ``module`` around the unit function ``unit``.

    ``suspends``: where units wait (``host_suspend.suspension_kinds``); empty for a plain function.
    ``param_bytes``: the size of the parameter block (``abi.param_layout(definition).total_bytes``).

    ``whole_cube``: the unit function runs every unit of the cube itself (``host_fission``): call it once per
    cube, with the shared block, a frame of ``whole_cube[0]`` bytes (the context's first frame slot,
    allocated on first use and kept for the next cube and launch) and the buffer pointers at the parameter
    block's offsets ``whole_cube[1]``.

    ``barrier_rows`` (first byte, bytes) of the shared block are zeroed when a cube starts: its mbarriers
    are uninitialised.  A cube context whose ``CTX_FAULT`` is set runs no more cubes.

    ``plain_buffers``: a plain unit function (no suspension, no fission) taking ``tid`` and its buffers as
    arguments, (offset in the parameter block, exclusive) per buffer.  The driver then loads the buffers and
    calls ``cubepy_run_cubes.range``, which holds the loops, with them as arguments, ``noalias`` where the
    launch checked that no other argument overlaps: LLVM's vectorized rows then need no overlap checks (they
    cost more than a 32-unit row's work).

    ``row_guard``: the plain unit function also takes ``mode`` and ``probe`` (``host_row_guard``): each row is
    probed, then its admitted units run with the guard known.

    ``merge_x``: the plain kernel tells its cubes apart along x only through ``absolute_pos``
    (``merges_cubes_along_x``): consecutive cubes of one x-row run as one cube ``run`` times as wide, the first
    one's ``ctaid`` and ``tid.x`` up to ``run * cube_dim_x``; each unit sees the same ``absolute_pos`` as in its
    own cube, and a row of units is one loop as long as the run (a 32-unit row pays its loop's set-up once per
    run instead of once per cube).
    """
    fn = ir.Function(module, ir.FunctionType(lt.VOID, [PTR, PTR, I32, I32]), DRIVER_NAME)
    # The parameter block (packed ``abi.BLOCK_ALIGN``-aligned by the runtime) is read-only and nothing else
    # writes it during the launch: LLVM may then hoist a length read out of a guarded branch.
    block_attributes = [
        "noalias",
        "readonly",
        f"align {abi.BLOCK_ALIGN}",
        *([f"dereferenceable({param_bytes})"] if param_bytes else []),
    ]
    fn.args[0].attributes = lt.RawArgumentAttributes(block_attributes)
    range_buffers: list[ir.Value] = []
    if plain_buffers is not None and plain_buffers:
        outer = ir.IRBuilder(fn.append_basic_block("entry"))
        loaded = [
            outer.load(outer.gep(fn.args[0], [_const(offset, I64)], source_etype=I8), typ=lt.GLOBAL_PTR)
            for offset, _ in plain_buffers
        ]
        ranged = ir.Function(
            module,
            ir.FunctionType(lt.VOID, [PTR, PTR, I32, I32, *(lt.GLOBAL_PTR for _ in plain_buffers)]),
            f"{DRIVER_NAME}.range",
        )
        ranged.linkage = "internal"
        ranged.args[0].attributes = lt.RawArgumentAttributes(block_attributes)
        for arg, (_, exclusive) in zip(ranged.args[4:], plain_buffers):
            if exclusive:
                arg.attributes = lt.RawArgumentAttributes(["noalias"])
        outer.call(ranged, [*fn.args, *loaded])
        outer.ret_void()
        fn = ranged
        range_buffers = list(fn.args[4:])
    params, cube, first, last = fn.args[:4]
    e = _Emitter(fn)
    b = e.b
    x, y, z = definition.cube_dim
    stream = streaming_vector_width(definition)
    units = x * y * z

    def ctx(offset: int) -> ir.Value:
        return b.gep(cube, [_const(offset, I64)], source_etype=I8)

    nx, ny = b.load(ctx(CTX_NCTAID), typ=I32), b.load(ctx(CTX_NCTAID + CTX_AXIS_BYTES), typ=I32)
    coroutine = bool(suspends)
    reduces = any(isinstance(i.operation, _REDUCING) for i in walk(definition.body))
    arrays = {}
    if coroutine:
        for name, offset in (
            ("state", CTX_STATE),
            ("site", CTX_SITE),
            ("mask", CTX_MASK),
            ("publish", CTX_PUBLISH),
            ("snapshot", CTX_SNAPSHOT),
            ("handles", CTX_HANDLES),
        ):
            arrays[name] = b.load(ctx(offset), typ=PTR, name=name)

    # The cube position is stepped from cube to cube (x, carried into y, then z): three divisions per cube cost
    # as much as a small cube's work.  They are done once, for the first cube.
    position = [
        e.var(I32, value, f"ctaid_{axis}")
        for axis, value in zip("xyz", (b.urem(first, nx), b.urem(b.udiv(first, nx), ny), b.udiv(first, b.mul(nx, ny))))
    ]

    def step_position(cubes: ir.Value | None = None) -> None:
        """The position ``cubes`` (default 1) cubes on, never past the end of its x-row."""
        cx, cy, cz = (e.load(slot) for slot in position)
        next_x, next_y = b.add(cx, _const(1) if cubes is None else cubes), b.add(cy, _const(1))
        wrap_x = b.icmp_unsigned(">=", next_x, nx)
        wrap_y = b.and_(wrap_x, b.icmp_unsigned(">=", next_y, ny))
        b.store(b.select(wrap_x, _const(0), next_x), position[0])
        b.store(b.select(wrap_x, b.select(wrap_y, _const(0), next_y), cy), position[1])
        b.store(b.select(wrap_y, b.add(cz, _const(1)), cz), position[2])

    def run_cube(linear: ir.Value) -> None:
        ctaid = [e.load(slot) for slot in position]
        for axis, value in enumerate(ctaid):
            b.store(value, ctx(CTX_CTAID + CTX_AXIS_BYTES * axis))
        if barrier_rows[1]:
            shared = b.load(ctx(CTX_SHARED), typ=PTR)
            rows = b.gep(shared, [_const(barrier_rows[0], I64)], source_etype=I8)
            memset = module.globals.get("llvm.memset.p0.i64") or ir.Function(
                module, ir.FunctionType(lt.VOID, [PTR, I8, I64, I1]), "llvm.memset.p0.i64"
            )
            b.call(memset, [rows, _const(0, I8), _const(barrier_rows[1], I64), _const(0, I1)])
        if whole_cube is not None:
            shared = b.load(ctx(CTX_SHARED), typ=PTR)
            frames = b.load(ctx(CTX_FRAMES), typ=PTR)
            frame = b.call(frame_allocator(module), [frames, _const(max(whole_cube[0], 1), I64)])
            buffers = [
                b.load(b.gep(params, [_const(offset, I64)], source_etype=I8), typ=lt.GLOBAL_PTR)
                for offset in whole_cube[1]
            ]
            b.call(unit, [params, cube, _const(0), *ctaid, shared, frame, *buffers])
            return
        if not coroutine:
            plain_units(e, unit, (params, cube, ctaid, range_buffers), (x, y, z), row_guard, None, stream)
            return
        run = _CubeRun(e, unit, params, cube, arrays, units, ctaid, reduces)
        if suspends == {"barrier"}:
            _schedule_barriers(run)
        else:
            _schedule(run, suspends)

    def run_unless_failed(linear: ir.Value) -> None:
        fault = b.load_atomic(ctx(CTX_FAULT), "monotonic", 4, typ=I32)  # set by another thread on Ctrl-C
        healthy = b.icmp_signed("==", fault, _const(0))
        e.when(healthy, lambda: run_cube(linear))
        step_position()

    def run_merged(index: ir.Value) -> ir.Value:
        """The run of cubes from ``index`` to the end of its x-row (or of the range, or ``MERGED_CUBES``), as one
        cube; the index after it."""
        ctaid = [e.load(slot) for slot in position]
        run = umin(b, umin(b, b.sub(nx, ctaid[0]), b.sub(last, index)), _const(max(1, MERGED_UNITS // x)))

        def go() -> None:
            for axis, value in enumerate(ctaid):
                b.store(value, ctx(CTX_CTAID + CTX_AXIS_BYTES * axis))
            width = b.mul(run, _const(x), flags=["nuw"])
            plain_units(e, unit, (params, cube, ctaid, range_buffers), (x, y, z), row_guard, width, stream)

        fault = b.load_atomic(ctx(CTX_FAULT), "monotonic", 4, typ=I32)  # set by another thread on Ctrl-C
        e.when(b.icmp_signed("==", fault, _const(0)), go)
        step_position(run)
        return b.add(index, run, flags=["nsw"])

    if merge_x and not coroutine and whole_cube is None:
        e.stepped_loop(first, last, run_merged)
    else:
        e.loop(first, last, run_unless_failed)
    b.ret_void()
    e.entry.branch(fn.blocks[1])
    return module.get_global(DRIVER_NAME)


def _coroutine_intrinsic(module: ir.Module, name: str) -> ir.Function:
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(lt.VOID, [PTR]), name)


@attrs.frozen
class _CubeRun:
    """What a scheduler emits its code around: the unit coroutine and the driver's arguments for one cube, the
    cube context's per-unit arrays, and whether the kernel's barriers reduce a predicate."""

    e: _Emitter
    unit: ir.Function
    params: ir.Value
    cube: ir.Value
    arrays: dict[str, ir.Value]
    units: int
    ctaid: list[ir.Value]
    reduces: bool

    def each_unit(self, body: Callable[[ir.Value], None]) -> None:
        """``body(u)`` for every unit ``u`` of the cube."""
        self.e.loop(_const(0), _const(self.units), body)

    def start_units(self) -> None:
        """Call every unit's ramp (it runs to its first suspension) and keep its coroutine handle."""
        e, b = self.e, self.e.b
        handles = self.arrays["handles"]
        args = [self.params, self.cube]
        self.each_unit(lambda u: b.store(b.call(self.unit, [*args, u, *self.ctaid]), e.element(handles, u, PTR)))

    def destroy_units(self) -> None:
        """Destroy every unit's coroutine (its frame stays with its slot for the next cube)."""
        e, b = self.e, self.e.b
        destroy = _coroutine_intrinsic(self.unit.module, "llvm.coro.destroy")
        handles = self.arrays["handles"]
        self.each_unit(lambda u: b.call(destroy, [b.load(e.element(handles, u, PTR), typ=PTR)]))


def _reduce_at_barrier(run: _CubeRun) -> None:
    """For ``sync_cube_count/and/or``: the units waiting at the barrier published a 0/1 predicate; leave
    ``count << 32 | arrived`` in each one's snapshot word before they are released."""
    e, b = run.e, run.e.b
    state, publish, snapshot = run.arrays["state"], run.arrays["publish"], run.arrays["snapshot"]
    count, arrived = e.var(I64, _const(0, I64), "count"), e.var(I64, _const(0, I64), "arrived")

    def at_barrier(u: ir.Value) -> ir.Value:
        return b.icmp_unsigned("==", b.load(e.element(state, u, I32), typ=I32), _const(AT_BARRIER))

    def tally(u: ir.Value) -> None:
        def go() -> None:
            vote = b.and_(b.load(e.element(publish, u, I64), typ=I64), _const(1, I64))
            b.store(b.add(e.load(count, I64), vote), count)
            b.store(b.add(e.load(arrived, I64), _const(1, I64)), arrived)

        e.when(at_barrier(u), go)

    run.each_unit(tally)
    word = b.or_(b.shl(e.load(count, I64), _const(32, I64)), e.load(arrived, I64))
    run.each_unit(lambda u: e.when(at_barrier(u), lambda: b.store(word, e.element(snapshot, u, I64))))


def _schedule_barriers(run: _CubeRun) -> None:
    """Units that wait only at ``sync_cube``: after a round every unit is at a barrier or done, so the next
    round resumes every unit not done; the cube ends after a round that leaves none waiting."""
    e, b = run.e, run.e.b
    state, handles = run.arrays["state"], run.arrays["handles"]
    run.start_units()
    resume = _coroutine_intrinsic(run.unit.module, "llvm.coro.resume")
    head, after = e.block("round"), e.block("rounds.done")
    b.branch(head)
    b.position_at_end(head)
    if run.reduces:
        _reduce_at_barrier(run)
    waiting = e.var(I1, _const(0, I1), "waiting")

    def step(u: ir.Value) -> None:
        slot = e.element(state, u, I32)

        def go() -> None:
            b.call(resume, [b.load(e.element(handles, u, PTR), typ=PTR)])
            still = b.icmp_unsigned("!=", b.load(slot, typ=I32), _const(DONE))
            b.store(b.or_(e.load(waiting, I1), still), waiting)

        e.when(b.icmp_unsigned("!=", b.load(slot, typ=I32), _const(DONE)), go)

    run.each_unit(step)
    b.cbranch(e.load(waiting, I1), head, after)
    b.position_at_end(after)
    run.destroy_units()


def _schedule(run: _CubeRun, suspends: frozenset[str]) -> None:
    """The general round-robin scheduler (``cubepy.compiler.targets.host``), with the parts ``suspends`` needs."""
    e, b = run.e, run.e.b
    unit, cube, arrays, units = run.unit, run.cube, run.arrays, run.units
    state, site, mask = arrays["state"], arrays["site"], arrays["mask"]
    publish, snapshot, handles = arrays["publish"], arrays["snapshot"], arrays["handles"]

    def state_of(u: ir.Value) -> ir.Value:
        return b.load(e.element(state, u, I32), typ=I32)

    run.start_units()
    polled = e.var(I1, _const(0, I1), "polled")  # waiting units were resumed at least once in this cube
    last_poll = e.var(I32, _const(0), "last_poll")  # CTX_EPOCH when they were last resumed
    head, after = e.block("schedule"), e.block("scheduled")
    b.branch(head)
    b.position_at_end(head)

    def resume(u: ir.Value) -> None:
        def go() -> None:
            handle = b.load(e.element(handles, u, PTR), typ=PTR)
            b.call(_coroutine_intrinsic(unit.module, "llvm.coro.resume"), [handle])

        e.when(b.icmp_unsigned("==", state_of(u), _const(RUNNABLE)), go)

    e.loop(_const(0), _const(units), resume)
    progress = e.var(I1, _const(0, I1), "progress")
    planes = -(-units // PLANE_WIDTH)
    # A plane with units waiting at an mbarrier (or a wgmma) is released only when polling the waiters frees
    # nothing: those units may be on the same path as the ones at the plane operation, only behind them (the
    # last unit to arrive at a barrier, or the warpgroup's last unit at a wgmma, which runs the product, goes on
    # without suspending). Released at once, the units ahead would form a partial active mask the lockstep
    # interp never sees.
    defer = "mbarrier" in suspends

    def release_plane(plane: ir.Value, deferring: bool) -> None:
        base = b.mul(plane, _const(PLANE_WIDTH))
        end = b.select(
            b.icmp_signed("<", b.add(base, _const(PLANE_WIDTH)), _const(units)),
            b.add(base, _const(PLANE_WIDTH)),
            _const(units),
        )
        if deferring:
            behind = e.var(I1, _const(0, I1), "behind")

            def note_waiter(u: ir.Value) -> None:
                waiting = b.icmp_unsigned("==", state_of(u), _const(AT_MBARRIER))
                b.store(b.or_(e.load(behind, I1), waiting), behind)

            e.loop(base, end, note_waiter)
            e.when(b.not_(e.load(behind, I1)), lambda: _release_at_lowest(base, end))
        else:
            _release_at_lowest(base, end)

    def _release_at_lowest(base: ir.Value, end: ir.Value) -> None:
        lowest = e.var(I32, _const(-1), "lowest")  # unsigned max: no unit waiting

        def find(u: ir.Value) -> None:
            waiting = b.icmp_unsigned("==", state_of(u), _const(AT_PLANE))
            at = b.load(e.element(site, u, I32), typ=I32)
            e.when(b.and_(waiting, b.icmp_unsigned("<", at, e.load(lowest))), lambda: b.store(at, lowest))

        e.loop(base, end, find)
        together = e.var(I32, _const(0), "together")

        def member(u: ir.Value) -> ir.Value:
            waiting = b.icmp_unsigned("==", state_of(u), _const(AT_PLANE))
            return b.and_(waiting, b.icmp_unsigned("==", b.load(e.element(site, u, I32), typ=I32), e.load(lowest)))

        def collect(u: ir.Value) -> None:
            bit = b.shl(_const(1), b.sub(u, base))
            e.when(member(u), lambda: b.store(b.or_(e.load(together), bit), together))

        def release(u: ir.Value) -> None:
            def go() -> None:
                word = b.load(e.element(publish, u, I64), typ=I64)
                b.store(word, e.element(snapshot, u, I64))
                b.store(e.load(together), e.element(mask, u, I32))
                b.store(_const(RUNNABLE), e.element(state, u, I32))
                b.store(_const(1, I1), progress)

            e.when(member(u), go)

        def found() -> None:
            e.loop(base, end, collect)
            e.loop(base, end, release)

        e.when(b.icmp_unsigned("!=", e.load(lowest), _const(-1)), found)

    if "plane" in suspends:
        e.loop(_const(0), _const(planes), lambda plane: release_plane(plane, defer))
    stuck = e.block("stuck")
    b.cbranch(e.load(progress, I1), head, stuck)
    b.position_at_end(stuck)
    if "mbarrier" in suspends:
        partial = None
        if "plane" in suspends:  # the waiters' barriers did not change: release the deferred planes first

            def release_deferred() -> None:
                e.loop(_const(0), _const(planes), lambda plane: release_plane(plane, False))

            partial = (release_deferred, progress)
        _mbarrier_waiters(e, cube, state, units, polled, last_poll, head, after, partial)
    released = e.var(I1, _const(0, I1), "released")

    def release_barrier(u: ir.Value) -> None:
        def go() -> None:
            b.store(_const(RUNNABLE), e.element(state, u, I32))
            b.store(_const(1, I1), released)

        e.when(b.icmp_unsigned("==", state_of(u), _const(AT_BARRIER)), go)

    if run.reduces:
        _reduce_at_barrier(run)
    run.each_unit(release_barrier)
    b.cbranch(e.load(released, I1), head, after)
    b.position_at_end(after)
    run.destroy_units()


def _mbarrier_waiters(
    e: _Emitter,
    cube: ir.Value,
    state: ir.Value,
    units: int,
    polled: ir.Value,
    last_poll: ir.Value,
    head: ir.Block,
    after: ir.Block,
    partial: tuple[Callable[[], None], ir.Value] | None = None,
) -> None:
    """Nothing is runnable: resume the units waiting at mbarriers if some barrier changed since they last
    tested, else release the planes deferred for them (``partial``: the code that does it and the flag it sets
    when it released some), else report the first of them as deadlocked (``CTX_FAULT``) and end the cube.
    Without waiting units, fall through to the ``sync_cube`` release."""
    b = e.b
    first = e.var(I32, _const(-1), "first_waiter")

    def note(u: ir.Value) -> None:
        waiting = b.icmp_unsigned("==", b.load(e.element(state, u, I32), typ=I32), _const(AT_MBARRIER))
        unseen = b.icmp_signed("<", e.load(first), _const(0))
        e.when(b.and_(waiting, unseen), lambda: b.store(u, first))

    e.loop(_const(0), _const(units), note)
    waiters, no_waiters = e.block("mbarrier.waiters"), e.block("mbarrier.none")
    b.cbranch(b.icmp_signed(">=", e.load(first), _const(0)), waiters, no_waiters)
    b.position_at_end(waiters)
    epoch = b.load(b.gep(cube, [_const(CTX_EPOCH, I64)], source_etype=I8), typ=I32)
    changed = b.or_(b.not_(e.load(polled, I1)), b.icmp_unsigned("!=", epoch, e.load(last_poll)))
    poll, deadlock = e.block("mbarrier.poll"), e.block("mbarrier.deadlock")
    b.cbranch(changed, poll, deadlock)
    b.position_at_end(poll)
    b.store(_const(1, I1), polled)
    b.store(epoch, last_poll)

    def wake(u: ir.Value) -> None:
        slot = e.element(state, u, I32)
        e.when(
            b.icmp_unsigned("==", b.load(slot, typ=I32), _const(AT_MBARRIER)),
            lambda: b.store(_const(RUNNABLE), slot),
        )

    e.loop(_const(0), _const(units), wake)
    b.branch(head)
    b.position_at_end(deadlock)
    if partial is not None:
        release_deferred, released = partial
        release_deferred()
        report = e.block("mbarrier.report")
        b.cbranch(e.load(released, I1), head, report)
        b.position_at_end(report)
    b.store(b.add(e.load(first), _const(1)), b.gep(cube, [_const(CTX_FAULT, I64)], source_etype=I8))
    b.branch(after)
    b.position_at_end(no_waiters)
