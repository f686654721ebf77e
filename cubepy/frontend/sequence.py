"""``cp.Sequence``: a comptime-length list of expand values (CubeCL's ``Sequence<T>``).

Its length is known at expansion time: ``push`` appends, ``seq[i]`` takes a comptime index and
``for x in seq`` unrolls.  It is the tool for rank-generic code (one value per dimension).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from cubepy.frontend import operations, source
from cubepy.frontend.state import active_state
from cubepy.frontend.values import ExpandElement
from cubepy.ir import VarKind
from cubepy.ir import ops as irops


def _stable(value: Any) -> Any:
    """A mutable local pushed into a sequence is copied, so later assignments do not change the item."""
    if isinstance(value, ExpandElement) and value.var.kind is VarKind.MUT and active_state() is not None:
        return operations.emit(irops.Assign(value.var), value.type)
    return value


def _comptime_index(index: Any) -> int | slice:
    if isinstance(index, slice):
        return index
    value = operations.comptime_value(index) if not isinstance(index, int) else index
    if not isinstance(value, int) or isinstance(value, bool):
        source.fail(f"a Sequence index must be a comptime int, got {index!r}")
    return value


class Sequence:
    """A list of values whose length is comptime: ``push``, ``len``, ``seq[i]`` (comptime i), iteration."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self._items = [_stable(v) for v in items]

    def push(self, value: Any) -> None:
        """Append ``value``."""
        self._items.append(_stable(value))

    def extend(self, values: Iterable[Any]) -> None:
        """Append every value of ``values``."""
        for value in values:
            self.push(value)

    def len(self) -> int:
        """The number of items (comptime)."""
        return len(self._items)

    def rev(self) -> Sequence:
        """The items in reverse order."""
        return Sequence(reversed(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Any:
        position = _comptime_index(index)
        if isinstance(position, slice):
            return Sequence(self._items[position])
        if not -len(self._items) <= position < len(self._items):
            source.fail(f"Sequence index {position} out of range for {len(self._items)} items")
        return self._items[position]

    def __setitem__(self, index: Any, value: Any) -> None:
        position = _comptime_index(index)
        self._items[position] = _stable(value)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items))

    def __repr__(self) -> str:
        return f"Sequence({self._items!r})"
