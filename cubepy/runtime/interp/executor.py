"""The interp's executor: a kernel prepared once, then run chunk by chunk of whole cubes, group by group.

Every IR instruction runs once for all lanes of a *group* (one numpy operation over arrays of lanes).
A group is a lane mask with an explicit continuation (``groups``): the frames of the regions it is in,
each with the index of its next step.  Control-flow handlers (``control``) push frames instead of
recursing, so a group can stop at any step and go on later.  Under the default ``lockstep`` schedule a
chunk is one group that runs start to end exactly as a recursive lockstep walk would; a wait that some
lanes cannot pass yet (``ctx.block``) splits them off as a blocked group and the others go on, and
groups at the same program point merge again.  Other schedules (``schedule``) start with one group
per plane and interleave them.  Cubes are independent, so chunks run one after another with bounded
memory; shared memory and local arrays live as long as their chunk, and locals are freed after their
last use while one group holds every lane.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, cast

import numpy as np

from cubepy.errors import CubeError, InterpreterError, LaunchError, SanitizerError, SanitizerKind
from cubepy.ir import Instruction, KernelDefinition, Scope, Variable, VarKind
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.bindings import Bindings
from cubepy.runtime.interp.chunk_state import ChunkState
from cubepy.runtime.interp.control import SpinWait, check_progress, idle_spin_check
from cubepy.runtime.interp.groups import Frame, Group, LoopControl, LoopState, Wait
from cubepy.runtime.interp.launch import Launch
from cubepy.runtime.interp.memory import MemoryRef, const_table_ref, local_ref, shared_ref
from cubepy.runtime.interp.plane import PlaneLayout
from cubepy.runtime.interp.program import prepare, source_prefix
from cubepy.runtime.interp.sanitizer import SharedSanitizer
from cubepy.runtime.interp.schedule import InFlight, Picker, Schedule
from cubepy.runtime.interp.values import Mask, Topology, ValueStore, literal


class LaneCounter:
    """Counts executed IR instructions and lane-instructions (instruction x active lanes)."""

    def __init__(self) -> None:
        self.instructions = 0
        self.lane_instructions = 0

    def count(self, mask: Mask) -> None:
        """Add one instruction run for the lanes of ``mask``."""
        self.instructions += 1
        self.lane_instructions += mask.bits.size if mask.full else int(np.count_nonzero(mask.bits))


_counter: LaneCounter | None = None


@contextlib.contextmanager
def counting() -> Iterator[LaneCounter]:
    """Count what launches inside the ``with`` block execute (for benchmarks; off otherwise)."""
    global _counter
    saved, _counter = _counter, LaneCounter()
    try:
        yield _counter
    finally:
        _counter = saved


class Chunk:
    """The execution state of a chunk of whole cubes; handlers receive it as ``ctx``."""

    def __init__(self, launch: Launch, first_cube: int, cubes: int) -> None:
        self.launch = launch
        self.program = launch.program
        kernel = launch.kernel
        self.topology = Topology(kernel.cube_dim, launch.cube_count, first_cube, cubes, launch.cluster)
        self.lanes = self.topology.lanes
        self.values = ValueStore(self.lanes, self.program.literals)
        # ``ctx.write(var, value, mask)`` assigns ``value`` to local ``var`` on the lanes of ``mask``.  It is
        # the value store's bound method itself, not a method of Chunk: the hottest call of every handler
        # skips one indirection.
        self.write: Callable[[Variable, np.ndarray | np.generic, Mask], None] = self.values.write
        self.no_lanes = np.zeros(self.lanes, dtype=bool)
        self.no_lanes.flags.writeable = False  # shared by every empty mask: never written
        self.returned = self.no_lanes
        self.finished = self.no_lanes  # lanes whose group ran off the end of the kernel
        # The running group's frames and loop states (handlers push regions and mark breaks there).
        self.frames: list[Frame] = []
        self.loops: list[LoopState] = []
        self.groups: list[Group] = []
        self.order = 0  # creation counter of groups
        self.pending: tuple[np.ndarray, Wait] | None = None  # a block asked for by the step just run
        self.frees = True  # one group holds every lane: dead locals may be freed, writes need no merge
        self.schedule = launch.schedule
        self.picker = Picker(launch.schedule, first_cube)
        self.parks = launch.schedule.name == "lockstep"  # groups wait at joins for the others to merge
        self.in_flight = InFlight()  # asynchronous copies issued and not landed
        self.spin_loops = self.program.spin_loops
        self.activity = 0  # group runs that did not end by spinning (a SpinWait polls it)
        self.spun = False  # the group run now ended by yielding at a spin loop's back-edge
        self.spin_marks: dict[object, bytes] = {}  # livelock checks: the last state digest, per loop or idle
        self.idle_rounds = (0, 0)  # (activity, rounds): idle rounds of spinning since the last activity
        self.state = ChunkState()  # per-chunk state of the op families (barriers, race trackers, hooks)
        self._memories: dict[tuple[VarKind, int], MemoryRef] = {}
        self._shared_arena: np.ndarray | None = None
        self._plane_layout: PlaneLayout | None = None
        # Shared-memory race and initialization tracking; None (one attribute test per access) when off.
        self.sanitizer: SharedSanitizer | None = None
        if launch.sanitize and self.program.shared_bytes:
            self.sanitizer = SharedSanitizer(cubes, self.program.shared_bytes, self.topology.units)
        self.coverage = launch.coverage  # None (one attribute test per global access) unless recording

    # -- values ----------------------------------------------------------------------------
    def read(self, var: Variable) -> np.ndarray | np.generic:
        """The value of ``var`` for every lane (a lane array or a uniform value)."""
        kind = var.kind
        try:
            if kind is VarKind.CONST:
                return self.values.locals[var.id * 2]
            if kind is VarKind.MUT:
                return self.values.locals[var.id * 2 + 1]
        except KeyError:
            raise LookupError(f"{var!r} is read before any instruction assigns it") from None
        if kind is VarKind.CONSTANT:
            value = self.values.uniforms.get(id(var))
            if value is None:
                value = self.values.uniforms[id(var)] = literal(var.value, var.type)
            return value
        if kind is VarKind.BUILTIN:
            return self.topology.get(cast(str, var.name))  # a builtin always has its name
        if kind is VarKind.SCALAR:
            return self.launch.scalars[var.id]
        raise TypeError(f"{var!r} is a {kind.value}: it has no value to read")

    # -- memories --------------------------------------------------------------------------
    def memory(self, var: Variable) -> MemoryRef:
        """How this chunk addresses the memory ``var`` (a buffer, shared memory, local array or constant table)."""
        key = (var.kind, var.id)
        ref = self._memories.get(key)
        if ref is not None:
            return ref
        if var.kind is VarKind.GLOBAL:
            ref = self.launch.globals[var.id]
        elif var.kind is VarKind.SHARED:
            offset = self.program.shared_offsets.get(var.id)
            if offset is None:
                raise LookupError(f"{var!r} is not declared in the kernel's shared memories")
            ref = shared_ref(var, self.shared_arena(), offset, self.topology.lane_of_cube())
        elif var.kind is VarKind.LOCAL_ARRAY:
            ref = local_ref(var, self.lanes)
        elif var.kind is VarKind.CONST_TABLE:
            items = self.program.const_tables.get(var.id)
            if items is None:
                raise LookupError(f"{var!r} is not declared in the kernel's constant tables")
            ref = const_table_ref(var, items)
        else:
            raise TypeError(f"{var!r} is a {var.kind.value}, not a memory")
        self._memories[key] = ref
        return ref

    def shared_arena(self) -> np.ndarray:
        """The shared-memory bytes of every cube of the chunk, ``(cubes, bytes)`` (zero-filled at start)."""
        if self._shared_arena is None:
            self._shared_arena = np.zeros((self.topology.cubes, self.program.shared_bytes), dtype=np.uint8)
        return self._shared_arena

    def shared_offset(self, var: Variable) -> int:
        """The byte offset of shared memory ``var`` in a cube's arena (its shared-memory address)."""
        return self.program.shared_offsets[var.id]

    def plane_layout(self) -> PlaneLayout:
        """The lanes of this chunk grouped into planes."""
        if self._plane_layout is None:
            self._plane_layout = PlaneLayout(self.topology.cubes, self.topology.units)
        return self._plane_layout

    # -- errors ----------------------------------------------------------------------------
    def describe_lane(self, lane: int) -> str:
        """``unit (x, y, z) of cube (x, y, z)`` for a lane of this chunk."""
        return f"unit {self.topology.unit_pos_of(lane)} of cube {self.topology.cube_pos_of(lane)}"

    def fail(self, inst: Instruction, message: str, lane: int, kind: SanitizerKind) -> NoReturn:
        """Raise the ``SanitizerError`` of a kernel bug of ``kind`` at ``inst`` on ``lane``."""
        if not message.startswith(kind.value):
            message = f"{kind.value}: {message}"  # every report starts with its kind
        if self.schedule.name != "lockstep":  # the interleaving that found it, to replay it
            message = f"{message} (schedule {self.schedule.describe()})"
        raise SanitizerError(
            f"{source_prefix(inst)}{message}, by {self.describe_lane(lane)}\n  in instruction: {inst}", kind
        )

    # -- groups and their frames ------------------------------------------------------------
    def exited(self) -> np.ndarray:
        """Lanes that left the current region: returned, or broke/continued the innermost loop."""
        if not self.loops:
            return self.returned
        loop = self.loops[-1]
        return cast(np.ndarray, self.returned | loop.broken | loop.continued)

    def enter(self, scope: Scope, mask: Mask) -> None:
        """Run ``scope`` for the lanes of ``mask`` next (before the rest of the current region)."""
        self.frames.append(Frame(self.program.scopes[id(scope)], mask))

    def enter_loop(self, body: Scope, mask: Mask, range_index: object) -> None:
        """Iterate ``body`` for the lanes of ``mask`` next; ``range_index`` steps a range loop (None: ``loop``)."""
        state = LoopState(self.no_lanes)
        control = LoopControl(self.program.scopes[id(body)], state, mask, self.program.may_leave(body), range_index)
        self.frames.append(Frame((), mask, control))
        self.loops.append(state)

    def set_index(self, var: Variable, value: np.ndarray | np.generic, mask: Mask) -> None:
        """Store a range loop's index for the lanes of ``mask`` (whole, while one group has every lane)."""
        if self.frees:
            self.values.set(var, value)
        else:
            self.values.write_merged(var, np.asarray(value), mask)

    def block(self, lanes: np.ndarray, wait: Wait) -> None:
        """Suspend the lanes of ``lanes`` (of the current step's mask) until ``wait.poll`` lets them go on."""
        if lanes.any():
            self.pending = (lanes, wait)

    def share_values(self) -> None:
        """From now on groups may run the same instructions at different times: merge every write, free nothing."""
        if self.frees:
            self.frees = False
            self.write = self.values.write_merged

    def run_group(self, group: Group, budget: int) -> int:
        """Run ``group`` for at most ``budget`` steps, until it finishes or blocks; the steps left."""
        frames = group.frames
        self.frames = frames
        self.loops = group.loops
        values = self.values
        counter = _counter
        while frames:
            frame = frames[-1]
            control = frame.loop
            if control is not None:
                body_mask = control.advance(self)
                if body_mask is None:
                    frames.pop()
                    self.loops.pop()
                    if control.range is not None and self.frees:
                        values.free((values.key(control.range.op.index),))
                    self._back_in(frames)
                    if self.parks and len(self.groups) > 1:
                        group.parked = True  # a join: let the other groups catch up (they merge when they do)
                        return budget
                else:
                    frames.append(Frame(control.body, body_mask))
                    if control.iteration and control.range is None and id(control.body) in self.spin_loops:
                        if self.spin_yield(group, control, body_mask):
                            return budget
                continue
            steps = frame.steps
            mask = frame.mask
            n = len(steps)
            pc = frame.pc if mask.any else n
            depth = len(frames)
            while pc < n:
                if budget <= 0:
                    frame.pc = pc
                    return 0
                budget -= 1
                step = steps[pc]
                pc += 1
                if counter is not None:
                    counter.count(mask)
                try:
                    step.handler(self, step.inst, mask)
                except CubeError:
                    raise
                except Exception as exc:
                    raise InterpreterError(
                        f"{source_prefix(step.inst)}interp failed on `{step.inst}`: {type(exc).__name__}: {exc}"
                    ) from exc
                if step.foreign_shared and self.sanitizer is not None:
                    self._mark_foreign_writes(step.foreign_shared, mask)
                if step.control:
                    frame.pc = pc
                    if len(frames) != depth:
                        break  # the step pushed regions: run them first (``_back_in`` frees its dead)
                    if self.pending is not None:
                        if self._suspend(group):
                            return budget
                        mask = frame.mask
                        if not mask.any:
                            pc = n
                    elif step.may_exit:
                        mask = frame.mask = mask.without(self.exited())
                        if not mask.any:
                            pc = n
                if step.dead and self.frees:
                    values.free(step.dead)
            else:
                frames.pop()
                self._back_in(frames)
                if self.parks and len(self.groups) > 1 and frames and not self._spin_body_ended(frames[-1]):
                    group.parked = True  # a join: let the other groups catch up (they merge when they do)
                    return budget
        self.finished = self.finished | group.lanes
        return budget

    def _spin_body_ended(self, frame: Frame) -> bool:
        # An iteration of a spin loop ended: no join there, its back-edge decides whether to yield.  (Parked
        # there, spinners would merge with the unit that broke out with the lock, and hold it back again.)
        return frame.loop is not None and id(frame.loop.body) in self.spin_loops

    def spin_yield(self, group: Group, control: LoopControl, body_mask: Mask) -> bool:
        """At a spin loop's back-edge: let the chunk's other units run first; True when the whole group waits.

        Alone, the units spin on, but every 2^k-th iteration checks that an iteration changed something.
        """
        frames = self.frames
        loop_inst = frames[-3].steps[frames[-3].pc - 1].inst  # below: the loop's control frame, then its body
        alone = len(self.groups) == 1 and (body_mask.full or not (group.lanes & ~self.returned & ~body_mask.bits).any())
        if alone:
            check_progress(self, control, control.iteration, loop_inst, body_mask.bits)
            return False
        self.pending = (body_mask.bits, SpinWait(loop_inst, self.activity))
        if self._suspend(group):
            self.spun = True
            return True
        return False

    def memory_refs(self) -> dict[tuple[VarKind, int], MemoryRef]:
        """The memories this chunk addressed so far, by (kind, id)."""
        return self._memories

    def _back_in(self, frames: list[Frame]) -> None:
        """A region ended: the region that entered it drops the lanes that left it for good."""
        if frames:
            parent = frames[-1]
            if parent.loop is None and parent.pc:
                step = parent.steps[parent.pc - 1]
                if step.may_exit:
                    parent.mask = parent.mask.without(self.exited())
                if step.dead and self.frees:
                    self.values.free(step.dead)

    def _suspend(self, group: Group) -> bool:
        """Split off the lanes of the pending block as a blocked group; True when the whole group blocked."""
        lanes, wait = self.pending  # type: ignore[misc]
        self.pending = None
        live = group.lanes & ~self.returned
        if not (live & ~lanes).any():
            group.wait, group.waiting = wait, lanes
            return True
        self.share_values()
        self.order += 1
        blocked = group.split(lanes, self.order)
        blocked.wait, blocked.waiting = wait, lanes
        self.groups.append(blocked)
        return False

    def _mark_foreign_writes(self, memories: tuple[Variable, ...], mask: Mask) -> None:
        """Count every byte of ``memories`` as written in the cubes where ``mask`` has lanes."""
        cubes = cast(np.ndarray, mask.bits.reshape(-1, self.topology.units).any(axis=1))
        for var in memories:
            start = self.shared_offset(var)
            cast(SharedSanitizer, self.sanitizer).mark_written(cubes, start, cast(int, var.length) * var.type.size)

    # -- the schedule ------------------------------------------------------------------------
    def execute(self) -> None:
        """Run the kernel body for every lane of the chunk, group by group as the schedule says."""
        body = self.program.steps(self.program.kernel.body)
        if not self.schedule.independent_planes:
            everyone = Mask.all_lanes(self.lanes)
            self.groups = [Group(everyone.bits, [Frame(body, everyone)], 0, 0)]
        else:
            self.share_values()
            lane = np.arange(self.lanes)
            units = self.topology.units
            homes = (lane // units) * -(-units // PLANE_WIDTH) + (lane % units) // PLANE_WIDTH
            self.groups = []
            for home in range(int(homes.max()) + 1 if homes.size else 0):
                bits = homes == home
                self.groups.append(Group(bits, [Frame(body, Mask(bits))], home, home))
            self.order = len(self.groups)
        picker = self.picker
        groups = self.groups
        while True:
            runnable = self._runnable()
            if not runnable and not self.in_flight.copies:
                idle_spin_check(self)
                runnable = self._runnable(idle=True)  # waits that yield (try_wait) go on once all are stuck
                if not runnable:
                    if groups:
                        self._deadlock()
                    break
            group, amount = picker.choose(runnable, len(self.in_flight.copies))
            if group is None:
                self.in_flight.land(amount)
                continue
            assert isinstance(group, Group)
            self._merge_into(group, runnable)
            self.spun = False
            self.run_group(group, amount)
            if not self.spun:
                self.activity += 1
            if not group.frames:
                groups.remove(group)
        self.in_flight.land_all()
        for check in self.state.end_checks:
            check(self)  # whole-run checks of op families (interp.cluster: peer accesses vs. exits)

    def _runnable(self, idle: bool = False) -> list[Group]:
        """The groups that can run now; blocked groups whose wait lets lanes go on are woken first.

        With ``idle`` (nothing else can run) the waits are asked ``on_idle`` instead of ``poll``.
        """
        runnable = []
        for group in list(self.groups):
            wait = group.wait
            if wait is not None:
                waiting = group.waiting
                ready = (wait.on_idle if idle else wait.poll)(self, waiting)  # type: ignore[arg-type]
                if not ready.any():
                    continue
                if (waiting & ~ready).any():
                    self.share_values()  # the woken lanes run apart from the ones still waiting
                    self.order += 1
                    woken = group.split(ready, self.order)
                    group.waiting = waiting & ~ready
                    self.groups.append(woken)
                    group = woken
                else:
                    group.wait = group.waiting = None
                wait.resume(self, Mask(ready))
            runnable.append(group)
        return runnable

    def _merge_into(self, group: Group, runnable: list[Group]) -> None:
        """Join into ``group`` every other runnable group of its home at the same program point."""
        if len(runnable) < 2:
            return
        position = None
        for other in runnable:
            if other is group or other.home != group.home or other.wait is not None or not other.frames:
                continue
            if position is None:
                position = group.position()
            if other.position() == position:
                group.merge(other)
                self.groups.remove(other)
                other.frames = []

    def _deadlock(self) -> NoReturn:
        """Every group waits and no copy is in flight: report the first wait, naming every waiter."""
        blocked = [group for group in self.groups if group.wait is not None]
        first = blocked[0]
        wait = first.wait
        assert wait is not None and first.waiting is not None
        lane = int(np.argmax(first.waiting))
        others = "".join(
            f"\n  also waiting: {source_prefix(g.wait.inst)}{g.wait.describe(self, g.waiting)}"  # type: ignore[union-attr,arg-type]
            for g in blocked[1:4]
        )
        kind = wait.deadlock_kind(self, first.waiting)
        units = self.topology.units
        cube = lane // units
        running = np.zeros_like(self.returned)
        for group in self.groups:
            if group.frames:
                running |= group.lanes
        running &= ~self.returned
        finished = units - int(running[cube * units : (cube + 1) * units].sum())
        left = ""
        if finished:
            # The phase nobody reached may be owed by units that already left: say so, and do not blame the
            # waiter's parity alone (a partner that skipped a wait of its own ran ahead and left).
            left = (
                f"; {finished} units of this cube already finished the kernel, so any arrival they owe this "
                "phase never comes (a unit that skipped a wait of its own runs ahead: its arrivals go to "
                "earlier phases)"
            )
            if kind is SanitizerKind.WRONG_PARITY:
                kind = SanitizerKind.BARRIER_DEADLOCK
        # fail() adds the kind ("barrier deadlock: ...") and, off lockstep, the schedule.
        self.fail(
            wait.inst,
            f"{wait.describe(self, first.waiting)}{left}; every live unit of the chunk is waiting and no "
            f"copy is in flight{others}",
            lane,
            kind=kind,
        )


def run(
    kernel: KernelDefinition,
    cube_count: Any,  # a CubeCount or an (x, y, z) sequence
    bindings: Bindings,
    *,
    sanitize: bool = False,
    schedule: Schedule | None = None,
    cluster: tuple[int, int, int] = (1, 1, 1),
) -> None:
    """Execute ``kernel`` for a grid of ``cube_count`` cubes (in clusters of ``cluster``) on the CPU; buffers are
    written in place."""
    program = prepare(kernel)
    counts = tuple(int(c) for c in (cube_count.as_tuple() if hasattr(cube_count, "as_tuple") else cube_count))
    if len(counts) != 3:
        raise LaunchError(f"cube_count {cube_count!r}: expected (x, y, z)")
    if getattr(cube_count, "cluster", None) is not None:
        cluster = cube_count.cluster.as_tuple()
    if any(count % size for count, size in zip(counts, cluster)):
        raise LaunchError(f"cube_count {counts} is not a whole number of clusters of {tuple(cluster)}")
    launch = Launch(program, counts, bindings, sanitize, schedule or Schedule(), tuple(cluster))  # type: ignore[arg-type]
    total = counts[0] * counts[1] * counts[2]
    per_chunk = launch.cubes_per_chunk()
    # Inactive lanes compute garbage (and integer division guards its own zeros): no warnings.
    with np.errstate(all="ignore"):
        for first in range(0, total, per_chunk):
            Chunk(launch, first, min(per_chunk, total - first)).execute()
