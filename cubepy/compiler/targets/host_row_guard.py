"""Row guards of plain host kernels: ``if x < n: ...`` run as a loop over exactly the units it admits.

Most elementwise kernels are ``if ABSOLUTE_POS < out.len(): body``.  The host driver runs a row of units
(``tid.x`` from 0 to ``cube_dim_x``) in one loop, and LLVM vectorizes it by turning the guarded body into
masked loads and stores.  Masked stores are slow on many x86 CPUs (AMD's ``vmaskmovps`` to memory is
microcoded), and every row pays for them although only the last cube of a launch has units past ``n``.

A *row guard* is a kernel body of pure instructions (arithmetic and buffer metadata: no reads, no writes)
followed by one ``if`` as its last instruction, whose condition is a conjunction of terms that do not depend
on ``tid.x`` and exactly one compare ``x < n`` (or ``n > x``) of u32 values where ``n`` does not depend on
``tid.x`` and ``x`` is ``a + tid.x`` modulo 2**32 (``unit_pos``, ``unit_pos_x``, ``absolute_pos``,
``absolute_pos_x``, or one of them plus a value independent of ``tid.x``).  For such a kernel the unit
function takes two more arguments, ``mode`` and ``probe``, and the driver, per row:

1. calls it with ``tid.x = 0`` and ``mode = PROBE``: the unit evaluates the prefix, stores ``x``, ``n`` and
   the other terms into ``probe`` and returns (unit 0 of the row evaluates the same prefix anyway);
2. with ``A = x(0)``: when ``A + cube_dim_x - 1`` does not wrap, ``x(t) = A + t`` for every unit, so the
   guard holds exactly for ``t < min(n - A, cube_dim_x)`` (none when ``A >= n`` or another term is false):
   that prefix of the row runs with ``mode = KNOWN``, where the guard is not evaluated, and the rest of the
   row is skipped (its guard is false and nothing follows the ``if``);
3. when it could wrap, the whole row runs with ``mode = AS_WRITTEN``.

LLVM then vectorizes the guard-free loop with plain vector loads and stores and the row's tail with scalars.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs
import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.ir import KernelDefinition, ops
from cubepy.ir.ops import branch
from cubepy.ir.scope import Instruction, Scope, walk
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering
    from cubepy.compiler.targets.host_driver import _Emitter

AS_WRITTEN, KNOWN, PROBE = 0, 1, 2  # the unit function's ``mode`` argument
PROBE_WORDS = 3  # x, n and the other terms (as 0 or 1), u32 each

# Builtins equal to ``tid.x`` plus a value independent of it (mod 2**32), and builtins independent of ``tid.x``.
_PLUS_TID_X = frozenset({"unit_pos", "unit_pos_x", "absolute_pos", "absolute_pos_x"})
_BESIDE_TID_X = ("cube_pos", "cube_dim", "cube_count", "unit_pos_y", "unit_pos_z", "absolute_pos_y", "absolute_pos_z")


BELOW, EQUAL, LANE = "below", "equal", "lane"  # a guard's kinds: x < n, x == n, unit_pos_plane == n


@attrs.frozen
class RowGuard:
    """A kernel body ``prefix; if cond: ...`` whose ``cond`` admits a prefix of each row of units (``BELOW``: ``x < n``),
    or one unit of it (``EQUAL``: ``x == n``), or one unit of each plane (``LANE``: ``unit_pos_plane == n``)."""

    prefix: Scope  # pure instructions before the ``if``
    guard: Instruction  # the ``if``, the body's last instruction
    cond: Variable  # its condition
    position: Variable  # ``x``: ``a + tid.x`` (``unit_pos_plane`` for ``LANE``)
    limit: Variable  # ``n``
    others: tuple[Variable, ...]  # the conjunction's terms independent of ``tid.x``
    kind: str = BELOW


def find_row_guard(definition: KernelDefinition) -> RowGuard | None:
    """The kernel's row guard, or None when its body is not of that shape (see the module's docstring)."""
    body = definition.body.instructions
    return find_guard(body, Dependence(_pure_definitions(body[:-1])))


def find_guard(instructions: Sequence[Instruction], facts: Dependence, equal: bool = False) -> RowGuard | None:
    """``instructions`` as a row guard (pure prefix, then an ``if`` on ``x < n`` and terms independent of
    ``tid.x``), or None; ``facts`` knows the definitions of the values the prefix reads.  ``equal``: also an
    ``if`` on ``x == n`` or ``unit_pos_plane == n`` (``EQUAL``, ``LANE``)."""
    guard = instructions[-1].operation if instructions else None
    if not isinstance(guard, branch.If):
        return None
    cond = guard.cond
    prefix = instructions[:-1]
    if not all(_pure_definition(inst) for inst in prefix):
        return None
    if cond.kind is not VarKind.CONST or all(inst.out is not cond for inst in prefix):
        return None
    terms = facts.conjuncts(cond)
    varying = [term for term in terms if facts.varies(term)]
    if len(varying) != 1:
        return None
    compare = facts.defs.get(varying[0].id) if varying[0].kind is VarKind.CONST else None
    kind = BELOW
    if isinstance(compare, ops.Lt):
        position, limit = compare.lhs, compare.rhs
    elif isinstance(compare, ops.Gt):
        position, limit = compare.rhs, compare.lhs
    elif isinstance(compare, ops.Eq) and equal:
        position, limit = (compare.lhs, compare.rhs) if facts.varies(compare.lhs) else (compare.rhs, compare.lhs)
        kind = LANE if position.kind is VarKind.BUILTIN and position.name == "unit_pos_plane" else EQUAL
    else:
        return None
    if not (_is_u32(position) and _is_u32(limit)) or facts.varies(limit):
        return None
    if kind != LANE and not facts.plus_tid_x(position):
        return None
    others = tuple(term for term in terms if term is not varying[0])
    return RowGuard(Scope(tuple(prefix)), instructions[-1], cond, position, limit, others, kind)


def kernel_dependence(body: Scope) -> Dependence:
    """What ``find_guard`` needs to know of a whole kernel body: every pure, memory-free definition of an
    immutable local at any depth (ids are unique), and the indices of range loops whose start and step
    do not depend on ``tid.x`` (a loop run for the whole cube, or in lockstep rounds: every unit of a row
    has the same index in a round)."""
    facts = Dependence(_pure_definitions(walk(body)))
    for inst in walk(body):  # in program order: a loop's start and step are defined before it
        operation = inst.operation
        if isinstance(operation, branch.RangeLoop) and operation.index.kind is VarKind.CONST:
            if not (facts.varies(operation.start) or facts.varies(operation.step)):
                facts.invariant.add(operation.index.id)
    return facts


def _pure_definition(inst: Instruction) -> bool:
    """Whether ``inst`` defines an immutable local from its operands alone (no memory, no control)."""
    record = inst.operation.RECORD
    if inst.out is None or inst.out.kind is not VarKind.CONST or not record.pure or record.reads or record.writes:
        return False
    return not isinstance(inst.operation, branch.BRANCH_OPS)


def _pure_definitions(instructions: Iterable[Instruction]) -> dict[int, ops.Operation]:
    """The ``_pure_definition``s among ``instructions``, by the id of the local each defines."""
    return {inst.out.id: inst.operation for inst in instructions if inst.out is not None and _pure_definition(inst)}


def _is_u32(var: Variable) -> bool:
    return not var.type.is_line and var.elem.kind == "uint" and var.elem.bits == 32


class Dependence:
    """Which values may differ between the units of a row (depend on ``tid.x``), and which are ``tid.x`` plus a
    value that does not; from ``defs``, the pure definitions known (a guard's prefix, or a whole kernel)."""

    def __init__(self, defs: dict[int, ops.Operation]) -> None:
        self.defs = defs
        self.invariant: set[int] = set()  # immutable locals known to be alike across a row (loop indices)
        self.memo: dict[int, bool] = {}

    def _definition(self, var: Variable) -> ops.Operation | None:
        return self.defs.get(var.id) if var.kind is VarKind.CONST else None

    def varies(self, var: Variable) -> bool:
        """Whether ``var`` may differ between units of a row (conservative: True when unsure)."""
        if var.kind in (VarKind.CONSTANT, VarKind.SCALAR, VarKind.GLOBAL):
            return False
        if var.kind is VarKind.BUILTIN:
            return var.name is None or not var.name.startswith(_BESIDE_TID_X)
        if var.kind is not VarKind.CONST:
            return True
        if var.id in self.invariant:
            return False
        if var.id not in self.defs:
            return True
        if var.id not in self.memo:
            self.memo[var.id] = True  # a cycle cannot happen in SSA; stay conservative if it did
            self.memo[var.id] = any(self.varies(operand) for operand in self.defs[var.id].operands())
        return self.memo[var.id]

    def plus_tid_x(self, var: Variable) -> bool:
        """Whether ``var`` is ``tid.x + a`` (mod 2**32) with ``a`` independent of ``tid.x``."""
        if var.kind is VarKind.BUILTIN:
            return var.name in _PLUS_TID_X
        found = self._definition(var)
        if not isinstance(found, ops.Add) or not all(_is_u32(v) for v in (found.lhs, found.rhs)):
            return False
        return (self.plus_tid_x(found.lhs) and not self.varies(found.rhs)) or (
            self.plus_tid_x(found.rhs) and not self.varies(found.lhs)
        )

    def conjuncts(self, cond: Variable) -> list[Variable]:
        """The terms of ``cond`` as a tree of logical ``and``s (``cond`` itself when it is not one)."""
        found = self._definition(cond)
        if isinstance(found, ops.And) and not found.lhs.type.is_line:
            return self.conjuncts(found.lhs) + self.conjuncts(found.rhs)
        return [cond]


def lower_guarded_body(lw: KernelLowering, guard: RowGuard, mode: ir.Value, probe: ir.Value) -> None:
    """Lower ``prefix; if cond: ...`` in a unit function for the three modes of ``mode``."""
    lw.lower_scope(guard.prefix)
    b: ir.IRBuilder = lw.builder
    probing, rest = lw.new_block("row.probe"), lw.new_block("row.run")
    b.cbranch(b.icmp_unsigned("==", mode, ir.Constant(lt.I32, PROBE)), probing, rest)
    b.position_at_end(probing)
    position, limit, others = guard_terms(lw, guard)
    words = (position, limit, b.zext(others, lt.I32))
    for index, word in enumerate(words):
        b.store(word, b.gep(probe, [ir.Constant(lt.I64, index)], source_etype=lt.I32))
    b.ret_void()
    b.position_at_end(rest)
    cond = guard.cond
    known = b.icmp_unsigned("==", mode, ir.Constant(lt.I32, KNOWN))
    lw.define(cond, b.or_(known, lw.value(cond)))
    lw.lower_instruction(guard.guard)


def run_guarded_row(
    e: _Emitter,
    call: Callable[[ir.Value, int], None],
    probe: ir.Value,
    width: ir.Value,
    vector_width: int | None = None,
) -> None:
    """The driver's row of ``width`` units: ``call(tid_x, mode)`` once to probe, then for the units the guard
    admits (``vector_width`` items per vector there, when given)."""
    b = e.b
    i32 = lt.I32
    call(ir.Constant(i32, 0), PROBE)
    first, limit, others = (
        b.load(b.gep(probe, [ir.Constant(i32, 0), ir.Constant(i32, index)], source_etype=probe.allocated_type), typ=i32)
        for index in range(PROBE_WORDS)
    )
    known, tested = admitted_units(b, first, limit, b.icmp_unsigned("!=", others, ir.Constant(i32, 0)), width)
    single = isinstance(width, ir.Constant) and width.constant == 1
    e.loop(ir.Constant(i32, 0), known, lambda tid_x: call(tid_x, KNOWN), vectorize=not single, width=vector_width)
    e.loop(tested, width, lambda tid_x: call(tid_x, AS_WRITTEN), scalar=True)


def admitted_units(
    b: ir.IRBuilder, first: ir.Value, limit: ir.Value, others: ir.Value, width: ir.Value
) -> tuple[ir.Value, ir.Value]:
    """For a row of ``width`` units whose unit 0 has ``x = first``, limit ``n`` and other terms ``others``
    (i1): (``known``, ``tested``).  Units ``[0, known)`` pass the guard, units from ``known`` up to ``tested``
    fail it, and units ``[tested, width)`` must evaluate it (all of them when ``x`` could wrap in the row)."""
    i32 = lt.I32
    # x(t) = first + t for every unit when first + width - 1 does not wrap: the guard admits t < limit - first
    exact = b.icmp_unsigned("<=", first, b.sub(ir.Constant(i32, 0xFFFFFFFF), b.sub(width, ir.Constant(i32, 1))))
    admitted = b.and_(b.icmp_unsigned("<", first, limit), others)
    span = b.sub(limit, first)
    count = b.select(b.icmp_unsigned("<", span, width), span, width)
    known = b.select(b.and_(exact, admitted), count, ir.Constant(i32, 0))
    return known, b.select(exact, width, ir.Constant(i32, 0))


def lower_known_guard(lw: KernelLowering, guard: RowGuard) -> None:
    """``prefix; if cond: ...`` for a unit the guard admits: the prefix, then the body with ``cond`` true.

    ``cond`` is also assumed (``llvm.assume``): a checked access in the body whose index is the guard's ``x``
    recomputed (``if i + k < n: a[i + k]``) then loses its bounds test once LLVM merges the two sums."""
    lw.lower_scope(guard.prefix)
    lw.call("llvm.assume", lt.VOID, [lw.value(guard.cond)])
    lw.define(guard.cond, ir.Constant(lt.I1, 1))
    lw.lower_instruction(guard.guard)


def guard_terms(lw: KernelLowering, guard: RowGuard) -> tuple[ir.Value, ir.Value, ir.Value]:
    """``x``, ``n`` and the conjunction of the other terms (i1), after the prefix was lowered."""
    b: ir.IRBuilder = lw.builder
    others: ir.Value = ir.Constant(lt.I1, 1)
    for term in guard.others:
        others = b.and_(others, lw.value(term))
    return lw.value(guard.position), lw.value(guard.limit), others
