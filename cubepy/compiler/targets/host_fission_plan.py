"""Which kernels loop fission can run, and how: the analysis half of ``host_fission``.

``plan_fission(definition)`` finds the split points (``sync_cube``, ``sync_plane``, whole-plane reductions and
scans) and checks that each sits in cube-uniform control; it names the instructions lowered once per cube
(split loops and branches, hoisted cube-uniform values), the loops run in lockstep, the unit values computed
again where they are read and the locals each unit keeps in its frame.  ``host_fission.CubeLoops`` emits what the plan says.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import attrs

from cubepy.compiler.lower_plane import EXCHANGES, LANEWISE
from cubepy.ir import KernelDefinition, VarKind, ops, walk
from cubepy.ir.ops import branch
from cubepy.ir.scope import Scope, child_scopes
from cubepy.ir.uniformity import cube_uniformity
from cubepy.ir.variable import LOCAL_KINDS

if TYPE_CHECKING:
    from cubepy.ir import Instruction, Variable

VarKey = tuple[VarKind, int]
_SPLITTABLE = (branch.RangeLoop, branch.Loop, branch.If, branch.IfElse)
_CONDITIONAL = (branch.If, branch.IfElse)
# The builtins that differ between the units of a cube: read again in every loop over units.
UNIT_BUILTINS = ("absolute_pos", "unit_pos", "plane_pos")


@attrs.frozen
class FissionPlan:
    """How a qualifying kernel runs: which instructions are lowered once per cube, and what lives per unit."""

    split: frozenset[int]  # id() of the loops and branches holding a barrier (lowered once per cube)
    per_unit: tuple[Variable, ...]  # locals and local arrays kept per unit, in the frame
    returns: bool  # the kernel has a ``return``: the frame holds a running flag per unit
    lockstep: frozenset[int] = frozenset()  # id() of the stretches' own range loops run in lockstep
    hoisted: frozenset[int] = frozenset()  # id() of the stretches' cube-uniform computations, done once per cube
    # Unit values computed again where a later stretch reads them, not kept in the frame: their defining
    # instruction, by the value's key (``_Stretches.recomputed``).
    recomputed: dict[VarKey, Instruction] = attrs.field(factory=dict, eq=False)


def is_split_point(inst: Instruction) -> bool:
    """A barrier or a plane collective; whether it may split the body is ``_splits``' question."""
    return isinstance(inst.operation, (ops.SyncCube, ops.SyncPlane, ops.PlaneOp))


def _splits(inst: Instruction) -> bool:
    """Whether ``inst``, met where stretches may be cut, is a split point the fission handles: a barrier, or a
    plane reduction, scan, move, vote or ``plane_elect`` the whole plane reaches (a move of a line takes the
    whole line from one lane; a vote takes a scalar predicate)."""
    op = inst.operation
    if isinstance(op, (ops.SyncCube, ops.SyncPlane)):
        return True
    if isinstance(op, ops.PlaneElect):
        return op.uniform
    if isinstance(op, EXCHANGES):
        if op.value is None or (op.arg is not None and op.arg.type.is_line):
            return False
        vote = isinstance(op, (ops.PlaneAll, ops.PlaneAny, ops.PlaneBallot))
        return op.uniform and not (vote and op.value.type.is_line)
    return isinstance(op, LANEWISE) and op.uniform


def _holds_split_point(inst: Instruction) -> bool:
    return any(is_split_point(i) for scope in child_scopes(inst.operation) for i in walk(scope))


def _leaves_loop(inst: Instruction) -> bool:
    """Whether ``inst`` is, or holds outside any nested loop, a ``break``/``continue`` of the loop around it."""
    if isinstance(inst.operation, (branch.Break, branch.Continue)):
        return True
    if isinstance(inst.operation, (branch.RangeLoop, branch.Loop)):
        return False
    return any(_leaves_loop(i) for scope in child_scopes(inst.operation) for i in scope.instructions)


def plan_fission(definition: KernelDefinition) -> FissionPlan | None:
    """The plan for ``definition`` when it qualifies (see the module's docstring), else None."""
    instructions = list(walk(definition.body))
    if not any(is_split_point(i) for i in instructions):
        return None
    uniformity = cube_uniformity(definition)
    uniform = uniformity.control
    split: set[int] = set()

    def qualifies(scope: Scope, in_split_loop: bool, cube_exits: bool) -> bool:
        """``cube_exits``: ``scope`` is cube-level code of a split ``while`` loop (its body, or a split branch
        in it), where a ``break``/``continue`` of that loop is taken by the whole cube at once."""
        for inst in scope.instructions:
            op = inst.operation
            if is_split_point(inst):
                if not _splits(inst):
                    return False
                continue
            if cube_exits and isinstance(op, (branch.Break, branch.Continue)):
                split.add(id(inst))  # the cube leaves (or restarts) the loop it runs once for all units
                continue
            if not _holds_split_point(inst):
                if not (in_split_loop and _leaves_loop(inst)):
                    continue
                # A branch that only leaves the loop: cube-level when every unit decides it alike.
                if not (cube_exits and isinstance(op, _CONDITIONAL) and id(inst) in uniform):
                    return False
            elif not isinstance(op, _SPLITTABLE) or id(inst) not in uniform:
                return False
            split.add(id(inst))
            inner = in_split_loop or isinstance(op, (branch.RangeLoop, branch.Loop))
            # A range loop's own break/continue would need its cube-wide latch: those kernels run as coroutines.
            exits = isinstance(op, branch.Loop) or (cube_exits and isinstance(op, _CONDITIONAL))
            if not all(qualifies(child, inner, exits) for child in child_scopes(op)):
                return False
        return True

    if not qualifies(definition.body, False, False):
        return None
    frozen = frozenset(split)
    stretches = _Stretches(frozen, uniformity.values)
    per_unit = stretches.per_unit(definition)
    arrays = tuple(definition.local_arrays)
    returns = any(isinstance(i.operation, branch.Return) for i in instructions)
    lockstep, hoisted = frozenset(stretches.lockstep), frozenset(stretches.hoisted)
    return FissionPlan(frozen, per_unit + arrays, returns, lockstep, hoisted, stretches.recomputed)


def _hoistable(inst: Instruction, uniform_values: frozenset[VarKey], cube_values: set[VarKey]) -> bool:
    """Whether an instruction at the top of a stretch computes a value every unit computes alike, with a
    pure operation that reads no memory, from values the cube already has before the stretch: literals,
    parameters, builtins and memories, and locals in ``cube_values`` (computed once per cube already, or a
    split loop's index).  A mutable local is never one: its assignment earlier in the stretch would come
    after.  Such an instruction runs once for the cube before the stretch's loop over units."""
    out, op = inst.out, inst.operation
    if out is None or out.kind is not VarKind.CONST or (out.kind, out.id) not in uniform_values:
        return False
    if child_scopes(op) or not op.RECORD.pure or op.RECORD.reads:
        return False
    return all(var.kind not in LOCAL_KINDS or (var.kind, var.id) in cube_values for var in op.operands())


# Integer operations cheap enough to compute again in every stretch that reads their result: a unit's row
# or column from its position (``CUBE_POS_Y * tile + UNIT_POS_Y``).  Read from the frame, such a value is
# a load per unit that LLVM cannot see through, so an address built from it is a gather; computed again,
# the address is affine in the unit's position and the loop over units loads whole vectors.
_RECOMPUTABLE: tuple[type[ops.Operation], ...] = (
    *(ops.Add, ops.Sub, ops.Mul, ops.Shl, ops.Shr, ops.Bitand, ops.Bitor, ops.Bitxor, ops.Min, ops.Max),
    *(ops.Cast, ops.Select, ops.Assign),
)
RECOMPUTE_LIMIT = 12  # operations in a value's tree, counted with repeats, past which it stays in the frame


def _runs_in_lockstep(inst: Instruction) -> bool:
    """Whether a range loop at the top of a stretch runs in lockstep: an integer index, bounds and step that
    no assignment changes (read again each round), no ``break``/``continue`` of its own and no ``return`` in
    its body (each unit's iterations then stop only at its own bound)."""
    op = inst.operation
    if not isinstance(op, branch.RangeLoop) or op.index.elem.kind not in ("int", "uint"):
        return False
    if any(var.kind is VarKind.MUT for var in op.operands()):
        return False
    if any(_leaves_loop(i) for i in op.body.instructions):
        return False
    return not any(isinstance(i.operation, branch.Return) for i in walk(op.body))


class _Stretches:
    """Numbers the stretches of a body and finds the locals that more than one of them touches."""

    def __init__(self, split: frozenset[int], uniform_values: frozenset[VarKey] = frozenset()) -> None:
        self.split = split
        self.uniform_values = uniform_values
        self.hoisted: set[int] = set()  # id() of the computations done once per cube
        self.hoisted_values: set[VarKey] = set()  # what they define: SSA values of the cube, in no frame
        self.count = 0
        self.touched: dict[VarKey, set[int]] = defaultdict(set)
        self.variables: dict[VarKey, Variable] = {}
        self.in_loops: set[int] = set()  # stretches inside a loop that holds a barrier
        self.uniform_indices: set[VarKey] = set()  # indices of split loops: one value for the whole cube
        self.lockstep: set[int] = set()  # id() of the loops run in lockstep
        self.cube_level: set[int] = set()  # stretches read outside a loop over units (control, collectives)
        # Unit values that may be computed again where they are read: defining instruction and tree size.
        self.candidates: dict[VarKey, tuple[Instruction, int]] = {}
        self.recomputed: dict[VarKey, Instruction] = {}

    def new(self, in_loop: bool) -> int:
        self.count += 1
        if in_loop:
            self.in_loops.add(self.count)
        return self.count

    def touch(self, var: Variable, stretch: int) -> None:
        if var.kind in LOCAL_KINDS:
            key = (var.kind, var.id)
            self.touched[key].add(stretch)
            self.variables[key] = var

    def scope(self, scope: Scope, in_loop: bool) -> None:
        stretch = self.new(in_loop)
        for inst in scope.instructions:
            op = inst.operation
            if isinstance(op, (ops.SyncCube, ops.SyncPlane)):
                stretch = self.new(in_loop)
            elif isinstance(op, ops.PlaneOp):  # reads and writes the units' frames between two stretches
                for var in (*op.operands(), *inst.outputs):
                    collective = self.new(in_loop)
                    self.cube_level.add(collective)
                    self.touch(var, collective)
                stretch = self.new(in_loop)
            elif _hoistable(inst, self.uniform_values, self.hoisted_values | self.uniform_indices):
                self.hoisted.add(id(inst))
                assert inst.out is not None
                self.hoisted_values.add((inst.out.kind, inst.out.id))
            elif id(inst) not in self.split and _runs_in_lockstep(inst):
                # A stretch of its own, run as a loop: a local it writes may be read in its next iteration.
                self.lockstep.add(id(inst))
                self.touch_all(inst, self.new(True))
                stretch = self.new(in_loop)
            elif id(inst) in self.split:
                header = self.new(in_loop)  # the cube-wide control reads its operands from a unit's frame
                self.cube_level.add(header)
                for var in op.operands():
                    self.touch(var, header)
                if isinstance(op, branch.RangeLoop):
                    self.uniform_indices.add((op.index.kind, op.index.id))
                for child in child_scopes(op):
                    self.scope(child, in_loop or isinstance(op, (branch.RangeLoop, branch.Loop)))
                stretch = self.new(in_loop)
            else:
                self._note_recomputable(inst)
                self.touch_all(inst, stretch)

    def _note_recomputable(self, inst: Instruction) -> None:
        """Record ``inst`` as a candidate when it computes an integer from literals, parameters, builtins,
        cube values and other candidates with a cheap operation (``_RECOMPUTABLE``), in a small tree."""
        out, op = inst.out, inst.operation
        if out is None or out.kind is not VarKind.CONST or not isinstance(op, _RECOMPUTABLE) or out.type.is_line:
            return
        if out.elem.kind not in ("int", "uint") or child_scopes(op):
            return
        size = 1
        for var in op.operands():
            key = (var.kind, var.id)
            if var.kind in (VarKind.CONSTANT, VarKind.BUILTIN, VarKind.SCALAR):
                continue
            if key in self.hoisted_values or key in self.uniform_indices:
                continue
            if key not in self.candidates:
                return
            size += self.candidates[key][1]
        if size <= RECOMPUTE_LIMIT:
            self.candidates[(out.kind, out.id)] = (inst, size)

    def _settle_recomputed(self) -> None:
        """The candidates that are never read at cube level and whose own operands are recomputed too."""
        kept = {key for key in self.candidates if not self.touched.get(key, set()) & self.cube_level}
        changed = True
        while changed:
            changed = False
            for key in sorted(kept):
                inst = self.candidates[key][0]
                operands = [(v.kind, v.id) for v in inst.operation.operands() if v.kind is VarKind.CONST]
                if any(
                    k not in kept and k not in self.hoisted_values and k not in self.uniform_indices for k in operands
                ):
                    kept.discard(key)
                    changed = True
        self.recomputed = {key: self.candidates[key][0] for key in sorted(kept)}

    def touch_all(self, inst: Instruction, stretch: int) -> None:
        """Every local ``inst`` and the instructions in its bodies read or define, in ``stretch``."""
        for nested in walk(Scope((inst,))):
            for var in (*nested.operation.operands(), *nested.outputs):
                self.touch(var, stretch)
            if isinstance(nested.operation, branch.RangeLoop):
                self.touch(nested.operation.index, stretch)

    def per_unit(self, definition: KernelDefinition) -> tuple[Variable, ...]:
        """The locals kept per unit: touched by two stretches, or mutable inside a loop that holds a barrier
        (its value may come from the previous iteration's stretch)."""
        self.scope(definition.body, False)
        self._settle_recomputed()
        kept = []
        for key, stretches in self.touched.items():
            if key in self.uniform_indices or key in self.hoisted_values or key in self.recomputed:
                continue
            carried = key[0] is VarKind.MUT and bool(stretches & self.in_loops)
            if len(stretches) > 1 or carried:
                kept.append(self.variables[key])
        return tuple(sorted(kept, key=lambda v: (v.kind.value, v.id)))
