"""Plane uniformity: which plane collectives every unit of the plane reaches together, decided in the IR.

A plane collective honors the active mask (the units of the plane executing it now).  When the IR shows
that the whole plane always reaches it, the back ends may drop the active-mask test and use the plain
full-plane form (PTX: ``shfl.sync``/``vote.sync`` with mask ``0xffffffff``, no ``activemask``).  The
``plane_uniform`` pass sets ``uniform=True`` on such an operation (printed ``{uniform=True}``); the
result is the same either way, so the interp ignores the flag.

A collective is *plane-uniform* when

- the cube's unit count is a multiple of the plane width (no plane is partial), and
- every enclosing branch decides the same way for all units of a plane: the condition (``if``,
  ``if_else``), value (``switch``) or bounds (``range_loop``) is plane-uniform, and a loop's body holds no
  ``break``/``continue``/``return`` taken by only part of the plane, and
- no ``return`` taken by only part of the plane comes before it (``if pos >= n: return`` at the top makes
  the rest of the kernel divergent).

A value is plane-uniform when it is a literal, a scalar parameter, a builtin equal on all units of a plane
(``cube_pos*``, ``cube_dim*``, ``cube_count*``, ``plane_dim``, ``plane_pos``), buffer metadata (``len``,
``shape``, ...), the index of a uniform ``range_loop``, the result of a pure operation (not a memory read)
of plane-uniform operands in uniform control, or the result of a uniform plane reduction or vote.  A
mutable local is plane-uniform only when every assignment to it is (checked to a fixed point).  Memory
reads and atomics are never plane-uniform.  This errs on the side of "divergent": a collective left
divergent is still correct, only slower.
"""

from __future__ import annotations

import attrs

from cubepy.ir import ops
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.ops import branch
from cubepy.ir.scope import Instruction, Scope
from cubepy.ir.variable import BUILTINS, PLANE_WIDTH, Variable, VarKind

# The builtins every unit of a plane reads the same: all but the unit's own positions.
_UNIFORM_BUILTINS = frozenset(name for name in BUILTINS if not name.startswith(("absolute_pos", "unit_pos")))
# Collectives whose result is the same on every unit that takes part.
_UNIFORM_RESULTS = (
    ops.PlaneSum,
    ops.PlaneProd,
    ops.PlaneMin,
    ops.PlaneMax,
    ops.PlaneAll,
    ops.PlaneAny,
    ops.PlaneBallot,
)
# The builtins every unit of a cube reads the same.
_CUBE_UNIFORM_BUILTINS = frozenset(
    name for name in BUILTINS if not name.startswith(("absolute_pos", "unit_pos", "plane_pos"))
)
_Key = tuple[VarKind, int]
_JUMPS = {branch.Break: "break", branch.Continue: "continue", branch.Return: "return"}


def plane_uniform_pass(definition: KernelDefinition) -> KernelDefinition:
    """The pipeline's ``plane_uniform`` pass: mark every plane collective the whole plane reaches."""
    if definition.units_per_cube % PLANE_WIDTH:
        return definition  # the last plane of each cube is partial
    divergent_muts: set[_Key] = set()
    while True:  # a mutable local found divergent can make more values (and locals) divergent
        analysis = _Analysis(divergent_muts)
        body = analysis.scope(definition.body, uniform=True)[0]
        if analysis.divergent_muts == divergent_muts:
            break
        divergent_muts = set(analysis.divergent_muts)
    return definition if body == definition.body else attrs.evolve(definition, body=body)


@attrs.frozen
class CubeUniformity:
    """What every unit of a cube still running computes alike (``cube_uniformity``)."""

    control: frozenset[int]  # id() of the branches and loops it decides alike, in control it takes alike
    values: frozenset[_Key]  # (kind, id) of the CONST locals it computes alike there, from pure operations


def cube_uniformity(definition: KernelDefinition) -> CubeUniformity:
    """The branches, loops and values of ``definition.body`` that every unit of the cube still running
    reaches and computes the same way.

    The rules above with the cube in place of the plane: a unit's position in its cube or plane is divergent,
    no plane collective's result is uniform, and a ``return`` makes nothing divergent (the units left decide
    alike).  A ``range_loop`` listed here has a ``break``/``continue`` taken by all units or by none.
    """
    divergent_muts: set[_Key] = set()
    while True:
        analysis = _Analysis(divergent_muts, cube=True)
        analysis.scope(definition.body, uniform=True)
        if analysis.divergent_muts == divergent_muts:
            consts = frozenset(key for key in analysis.uniform_consts if key[0] is VarKind.CONST)
            return CubeUniformity(frozenset(analysis.uniform_control), consts)
        divergent_muts = set(analysis.divergent_muts)


def cube_uniform_control(definition: KernelDefinition) -> frozenset[int]:
    """``cube_uniformity(definition).control``."""
    return cube_uniformity(definition).control


class _Analysis:
    """One walk over the body in program order, marking plane collectives given the divergent locals.

    ``cube``: decide uniformity over the cube's running units instead (``cube_uniform_control``)."""

    def __init__(self, divergent_muts: set[_Key], cube: bool = False) -> None:
        self.divergent_muts = set(divergent_muts)
        self.uniform_consts: set[_Key] = set()
        self.returned = False  # part of the plane may have returned before this point
        self.cube = cube
        self.uniform_builtins = _CUBE_UNIFORM_BUILTINS if cube else _UNIFORM_BUILTINS
        self.uniform_control: set[int] = set()  # id() of branches and loops decided alike, in uniform control

    def value(self, var: Variable) -> bool:
        """Whether ``var`` holds the same value on every unit of a plane."""
        kind = var.kind
        if kind in (VarKind.CONSTANT, VarKind.SCALAR, VarKind.GLOBAL, VarKind.SHARED, VarKind.LOCAL_ARRAY):
            return True  # memories stand for themselves (their metadata is uniform, their items are not)
        if kind is VarKind.BUILTIN:
            return var.name in self.uniform_builtins
        if kind is VarKind.MUT:
            return (kind, var.id) not in self.divergent_muts
        return (kind, var.id) in self.uniform_consts

    def define(self, var: Variable, uniform: bool) -> None:
        """Record the uniformity of a value ``var`` receives."""
        key = (var.kind, var.id)
        if var.kind is VarKind.MUT:
            if not uniform:
                self.divergent_muts.add(key)
        elif uniform:
            self.uniform_consts.add(key)
        else:  # a loop body analysed again as divergent
            self.uniform_consts.discard(key)

    def scope(self, scope: Scope, uniform: bool) -> tuple[Scope, set[str]]:
        """``scope`` with its collectives marked, and the jumps some but not all units of a plane take."""
        out: list[Instruction] = []
        jumps: set[str] = set()
        for inst in scope.instructions:
            here = uniform and not self.returned
            inst, taken = self.instruction(inst, here)
            jumps |= taken
            out.append(inst)
        return Scope(tuple(out)), jumps

    def instruction(self, inst: Instruction, uniform: bool) -> tuple[Instruction, set[str]]:
        """One instruction in a context that is (or is not) reached by the whole plane."""
        operation = inst.operation
        if isinstance(operation, tuple(_JUMPS)):
            if uniform or (self.cube and isinstance(operation, branch.Return)):
                return inst, set()
            if isinstance(operation, branch.Return):
                self.returned = True
            return inst, {_JUMPS[type(operation)]}
        if isinstance(operation, (branch.If, branch.IfElse, branch.Switch)):
            return self.branch(inst, uniform)
        if isinstance(operation, (branch.RangeLoop, branch.Loop)):
            return self.loop(inst, uniform)
        if isinstance(operation, ops.PlaneOp):
            if operation.uniform != uniform:
                inst = attrs.evolve(inst, operation=attrs.evolve(operation, uniform=uniform))
            result_uniform = uniform and not self.cube and isinstance(operation, _UNIFORM_RESULTS)
            if isinstance(operation, ops.PlaneBroadcast):
                result_uniform = uniform and operation.arg is not None and self.value(operation.arg)
            if inst.out is not None:
                self.define(inst.out, result_uniform)
            return inst, set()
        record = operation.RECORD
        same = uniform and record.pure and not record.reads and all(self.value(v) for v in operation.operands())
        for var in inst.outputs:
            self.define(var, same)
        if isinstance(operation, ops.InsertLane) and operation.target.kind is VarKind.MUT:
            self.define(operation.target, same)
        return inst, set()

    def branch(self, inst: Instruction, uniform: bool) -> tuple[Instruction, set[str]]:
        operation = inst.operation
        assert isinstance(operation, (branch.If, branch.IfElse, branch.Switch))
        cond = operation.value if isinstance(operation, branch.Switch) else operation.cond
        inner = uniform and self.value(cond)
        if inner:
            self.uniform_control.add(id(inst))
        jumps: set[str] = set()
        changes: dict[str, object] = {}
        if isinstance(operation, branch.Switch):
            cases = []
            for case, body in operation.cases:
                new_body, taken = self.scope(body, inner)
                jumps |= taken
                cases.append((case, new_body))
            changes["cases"] = tuple(cases)
            changes["default"], taken = self.scope(operation.default, inner)
            jumps |= taken
        else:
            for field in ("body", "then_body", "else_body"):
                if hasattr(operation, field):
                    changes[field], taken = self.scope(getattr(operation, field), inner)
                    jumps |= taken
        return _evolve(inst, changes), jumps

    def loop(self, inst: Instruction, uniform: bool) -> tuple[Instruction, set[str]]:
        operation = inst.operation
        assert isinstance(operation, (branch.RangeLoop, branch.Loop))
        inner = uniform
        if isinstance(operation, branch.RangeLoop):
            inner = uniform and all(self.value(v) for v in operation.operands())
            self.define(operation.index, inner)
        decided = set(self.uniform_control)
        body, jumps = self.scope(operation.body, inner)
        if inner and jumps:  # part of the plane leaves or skips an iteration: later iterations diverge
            self.uniform_control = decided  # so does what the body decided alike
            if isinstance(operation, branch.RangeLoop):
                self.define(operation.index, False)
            body, jumps = self.scope(operation.body, False)
        elif inner:
            self.uniform_control.add(id(inst))
        return _evolve(inst, {"body": body}), jumps & {"return"}


def _evolve(inst: Instruction, changes: dict[str, object]) -> Instruction:
    operation = attrs.evolve(inst.operation, **changes)
    return inst if operation == inst.operation else attrs.evolve(inst, operation=operation)
