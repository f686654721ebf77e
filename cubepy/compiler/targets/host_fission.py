"""Loop fission at barriers: the host target runs a cube's units side by side between two ``sync_cube``s.

A kernel qualifies when its units wait only at *split points*, and every split point sits in control that
all running units of the cube take alike (``cubepy.ir.uniformity.cube_uniformity``): in the body
itself, or inside ``range_loop``s, ``loop``s (``while``), ``if``s and ``if_else``s whose bounds or conditions
are cube-uniform, with no ``break`` or ``continue`` leaving such a ``range_loop``; a ``while`` loop's ``break``
and ``continue`` must sit in its cube-level code (its body, or a cube-uniform ``if`` there): the whole cube
takes them at once.  The split points are ``sync_cube``, ``sync_plane``
and the plane reductions and scans (``plane_sum`` ... ``plane_exclusive_prod``), moves (shuffles, broadcast)
and votes (all, any, ballot) of scalar values that the whole plane reaches (``uniform=True``,
``cubepy.ir.uniformity``).

Such a body is cut at its split points into *stretches*.  Each stretch becomes one loop over the cube's units,
``for z: for y: for x: <the stretch for unit (x, y, z)>``; the loops and branches that hold barriers are
lowered once for the whole cube around them, reading their bounds and conditions from the first unit still
running.  Every unit finishes a stretch before any unit starts the next, which is all a barrier promises,
and the innermost loop, over ``x``, is one LLVM can vectorize across units.  A plane reduction or scan
between two stretches runs once per plane over its 32 units' values, with the butterfly or Hillis-Steele
combines of the shuffled form in the same order (``lower_plane.full_plane_lanes``), so each unit gets
the bits it gets there; a move reads its source lane by the shuffle's own rule (``lower_plane.source_lane``,
shared with the coroutine form) and a vote combines the 32 predicates (``lower_plane.exchange_lanes``).

Inside a stretch, two more things make the loops over units vector code:

* *Cube-uniform values* (``CubeUniformity.values``: pure computations of values every unit has alike, such as
  a row's base offset from ``CUBE_POS`` and a stride) are computed once for the cube before the stretch's
  loop, so addresses built from them stay affine in the unit's position.
* *Recomputed unit values* (``FissionPlan.recomputed``): an integer a few cheap operations compute from the
  unit's position, scalars and cube-uniform values (the matmul's ``row = CUBE_POS_Y * tile + UNIT_POS_Y``)
  is computed again in each stretch that reads it instead of living in the frame, so an address built
  from it stays affine in the unit's position (a vector load, not a gather of frame-loaded indices).
* *Row guards.*  When what a stretch (or a lockstep round) runs per unit is a pure prefix and then an ``if``
  on ``x < n`` with ``x = a + tid.x`` (``host_row_guard.find_guard``: ``if base + k * CUBE_DIM < n:
  acc += data[...]``), each row's first unit evaluates the prefix, the units the guard admits run with the
  test known (and assumed, so a checked access of the same index loses its test too), as plain vector
  code, and the others skip the ``if``; a row where ``x`` could wrap runs as written.  An ``if`` on
  ``x == n`` runs the one unit it picks, and one on ``unit_pos_plane == n`` the unit ``n`` of each plane.
* *Lockstep loops.*  A ``range_loop`` at the top of a stretch whose bounds no assignment changes, with no
  ``break``/``continue`` of its own and no ``return`` inside, runs round by round: round ``j`` runs
  iteration ``j`` of every unit (index ``start + j * step``, wrapping as ``j`` steps would), then round
  ``j + 1``.  A unit whose index fails the loop's test is finished (a byte in its frame), as its own loop
  would be.  ``for c in range(UNIT_POS, cols, 32)`` then reads 32 consecutive items per round.

A local that one stretch writes and another reads (or that a loop holding a barrier carries from one
iteration to the next) and every local array live in a per-unit *frame*: one array per variable, indexed
by the unit's linear position, so consecutive units are consecutive elements.  The frame is allocated once
per worker thread and reused cube after cube (the cube context's first frame slot).  When the kernel has a
``return``, the frame also holds a running flag per unit: ``return`` clears it and ends the unit's stretch,
and later stretches skip the unit, as a barrier on the GPU stops counting a unit that has exited.

Anything else (barriers or collectives under divergent control, votes of lines, matches, mbarriers,
``sync_cube_count``) runs as coroutines (``cubepy.compiler.targets.host``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import llvmlite.binding as llvm
import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower_control import _loop_test, frame_locals_in_registers, hint_unroll, hint_vectorize
from cubepy.compiler.targets.host_fission_plan import FissionPlan, VarKey, is_split_point
from cubepy.compiler.targets.host_fission_planes import lower_plane_collective
from cubepy.compiler.targets.host_row_guard import (
    EQUAL,
    LANE,
    Dependence,
    RowGuard,
    admitted_units,
    find_guard,
    guard_terms,
    kernel_dependence,
    lower_known_guard,
)
from cubepy.ir import VarKind, ops
from cubepy.ir.ops import branch
from cubepy.ir.scope import Scope
from cubepy.ir.variable import PLANE_WIDTH

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering
    from cubepy.compiler.targets.host import HostTarget
    from cubepy.ir import Instruction, Variable

I8, I32, I64, PTR = ir.IntType(8), lt.I32, lt.I64, lt.GENERIC_PTR
FRAME_ARRAY_ALIGN = 64  # each per-unit array starts on a cache line (and a 512-bit vector)
WHOLE_UNITS = 64  # unit loops this short are kept from LLVM's full unrolling (``CubeLoops.counted``)


class CubeLoops:
    """Lowers a qualifying body (``FissionPlan``) into loops over the cube's units; ``KernelLowering`` asks it
    where a per-unit variable lives (``holds``, ``pointer``) for the unit being lowered."""

    ARRAY_ALIGN = FRAME_ARRAY_ALIGN  # the frame's per-unit arrays' alignment (``host_fission_planes`` reads it)

    def __init__(self, lw: KernelLowering, target: HostTarget, plan: FissionPlan) -> None:
        self.lw, self.target, self.plan = lw, target, plan
        self.units = lw.definition.units_per_cube
        self.unit: ir.Value = ir.Constant(I32, 0)  # whose frame slots ``pointer`` addresses now
        self.next_unit: ir.Block | None = None  # inside a loop over units: where that unit's stretch ends
        self.types: dict[VarKey, ir.Type] = {}
        self.offsets: dict[VarKey, int] = {}
        self.target_data = target_data = llvm.create_target_data(lw.module.data_layout)
        end = 0
        for var in plan.per_unit:
            key = (var.kind, var.id)
            if var.kind is VarKind.LOCAL_ARRAY:
                self.types[key] = ir.ArrayType(lt.item_type(var.type, memory=True), var.length or 0)
            else:
                self.types[key] = lt.item_type(var.type)
            end = -(-end // FRAME_ARRAY_ALIGN) * FRAME_ARRAY_ALIGN
            self.offsets[key] = end
            end += self.units * self.types[key].get_abi_size(target_data)
        # A byte per unit for each loop run in lockstep: whether the unit's own iterations are over.
        self.finished_offsets: dict[int, int] = {}
        for loop in sorted(plan.lockstep):
            end = -(-end // FRAME_ARRAY_ALIGN) * FRAME_ARRAY_ALIGN
            self.finished_offsets[loop] = end
            end += self.units
        self.running_offset = -(-end // FRAME_ARRAY_ALIGN) * FRAME_ARRAY_ALIGN
        self.frame_bytes = self.running_offset + (self.units if plan.returns else 0)
        self.frame: ir.Value = ir.Constant(PTR, None)
        self._guard_facts: Dependence | None = None  # ``host_row_guard.kernel_dependence``, built when first needed

    # -- what KernelLowering asks ------------------------------------------------------------------
    def holds(self, var: Variable) -> bool:
        """Whether ``var`` lives in the per-unit frame."""
        return (var.kind, var.id) in self.offsets

    def recomputes(self, var: Variable) -> bool:
        """Whether ``var`` is computed again where it is read (``FissionPlan.recomputed``), not kept."""
        return (var.kind, var.id) in self.plan.recomputed

    def recompute(self, var: Variable) -> ir.Value:
        """``var`` computed again here for the unit being lowered: its defining instruction lowered anew (LLVM
        merges the copies a stretch repeats)."""
        lw = self.lw
        location = lw.builder.debug_metadata
        lw.lower_instruction(self.plan.recomputed[(var.kind, var.id)])
        lw.builder.debug_metadata = location
        return lw.consts[var.id]

    def pointer(self, var: Variable) -> ir.Value:
        """Where the unit being lowered keeps ``var`` (a local's item, or a local array's first item)."""
        b = self.lw.builder
        key = (var.kind, var.id)
        base = b.gep(self.frame, [ir.Constant(I64, self.offsets[key])], source_etype=I8)
        return b.gep(base, [b.zext(self.unit, I64)], source_etype=self.types[key])

    # -- lowering ------------------------------------------------------------------------------------
    def lower(self, body: Scope) -> None:
        """Lower the kernel body; the builder ends in the block after the last stretch."""
        lw = self.lw
        self.frame = self.target.frame(lw)
        if self.plan.returns:
            lw.call(
                "llvm.memset.p0.i64",
                lt.VOID,
                [self._running_flags(), ir.Constant(I8, 1), ir.Constant(I64, self.units), ir.Constant(lt.I1, 0)],
            )
        lw.per_unit = self
        self._stretches(body)

    def _running_flags(self) -> ir.Value:
        return self.lw.builder.gep(self.frame, [ir.Constant(I64, self.running_offset)], source_etype=I8)

    def _stretches(self, scope: Scope) -> None:
        pending: list[Instruction] = []
        for inst in scope.instructions:
            if not (is_split_point(inst) or id(inst) in self.plan.split or id(inst) in self.plan.lockstep):
                pending.append(inst)
                continue
            self._each_unit(pending)
            pending = []
            if id(inst) in self.plan.lockstep:
                self._lockstep(inst)
            elif isinstance(inst.operation, ops.PlaneOp):
                lower_plane_collective(self, inst)
            elif id(inst) in self.plan.split:
                self._split(inst)
        self._each_unit(pending)

    def counted(
        self,
        count: int,
        name: str,
        body: Callable[[ir.Value], None],
        *,
        vector: bool | None = None,
        keep: bool = False,
        bounds: tuple[ir.Value, ir.Value] | None = None,
    ) -> None:
        """``for i in range(count): body(i)``, or ``body(0)`` when ``count`` is 1; ``keep``: not unrolled;
        ``bounds``: ``range(first, end)`` instead, a part of those ``count`` iterations known at run time.

        ``vector``: True, the loop LLVM should vectorize; False, a loop it should not (a plane's 32 lanes are
        one vector already: across planes they would be gathers); None, LLVM's choice.  A loop to vectorize of
        at most ``WHOLE_UNITS`` is also kept from being unrolled: a loop over 16 or 32 units is otherwise
        unrolled whole before the vectorizer sees it, which leaves strided scatters to the SLP vectorizer, or
        has it vectorize the lockstep rounds around it instead, gathering each unit's items a round apart (a
        32-unit row softmax ran 2.3x slower so).  Longer loops are left to LLVM, which interleaves them.  The
        ``y`` and ``z`` loops around such an ``x`` loop are kept too (``keep``): unrolled, each copy of the
        vectorized ``x`` loop brings its own run-time checks and scalar fallback, code that cost compile time
        (a 16x16 cube reduction: 2.5 s instead of 1.2) and no speed.
        """
        lw = self.lw
        b = lw.builder
        if count == 1 and bounds is None:
            body(ir.Constant(I32, 0))
            return
        first, end = bounds or (ir.Constant(I32, 0), ir.Constant(I32, count))
        counter = lw.alloca(I32, name)
        b.store(first, counter)
        head, step, done = lw.new_block(f"{name}.head"), lw.new_block(f"{name}.body"), lw.new_block(f"{name}.end")
        b.branch(head)
        b.position_at_end(head)
        index = b.load(counter, typ=I32)
        b.cbranch(b.icmp_unsigned("<", index, end), step, done)
        b.position_at_end(step)
        body(index)
        b.store(b.add(b.load(counter, typ=I32), ir.Constant(I32, 1), flags=["nuw"]), counter)
        back_edge = b.branch(head)
        if vector is not None:
            hint_vectorize(lw, back_edge, vector, whole=vector and count <= WHOLE_UNITS)
        elif keep:
            hint_unroll(lw, back_edge, 1)
        b.position_at_end(done)

    def _each_unit(self, stretch: list[Instruction]) -> None:
        """The stretch's cube-uniform computations once, then the rest once for every unit, ``x`` innermost."""
        rest = []
        for inst in stretch:
            if id(inst) in self.plan.hoisted:
                self.lw.lower_instruction(inst)
            else:
                rest.append(inst)
        if rest:
            guard = self._row_guard(rest)
            self._for_units(lambda: self._lower_all(rest), None if guard is None else (guard, lambda: None))

    def _lower_all(self, instructions: list[Instruction]) -> None:
        for inst in instructions:
            self.lw.lower_instruction(inst)

    def _lockstep(self, inst: Instruction) -> None:
        """A unit's own range loop, its iterations run side by side: iteration ``j`` of every unit, then ``j + 1``.

        In round ``j`` a unit's index is ``start + j * step`` (the same wrapping arithmetic as ``j`` steps), so
        when ``start`` is the unit's position the units read consecutive items and LLVM vectorizes the round.
        A unit whose index fails the loop's test is finished (a byte in its frame), as its own loop would be;
        the rounds end after one that ran no unit.  Each unit runs its own iterations, in the same order.
        """
        lw = self.lw
        op = inst.operation
        assert isinstance(op, branch.RangeLoop)
        if lw.debug is not None:
            lw.builder.debug_metadata = lw.debug.location(inst.loc)
        flags_offset = ir.Constant(I64, self.finished_offsets[id(inst)])

        def finished() -> ir.Value:
            b = lw.builder
            flags = b.gep(self.frame, [flags_offset], source_etype=I8)
            return b.gep(flags, [b.zext(self.unit, I64)], source_etype=I8)

        round_slot, ran = lw.alloca(I32, f"round{op.index.id}"), lw.alloca(I32, f"ran{op.index.id}")
        all_run, complete = self._rounds_all_run(op)
        b = lw.builder
        b.store(all_run, round_slot)
        head, done, tested = (
            lw.new_block("lockstep.round"),
            lw.new_block("lockstep.end"),
            lw.new_block("lockstep.tested"),
        )
        # Units that all ran their last iteration in the untested rounds need no tested round to find that out.
        b.cbranch(complete, done, tested)
        b.position_at_end(tested)
        self._for_units(lambda: lw.builder.store(ir.Constant(I8, 0), finished()))
        b = lw.builder
        b.branch(head)
        b.position_at_end(head)
        b.store(ir.Constant(I32, 0), ran)  # units that ran this round: a sum LLVM vectorizes
        rounds = self._round_count(op, b.load(round_slot, typ=I32))

        def iteration() -> None:
            b = lw.builder
            body, skip = lw.new_block("lockstep.body"), lw.new_block("lockstep.skip")
            flag = finished()
            # The test is pure arithmetic, so it is computed for finished units too, and the unit's own byte is
            # stored either way: a store under a branch would be a masked or scalarized one in the vectorized
            # loop over units.
            going = b.icmp_unsigned("==", b.load(flag, typ=I8), ir.Constant(I8, 0))
            index = self._round_index(op, rounds)
            runs = b.and_(going, _loop_test(lw, op, index, lw.value(op.end), lw.value(op.step)))
            b.store(b.add(b.load(ran, typ=I32), b.zext(runs, I32)), ran)
            b.store(b.select(runs, ir.Constant(I8, 0), ir.Constant(I8, 1)), flag)
            # (a lockstep body has no break, continue or return: its frame locals may be written back after it)
            with frame_locals_in_registers(lw, (op.body,)):
                b.cbranch(runs, body, skip)
                b.position_at_end(body)
                lw.define(op.index, index)
                lw.lower_scope(op.body)
                lw.branch_if_open(skip)
                b.position_at_end(skip)

        self._for_units(iteration)
        b = lw.builder
        b.store(b.add(b.load(round_slot, typ=I32), ir.Constant(I32, 1)), round_slot)
        b.cbranch(b.icmp_unsigned("!=", b.load(ran, typ=I32), ir.Constant(I32, 0)), head, done)
        b.position_at_end(done)

    def _rounds_all_run(self, op: branch.RangeLoop) -> tuple[ir.Value, ir.Value]:
        """Run the rounds that every running unit runs, without tests: (the number of them, 0 when unknown;
        whether every unit's iterations are over after them).

        With a literal step and an index of at most 32 bits, unit ``u`` runs ``trips(u)`` iterations before its
        index first fails the test (``ceil((end - start) / step)`` going up), computed in i64; in rounds below
        the least of them every index lies between ``start`` and ``end``, so nothing wraps and every test
        passes.  Those rounds need no finished bytes, tests or masks: plain vector code.  The rounds after
        them run with the tests, from there; none are needed when every unit runs as many iterations (the
        usual case: ``range(UNIT_POS, n, CUBE_DIM)`` with ``n`` a multiple of the cube) and the index after the
        last one, ``start + trips * step``, is in the index type's range: then it is the exact next index, past
        ``end``, so every unit's own loop ends there (a wrapped one could still pass the test).
        """
        lw = self.lw
        b = lw.builder
        step_value = op.step.value if op.step.is_constant else 0
        # (The frontend makes no inclusive loops: an IR-built one takes the tested rounds from the first.)
        if not isinstance(step_value, int) or step_value == 0 or op.index.elem.bits > 32 or op.inclusive:
            return ir.Constant(I32, 0), ir.Constant(lt.I1, 0)
        signed = op.index.elem.kind == "int"
        extend = b.sext if signed else b.zext
        bits = op.index.elem.bits
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        least = lw.alloca(I64, f"all_run{op.index.id}")
        b.store(ir.Constant(I64, 2**31 - 1), least)
        most = lw.alloca(I64, f"most_run{op.index.id}")
        b.store(ir.Constant(I64, 0), most)
        exact = lw.alloca(lt.I1, f"exact_end{op.index.id}")
        b.store(ir.Constant(lt.I1, 1), exact)

        def trips() -> None:
            b = lw.builder
            start, end = extend(lw.value(op.start), I64), extend(lw.value(op.end), I64)
            distance = b.sub(end, start) if step_value > 0 else b.sub(start, end)
            count = b.sdiv(b.add(distance, ir.Constant(I64, abs(step_value) - 1)), ir.Constant(I64, abs(step_value)))
            count = b.select(b.icmp_signed(">", distance, ir.Constant(I64, 0)), count, ir.Constant(I64, 0))
            so_far = b.load(least, typ=I64)
            b.store(b.select(b.icmp_signed("<", count, so_far), count, so_far), least)
            so_far = b.load(most, typ=I64)
            b.store(b.select(b.icmp_signed(">", count, so_far), count, so_far), most)
            after = b.add(start, b.mul(count, ir.Constant(I64, step_value)))  # |count * step| <= 2**33: no overflow
            in_range = b.and_(
                b.icmp_signed(">=", after, ir.Constant(I64, low)), b.icmp_signed("<=", after, ir.Constant(I64, high))
            )
            b.store(b.and_(b.load(exact, typ=lt.I1), in_range), exact)

        self._for_units(trips)
        b = lw.builder
        most_value = b.load(most, typ=I64)
        least_value = b.load(least, typ=I64)  # (no running unit: 0 rounds, and complete)
        least_value = b.select(b.icmp_signed("<", most_value, least_value), most_value, least_value)
        complete = b.and_(b.load(exact, typ=lt.I1), b.icmp_signed("==", most_value, least_value))
        all_run = b.trunc(least_value, I32)
        counter = lw.alloca(I32, f"all_round{op.index.id}")
        b.store(ir.Constant(I32, 0), counter)
        head, body, done = (lw.new_block(f"all_run.{part}") for part in ("head", "body", "end"))
        b.branch(head)
        b.position_at_end(head)
        rounds = b.load(counter, typ=I32)
        b.cbranch(b.icmp_signed("<", rounds, all_run), body, done)
        b.position_at_end(body)
        rounds = self._round_count(op, rounds)

        def setup() -> None:
            lw.define(op.index, self._round_index(op, rounds))

        def iteration() -> None:
            setup()
            lw.lower_scope(op.body)

        guard = self._row_guard(op.body.instructions)
        self._for_units(iteration, None if guard is None else (guard, setup))
        b = lw.builder
        b.store(b.add(b.load(counter, typ=I32), ir.Constant(I32, 1)), counter)
        b.branch(head)
        b.position_at_end(done)
        return all_run, complete

    def _round_count(self, op: branch.RangeLoop, rounds: ir.Value) -> ir.Value:
        """The i32 round number in the loop index's type (extended or wrapped as ``j`` steps would be)."""
        b = self.lw.builder
        index_t = lt.item_type(op.index.type)
        if index_t.width > 32:
            return b.zext(rounds, index_t)
        return b.trunc(rounds, index_t) if index_t.width < 32 else rounds

    def _round_index(self, op: branch.RangeLoop, rounds: ir.Value) -> ir.Value:
        """The unit's index in round ``rounds`` (``_round_count``): ``start + rounds * step``."""
        b = self.lw.builder
        return b.add(self.lw.value(op.start), b.mul(rounds, self.lw.value(op.step)))

    def _for_units(self, emit: Callable[[], None], guarded: tuple[RowGuard, Callable[[], None]] | None = None) -> None:
        """``emit()`` once for every unit still running (``unit`` and its builtins set), ``x`` innermost.

        ``guarded``: ``emit`` lowers ``setup()`` then the row guard's ``prefix; if x < n: ...`` (``find_guard``,
        nothing after it): per row, the first unit evaluates the prefix, and the units the guard admits run
        with it known true, in a loop of plain vector code; the others skip the ``if`` (they would not enter
        it), unless ``x`` could wrap in the row: then the row runs as written."""
        lw = self.lw
        dim_x, dim_y, dim_z = lw.definition.cube_dim

        def unit(x: ir.Value, y: ir.Value, z: ir.Value, emit_unit: Callable[[], None]) -> None:
            b = lw.builder
            self._enter(x, y, z)
            done = lw.new_block("unit.next")
            self.next_unit = done
            if self.plan.returns:
                flag = b.load(b.gep(self._running_flags(), [b.zext(self.unit, I64)], source_etype=I8), typ=I8)
                running = lw.new_block("unit.running")
                b.cbranch(b.icmp_unsigned("!=", flag, ir.Constant(I8, 0)), running, done)
                b.position_at_end(running)
            emit_unit()
            lw.branch_if_open(done)
            b.position_at_end(done)
            self.next_unit = None

        def row(y: ir.Value, z: ir.Value) -> None:
            if guarded is None:
                self.counted(dim_x, "unit_x", lambda x: unit(x, y, z, emit), vector=True)
                return
            guard, setup = guarded
            self._enter(ir.Constant(I32, 0), y, z)
            setup()
            lw.lower_scope(guard.prefix)
            first, limit, others = guard_terms(lw, guard)
            b = lw.builder

            def known_unit() -> None:
                setup()
                lower_known_guard(lw, guard)

            width = ir.Constant(I32, dim_x)
            if guard.kind == EQUAL:  # x(t) = first + t (mod 2**32) equals n for t = n - first alone
                only = b.sub(limit, first)
                admitted = b.and_(b.icmp_unsigned("<", only, width), others)
                end = b.select(admitted, b.add(only, ir.Constant(I32, 1)), only)
                self.counted(dim_x, "unit_x.known", lambda x: unit(x, y, z, known_unit), bounds=(only, end))
            elif guard.kind == LANE:  # rows of whole planes: unit_pos_plane is x % 32, n only at x = n + 32 j
                admitted = b.and_(b.icmp_unsigned("<", limit, ir.Constant(I32, PLANE_WIDTH)), others)
                planes = b.select(admitted, ir.Constant(I32, dim_x // PLANE_WIDTH), ir.Constant(I32, 0))

                def lane(j: ir.Value) -> None:
                    x = lw.builder.add(limit, lw.builder.mul(j, ir.Constant(I32, PLANE_WIDTH)))
                    unit(x, y, z, known_unit)

                self.counted(dim_x // PLANE_WIDTH, "unit_x.lane", lane, bounds=(ir.Constant(I32, 0), planes))
            else:
                known, tested = admitted_units(b, first, limit, others, width)
                bounds = (ir.Constant(I32, 0), known)
                self.counted(dim_x, "unit_x.known", lambda x: unit(x, y, z, known_unit), vector=True, bounds=bounds)
                self.counted(
                    dim_x, "unit_x.tested", lambda x: unit(x, y, z, emit), vector=False, bounds=(tested, width)
                )

        keep = dim_x <= WHOLE_UNITS  # the x loop is kept whole: keep the loops around it too (``counted``)
        self.counted(
            dim_z, "unit_z", lambda z: self.counted(dim_y, "unit_y", lambda y: row(y, z), keep=keep), keep=keep
        )

    def _enter(self, x: ir.Value, y: ir.Value, z: ir.Value) -> None:
        """Lower what follows for unit ``(x, y, z)`` of the cube."""
        lw = self.lw
        b = lw.builder
        dim_x, dim_y, _ = lw.definition.cube_dim
        row = b.add(b.mul(z, ir.Constant(I32, dim_y), flags=["nuw"]), y, flags=["nuw"])
        linear = b.add(b.mul(row, ir.Constant(I32, dim_x), flags=["nuw"]), x, flags=["nuw"])
        self.unit = linear
        self.target.enter_unit(lw, linear, (x, y, z))

    def _row_guard(self, instructions: Sequence[Instruction]) -> RowGuard | None:
        """``instructions`` (what a stretch runs per unit) as a row guard ``_for_units`` can split rows by, or
        None.  Not when a unit may have returned (the row's first unit evaluates the prefix), nor when a value
        of the prefix lives on in the frame (the units that skip the ``if`` would not store it)."""
        if self.plan.returns:
            return None
        if self._guard_facts is None:
            self._guard_facts = kernel_dependence(self.lw.definition.body)
        guard = find_guard(instructions, self._guard_facts, equal=True)
        if guard is None or any(inst.out is not None and self.holds(inst.out) for inst in guard.prefix.instructions):
            return None
        if guard.kind == LANE and self.lw.definition.cube_dim[0] % PLANE_WIDTH:
            return None  # a row is not whole planes: unit_pos_plane is not x % 32
        return guard

    def unit_returns(self) -> None:
        """``return`` inside a stretch: clear the unit's running flag and end its stretch."""
        b = self.lw.builder
        assert self.next_unit is not None
        b.store(ir.Constant(I8, 0), b.gep(self._running_flags(), [b.zext(self.unit, I64)], source_etype=I8))
        b.branch(self.next_unit)

    def _leader(self) -> None:
        """Point ``unit`` at the first unit still running, whose frame the cube-wide control reads; when every
        unit has returned, the cube is done."""
        lw = self.lw
        if not self.plan.returns:
            self.unit = ir.Constant(I32, 0)
            return
        b = lw.builder
        flags = self._running_flags()
        counter = lw.alloca(I32, "leader")
        b.store(ir.Constant(I32, 0), counter)
        head, test, found, finished = (lw.new_block(h) for h in ("leader.head", "leader.test", "leader", "cube.end"))
        b.branch(head)
        b.position_at_end(head)
        index = b.load(counter, typ=I32)
        b.cbranch(b.icmp_unsigned("<", index, ir.Constant(I32, self.units)), test, finished)
        b.position_at_end(test)
        flag = b.load(b.gep(flags, [b.zext(index, I64)], source_etype=I8), typ=I8)
        b.store(b.add(index, ir.Constant(I32, 1)), counter)
        b.cbranch(b.icmp_unsigned("!=", flag, ir.Constant(I8, 0)), found, head)
        b.position_at_end(finished)
        b.ret_void()
        b.position_at_end(found)
        self.unit = index

    def _split(self, inst: Instruction) -> None:
        """A loop or branch holding barriers, lowered once for the cube around the stretches of its bodies."""
        from cubepy.compiler.lower_control import emit_loop, emit_range_loop

        lw = self.lw
        b = lw.builder
        op = inst.operation
        if lw.debug is not None:
            b.debug_metadata = lw.debug.location(inst.loc)
        self._leader()
        if isinstance(op, branch.RangeLoop):  # no break or continue leaves it (``plan_fission``)
            # The unroll hint is the units' loop's: copies of a cube-wide loop would copy every loop over units.
            emit_range_loop(lw, op, lambda _: self._stretches(op.body), hint=False)
            return
        if isinstance(op, (branch.Break, branch.Continue)):  # taken by the whole cube (``plan_fission``)
            lw.lower_instruction(inst)
            return
        if isinstance(op, branch.Loop):  # its breaks sit in cube-level branches: the cube leaves it at once
            emit_loop(lw, lambda: self._stretches(op.body), "cube.loop")
            return
        assert isinstance(op, (branch.If, branch.IfElse))
        then, join = lw.new_block("cube.then"), lw.new_block("cube.endif")
        other = lw.new_block("cube.else") if isinstance(op, branch.IfElse) else join
        b.cbranch(lw.value(op.cond), then, other)
        bodies = [(then, op.then_body), (other, op.else_body)] if isinstance(op, branch.IfElse) else [(then, op.body)]
        for block, scope in bodies:
            b.position_at_end(block)
            self._stretches(scope)
            b.branch(join)
        b.position_at_end(join)
