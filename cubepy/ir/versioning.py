"""Loop splitting for checked global accesses: one bound before a loop in place of a check per access per round.

A checked read or write of a buffer inside a ``range_loop`` compares its index with the buffer's length in
every round.  When the index is the loop index plus loop-invariant terms (``x[base + c]``, ``gamma[c]``),
the rounds whose index is below ``length - base`` cannot miss, so the loop is split in two:

```text
fast_end = min(end, length - min(length, base), ...)      (u64, one term per covered access)
for c in range(start, fast_end, step): ...  those accesses unchecked; counts where the original goes on
for c in range(resume, end, step):     ...  the loop as written (checked): usually no round at all
```

The first loop runs exactly the original's rounds while its index is below ``fast_end`` (wrapping as the
original wraps), and the second picks up at the index the original would test next, so the two run the
same rounds in the same order.  Both stay plain top-level loops (the cpu runtime runs such loops in
lockstep across units).  Only loops whose two parts cannot be told apart are split: an unsigned index of
at most 32 bits counting up by a literal positive step to an invariant ``end`` that is not a literal (a
literal ``end`` gives a trip count the compiler sees, short or unrolled, where a second copy of the loop
costs more code than its checks), and a body of lane-local work only (arithmetic, memory indexing, lanes,
metadata, ``if``/``switch``, ``continue``/``return``): no nested loop, ``break``, barrier, plane
collective, atomic, print or asynchronous operation.  The copy's immutable locals get fresh ids.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import attrs

from cubepy.ir import ops
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.ops import branch
from cubepy.ir.scope import Instruction, Scope, map_child_scopes, walk
from cubepy.ir.types import U32, U64, Type
from cubepy.ir.variable import Variable, VarKind

_Key = tuple[VarKind, int]
# Operations a split loop body may hold: lane-local, nothing another unit can see the split through.
_LANE_LOCAL = (
    ops.Unary,
    ops.Binary,
    ops.Compare,
    ops.Fma,
    ops.Clamp,
    ops.Select,
    ops.Cast,
    ops.Bitcast,
    ops.Assign,
    ops.Index,
    ops.IndexAssign,
    ops.ExtractLane,
    ops.InsertLane,
    ops.Metadata,
    branch.If,
    branch.IfElse,
    branch.Switch,
    branch.RangeLoop,
    branch.Loop,
    branch.Break,
    branch.Continue,
    branch.Return,
)


def version_loops(definition: KernelDefinition) -> KernelDefinition:
    """Split every eligible ``range_loop`` of a checked kernel into an unchecked part and the checked rest."""
    if not definition.checked:
        return definition
    seen = [v for inst in walk(definition.body) for v in _variables(inst)]
    fresh = itertools.count(max((v.id for v in seen if v.kind is VarKind.CONST), default=-1) + 1)
    fresh_mut = itertools.count(max((v.id for v in seen if v.kind is VarKind.MUT), default=-1) + 1)
    written = _written(definition.body)
    lengths = {p.var.id: p.len_is_buffer_len for p in definition.buffers}
    everywhere = {(i.out.kind, i.out.id): i.operation for i in walk(definition.body) if i.out is not None}
    facts = _Facts(lengths, everywhere)
    return attrs.evolve(definition, body=_scope(definition.body, (fresh, fresh_mut), written, facts))


def _variables(inst: Instruction) -> Iterator[Variable]:
    if inst.out is not None:
        yield inst.out
    yield from inst.operation.operands()
    if isinstance(inst.operation, branch.RangeLoop):
        yield inst.operation.index


def _written(scope: Scope) -> set[_Key]:
    """Every variable some instruction of ``scope`` (at any depth) defines or assigns."""
    keys: set[_Key] = set()
    for inst in walk(scope):
        if inst.out is not None:
            keys.add((inst.out.kind, inst.out.id))
        if isinstance(inst.operation, branch.RangeLoop):
            keys.add((inst.operation.index.kind, inst.operation.index.id))
    return keys


def _scope(scope: Scope, fresh: tuple[Iterator[int], Iterator[int]], written: set[_Key], facts: _Facts) -> Scope:
    out: list[Instruction] = []
    for inst in scope.instructions:
        operation = map_child_scopes(inst.operation, lambda child: _scope(child, fresh, written, facts))
        inst = attrs.evolve(inst, operation=operation) if operation is not inst.operation else inst
        if isinstance(operation, branch.RangeLoop):
            out.extend(_version(inst, operation, fresh, facts))
        else:
            out.append(inst)
    return Scope(tuple(out))


@attrs.frozen
class _Facts:
    """What the split needs about the whole kernel: which buffers' ``len`` word is their checked bound, and
    the operation defining each local (CONST ids are unique in a kernel)."""

    lengths: dict[int, bool]
    defs: dict[_Key, ops.Operation]


def _bounded_by_end(
    loop: branch.RangeLoop, inside: set[_Key], defs: dict[_Key, ops.Operation], facts: _Facts
) -> set[int]:
    """Positions (``walk(loop.body)`` order) of checked accesses ``m[c]`` in a loop ``c < end`` whose ``end`` is
    the very word ``m``'s check compares against: the loop's own test already keeps them in bounds."""
    index = loop.index
    if index.type.is_line or index.elem.kind != "uint" or loop.inclusive or index.kind is not VarKind.CONST:
        return set()
    if (index.kind, index.id) in _written(loop.body) or not _invariant(loop.end, inside):
        return set()
    end = facts.defs.get((loop.end.kind, loop.end.id))
    if not isinstance(end, (ops.Len, ops.BufferLen)):
        return set()
    proven = set()
    for position, inst in enumerate(walk(loop.body)):
        op = inst.operation
        if not isinstance(op, (ops.Index, ops.IndexAssign)) or not op.checked or op.memory != end.memory:
            continue
        same_word = isinstance(end, ops.BufferLen) or facts.lengths.get(op.memory.id, False)
        if same_word and _terms(op.index, index, defs, inside) == []:
            proven.add(position)
    return proven


def _invariant(var: Variable, inside: set[_Key]) -> bool:
    if var.kind in (VarKind.CONSTANT, VarKind.BUILTIN, VarKind.SCALAR):
        return True
    return var.kind is VarKind.CONST and (var.kind, var.id) not in inside


def _eligible(loop: branch.RangeLoop, inside: set[_Key]) -> bool:
    index = loop.index
    # u32 and narrower: the u64 sum of a few terms cannot wrap.
    if index.type.is_line or index.elem.kind != "uint" or index.elem.bits > 32 or loop.end.type != index.type:
        return False
    if loop.end.is_constant:  # a trip count known at compile time is short or unrolled: the copy is not worth it
        return False
    if not _invariant(loop.end, inside) or not loop.step.is_constant or int(loop.step.value) <= 0:  # type: ignore[call-overload]
        return False
    if index.kind is not VarKind.CONST or loop.inclusive:
        return False
    # Loops nested inside are split on their own; splitting the outer one too would copy them twice.
    body = [inst.operation for inst in walk(loop.body)]
    # A ``break`` would leave the first part only, and the second would run on.
    nested = (branch.RangeLoop, branch.Loop, branch.Break)
    return all(isinstance(op, _LANE_LOCAL) and not isinstance(op, nested) for op in body)


def _terms(var: Variable, index: Variable, defs: dict[_Key, ops.Operation], inside: set[_Key]) -> list[Variable] | None:
    """The invariant terms of ``var`` when it is ``index`` plus invariant terms (one ``index``, adds only)."""
    if var == index:
        return []
    op = defs.get((var.kind, var.id))
    if not isinstance(op, ops.Add) or op.lhs.type != index.type or op.rhs.type != index.type:
        return None
    for a, b in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        if _invariant(b, inside):
            rest = _terms(a, index, defs, inside)
            if rest is not None:
                return [*rest, b]
    return None


def _version(
    inst: Instruction, loop: branch.RangeLoop, ids: tuple[Iterator[int], Iterator[int]], facts: _Facts
) -> list[Instruction]:
    fresh, fresh_mut = ids
    lengths = facts.lengths
    inside = _written(loop.body)
    inside.add((loop.index.kind, loop.index.id))
    defs: dict[_Key, ops.Operation] = {}
    for body_inst in walk(loop.body):
        if body_inst.out is not None and body_inst.out.kind is VarKind.CONST:
            defs[(body_inst.out.kind, body_inst.out.id)] = body_inst.operation
    proven = _bounded_by_end(loop, inside, defs, facts)
    if proven:  # ``for c in range(.., x.len(), ..): x[c]``: in bounds in every round, no split needed
        loop = _unchecked(loop, proven)
        inst = attrs.evolve(inst, operation=loop)
    if not _eligible(loop, inside):
        return [inst]
    # One precondition per (buffer, invariant terms); the accesses it covers lose their checks in the copy.
    conditions: dict[tuple[int, tuple[_Key, ...]], list[Variable]] = {}
    covered: set[int] = set()
    for position, body_inst in enumerate(walk(loop.body)):
        op = body_inst.operation
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.checked and op.memory.kind is VarKind.GLOBAL:
            terms = _terms(op.index, loop.index, defs, inside)
            if terms is not None:
                conditions.setdefault((op.memory.id, tuple(sorted((t.kind, t.id) for t in terms))), terms)
                covered.add(position)
    if not conditions:
        return [inst]
    emit: list[Instruction] = []

    def new(ty: Type, operation: ops.Operation) -> Variable:
        var = Variable(VarKind.CONST, next(fresh), ty)
        emit.append(Instruction(var, operation, inst.loc))
        return var

    def wide(var: Variable) -> Variable:
        return new(Type(U64), ops.Cast(var))

    memories = {
        v.id: v for body_inst in walk(loop.body) for v in body_inst.operation.operands() if v.kind is VarKind.GLOBAL
    }
    # The fast loop's end: below ``end`` and below every covered access's reach (its length minus its
    # invariant terms, 0 past them), so each of its indices keeps those accesses in bounds.
    fast_end = wide(loop.end)
    for (slot, _), terms in conditions.items():
        memory = memories[slot]
        # The word the access's check compares against (cubepy.compiler.lower_memory.memory_length).
        length = wide(new(Type(U32), (ops.Len if lengths.get(slot) else ops.BufferLen)(memory)))
        offset: Variable | None = None
        for term in terms:
            offset = wide(term) if offset is None else new(Type(U64), ops.Add(offset, wide(term)))
        if offset is not None:
            length = new(Type(U64), ops.Sub(length, new(Type(U64), ops.Min(length, offset))))
        fast_end = new(Type(U64), ops.Min(fast_end, length))
    # The fast loop counts where the original goes on (its index plus the step, wrapped as the loop's own
    # increment wraps), first thing in each round so ``continue`` cannot skip it; the rest starts there.
    index_type = loop.index.type
    resume = Variable(VarKind.MUT, next(fresh_mut), index_type)
    emit.append(Instruction(resume, ops.Assign(loop.start), inst.loc))
    fast = _unchecked(loop, covered)
    following = Variable(VarKind.CONST, next(fresh), index_type)
    count = (
        Instruction(following, ops.Add(loop.index, loop.step), inst.loc),
        Instruction(resume, ops.Assign(following), inst.loc),
    )
    fast = attrs.evolve(fast, end=new(index_type, ops.Cast(fast_end)), body=Scope(count + fast.body.instructions))
    emit.append(_renamed(attrs.evolve(inst, operation=fast), fresh))
    rest = attrs.evolve(loop, start=new(index_type, ops.Assign(resume)))
    emit.append(attrs.evolve(inst, operation=rest))
    return emit


def _unchecked(loop: branch.RangeLoop, covered: set[int]) -> branch.RangeLoop:
    """``loop`` with the accesses at ``covered`` (positions in ``walk(loop.body)`` order) unchecked."""
    counter = itertools.count()

    def rewrite(scope: Scope) -> Scope:
        out = []
        for inst in scope.instructions:
            position = next(counter)
            op = inst.operation
            if position in covered and isinstance(op, (ops.Index, ops.IndexAssign)):
                inst = attrs.evolve(inst, operation=attrs.evolve(op, checked=False))
            else:
                inst = attrs.evolve(inst, operation=map_child_scopes(op, rewrite))
            out.append(inst)
        return Scope(tuple(out))

    return attrs.evolve(loop, body=rewrite(loop.body))


def _renamed(inst: Instruction, fresh: Iterator[int]) -> Instruction:
    """``inst`` with every immutable local it defines (at any depth) given a fresh id, and its uses renamed."""
    mapping = {
        key: next(fresh) for key in sorted(_written(Scope((inst,))), key=lambda k: k[1]) if key[0] is VarKind.CONST
    }

    def swap(var: Variable) -> Variable:
        found = mapping.get((var.kind, var.id))
        return var if found is None else attrs.evolve(var, id=found)

    return _map_variables(inst, swap)


def _map_variables(inst: Instruction, swap: Callable[[Variable], Variable]) -> Instruction:
    operation = inst.operation
    changes: dict[str, object] = {}
    for field in attrs.fields(type(operation)):
        value = getattr(operation, field.name)
        if isinstance(value, Variable):
            changes[field.name] = swap(value)
        elif isinstance(value, tuple) and any(isinstance(v, Variable) for v in value):
            changes[field.name] = tuple(swap(v) if isinstance(v, Variable) else v for v in value)
    operation = attrs.evolve(operation, **changes) if changes else operation
    operation = map_child_scopes(
        operation, lambda scope: Scope(tuple(_map_variables(i, swap) for i in scope.instructions))
    )
    out = swap(inst.out) if inst.out is not None else None
    return attrs.evolve(inst, out=out, operation=operation)
