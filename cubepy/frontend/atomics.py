"""Atomic memories inside kernels: the ``Atomic[T]`` element type and ``AtomicRef``, one element of such a memory.

``Array[Atomic[u32]]`` (or an atomic ``SharedMemory``) indexes to an ``AtomicRef``, whose methods emit the atomic
IR operations (``a[i].fetch_add(v)``); each returns the value it replaced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cubepy import ir
from cubepy.frontend import generics, operations, source
from cubepy.frontend.elem import ScalarType, scalar_type, to_elem
from cubepy.frontend.state import current_scope
from cubepy.frontend.values import ExpandElement
from cubepy.ir import ops as irops

if TYPE_CHECKING:
    from cubepy.frontend.containers import MemoryExpand

__all__ = ["Atomic", "AtomicRef", "AtomicType"]


class AtomicType:
    """``Atomic[T]``: the element type of memories accessed with atomic operations."""

    __slots__ = ("elem",)

    def __init__(self, elem: ScalarType) -> None:
        self.elem = elem

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AtomicType) and other.elem == self.elem

    def __hash__(self) -> int:
        return hash(("Atomic", self.elem))

    def __repr__(self) -> str:
        return f"Atomic[{self.elem!r}]"


class Atomic:
    """``cp.Atomic[T]`` element type for arrays and shared memory (``a[i].fetch_add(v)``)."""

    def __class_getitem__(cls, item: Any) -> AtomicType | generics.GenericItem:
        var = generics.unbound_var(item)
        if var is not None:  # Atomic[F] in a generic kernel's annotation
            return generics.GenericItem(cls, var)
        return AtomicType(item if isinstance(item, ScalarType) else scalar_type(to_elem(item)))


class AtomicRef:
    """An element of an atomic memory; every operation returns the value it replaced (store: None)."""

    __slots__ = ("memory", "index")

    def __init__(self, memory: MemoryExpand, index: ir.Variable) -> None:
        self.memory = memory
        self.index = index

    def _value(self, value: Any) -> ir.Variable:
        return operations.convert(value, self.memory.var.type, "atomic operand")

    def _op(self, op: str, value: Any = None) -> ExpandElement:
        var = None if value is None else self._value(value)
        result = operations.emit(irops.lookup(f"atomic_{op}")(self.memory.var, self.index, var), self.memory.var.type)
        assert result is not None  # every atomic but the store has a result
        return result

    def fetch_inc(self, limit: Any) -> ExpandElement:
        """CUDA's ``atomicInc`` on a u32: ``m = 0 if m >= limit else m + 1``; the old value."""
        return self._op("inc", limit)

    def fetch_dec(self, limit: Any) -> ExpandElement:
        """CUDA's ``atomicDec`` on a u32: ``m = limit if m == 0 or m > limit else m - 1``; the old value."""
        return self._op("dec", limit)

    def fetch_add(self, value: Any) -> ExpandElement:
        """Atomically ``m += value``; the old value."""
        return self._op("add", value)

    def fetch_sub(self, value: Any) -> ExpandElement:
        """Atomically ``m -= value``; the old value."""
        return self._op("sub", value)

    def fetch_max(self, value: Any) -> ExpandElement:
        """Atomically ``m = max(m, value)``; the old value."""
        return self._op("max", value)

    def fetch_min(self, value: Any) -> ExpandElement:
        """Atomically ``m = min(m, value)``; the old value."""
        return self._op("min", value)

    def fetch_and(self, value: Any) -> ExpandElement:
        """Atomically ``m &= value``; the old value."""
        return self._op("and", value)

    def fetch_or(self, value: Any) -> ExpandElement:
        """Atomically ``m |= value``; the old value."""
        return self._op("or", value)

    def fetch_xor(self, value: Any) -> ExpandElement:
        """Atomically ``m ^= value``; the old value."""
        return self._op("xor", value)

    def exchange(self, value: Any) -> ExpandElement:
        """Atomically ``m = value``; the old value."""
        return self._op("exchange", value)

    def load(self) -> ExpandElement:
        """Atomically read ``m``."""
        return self._op("load")

    def store(self, value: Any) -> None:
        """Atomically ``m = value``."""
        current_scope().append(irops.AtomicStore(self.memory.var, self.index, self._value(value)))

    def compare_exchange(self, cmp: Any, new: Any) -> ExpandElement:
        """Atomically ``if m == cmp: m = new``; the old value."""
        return operations.emit(
            irops.AtomicCompareExchange(self.memory.var, self.index, self._value(cmp), self._value(new)),
            self.memory.var.type,
        )

    def __bool__(self) -> bool:
        source.fail("an atomic element is not a value; use .load()")

    def __repr__(self) -> str:
        return f"<atomic element of {self.memory!r}>"
