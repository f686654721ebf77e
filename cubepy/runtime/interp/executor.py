"""The interp's executor: a kernel prepared once, then run chunk by chunk of whole cubes in lockstep.

Every IR instruction runs once for all active lanes of a chunk (one numpy operation over arrays of
lanes).  Divergence is a ``Mask`` per structured region: ``if`` runs its body under ``mask & cond``,
loops iterate while any lane is active, and ``break``/``continue``/``return`` clear lanes from the
masks of the enclosing regions through per-loop *broken*/*continued* masks and a per-chunk
*returned* mask.  Cubes are independent, so chunks run one after another with bounded memory;
shared memory and local arrays live as long as their chunk, and locals are freed after their last use.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import NoReturn

import numpy as np

from cubepy.errors import CubeError, InterpreterError, LaunchError, SanitizerError, SanitizerKind
from cubepy.ir import Instruction, KernelDefinition, Scope, Variable, VarKind, child_scopes
from cubepy.ir.ops import branch
from cubepy.runtime.bindings import Bindings
from cubepy.runtime.interp.coverage import ACTIVE as COVERAGE
from cubepy.runtime.interp.memory import (
    MemoryRef,
    const_table_items,
    const_table_ref,
    global_ref,
    local_ref,
    shared_layout,
    shared_ref,
)
from cubepy.runtime.interp.plane import PlaneLayout
from cubepy.runtime.interp.registry import INTERP, Handler, implements
from cubepy.runtime.interp.sanitizer import SharedSanitizer, foreign_shared_operands
from cubepy.runtime.interp.values import Mask, Topology, ValueStore, literal, numpy_dtype

MAX_LANES_PER_CHUNK = 1 << 16
MAX_CHUNK_MEMORY_BYTES = 1 << 28  # shared arenas plus local arrays of one chunk
PROGRAM_CACHE_SIZE = 64


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


def _where(inst: Instruction) -> str:
    return f"{inst.loc.file}:{inst.loc.line}: " if inst.loc is not None else ""


class Step:
    """One instruction ready to run: its handler, the locals that die after it, whether lanes may leave."""

    __slots__ = ("inst", "handler", "dead", "may_exit", "foreign_shared")

    def __init__(self, inst: Instruction, handler: Handler, dead: tuple[int, ...], may_exit: bool) -> None:
        self.inst = inst
        self.handler = handler
        self.dead = dead  # ValueStore keys of immutable locals whose last use is this step
        self.may_exit = may_exit  # a break/continue/return here (or nested) can shrink the scope's mask
        # Shared memories this op writes without telling the sanitizer (TMA, cmma): see sanitizer.py.
        self.foreign_shared = foreign_shared_operands(inst.operation)


class Program:
    """A kernel prepared for execution: handlers resolved, literals converted, lifetimes computed."""

    def __init__(self, kernel: KernelDefinition) -> None:
        self.kernel = kernel
        self.scopes: dict[int, tuple[Step, ...]] = {}
        self.literals: dict[int, np.ndarray | np.generic] = {}
        self._uses: dict[int, frozenset[int]] = {}
        self._escapes: dict[int, bool] = {}  # scope may shrink its parent's mask (break/continue/return)
        self._returns: dict[int, bool] = {}  # scope holds a return (it escapes loops too)
        self.body = self._compile(kernel.body)
        self.shared_offsets, self.shared_bytes = shared_layout(kernel.shared_memories)
        self.const_tables = {table.var.id: const_table_items(table) for table in kernel.const_tables}

    def steps(self, scope: Scope) -> tuple[Step, ...]:
        """The prepared steps of ``scope`` (the kernel body or any nested scope)."""
        return self.scopes[id(scope)]

    def may_leave(self, scope: Scope) -> bool:
        """Whether a break, continue or return inside ``scope`` can take lanes out of it."""
        return self._escapes[id(scope)]

    def _compile(self, scope: Scope) -> tuple[Step, ...]:
        key = id(scope)
        if key in self.scopes:
            return self.scopes[key]
        infos: list[tuple[Instruction, Handler, bool]] = []
        last_use: dict[int, int] = {}
        defined: set[int] = set()
        scope_uses: set[int] = set()
        returns = False
        for position, inst in enumerate(scope.instructions):
            operation = inst.operation
            handler = INTERP.get(type(operation))
            if handler is None:
                raise InterpreterError(
                    f"{_where(inst)}{INTERP.missing_message(type(operation))}\n  in instruction: {inst}"
                )
            children = child_scopes(operation)
            for child in children:
                self._compile(child)
            used = {var.id for var in operation.operands() if var.kind is VarKind.CONST}
            for var in operation.operands():
                if var.kind is VarKind.CONSTANT:
                    self.literals[id(var)] = literal(var.value, var.type)
            for child in children:
                used |= self._uses[id(child)]
            if inst.out is not None and inst.out.kind is VarKind.CONST:
                defined.add(inst.out.id)
                used.add(inst.out.id)
            for const_id in used:
                last_use[const_id] = position
            scope_uses |= used
            is_return = isinstance(operation, branch.Return) or any(self._returns[id(c)] for c in children)
            returns = returns or is_return
            if isinstance(operation, (branch.Break, branch.Continue, branch.Return)):
                may_exit = True
            elif isinstance(operation, (branch.Loop, branch.RangeLoop)):
                may_exit = is_return  # break and continue stop at the loop
            else:
                may_exit = any(self._escapes[id(c)] for c in children)
            infos.append((inst, handler, may_exit))
        dying: dict[int, list[int]] = {}
        for const_id in defined:
            dying.setdefault(last_use[const_id], []).append(const_id * 2)
        steps = tuple(
            Step(inst, handler, tuple(dying.get(position, ())), may_exit)
            for position, (inst, handler, may_exit) in enumerate(infos)
        )
        self.scopes[key] = steps
        self._uses[key] = frozenset(scope_uses)
        self._escapes[key] = any(step.may_exit for step in steps)
        self._returns[key] = returns
        return steps


_PROGRAMS: OrderedDict[int, Program] = OrderedDict()
# Launches may come from several threads: a get, move_to_end and eviction must not interleave
# (another thread's eviction between a hit and move_to_end would raise KeyError).
_PROGRAMS_LOCK = threading.Lock()


def prepare(kernel: KernelDefinition) -> Program:
    """The prepared program of ``kernel`` (cached: the cache holds the kernel, so ids stay unique)."""
    with _PROGRAMS_LOCK:
        program = _PROGRAMS.get(id(kernel))
        if program is not None and program.kernel is kernel:
            _PROGRAMS.move_to_end(id(kernel))
            return program
    program = Program(kernel)  # outside the lock: preparing is pure, two threads may both do it
    with _PROGRAMS_LOCK:
        _PROGRAMS[id(kernel)] = program
        while len(_PROGRAMS) > PROGRAM_CACHE_SIZE:
            _PROGRAMS.popitem(last=False)
    return program


class Launch:
    """What every chunk of one launch shares: the program, bound buffers and scalars, the grid."""

    def __init__(self, program: Program, cube_count: tuple[int, int, int], bindings: Bindings, sanitize: bool) -> None:
        kernel = program.kernel
        self.program = program
        self.kernel = kernel
        self.cube_count = cube_count
        self.bindings = bindings
        self.sanitize = sanitize
        self.coverage = COVERAGE.get()  # a coverage Recorder, or None (the default: nothing recorded)
        self.globals: dict[int, MemoryRef] = {}
        for param in kernel.buffers:
            self.globals[param.slot] = global_ref(param.var, self._checked_buffer(param), param.name)
        self.scalars: dict[int, np.generic] = {}
        for param in kernel.scalars:
            if param.slot >= len(bindings.scalars):
                raise LaunchError(f"scalar parameter {param.name!r} (slot {param.slot}) is not bound")
            value = np.asarray(bindings.scalars[param.slot])
            self.scalars[param.slot] = value.astype(numpy_dtype(param.var.elem))[()]

    def _checked_buffer(self, param):
        slot = param.slot
        if slot >= len(self.bindings.buffers):
            raise LaunchError(f"buffer parameter {param.name!r} (slot {slot}) is not bound")
        binding = self.bindings.buffers[slot]
        expected = numpy_dtype(param.var.elem)
        storage = binding.handle.storage
        if not isinstance(storage, np.ndarray) or storage.ndim != 1:
            raise LaunchError(
                f"buffer parameter {param.name!r}: the interp needs a 1-D numpy storage, got {type(storage).__name__}"
            )
        if storage.dtype != expected:
            raise LaunchError(
                f"buffer parameter {param.name!r} holds {storage.dtype}, the kernel expects "
                f"{param.var.elem!r} ({expected})"
            )
        if binding.line_size != param.var.type.line:
            raise LaunchError(
                f"buffer parameter {param.name!r} is bound with line size {binding.line_size}, "
                f"the kernel was expanded for {param.var.type.line}"
            )
        return binding

    def cubes_per_chunk(self) -> int:
        """How many whole cubes one chunk holds: at most 64K lanes and a bounded memory footprint."""
        kernel = self.kernel
        units = kernel.units_per_cube
        local_bytes = sum(var.length * var.type.size for var in kernel.local_arrays)
        per_cube = self.program.shared_bytes + units * local_bytes
        by_lanes = MAX_LANES_PER_CHUNK // units
        by_memory = MAX_CHUNK_MEMORY_BYTES // per_cube if per_cube else by_lanes
        return max(1, min(by_lanes, by_memory))


class LoopState:
    """Lanes that left the innermost running loop: for good (broken) or for this iteration (continued)."""

    __slots__ = ("broken", "continued")

    def __init__(self, no_lanes: np.ndarray) -> None:
        # Masks are never changed in place, so both start as the chunk's shared all-false array.
        self.broken = no_lanes
        self.continued = no_lanes


class Chunk:
    """The execution state of a chunk of whole cubes; handlers receive it as ``ctx``."""

    def __init__(self, launch: Launch, first_cube: int, cubes: int) -> None:
        self.launch = launch
        self.program = launch.program
        kernel = launch.kernel
        self.topology = Topology(kernel.cube_dim, launch.cube_count, first_cube, cubes)
        self.lanes = self.topology.lanes
        self.values = ValueStore(self.lanes, self.program.literals)
        # ``ctx.write(var, value, mask)`` assigns ``value`` to local ``var`` on the lanes of ``mask``.  It is
        # the value store's bound method itself, not a method of Chunk: the hottest call of every handler
        # skips one indirection.
        self.write: Callable[[Variable, np.ndarray | np.generic, Mask], None] = self.values.write
        self.no_lanes = np.zeros(self.lanes, dtype=bool)
        self.no_lanes.flags.writeable = False  # shared by every empty mask: never written
        self.returned = self.no_lanes
        self.loops: list[LoopState] = []
        self.extensions: dict[str, object] = {}  # per-chunk state of op families defined elsewhere
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
            return self.topology.get(var.name)
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
        raise SanitizerError(f"{_where(inst)}{message}, by {self.describe_lane(lane)}\n  in instruction: {inst}", kind)

    # -- control flow ----------------------------------------------------------------------
    def exited(self) -> np.ndarray:
        """Lanes that left the current region: returned, or broke/continued the innermost loop."""
        if not self.loops:
            return self.returned
        loop = self.loops[-1]
        return self.returned | loop.broken | loop.continued

    def run_scope(self, scope: Scope, mask: Mask) -> None:
        """Run the instructions of ``scope`` for the lanes of ``mask``."""
        values = self.values
        counter = _counter
        for step in self.program.scopes[id(scope)]:
            if counter is not None:
                counter.count(mask)
            try:
                step.handler(self, step.inst, mask)
            except CubeError:
                raise
            except Exception as exc:
                raise InterpreterError(
                    f"{_where(step.inst)}interp failed on `{step.inst}`: {type(exc).__name__}: {exc}"
                ) from exc
            if step.foreign_shared and self.sanitizer is not None:
                self._mark_foreign_writes(step.foreign_shared, mask)
            if step.dead:
                values.free(step.dead)
            if step.may_exit:
                mask = mask.without(self.exited())
                if not mask.any:
                    return

    def _mark_foreign_writes(self, memories: tuple[Variable, ...], mask: Mask) -> None:
        """Count every byte of ``memories`` as written in the cubes where ``mask`` has lanes."""
        cubes = mask.bits.reshape(-1, self.topology.units).any(axis=1)
        for var in memories:
            start = self.shared_offset(var)
            self.sanitizer.mark_written(cubes, start, var.length * var.type.size)  # type: ignore[union-attr]

    def execute(self) -> None:
        """Run the kernel body for every lane of the chunk."""
        self.run_scope(self.program.kernel.body, Mask.all_lanes(self.lanes))


# -- structured control flow ------------------------------------------------------------------


@implements(branch.If)
def run_if(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Run the body for the lanes where the condition holds."""
    op: branch.If = inst.operation
    inner = mask.where(ctx.read(op.cond))
    if inner.any:
        ctx.run_scope(op.body, inner)


@implements(branch.IfElse)
def run_if_else(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Run the then-body where the condition holds and the else-body on the other lanes."""
    op: branch.IfElse = inst.operation
    cond = ctx.read(op.cond)
    then_mask = mask.where(cond)
    if then_mask.any:
        ctx.run_scope(op.then_body, then_mask)
    else_mask = mask.where(np.logical_not(cond))
    if else_mask.any:
        ctx.run_scope(op.else_body, else_mask)


@implements(branch.Switch)
def run_switch(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Run each case's body for the lanes whose value matches it, the default for the rest."""
    op: branch.Switch = inst.operation
    value = ctx.read(op.value)
    rest = mask
    for case_value, body in op.cases:
        hit = value == case_value
        case_mask = mask.where(hit)
        if case_mask.any:
            ctx.run_scope(body, case_mask)
        rest = rest.where(np.logical_not(hit))
    if rest.any:
        ctx.run_scope(op.default, rest)


def _run_loop(ctx: Chunk, body: Scope, mask: Mask, condition) -> None:
    """Iterate ``body`` while any lane is active; ``condition(iteration)`` narrows each iteration."""
    loop = LoopState(ctx.no_lanes)
    ctx.loops.append(loop)
    may_leave = ctx.program.may_leave(body)
    try:
        active = mask
        iteration = 0
        while True:
            current = condition(active, iteration)
            if not current.any:
                return
            loop.continued = ctx.no_lanes
            ctx.run_scope(body, current)
            if may_leave:
                active = current.without(loop.broken | ctx.returned)
                if not active.any:
                    return
            else:
                active = current
            iteration += 1
    finally:
        ctx.loops.pop()


@implements(branch.Loop)
def run_loop(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Iterate until every lane broke out or returned."""
    _run_loop(ctx, inst.operation.body, mask, lambda active, _iteration: active)


@implements(branch.RangeLoop)
def run_range_loop(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """for index in start..end step: each lane runs its own trip count."""
    op: branch.RangeLoop = inst.operation
    start, end, step = ctx.read(op.start), ctx.read(op.end), ctx.read(op.step)
    signed = op.start.elem.kind == "int"
    state = {"index": start}
    # A zero step runs zero iterations (Python would raise; a kernel cannot): the lowering agrees.
    moving = step != 0
    if ctx.launch.sanitize:
        stuck = mask.bits & ~np.broadcast_to(moving, mask.bits.shape)
        if stuck.any():
            ctx.fail(
                inst,
                "range() step is zero at run time (the loop runs zero iterations)",
                int(np.flatnonzero(stuck)[0]),
                SanitizerKind.ZERO_RANGE_STEP,
            )

    def condition(active: Mask, iteration: int) -> Mask:
        index = state["index"]
        if iteration:
            index = state["index"] = index + step  # wraps in the index type, like the GPU
        if op.inclusive:
            cond = index <= end
            if signed:
                cond = np.where(step > 0, cond, index >= end)
        else:
            cond = index < end
            if signed:
                cond = np.where(step > 0, cond, index > end)
        current = active.where(cond & moving)
        if current.any:
            ctx.values.set(op.index, index)
        return current

    try:
        _run_loop(ctx, op.body, mask, condition)
    finally:
        ctx.values.free((ctx.values.key(op.index),))


@implements(branch.Break)
def run_break(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The lanes here leave the innermost loop."""
    loop = ctx.loops[-1]
    loop.broken = loop.broken | mask.bits


@implements(branch.Continue)
def run_continue(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The lanes here skip the rest of the innermost loop's iteration."""
    loop = ctx.loops[-1]
    loop.continued = loop.continued | mask.bits


@implements(branch.Return)
def run_return(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The lanes here end their execution of the kernel."""
    ctx.returned = ctx.returned | mask.bits


def run(kernel: KernelDefinition, cube_count, bindings: Bindings, *, sanitize: bool = False) -> None:
    """Execute ``kernel`` for a grid of ``cube_count`` cubes on the CPU; buffers are written in place."""
    program = prepare(kernel)
    counts = tuple(int(c) for c in (cube_count.as_tuple() if hasattr(cube_count, "as_tuple") else cube_count))
    if len(counts) != 3:
        raise LaunchError(f"cube_count {cube_count!r}: expected (x, y, z)")
    launch = Launch(program, counts, bindings, sanitize)  # type: ignore[arg-type]
    total = counts[0] * counts[1] * counts[2]
    per_chunk = launch.cubes_per_chunk()
    # Inactive lanes compute garbage (and integer division guards its own zeros): no warnings.
    with np.errstate(all="ignore"):
        for first in range(0, total, per_chunk):
            Chunk(launch, first, min(per_chunk, total - first)).execute()
