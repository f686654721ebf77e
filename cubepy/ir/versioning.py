"""Loop splitting for checked global accesses: one bound before a loop in place of a check per access per round.

A checked read or write of a buffer inside a ``range_loop`` compares its index with the buffer's length in
every round.  When the index is linear in the loop index, ``c * scale + offset`` with ``scale`` and
``offset`` built by ``+``, ``*`` and literal shifts from values the loop does not change (``x[base + c]``,
``gamma[c]``, ``b[(c + y) * n + col]``), the rounds with ``c * scale + offset < length`` cannot miss, so the
loop is split in two:

```text
fast_end = min(end, ceil((length - min(length, offset)) / max(scale, 1)), ..., 2**bits - step)   (u64)
resume = start + ceil((fast_end - start) / step) * step if start < fast_end else start
for c in range(start, fast_end, step): ...  those accesses unchecked
for c in range(resume, end, step):     ...  the loop as written (checked): usually no round at all
```

``scale`` and ``offset`` are rebuilt before the loop in u64 from their leaves (values defined before the
loop, literals, builtins, scalars, buffer metadata), so they are exact: the index the kernel computes wraps
modulo 2**32 but is congruent to ``c * scale + offset``, and equals it when that is below ``length``.
A scale whose u64 value could wrap (more than 63 bits by the widths of its leaves) is not used; such an
offset (``x[row, c]``'s ``row * x.shape(1)``, rebuilt from a product of two 32-bit leaves) is taken modulo
2**32 instead (computed in u32, as the kernel computes it): the index is congruent to ``c * scale`` plus
that value too, and equals it below ``length``.  (Not in a cube-uniform split, whose offsets are upper
bounds over the units: a wrapped value is no bound.)

The first loop runs exactly the original's rounds while its index is below ``fast_end``; it stops before an
index could wrap (``2**bits - step``), so ``resume``, the index the original would test next, is the closed
form above (computed before the loops: a counter kept in the fast loop would be stored per unit and round
on the cpu runtime, where a unit's rounds run side by side with its cube's other units).  The second loop
picks up there, wrapping as the original wraps, so the two run the same rounds in the same order.  Both
stay plain top-level loops (the cpu runtime runs such loops in lockstep across units).  Only loops whose two parts cannot be told apart are split: an unsigned index of
at most 32 bits counting up by a literal positive step to an invariant ``end`` that is not a literal (a
literal ``end`` gives a trip count the compiler sees, short or unrolled, where a second copy of the loop
costs more code than its checks), and a body of lane-local work (arithmetic, memory
indexing, lanes, metadata, ``if``/``switch``, ``continue``/``return``): no nested loop, ``break``, plane
collective, atomic, print or asynchronous operation.

A lane-local body past ``LANE_SPLIT_LIMIT`` instructions is not split: its copy costs more code than its
checks (on the GPU each is one compare joined to the access's predicate).  Accesses of one buffer and
scale share one precondition when one offset dominates another (``cubepy.ir.index_forms.dominates``: as
polynomials of their non-negative leaves, every coefficient at least as large), so ``x[c + base + k]`` for
an unrolled ``k`` costs one bound, not one per ``k``.

A body may also hold ``sync_cube`` (the tile loop of a shared-memory GEMM): then every unit must leave the
first part at the same round, so ``start``, ``end`` and ``fast_end`` are cube-uniform.  Each access's
``scale`` and ``offset`` are then replaced by upper bounds over the cube's units: ``unit_pos*`` by their
largest value (the cube shape is compiled in), values defined from them by ``+``/``*`` expanded down to
their leaves; a non-negative sum of products only grows with its leaves, so a round below the uniform
bound is in range for every unit.  The copy's immutable locals get fresh ids.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import attrs

from cubepy.ir import ops
from cubepy.ir.index_forms import Tree, bit_length, dominates, per_unit, tree_add, tree_mul
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.ops import branch
from cubepy.ir.scope import Instruction, Scope, map_child_scopes, walk
from cubepy.ir.types import BOOL, U32, U64, Type
from cubepy.ir.variable import Variable, VarKind, constant

_Key = tuple[VarKind, int]
# A lane-local loop body past this many instructions is not split: its copy costs more code than its checks
# (one compare folded into each access's predicate on the GPU).  A tile loop with ``sync_cube`` always is.
LANE_SPLIT_LIMIT = 32
# Operations a split loop body may hold besides the pure ones (their records say so): lane-local writes and
# control flow, nothing another unit can see the split through.
_LANE_LOCAL_EFFECTS = (
    ops.IndexAssign,
    ops.InsertLane,
    branch.If,
    branch.IfElse,
    branch.Switch,
    branch.RangeLoop,
    branch.Loop,
    branch.Break,
    branch.Continue,
    branch.Return,
)


def _lane_local(operation: ops.Operation) -> bool:
    """Whether ``operation`` touches only its own unit's values and memory accesses."""
    return operation.RECORD.pure or isinstance(operation, _LANE_LOCAL_EFFECTS)


def version_loops(definition: KernelDefinition) -> KernelDefinition:
    """Split every eligible ``range_loop`` of a checked kernel into an unchecked part and the checked rest."""
    if not definition.checked:
        return definition
    seen = [v for inst in walk(definition.body) for v in _variables(inst)]
    fresh = itertools.count(max((v.id for v in seen if v.kind is VarKind.CONST), default=-1) + 1)
    written = _written(definition.body)
    lengths = {p.var.id: p.len_is_buffer_len for p in definition.buffers}
    everywhere = {(i.out.kind, i.out.id): i.operation for i in walk(definition.body) if i.out is not None}
    facts = _Facts(lengths, everywhere, definition.cube_dim)
    return attrs.evolve(definition, body=_scope(definition.body, fresh, written, facts))


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


def _scope(scope: Scope, fresh: Iterator[int], written: set[_Key], facts: _Facts) -> Scope:
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
    cube_dim: tuple[int, int, int] = (1, 1, 1)


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
        if same_word and op.index == index:
            proven.add(position)
    return proven


def _invariant(var: Variable, inside: set[_Key]) -> bool:
    if var.kind in (VarKind.CONSTANT, VarKind.BUILTIN, VarKind.SCALAR):
        return True
    return var.kind is VarKind.CONST and (var.kind, var.id) not in inside


def _eligible(loop: branch.RangeLoop, inside: set[_Key]) -> str | None:
    """How the loop may be split: ``"lane"`` (lane-local body), ``"cube"`` (a body with ``sync_cube``: the split
    must be cube-uniform) or None."""
    index = loop.index
    # u32 and narrower: the u64 sum of a few terms cannot wrap.
    if index.type.is_line or index.elem.kind != "uint" or index.elem.bits > 32 or loop.end.type != index.type:
        return None
    if loop.end.is_constant:  # a trip count known at compile time is short or unrolled: the copy is not worth it
        return None
    if not _invariant(loop.end, inside) or not loop.step.is_constant or int(loop.step.value) <= 0:  # type: ignore[call-overload]
        return None
    if index.kind is not VarKind.CONST or loop.inclusive:
        return None
    # Loops nested inside are split on their own; splitting the outer one too would copy them twice.
    body = [inst.operation for inst in walk(loop.body)]
    # A ``break`` would leave the first part only, and the second would run on.
    nested = (branch.RangeLoop, branch.Loop, branch.Break)
    if any(isinstance(op, nested) for op in body):
        return None
    if all(_lane_local(op) for op in body):
        return "lane"
    if all(_lane_local(op) or isinstance(op, ops.SyncCube) for op in body):
        return "cube"
    return None


@attrs.frozen
class _Linear:
    """Decomposes an index into ``c * scale + offset`` (trees of values available before the loop), and in a
    cube-uniform split bounds those trees over the cube's units."""

    loop: branch.RangeLoop
    inside: set[_Key]
    defs: dict[_Key, ops.Operation]  # every immutable local of the kernel
    cube_dim: tuple[int, int, int]
    uniform: bool  # replace per-unit values by their largest value over the cube

    def split(self, var: Variable, depth: int = 0) -> tuple[Tree | None, Tree | None] | None:
        """(scale, offset) with ``var == c * scale + offset`` modulo 2**bits (None: 0), or None."""
        if var.type != self.loop.index.type or depth > 24:
            return None
        if var == self.loop.index:
            return (("const", 1), None)
        if (var.kind, var.id) in self.inside and var.kind is not VarKind.CONST:
            return None  # a mutable local: which of its assignments a read sees is not one definition
        op = self.defs.get((var.kind, var.id)) if (var.kind, var.id) in self.inside else None
        if op is None:
            leaf = self.leaf(var, depth)
            return None if leaf is None else (None, leaf)
        if isinstance(op, ops.Assign):
            return self.split(op.input, depth + 1)
        if isinstance(op, ops.Add):
            a, b = self.split(op.lhs, depth + 1), self.split(op.rhs, depth + 1)
            if a is None or b is None or (a[0] is not None and b[0] is not None):
                return None
            return (a[0] if a[0] is not None else b[0], tree_add(a[1], b[1]))
        if isinstance(op, (ops.Mul, ops.Shl)):
            a = self.split(op.lhs, depth + 1)
            if isinstance(op, ops.Shl):
                b = self._shift(op.rhs)
            else:
                b = self.split(op.rhs, depth + 1)
            if a is None or b is None:
                return None
            if b[0] is not None:
                a, b = b, a
            if b[0] is not None or b[1] is None:  # c * c, or a factor that is 0
                return None
            return (tree_mul(a[0], b[1]), tree_mul(a[1], b[1]))
        leaf = self.leaf(var, depth)  # a metadata read in the loop; None for anything built from ``c``
        return None if leaf is None else (None, leaf)

    def _shift(self, amount: Variable) -> tuple[None, Tree] | None:
        if not amount.is_constant or not 0 <= int(amount.value) < amount.elem.bits:  # type: ignore[call-overload]
            return None
        return (None, ("const", 1 << int(amount.value)))  # type: ignore[call-overload]

    def leaf(self, var: Variable, depth: int = 0) -> Tree | None:
        """``var`` as a tree of values available before the loop: itself when defined outside the loop (and,
        in a cube-uniform split, the same on every unit), else rebuilt from its definition; None if neither."""
        if var.type.is_line or var.elem.kind != "uint" or var.elem.bits > 32 or depth > 24:
            return None
        if var.kind is VarKind.CONSTANT:
            return ("const", int(var.value))  # type: ignore[call-overload]
        if var.kind is VarKind.SCALAR:
            return ("var", var)
        if var.kind is VarKind.BUILTIN:
            name = var.name or ""
            if name.startswith(_UNIFORM_BUILTINS):
                return ("var", var)
            if not self.uniform:
                return ("var", var)
            top = _unit_top(name, self.cube_dim)
            return None if top is None else ("top", top)
        if var.kind is not VarKind.CONST:
            return None
        op = self.defs.get((var.kind, var.id))
        inside = (var.kind, var.id) in self.inside
        if isinstance(op, ops.Metadata) and (op.dim is None or op.dim.is_constant):
            return ("meta", op) if inside else ("var", var)
        if not inside and not self.uniform:
            return ("var", var)
        if isinstance(op, ops.Assign):
            return self.leaf(op.input, depth + 1)
        if isinstance(op, (ops.Add, ops.Mul)) and op.lhs.type == var.type and op.rhs.type == var.type:
            a, b = self.leaf(op.lhs, depth + 1), self.leaf(op.rhs, depth + 1)
            if a is None or b is None:
                return None
            return ("add" if isinstance(op, ops.Add) else "mul", a, b)
        if isinstance(op, ops.Shl) and op.lhs.type == var.type:
            a, b = self.leaf(op.lhs, depth + 1), self._shift(op.rhs)
            return None if a is None or b is None else ("mul", a, b[1])
        return None


# Builtins equal on every unit of the cube (a cube-uniform split may read them as they are).
_UNIFORM_BUILTINS = ("cube_pos", "cube_dim", "cube_count", "plane_dim")


def _unit_top(name: str, cube_dim: tuple[int, int, int]) -> int | None:
    """The largest value of a per-unit position builtin in a cube of ``cube_dim`` (None: not one)."""
    units = cube_dim[0] * cube_dim[1] * cube_dim[2]
    axes = dict(zip("xyz", cube_dim))
    if name == "unit_pos":
        return units - 1
    if name.startswith("unit_pos_") and name[-1] in axes:
        return axes[name[-1]] - 1
    return None


def _version(inst: Instruction, loop: branch.RangeLoop, fresh: Iterator[int], facts: _Facts) -> list[Instruction]:
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
    mode = _eligible(loop, inside)
    if mode is None or (mode == "lane" and sum(1 for _ in walk(loop.body)) > LANE_SPLIT_LIMIT):
        return [inst]
    linear = _Linear(loop, inside, facts.defs, facts.cube_dim, uniform=mode == "cube")
    if mode == "cube":
        # Every unit must leave the first part at the same round: its bounds may not differ between units.
        bounds = [linear.leaf(loop.start), linear.leaf(loop.end)]
        if any(tree is None or per_unit(tree) for tree in bounds):
            return [inst]
    # One precondition per (buffer, scale, offset); the accesses it covers lose their checks in the copy.  An
    # offset another one of the same buffer and scale dominates (``index_forms.dominates``) needs no precondition.
    conditions: dict[tuple[int, Tree, Tree | None], Variable] = {}
    covered: set[int] = set()
    for position, body_inst in enumerate(walk(loop.body)):
        op = body_inst.operation
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.checked and op.memory.kind is VarKind.GLOBAL:
            found = linear.split(op.index)
            if found is None:
                continue
            scale, offset = found
            if scale is None:
                continue
            if bit_length(scale) > (63 if scale == ("const", 1) else 32):
                continue
            if offset is not None and bit_length(offset) > 63:
                if mode != "lane":
                    continue
                offset = ("wrap", offset)
            _add_condition(conditions, (op.memory.id, scale, offset), op.memory)
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

    def build(tree: Tree) -> Variable:
        kind = tree[0]
        if kind in ("const", "top"):
            return constant(tree[1], Type(U64))
        if kind == "var":
            return wide(tree[1])
        if kind == "meta":  # a metadata read inside the loop, read again before it
            return wide(new(Type(U32), tree[1]))
        if kind == "wrap":
            return wide(build32(tree[1]))
        a, b = build(tree[1]), build(tree[2])
        return new(Type(U64), (ops.Add if kind == "add" else ops.Mul)(a, b))

    def build32(tree: Tree) -> Variable:
        """The tree's value modulo 2**32, computed in u32 (a lane split has no ``top`` leaves)."""
        kind = tree[0]
        if kind == "const":
            return constant(int(tree[1]) % 2**32, Type(U32))
        if kind == "var":
            var = tree[1]
            return var if var.type == Type(U32) else new(Type(U32), ops.Cast(var))
        if kind == "meta":
            return new(Type(U32), tree[1])
        a, b = build32(tree[1]), build32(tree[2])
        return new(Type(U32), (ops.Add if kind == "add" else ops.Mul)(a, b))

    last_round: list[Variable] = []

    def last() -> Variable:
        """The loop's last index, start + (end - 1 - start) // step * step (meaningless when no round runs,
        and then unused: the fast part ends at or below ``end``)."""
        if not last_round:
            top = new(Type(U64), ops.Sub(wide(loop.end), constant(1, Type(U64))))
            past = new(Type(U64), ops.Mod(new(Type(U64), ops.Sub(top, wide(loop.start))), wide(loop.step)))
            last_round.append(new(Type(U64), ops.Sub(top, past)))
        return last_round[0]

    # The fast loop's end: below ``end`` and below every covered access's reach (the rounds whose
    # ``c * scale + offset`` is below its length), so each of its indices keeps those accesses in bounds.
    fast_end = wide(loop.end)
    for (_, scale, offset), memory in conditions.items():
        # The word the access's check compares against (cubepy.compiler.lower_memory.memory_length).
        length = wide(new(Type(U32), (ops.Len if lengths.get(memory.id) else ops.BufferLen)(memory)))
        if offset is not None:
            length = new(Type(U64), ops.Sub(length, new(Type(U64), ops.Min(length, build(offset)))))
        if scale != ("const", 1):
            # A scaled access: no division (a 64-bit one is a call on the GPU); the fast part runs every round
            # when the last round's index is in range (last * scale < room), and none otherwise.
            passes = new(Type(BOOL), ops.Lt(new(Type(U64), ops.Mul(last(), build(scale))), length))
            length = new(Type(U64), ops.Select(passes, wide(loop.end), constant(0, Type(U64))))
        fast_end = new(Type(U64), ops.Min(fast_end, length))
    # ``resume`` as the module docstring says: nothing in it wraps (fast_end - 1 - start and start + rounds *
    # step stay below 2**bits), and it is computed before the fast loop, not between the two loops (on the cpu
    # runtime that would be one more pass over the cube's units).
    index_type = loop.index.type
    step = int(loop.step.value)  # type: ignore[call-overload]  # _eligible: a literal positive step
    no_wrap = constant(2**index_type.elem.bits - step, Type(U64))
    fast_end = new(index_type, ops.Cast(new(Type(U64), ops.Min(fast_end, no_wrap))))
    runs = new(Type(BOOL), ops.Lt(loop.start, fast_end))
    last_offset = new(index_type, ops.Sub(new(index_type, ops.Sub(fast_end, constant(1, index_type))), loop.start))
    step_var = constant(step, index_type)
    rounds = new(index_type, ops.Add(new(index_type, ops.Floordiv(last_offset, step_var)), constant(1, index_type)))
    past = new(index_type, ops.Add(loop.start, new(index_type, ops.Mul(rounds, step_var))))
    resume = new(index_type, ops.Select(runs, past, loop.start))
    fast = attrs.evolve(_unchecked(loop, covered), end=fast_end)
    emit.append(_renamed(attrs.evolve(inst, operation=fast), fresh))
    emit.append(attrs.evolve(inst, operation=attrs.evolve(loop, start=resume)))
    return emit


def _add_condition(
    conditions: dict[tuple[int, Tree, Tree | None], Variable], key: tuple[int, Tree, Tree | None], memory: Variable
) -> None:
    """Record the precondition ``key`` unless a recorded one of the same buffer and scale dominates it; drop
    the recorded ones it dominates.  ``x[c + base + k]`` for k = 0..31 needs only k = 31's."""
    buffer, scale, offset = key
    for other in list(conditions):
        if other[0] != buffer or other[1] != scale:
            continue
        if dominates(other[2], offset):
            return
        if dominates(offset, other[2]):
            del conditions[other]
    conditions[key] = memory


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
