"""Instructions and the scopes (blocks) that hold them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import attrs

from cubepy.ir.ops.base import Operation, field_names
from cubepy.ir.printer import format_instruction
from cubepy.ir.variable import SourceLoc, Variable, VarKind


@attrs.frozen
class Instruction:
    """``out = operation`` at ``loc``; ``out`` is None for operations without a result."""

    out: Variable | None
    operation: Operation
    loc: SourceLoc | None = attrs.field(default=None, eq=False)

    @property
    def op(self) -> str:
        """The operation's stable lowercase name."""
        return self.operation.name

    @property
    def outputs(self) -> tuple[Variable, ...]:
        """The variables this instruction defines: ``(out,)``, or ``()`` for operations without a result."""
        return () if self.out is None else (self.out,)

    def __str__(self) -> str:
        return format_instruction(self)


@attrs.frozen
class Scope:
    """A straight-line list of instructions; branch operations own child scopes."""

    instructions: tuple[Instruction, ...] = ()

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)


def child_scopes(operation: Operation) -> tuple[Scope, ...]:
    """The scopes a branch operation owns, in program order (empty for other operations)."""
    scopes: list[Scope] = []
    for name in field_names(type(operation)):
        value = getattr(operation, name)
        if isinstance(value, Scope):
            scopes.append(value)
        elif isinstance(value, tuple):
            scopes.extend(x for item in value for x in _items(item) if isinstance(x, Scope))
    return tuple(scopes)


def map_child_scopes(operation: Operation, transform: Callable[[Scope], Scope]) -> Operation:
    """``operation`` with each scope it owns replaced by ``transform(scope)`` (itself when it owns none).

    Scopes sit in a field (an ``if``'s ``then``) or in a tuple, alone or in pairs (a ``switch``'s
    ``(case, body)``), as ``child_scopes`` finds them; ``transform`` runs on them in program order.
    """
    changes: dict[str, object] = {}
    for name in field_names(type(operation)):
        value = getattr(operation, name)
        if isinstance(value, Scope):
            changes[name] = transform(value)
        elif isinstance(value, tuple) and any(isinstance(x, Scope) for item in value for x in _items(item)):
            changes[name] = tuple(_map_item(item, transform) for item in value)
    return attrs.evolve(operation, **changes) if changes else operation


def _items(item: object) -> tuple[object, ...]:
    """A tuple field's item as what may hold scopes: the pair itself (a switch arm), or the lone item."""
    return item if isinstance(item, tuple) else (item,)


def _map_item(item: object, transform: Callable[[Scope], Scope]) -> object:
    if isinstance(item, Scope):
        return transform(item)
    if isinstance(item, tuple):
        return tuple(transform(x) if isinstance(x, Scope) else x for x in item)
    return item


def walk(scope: Scope) -> Iterator[Instruction]:
    """Every instruction of ``scope`` and its children, in program order (a branch before its body)."""
    for inst in scope.instructions:
        yield inst
        for child in child_scopes(inst.operation):
            yield from walk(child)


def assigns(scope: Scope, *variables: Variable) -> bool:
    """Whether an instruction of ``scope`` (nested bodies included) writes one of ``variables``."""
    keys = {(v.kind, v.id) for v in variables}
    return any((v.kind, v.id) in keys for inst in walk(scope) for v in inst.outputs)


def fresh_ids(scope: Scope) -> Iterator[int]:
    """Immutable-local ids no instruction of ``scope`` defines: counting up from one past the largest defined."""
    defined = (inst.out.id for inst in walk(scope) if inst.out is not None and inst.out.kind is VarKind.CONST)
    return itertools.count(max(defined, default=-1) + 1)


def defined_once(scope: Scope) -> set[tuple[VarKind, int]]:
    """The variables exactly one instruction of ``scope`` defines (a ``range_loop``'s index counts as defined by
    its loop): the values that cannot change once computed."""
    writes: dict[tuple[VarKind, int], int] = {}
    for inst in walk(scope):
        defined = [inst.out] if inst.out is not None else []
        index = getattr(inst.operation, "index", None) if inst.operation.RECORD.name == "range_loop" else None
        if isinstance(index, Variable):
            defined.append(index)
        for var in defined:
            writes[(var.kind, var.id)] = writes.get((var.kind, var.id), 0) + 1
    return {key for key, count in writes.items() if count == 1}
