"""Adjacent guarded stores merged into one ``if``, so the GPU writes both items as one aligned word.

An unrolled epilogue stores a tensor-core accumulator one item at a time, each behind its own guard::

    if row < m and col < n:      c[row * ldc + col] = a
    if row < m and col + 1 < n:  c[row * ldc + col + 1] = b

Triton writes such a pair with one wider store.  The two guards agree whenever ``col`` and ``n`` are even
(``col < n`` is then ``col + 1 < n``), and so do the bounds checks when the buffer's length is even.  When
the range analysis proves those parities (``RangeAnalysis.trailing_zeros``: literals, the launch's
multiple-of-16 facts, products and sums of them) and the launch found the buffer's first element aligned
(``Param.address_multiple_of``), the pass rewrites::

    if c1: B1; m[i] = a          P (pure, reads no m)
    P                      ->    if c1: B1; B2; m[i] = a {pair}; m[i + 1] = b
    if c2: B2; m[i + 1] = b

The stores keep their order and their conditions are equivalent, so every runtime computes the same; the
``pair`` flag lets the GPU lowering emit one ``st.global.b32`` (two 16-bit items) or ``b64`` (two 32-bit
ones) under the first store's predicate.

Indices and compared values are matched as polynomials modulo 2**32 over structurally hashed leaves: the
unrolled code recomputes ``row`` and ``col`` for every item, as distinct variables.
"""

from __future__ import annotations

from typing import Any

import attrs

from cubepy.ir import ops
from cubepy.ir.index_forms import Poly, plus, times
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.ops import branch
from cubepy.ir.ranges import RangeAnalysis
from cubepy.ir.scope import Instruction, Scope, map_child_scopes
from cubepy.ir.variable import Variable, VarKind

_Key = tuple[VarKind, int]
_MOD = 1 << 32
PAIR_ITEM_BYTES = (2, 4)  # 16-bit items pair into b32, 32-bit ones into b64
LOOKAHEAD = 48  # instructions between the two ``if``s the pass looks through


def pair_stores(definition: KernelDefinition, body: Scope, analysis: RangeAnalysis) -> Scope:
    """``body`` with each provable pair of adjacent guarded stores merged (see the module docstring).

    ``analysis`` has walked ``body``: its ``defs`` (each immutable value's operation, before ``bounds`` rewrote
    some into simpler ones of the same value) and its trailing zeros are what the proofs read."""
    return _Pairing(definition, analysis).scope(body)


@attrs.frozen
class _Store:
    """An ``if`` whose body is pure instructions and one store to a global buffer, last."""

    cond: Variable
    pure: tuple[Instruction, ...]
    store: Instruction

    @property
    def op(self) -> ops.IndexAssign:
        op = self.store.operation
        assert isinstance(op, ops.IndexAssign)
        return op


class _Pairing:
    def __init__(self, definition: KernelDefinition, analysis: RangeAnalysis):
        self.buffers = {p.var.id: p for p in definition.buffers}
        self.analysis = analysis
        self.defs = analysis.defs
        # each immutable value's polynomial, built once: the unrolled code's indices share long subtrees
        self.polys: dict[_Key, Poly] = {}

    def scope(self, scope: Scope) -> Scope:
        out = [
            attrs.evolve(inst, operation=map_child_scopes(inst.operation, self.scope)) for inst in scope.instructions
        ]
        i = 0
        while i < len(out):
            merged = self._merge_from(out, i)
            if merged is not None:
                out = merged
            i += 1
        return Scope(tuple(out))

    def _merge_from(self, out: list[Instruction], i: int) -> list[Instruction] | None:
        first = self._guarded_store(out[i])
        if first is None:
            return None
        local = {(v.kind, v.id) for inst in first.pure for v in inst.outputs}
        for j in range(i + 1, min(len(out), i + 1 + LOOKAHEAD)):
            second = self._guarded_store(out[j])
            if second is not None and second.op.memory == first.op.memory:
                if not self._pairs(first, second) or _uses(second, local):
                    return None
                cond = branch.If(first.cond, Scope((*first.pure, *second.pure, _flagged(first.store), second.store)))
                merged = attrs.evolve(out[j], operation=cond)
                return out[:i] + out[i + 1 : j] + [merged] + out[j + 1 :]
            if not self._movable_past(out[j], first, local):
                return None
        return None

    def _guarded_store(self, inst: Instruction) -> _Store | None:
        op = inst.operation
        if not isinstance(op, branch.If) or not op.body.instructions:
            return None
        *pure, store = op.body.instructions
        store_op = store.operation
        if not isinstance(store_op, ops.IndexAssign) or store_op.pair or store_op.memory.kind is not VarKind.GLOBAL:
            return None
        memory = store_op.memory
        if memory.type.line != 1 or memory.type.size not in PAIR_ITEM_BYTES:
            return None
        for body_inst in pure:
            if not _pure(body_inst) or _reads(body_inst, memory):
                return None
        return _Store(op.cond, tuple(pure), store)

    def _movable_past(self, inst: Instruction, first: _Store, local: set[_Key]) -> bool:
        """Whether ``first``'s body may run after ``inst`` (pure, not reading the stored buffer or its values)."""
        return _pure(inst) and not _reads(inst, first.op.memory) and not _uses_vars(inst, local)

    def _pairs(self, first: _Store, second: _Store) -> bool:
        a, b = first.op, second.op
        param = self.buffers.get(a.memory.id)
        size = a.memory.type.size
        if param is None or param.address_multiple_of < 2 * size or a.checked != b.checked:
            return False
        if a.checked and param.multiple_of < 2:  # i < len then implies i + 1 < len only for an even len
            return False
        if a.index.elem.kind != "uint" or a.index.elem.bits != 32 or b.index.elem.kind != "uint":
            return False
        if self.analysis.trailing_zeros(a.index) < 1 or not _differ_by_one(self._poly(a.index), self._poly(b.index)):
            return False
        return self._same_guard(first.cond, second.cond)

    def _same_guard(self, c1: Variable, c2: Variable) -> bool:
        """Whether ``c1`` and ``c2`` are conjunctions of the same compares, but for at most one ``x < n`` in
        ``c1`` that is ``x + 1 < n`` in ``c2`` with ``x`` and ``n`` even unsigned 32-bit values."""
        left, right = self._terms(c1), self._terms(c2)
        if left is None or right is None or len(left) != len(right):
            return False
        unmatched = list(right)
        odd: list[tuple[Any, ...]] = []
        for term in left:  # matched by value (kind and polynomials), not by the variables that hold them
            same = next((other for other in unmatched if other[:3] == term[:3]), None)
            if same is not None:
                unmatched.remove(same)
            else:
                odd.append(term)
        if not odd:
            return True
        if len(odd) != 1 or len(unmatched) != 1:
            return False
        (kind_a, x_a, n_a, x_var, n_var), (kind_b, x_b, n_b, _, _) = odd[0], unmatched[0]
        if kind_a != "lt" or kind_b != "lt" or n_a != n_b or not _differ_by_one(dict(x_a), dict(x_b)):
            return False
        even = self.analysis.trailing_zeros(x_var) >= 1 and self.analysis.trailing_zeros(n_var) >= 1
        return even and x_var.elem.kind == "uint" and x_var.elem.bits == 32

    def _terms(self, cond: Variable, depth: int = 0) -> list[tuple[Any, ...]] | None:
        """The compares ``cond`` is the conjunction of, as (kind, lhs polynomial, rhs polynomial, lhs, rhs)."""
        op = self.defs.get((cond.kind, cond.id)) if cond.kind is VarKind.CONST else None
        if op is None or depth > 8:
            return None
        if isinstance(op, ops.And):
            a, b = self._terms(op.lhs, depth + 1), self._terms(op.rhs, depth + 1)
            return None if a is None or b is None else a + b
        if isinstance(op, ops.Compare) and not op.lhs.type.is_line and op.lhs.elem.is_int:
            kind = op.RECORD.name
            lhs, rhs = op.lhs, op.rhs
            if kind in ("gt", "ge"):  # n > x is x < n
                kind, lhs, rhs = {"gt": "lt", "ge": "le"}[kind], rhs, lhs
            lhs_poly, rhs_poly = self._poly(lhs), self._poly(rhs)
            return [(kind, _frozen(lhs_poly), _frozen(rhs_poly), lhs, rhs)]
        return None

    def _poly(self, var: Variable, depth: int = 0) -> Poly:
        """``var`` as a polynomial modulo 2**32 of its leaves (``+ - *``, shifts by literals, assignments); the
        dicts returned are shared, never changed."""
        key = (var.kind, var.id)
        found = self.polys.get(key) if var.kind is VarKind.CONST else None
        if found is None:
            found = self._expand(var, depth)
            if var.kind is VarKind.CONST:
                self.polys[key] = found
        return found

    def _expand(self, var: Variable, depth: int) -> Poly:
        if var.kind is VarKind.CONSTANT:
            return {(): int(var.value) % _MOD} if int(var.value) % _MOD else {}  # type: ignore[call-overload]
        op = self.defs.get((var.kind, var.id)) if var.kind is VarKind.CONST else None
        ring = var.elem.is_int and not var.type.is_line and var.elem.bits == 32
        if op is None or depth > 24 or not ring:
            return {(_leaf(var, op, self, depth),): 1}
        if isinstance(op, ops.Assign):
            return self._poly(op.input, depth + 1)
        if isinstance(op, (ops.Add, ops.Sub, ops.Mul)) and op.lhs.type == var.type and op.rhs.type == var.type:
            a, b = self._poly(op.lhs, depth + 1), self._poly(op.rhs, depth + 1)
            if isinstance(op, ops.Mul):
                return times(a, b, _MOD)
            return plus(a, b, -1 if isinstance(op, ops.Sub) else 1, _MOD)
        if isinstance(op, ops.Shl) and op.rhs.is_constant and 0 <= int(op.rhs.value) < 32:  # type: ignore[call-overload]
            return times(self._poly(op.lhs, depth + 1), {(): 1 << int(op.rhs.value)}, _MOD)  # type: ignore[call-overload]
        return {(_leaf(var, op, self, depth),): 1}


def _leaf(var: Variable, op: ops.Operation | None, pairing: _Pairing, depth: int) -> tuple[Any, ...]:
    """A leaf's identity: a builtin, scalar or memory-read value by itself; another operation by its kind and
    its operands' polynomials (``shr @unit_pos_plane, 2`` written twice is one leaf)."""
    if op is None or not op.RECORD.pure or op.RECORD.reads or depth > 24:
        return ("var", var.kind, var.id)
    parts = tuple(_frozen(pairing._poly(v, depth + 1)) for v in op.operands())
    return ("op", op.RECORD.name, str(var.type), tuple(sorted(op.attributes().items())), parts)


def _frozen(poly: Poly) -> tuple[Any, ...]:
    return tuple(sorted(poly.items(), key=repr))


def _differ_by_one(low: Poly, high: Poly) -> bool:
    """Whether ``high == low + 1`` modulo 2**32."""
    return plus(high, low, -1, _MOD) == {(): 1}


def _pure(inst: Instruction) -> bool:
    op = inst.operation
    record = op.RECORD
    if isinstance(op, branch.BRANCH_OPS) or not record.pure or record.writes:
        return False
    return all(v.kind is VarKind.CONST for v in inst.outputs)


def _reads(inst: Instruction, memory: Variable) -> bool:
    return memory in tuple(inst.operation.operands())


def _uses_vars(inst: Instruction, keys: set[_Key]) -> bool:
    return any((v.kind, v.id) in keys for v in inst.operation.operands())


def _uses(store: _Store, keys: set[_Key]) -> bool:
    return (
        any(_uses_vars(inst, keys) for inst in (*store.pure, store.store)) or (store.cond.kind, store.cond.id) in keys
    )


def _flagged(store: Instruction) -> Instruction:
    op = store.operation
    assert isinstance(op, ops.IndexAssign)
    return attrs.evolve(store, operation=attrs.evolve(op, pair=True))
