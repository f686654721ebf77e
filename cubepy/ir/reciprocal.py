"""Shared reciprocals: f32 divisions by one divisor become multiplications by its f64 reciprocal, exactly.

``q = x / d`` in f32 is IEEE's correctly rounded quotient on every runtime. On a GPU that is ``div.rn.f32``:
an approximate reciprocal refined per division, a range test and a call to a slow path, about fifteen
instructions each time. When several divisions share ``d`` (``x[i] / (1 - p)`` over a unit's items, a row
divided by its sum in a loop), this pass computes ``r = wide_recip(d)``, ``1 / d`` in f64, once, right after
``d`` is defined, and each division becomes ``f32(f64(x) * r)``: two conversions and one multiply, no branch.
``wide_recip`` is the correctly rounded ``1 / f64(d)`` on the interp and the cpu runtime; on the GPU it is
``rcp.approx.ftz.f64`` refined by two Newton steps (``cubepy.compiler.lower_arith.wide_reciprocal``), within
1.13 * 2^-53 of ``1/d``, with no slow path.

Why the result is the same to the bit. ``r`` is within 1.13 * 2^-53 of ``1/d`` (relative) and the product
adds at most 2^-53 more, so ``f64(x) * r`` is within 2.2 * 2^-53 of ``x/d``. A quotient of two f32 values is
never a rounding midpoint of f32 and stays at least 2^-50 = 8 * 2^-53 (relative) away from every one: with
``x = X 2^a``, ``d = D 2^b`` and a midpoint ``m = M 2^c`` (``X``, ``D`` of 24 bits, ``M`` of 25), ``x - m d``
is a non-zero multiple of ``2^(b+c)`` with ``b + c >= a - 26``, and ``x < 2^(a+24)``; below f32's normal
range the midpoints are sparser still. So the f64 value lies on the same side of every midpoint as ``x/d``
and rounds to the same f32, whichever ``r`` a runtime computed. f64 has range to spare (``x * r`` neither
overflows nor leaves f64's normal range for any f32 ``x`` and ``d``), and zeros, infinities and NaNs come
out as IEEE's division gives them (``0 * inf`` is NaN as ``0/0`` is; ``x * 0`` keeps the sign ``x / inf``
has).

When. Divisions are grouped by what they divide by: a line divided by a broadcast scalar by that scalar,
and a divisor computed from parameters, literals and builtins alone (``1 - p`` written inside an unrolled
loop is eight instructions, one value) by its expression. A group is worth a reciprocal when it divides at
least two values (each lane of a line counts) or one of its divisions sits in a loop the divisor is defined
outside of. Where the reciprocal goes: a divisor of parameters and literals, in the kernel's prologue (its
expression computed again there); an immutable local, right after its definition; a mutable local (a sum
assigned in a loop), just before the first of its divisions when all of them sit in one scope's stretch
that never assigns it, and from there out of the loops (and branches) around them that never assign it
(a lone division by a mutable gets a reciprocal only when that takes it out of a loop). A literal
divisor always gets one (a literal), unless ``1/d`` is itself an f32 (a power of two), which LLVM already
turns into one multiply. f16/bf16/f64 divisions and line divisors that are not a broadcast of one value are
left alone. The compiler runs this pass for GPU targets whose f64 multiply runs at half the f32 rate or
better (``cubepy.compiler.emit_ptx.FAST_F64_ARCHS``) when fast math is off; with fast math on, the
division is already ``div.approx``.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable

import attrs
import numpy as np

from cubepy.ir import ops
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.ops import branch
from cubepy.ir.ops.base import field_names
from cubepy.ir.scope import Instruction, Scope, assigns, child_scopes, fresh_ids, map_child_scopes, walk
from cubepy.ir.types import F32, F64, Type
from cubepy.ir.variable import SourceLoc, Variable, VarKind, constant

_Key = tuple[VarKind, int]
_Path = tuple[int, ...]  # instruction index, child scope number, instruction index, ... from the body down
_LOOPS = (branch.RangeLoop, branch.Loop)
_ENTRY_KINDS = frozenset({VarKind.SCALAR, VarKind.BUILTIN, VarKind.CONSTANT})


def _key(var: Variable) -> _Key:
    return (var.kind, var.id)


def _is_f32_division(inst: Instruction) -> bool:
    return isinstance(inst.operation, ops.Div) and inst.out is not None and inst.out.elem is F32


def _exact_f32_reciprocal(value: float) -> bool:
    """Whether ``1/value`` is an f32 (a power of two whose reciprocal is normal): LLVM multiplies already."""
    divisor = np.float64(np.float32(value))
    if divisor == 0 or not np.isfinite(divisor):
        return False
    reciprocal = 1.0 / divisor
    return bool(np.float64(np.float32(reciprocal)) == reciprocal and abs(reciprocal) >= np.finfo(np.float32).tiny)


@attrs.define
class _Group:
    """The divisions by one value: how many values they divide, where they are, where the value is defined."""

    divisor: Variable  # a scalar f32
    entry: bool  # computed from parameters, literals and builtins alone
    depth: int  # loops around the divisor's definition (0 at entry)
    values: int = 0
    deeper: bool = False
    loc: SourceLoc | None = None  # the first division's: the reciprocal's source line
    paths: list[_Path] = attrs.Factory(list)


class _Analysis:
    """One walk of the kernel: definitions, the expressions computable at entry, the division groups."""

    def __init__(self, definition: KernelDefinition) -> None:
        self.defs: dict[_Key, tuple[Instruction, int, _Path]] = {}  # an immutable local -> its definition, depth, path
        self.entry_exprs: dict[_Key, Hashable] = {}  # an immutable local computable at entry -> its expression
        self.groups: dict[Hashable, _Group] = {}
        self.division_group: dict[_Path, Hashable] = {}
        self._visit(definition.body, (), 0)

    def _expression(self, var: Variable) -> Hashable | None:
        """A key equal for equal values computable at entry, or None when ``var`` is not one."""
        if var.kind is VarKind.CONSTANT:
            return ("literal", var.type, var.value)
        if var.kind in _ENTRY_KINDS or var.kind is VarKind.GLOBAL:
            return _key(var)
        return self.entry_exprs.get(_key(var))

    def _entry_expression(self, inst: Instruction) -> Hashable | None:
        operation = inst.operation
        record = operation.RECORD
        # lane-local and free of memory (a buffer's shape aside): the same value wherever it is computed
        if not record.pure or record.writes or record.family not in ("arith", "memory"):
            return None
        if record.reads and not isinstance(operation, ops.Metadata):
            return None
        parts: list[Hashable] = [type(operation).__name__, inst.out.type if inst.out is not None else None]
        for name in field_names(type(operation)):
            value = getattr(operation, name)
            if isinstance(value, Variable):
                if value.kind is VarKind.GLOBAL and not isinstance(operation, ops.Metadata):
                    return None
                part = self._expression(value)
                if part is None:
                    return None
                parts.append(part)
            elif isinstance(value, Hashable):
                parts.append(value)
            else:
                return None
        return tuple(parts)

    def _source(self, divisor: Variable) -> tuple[Variable, _Path | None] | None:
        """The scalar a division divides by and, for a line divisor, the path of the broadcast that reads it
        (None when the divisor is not a line broadcast of one scalar)."""
        if not divisor.type.is_line:
            return divisor, None
        found = self.defs.get(_key(divisor))
        if found is not None and isinstance(found[0].operation, ops.Cast):
            source = found[0].operation.input
            if source.type == Type(F32):
                return source, found[2]
        return None

    def _add_division(self, inst: Instruction, path: _Path, depth: int) -> None:
        operation, out = inst.operation, inst.out
        assert isinstance(operation, ops.Div) and out is not None
        if operation.rhs.is_constant:
            return
        found = self._source(operation.rhs)
        if found is None:
            return
        divisor, broadcast = found
        expression = self._expression(divisor)
        if divisor.kind is VarKind.CONSTANT:
            return
        if expression is not None:
            key: Hashable = ("entry", expression)
            group = self.groups.setdefault(key, _Group(divisor, True, 0))
        elif divisor.kind is VarKind.CONST and _key(divisor) in self.defs:
            key = ("var", _key(divisor))
            group = self.groups.setdefault(key, _Group(divisor, False, self.defs[_key(divisor)][1]))
        elif divisor.kind is VarKind.MUT:
            key = ("var", _key(divisor))
            group = self.groups.setdefault(key, _Group(divisor, False, depth))
        else:
            return
        group.values += out.type.line
        group.loc = group.loc or inst.loc
        group.deeper = group.deeper or depth > group.depth
        group.paths.append(path)
        if broadcast is not None:  # a mutable scalar is read where it is broadcast: that is in the stretch too
            group.paths.append(broadcast)
        self.division_group[path] = key

    def _visit(self, scope: Scope, prefix: _Path, depth: int) -> None:
        for index, inst in enumerate(scope.instructions):
            path = (*prefix, index)
            out = inst.out
            if out is not None and out.kind is VarKind.CONST:
                self.defs[_key(out)] = (inst, depth, path)
                expression = self._entry_expression(inst)
                if expression is not None:
                    self.entry_exprs[_key(out)] = expression
            if _is_f32_division(inst):
                self._add_division(inst, path, depth)
            inner = depth + isinstance(inst.operation, _LOOPS)
            for number, child in enumerate(child_scopes(inst.operation)):
                self._visit(child, (*path, number), inner)


def _scope_at(body: Scope, path: _Path) -> Scope:
    """The scope ``path`` (an even-length prefix of an instruction's path) names."""
    scope = body
    for step in range(0, len(path), 2):
        scope = child_scopes(scope.instructions[path[step]].operation)[path[step + 1]]
    return scope


def _mutable_placement(body: Scope, group: _Group) -> tuple[_Path, int] | None:
    """Where a mutable divisor's reciprocal goes, as (scope path, index): before its first division, and out
    of the loops (and the branches on the way to them) that never assign it; None when an assignment comes
    between its divisions, or when it would serve one value in one place (nothing gained)."""
    common = list(group.paths[0])
    for path in group.paths[1:]:
        length = 0
        while length < min(len(common), len(path)) and common[length] == path[length]:
            length += 1
        del common[length:]
    scope_path = tuple(common[: len(common) - len(common) % 2])  # an odd prefix ends inside one instruction
    indices = [path[len(scope_path)] for path in group.paths]
    first, last = min(indices), max(indices)
    if assigns(Scope(_scope_at(body, scope_path).instructions[first : last + 1]), group.divisor):
        return None
    place, out_of_loop = (scope_path, first), False
    while scope_path:  # up through the instructions that own this scope, while none assigns the divisor
        owner_path, owner_index = scope_path[:-2], scope_path[-2]
        owner = _scope_at(body, owner_path).instructions[owner_index]
        structured = isinstance(owner.operation, (*_LOOPS, branch.If, branch.IfElse))
        if not structured or assigns(Scope((owner,)), group.divisor):
            break
        scope_path, first = owner_path, owner_index
        if isinstance(owner.operation, _LOOPS):
            place, out_of_loop = (scope_path, first), True
    return place if out_of_loop or group.values >= 2 else None


class _Rewriter:
    """Places the reciprocals and rewrites the divisions."""

    def __init__(self, definition: KernelDefinition, analysis: _Analysis) -> None:
        self.fresh = fresh_ids(definition.body)
        self.analysis = analysis
        self.prologue: list[Instruction] = []
        self.after: dict[_Key, list[Instruction]] = {}  # an immutable local -> what follows its definition
        self.before: dict[tuple[_Path, int], list[Instruction]] = {}  # (scope path, index) -> what precedes it
        self.reciprocals: dict[Hashable, Variable] = {}
        self._cloned: dict[_Key, Variable] = {}
        for key, group in analysis.groups.items():
            worth = group.values >= 2 or group.deeper
            if group.entry and worth:
                self.prologue.extend(self._reciprocal(key, self._at_entry(group.divisor), group.loc))
            elif group.divisor.kind is VarKind.CONST and worth:
                self.after.setdefault(_key(group.divisor), []).extend(self._reciprocal(key, group.divisor, group.loc))
            elif group.divisor.kind is VarKind.MUT:  # its own rule: where it is not assigned
                place = _mutable_placement(definition.body, group)
                if place is not None:
                    self.before.setdefault(place, []).extend(self._reciprocal(key, group.divisor, group.loc))

    def _new(self, ty: Type) -> Variable:
        return Variable(VarKind.CONST, next(self.fresh), ty)

    def _at_entry(self, var: Variable) -> Variable:
        """``var`` computed in the prologue: its defining instructions cloned there (once each)."""
        if var.kind is not VarKind.CONST:
            return var
        if _key(var) in self._cloned:
            return self._cloned[_key(var)]
        inst = self.analysis.defs[_key(var)][0]
        changes = {
            name: self._at_entry(value)
            for name in field_names(type(inst.operation))
            if isinstance(value := getattr(inst.operation, name), Variable)
        }
        clone = self._new(var.type)
        self.prologue.append(Instruction(clone, attrs.evolve(inst.operation, **changes), inst.loc))
        self._cloned[_key(var)] = clone
        return clone

    def _reciprocal(self, key: Hashable, divisor: Variable, loc: SourceLoc | None) -> list[Instruction]:
        inverse = self._new(Type(F64))
        self.reciprocals[key] = inverse
        return [Instruction(inverse, ops.WideRecip(divisor), loc)]

    def divide(self, inst: Instruction, path: _Path) -> list[Instruction]:
        """``inst`` (an f32 division) as a multiply by its divisor's reciprocal, or itself."""
        operation, out = inst.operation, inst.out
        assert isinstance(operation, ops.Div) and out is not None
        wide_type = out.type.with_elem(F64)
        emitted: list[Instruction] = []
        if operation.rhs.is_constant:
            value = operation.rhs.value
            assert isinstance(value, float)
            if _exact_f32_reciprocal(value):
                return [inst]
            with np.errstate(divide="ignore"):  # x / 0.0 is x * inf: NaN for 0, infinities else, as divisions give
                inverse = constant(1.0 / np.float64(np.float32(value)), wide_type)
        else:
            group = self.analysis.division_group.get(path)
            if group not in self.reciprocals:
                return [inst]
            inverse = self.reciprocals[group]
            if out.type.is_line:
                line = self._new(wide_type)
                emitted.append(Instruction(line, ops.Cast(inverse), inst.loc))
                inverse = line
        dividend = operation.lhs
        if dividend.is_constant:
            value = dividend.value
            assert isinstance(value, float)
            wide = constant(float(np.float32(value)), wide_type)
        else:
            wide = self._new(wide_type)
            emitted.append(Instruction(wide, ops.Cast(dividend), inst.loc))
        product = self._new(wide_type)
        emitted.append(Instruction(product, ops.Mul(wide, inverse), inst.loc))
        emitted.append(Instruction(out, ops.Cast(product), inst.loc))
        return emitted

    def _children(self, operation: ops.Operation, path: _Path) -> ops.Operation:
        numbers = itertools.count()
        return map_child_scopes(operation, lambda child: self.scope(child, (*path, next(numbers))))

    def scope(self, scope: Scope, prefix: _Path) -> Scope:
        out: list[Instruction] = []
        for index, inst in enumerate(scope.instructions):
            path = (*prefix, index)
            out.extend(self.before.get((prefix, index), ()))
            operation = self._children(inst.operation, path)
            if operation is not inst.operation:
                inst = attrs.evolve(inst, operation=operation)
            out.extend(self.divide(inst, path) if _is_f32_division(inst) else [inst])
            if inst.out is not None:
                out.extend(self.after.get(_key(inst.out), ()))
        return Scope(tuple(out))


def shared_reciprocal(definition: KernelDefinition) -> KernelDefinition:
    """``definition`` with every f32 division by a shared or literal divisor made a multiply by its reciprocal."""
    if definition.fastmath or not any(_is_f32_division(inst) for inst in walk(definition.body)):
        return definition
    rewriter = _Rewriter(definition, _Analysis(definition))
    body = rewriter.scope(definition.body, ())
    if body == definition.body and not rewriter.prologue:
        return definition
    return attrs.evolve(definition, body=Scope((*rewriter.prologue, *body.instructions)))


__all__ = ["shared_reciprocal"]
