"""The base of every IR operation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs

from cubepy.ir.variable import Variable


@attrs.frozen
class Operation:
    """An operation; ``name`` is its stable lowercase name (``"add"``, ``"index"``, ``"if"``)."""

    NAME: ClassVar[str] = "?"

    @property
    def name(self) -> str:
        """The stable lowercase name of this operation."""
        return self.NAME

    def operands(self) -> Iterator[Variable]:
        """Every variable this operation reads, in field order."""
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
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
            if field.name == "op":
                continue
            value = getattr(self, field.name)
            if isinstance(value, Variable) or value is None or type(value).__name__ == "Scope":
                continue
            if isinstance(value, tuple) and all(isinstance(v, (Variable, tuple)) for v in value):
                continue
            if field.default is not attrs.NOTHING and value == field.default:
                continue
            out[field.name] = value
        return out


@attrs.frozen
class NamedOperation(Operation):
    """An operation family whose members differ only by name (``op``)."""

    op: str

    @property
    def name(self) -> str:
        """The member's stable lowercase name."""
        return self.op
