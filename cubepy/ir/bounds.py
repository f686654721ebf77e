"""The ``bounds`` pass: checks the range analysis proves are dropped, values it decides are rewritten.

In a checked kernel every ``index``/``index_assign`` carries ``checked=True`` (``checked_io``).  The pass
first splits loops over buffers (``cubepy.ir.versioning``), then walks the kernel once with
``cubepy.ir.ranges.RangeAnalysis``: an access proven in bounds loses its check (its checked and unchecked
forms agree, so results cannot change), and in every kernel, checked or not, values the facts decide are
rewritten (``_simplified``).  Last, adjacent guarded stores it can prove pair up are merged under one guard
(``cubepy.ir.store_pairs``).
"""

from __future__ import annotations

import attrs

from cubepy.ir import ops
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.launch_bounds import in_len_bounds, in_tensor_bounds
from cubepy.ir.ops import branch
from cubepy.ir.product_bounds import in_product_bounds
from cubepy.ir.ranges import DECLARED_LENGTH, Env, Interval, RangeAnalysis, multiples_within
from cubepy.ir.scope import Instruction, Scope, map_child_scopes
from cubepy.ir.store_pairs import pair_stores
from cubepy.ir.types import BOOL, Type
from cubepy.ir.variable import Variable, VarKind, constant
from cubepy.ir.versioning import version_loops


def proven_in_bounds(memory: Variable, index: Interval | None) -> bool:
    """Whether every index in ``index`` is inside ``memory``'s declared length."""
    return (
        memory.kind in DECLARED_LENGTH
        and memory.length is not None
        and index is not None
        and 0 <= index[0]
        and index[1] < memory.length
    )


def bounds_pass(definition: KernelDefinition) -> KernelDefinition:
    """The pipeline's ``bounds`` pass: in a checked kernel, version loops over buffers (``cubepy.ir.versioning``)
    and clear ``checked`` on accesses the range analysis proves in bounds; in every kernel, rewrite the values
    it decides (``_simplified``)."""
    if definition.checked:
        definition = version_loops(definition)
    analysis = RangeAnalysis(definition)
    body = _scope(definition.body, analysis, {})
    return attrs.evolve(definition, body=pair_stores(definition, body, analysis))


def _scope(scope: Scope, analysis: RangeAnalysis, env: Env) -> Scope:
    out: list[Instruction] = []
    for inst in scope.instructions:
        op = inst.operation
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.checked:
            proven = proven_in_bounds(op.memory, analysis.of(op.index, env))
            if (
                proven
                or in_len_bounds(analysis, op, env)
                or in_tensor_bounds(analysis, op, env)
                or in_product_bounds(analysis, op, env)
            ):
                inst = attrs.evolve(inst, operation=attrs.evolve(op, checked=False))
        elif isinstance(op, ops.AsyncCopy) and not op.all_or_nothing and _all_or_nothing(op, analysis, env):
            inst = attrs.evolve(inst, operation=attrs.evolve(op, all_or_nothing=True))
        elif isinstance(op, branch.BRANCH_OPS):
            inst = attrs.evolve(inst, operation=_branch(op, analysis, env))
        analysis.define(inst, env)
        out.extend(_simplified(inst, analysis, env))
    return Scope(tuple(out))


def _all_or_nothing(op: ops.AsyncCopy, analysis: RangeAnalysis, env: Env) -> bool:
    """Whether the copy's source byte count is 0 or its whole size for every unit: in ``[0, size]`` and a
    multiple of ``size`` (a chunk cut at an edge that is a multiple of the chunk)."""
    found = analysis.of(op.src_bytes, env)
    if found is None or found[0] < 0 or found[1] > op.size:
        return False
    return found[1] == 0 or analysis.trailing_zeros(op.src_bytes) >= op.size.bit_length() - 1


_FOLDABLE = (ops.Binary, ops.Select, ops.Clamp, ops.Cast)


def _simplified(inst: Instruction, analysis: RangeAnalysis, env: Env) -> tuple[Instruction, ...]:
    """``inst``, or what computes its value more simply from the facts of the analysis, which LLVM cannot see:

    - an immutable integer pinned to one value is an assignment of it (``min(cols - col, 8)`` under
      ``col < cols``, both multiples of 8, is 8);
    - ``min(a, b)`` is ``a`` when ``a <= b`` for every value (``max`` alike);
    - ``min(a, b)`` with ``a`` either 0 or ``2**z`` and ``b`` a non-negative multiple of ``2**z`` is
      ``select(b != 0, a, 0)``: a checked 16-byte copy cut at a buffer whose length is a multiple of 16
      copies all of it or nothing, a predicate ptxas turns into a predicated copy.
    """
    out, op = inst.out, inst.operation
    if out is None or out.elem.is_bool or out.type.is_line or not isinstance(op, _FOLDABLE):
        return (inst,)
    found = env.get((out.kind, out.id))  # set by ``define`` for immutable integers only
    if found is not None and found[0] == found[1]:
        return (attrs.evolve(inst, operation=ops.Assign(constant(found[0], out.type))),)
    kept = analysis.added_back(op)
    if kept is not None and (analysis.stable(kept) or kept.kind is VarKind.CONSTANT):  # the value the add read
        return (attrs.evolve(inst, operation=ops.Assign(kept)),)
    if not isinstance(op, (ops.Min, ops.Max)) or not out.elem.is_int:
        return (inst,)
    a, b = analysis.of(op.lhs, env), analysis.of(op.rhs, env)
    if a is None or b is None:
        return (inst,)
    for first, second, (x, y) in ((op.lhs, op.rhs, (a, b)), (op.rhs, op.lhs, (b, a))):
        if isinstance(op, ops.Min) and x[1] <= y[0] or isinstance(op, ops.Max) and x[0] >= y[1]:
            return (attrs.evolve(inst, operation=ops.Assign(first)),)
        zeros = analysis.trailing_zeros(first)
        all_or_nothing = isinstance(op, ops.Min) and x[0] >= 0 and y[0] >= 0 and 0 < zeros < out.elem.bits
        if all_or_nothing and x[1] <= 1 << zeros and analysis.trailing_zeros(second) >= zeros:
            nonzero = Variable(VarKind.CONST, analysis.next_id, Type(BOOL))
            analysis.next_id += 1
            test = attrs.evolve(inst, out=nonzero, operation=ops.Ne(second, constant(0, second.type)))
            return (test, attrs.evolve(inst, operation=ops.Select(nonzero, first, constant(0, out.type))))
    return (inst,)


def _branch(op: ops.Operation, analysis: RangeAnalysis, env: Env) -> ops.Operation:
    """``op`` with each body rewritten under what holds inside it."""
    if isinstance(op, branch.If):
        return attrs.evolve(op, body=_scope(op.body, analysis, analysis.narrowed(op.cond, True, env)))
    if isinstance(op, branch.IfElse):
        return attrs.evolve(
            op,
            then_body=_scope(op.then_body, analysis, analysis.narrowed(op.cond, True, env)),
            else_body=_scope(op.else_body, analysis, analysis.narrowed(op.cond, False, env)),
        )
    if isinstance(op, branch.RangeLoop):
        inner = dict(env)
        found = analysis.loop_index(op, env)
        if analysis.stable(op.index):
            zeros = min(analysis.trailing_zeros(op.start), analysis.trailing_zeros(op.step))
            if zeros:  # start + k * step
                analysis.zeros[(op.index.kind, op.index.id)] = zeros
            if found is not None:
                inner[(op.index.kind, op.index.id)] = multiples_within(found, zeros)
            step = analysis.of(op.step, env)
            if not op.inclusive and step is not None and step[0] > 0 and analysis.stable(op.end):
                # an ascending loop runs its body only while ``index < end``: the fact a guard would give
                inner[("lt", (op.index.kind, op.index.id), (op.end.kind, op.end.id))] = (1, 1)
        return attrs.evolve(op, body=_scope(op.body, analysis, inner))
    if isinstance(op, branch.Switch):
        cases = tuple(
            (value, _scope(body, analysis, _case(analysis, op.value, value, env))) for value, body in op.cases
        )
        return attrs.evolve(op, cases=cases, default=_scope(op.default, analysis, dict(env)))
    return map_child_scopes(op, lambda child: _scope(child, analysis, dict(env)))


def _case(analysis: RangeAnalysis, value: Variable, case: int, env: Env) -> Env:
    inner = dict(env)
    if analysis.stable(value):
        inner[(value.kind, value.id)] = (case, case)
    return inner
