"""The base of every IR operation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs

from cubepy.ir.ops.record import GIVEN, OpRecord, ResultRule
from cubepy.ir.types import ElemType, Type
from cubepy.ir.variable import Variable


@attrs.frozen(repr=False)
class Operation:
    """An operation; its ``RECORD`` (see :mod:`cubepy.ir.ops.record`) says what it is."""

    RECORD: ClassVar[OpRecord]

    def __repr__(self) -> str:
        """``Name(field=value, ...)`` as attrs writes it; op classes say ``repr=False``: one method, not one compiled per class."""
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in attrs.fields(type(self)) if f.repr)
        return f"{type(self).__qualname__.rsplit('>.', 1)[-1]}({fields})"

    @property
    def name(self) -> str:
        """The stable lowercase name of this operation (``"add"``, ``"index"``, ``"plane_sum"``)."""
        record = getattr(type(self), "RECORD", None)
        return type(self).__name__ if record is None else record.name  # undeclared: named in errors

    def result_type(self) -> Type | None:
        """The type of the result by the record's rule; None without a result or when the result is given."""
        rule = self.RECORD.result
        if rule is None or rule is GIVEN:
            return None
        assert callable(rule)
        return rule(self)

    def operands(self) -> Iterator[Variable]:
        """Every variable this operation reads, in field order."""
        for name in field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, Variable):
                yield value
            elif isinstance(value, tuple):
                for item in value:
                    if isinstance(item, Variable):
                        yield item

    def attributes(self) -> dict[str, object]:
        """Non-variable fields shown in the text form (flags, modes)."""
        out: dict[str, object] = {}
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if isinstance(value, Variable) or value is None or type(value).__name__ == "Scope":
                continue
            if isinstance(value, tuple) and all(isinstance(v, (Variable, tuple)) for v in value):
                continue
            if field.default is not attrs.NOTHING and value == field.default:
                continue
            out[field.name] = value
        return out


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """The attrs field names of an operation class, in order (cached: operand walks run per instruction)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(field.name for field in attrs.fields(cls))
    return names


def same_as(field: str) -> ResultRule:
    """Result rule: the type of operand ``field``."""

    def rule(op: Operation) -> Type:
        var: Variable = getattr(op, field)
        return var.type

    return rule


def elem_of(field: str, elem: ElemType) -> ResultRule:
    """Result rule: operand ``field``'s line of ``elem``."""

    def rule(op: Operation) -> Type:
        var: Variable = getattr(op, field)
        return var.type.with_elem(elem)

    return rule


def fixed(ty: Type) -> ResultRule:
    """Result rule: always ``ty``."""

    def rule(op: Operation) -> Type:
        return ty

    return rule


def scalar_of(field: str) -> ResultRule:
    """Result rule: one lane of operand ``field``."""

    def rule(op: Operation) -> Type:
        var: Variable = getattr(op, field)
        return var.type.scalar()

    return rule
