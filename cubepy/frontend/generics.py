"""Generic kernels: type parameters (``F = cp.TypeVar("F", cp.Float)``) bound per launch.

A kernel whose annotations name a ``TypeVar`` (``Array[F]``, ``Tensor[Line[F]]``, ``Array[Atomic[F]]``
or a scalar ``x: F``) is generic.  Each launch binds every type parameter from its arguments (the
dtype of a buffer, the element type of a ``cp.ScalarArg`` or numpy scalar; ``launch.bind_type_params``
reads them next to the launch protocol); ``kernel.compile`` and
``cp.testing.expand`` also take element types (``cp.Array[cp.f32]``, ``cp.f32``) in those places.
All uses of one parameter must agree.  The bound kernel is an ordinary kernel whose identity (the
cache key) names the binding, so each element type compiles once.  While it expands, ``F`` stands
for its bound type: ``F(x)`` casts, ``cp.SharedMemory[F](n)`` and ``cp.Line[F]`` declare.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cubepy import ir
from cubepy.errors import CubeError

if TYPE_CHECKING:
    import numpy as np

    from cubepy.frontend.elem import ScalarType

_ELEM_NAMES = {
    "float": ("f16", "bf16", "f32", "f64"),
    "int": ("i8", "i16", "i32", "i64"),
    "uint": ("u8", "u16", "u32", "u64", "usize"),
}


class TypeBound:
    """A named set of element types a type parameter may take (``cp.Float``, ``cp.Int``, ...)."""

    __slots__ = ("name", "elems")

    def __init__(self, name: str, elems: tuple[ir.ElemType, ...]) -> None:
        self.name = name
        self.elems = elems

    def __repr__(self) -> str:
        return f"cp.{self.name}"


Float = TypeBound("Float", tuple(ir.ELEM_BY_NAME[n] for n in _ELEM_NAMES["float"]))
Int = TypeBound("Int", tuple(ir.ELEM_BY_NAME[n] for n in _ELEM_NAMES["int"]))
UInt = TypeBound("UInt", tuple(ir.ELEM_BY_NAME[n] for n in _ELEM_NAMES["uint"]))
Numeric = TypeBound("Numeric", Float.elems + Int.elems + UInt.elems)

_local = threading.local()


def _bindings() -> list[dict[TypeVar, ScalarType]]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


@contextmanager
def bound(binding: dict[TypeVar, ScalarType]) -> Iterator[None]:
    """Within the block, each ``TypeVar`` of ``binding`` stands for its element type."""
    stack = _bindings()
    stack.append(binding)
    try:
        yield
    finally:
        stack.pop()


ACCEPTED_BOUNDS = "cp.Float, cp.Int, cp.UInt, cp.Numeric, or element types such as cp.f32 (a tuple of them)"


def _bound_elem(name: str, item: Any) -> ir.ElemType:
    """The element type a ``TypeVar`` bound names; strings are refused (``"float"`` would silently mean f64)."""
    from cubepy.frontend.elem import to_elem

    if isinstance(item, str):
        raise CubeError(
            f"cp.TypeVar({name!r}, {item!r}): a bound is not a string; the accepted bounds are {ACCEPTED_BOUNDS}"
        )
    try:
        return to_elem(item)
    except TypeError:
        raise CubeError(
            f"cp.TypeVar({name!r}, {item!r}): {item!r} is not a type bound; the accepted bounds are {ACCEPTED_BOUNDS}"
        ) from None


class TypeVar:
    """A kernel's type parameter: ``F = cp.TypeVar("F", cp.Float)`` (bounds: TypeBounds or element types)."""

    def __init__(self, name: str, *bounds: Any) -> None:
        if not isinstance(name, str):
            raise CubeError(f"cp.TypeVar({name!r}, ...): the name must be a str, got {type(name).__name__}")
        if not bounds:
            bounds = (Numeric,)
        allowed: list[ir.ElemType] = []
        for bound_ in bounds:
            items = bound_ if isinstance(bound_, tuple) else (bound_,)
            for item in items:
                elems = item.elems if isinstance(item, TypeBound) else (_bound_elem(name, item),)
                allowed.extend(e for e in elems if e not in allowed)
        self.name = name
        self.allowed = tuple(allowed)

    def __repr__(self) -> str:
        return f"TypeVar({self.name!r}: {'|'.join(e.name for e in self.allowed)})"

    def bound_type(self) -> ScalarType:
        """The ``ScalarType`` this parameter stands for now; CubeError outside a bound expansion."""
        for binding in reversed(_bindings()):
            found = binding.get(self)
            if found is not None:
                return found
        raise CubeError(
            f"type parameter {self.name} is not bound here: use it in a generic kernel's "
            "annotations, and launch, compile or expand that kernel"
        )

    def is_bound(self) -> bool:
        """Whether an enclosing expansion binds this parameter."""
        return any(self in binding for binding in _bindings())

    def __call__(self, value: Any = 0) -> Any:
        """Inside a kernel: cast ``value`` to the bound type (as ``f32(x)`` does)."""
        return self.bound_type()(value)

    @property
    def ir(self) -> ir.ElemType:
        """The bound IR element type."""
        return self.bound_type().ir

    @property
    def numpy(self) -> np.dtype:
        """The bound numpy dtype."""
        return self.bound_type().numpy

    @property
    def size(self) -> int:
        """Bytes per element of the bound type."""
        return self.bound_type().size

    def max_value(self) -> int | float:
        """The largest finite value of the bound type."""
        return self.bound_type().max_value()

    def min_value(self) -> int | float:
        """The lowest finite value of the bound type."""
        return self.bound_type().min_value()


class GenericItem:
    """``Line[F]`` / ``Line[F, N]`` / ``Atomic[F]`` with ``F`` unbound: substituted when the kernel is bound.

    ``factory`` is the class subscripted (``Line`` or ``Atomic``), as ``GenericBuffer`` keeps ``Array``/``Tensor``.
    """

    __slots__ = ("factory", "var", "size")

    def __init__(self, factory: Any, var: TypeVar, size: int | None = None) -> None:
        self.factory, self.var, self.size = factory, var, size

    def __repr__(self) -> str:
        return f"{self.factory.__name__}[{self.var.name}{'' if self.size is None else f', {self.size}'}]"

    def substitute(self) -> Any:
        """The concrete item for the current binding."""
        elem = self.var.bound_type()
        return self.factory[elem] if self.size is None else self.factory[elem, self.size]


class GenericBuffer:
    """``Array[F]`` / ``Tensor[...F...]`` with ``F`` unbound: a generic kernel's parameter annotation."""

    __slots__ = ("factory", "item")

    def __init__(self, factory: Any, item: TypeVar | GenericItem) -> None:
        self.factory, self.item = factory, item

    @property
    def var(self) -> TypeVar:
        """The type parameter it names."""
        return self.item if isinstance(self.item, TypeVar) else self.item.var

    def __repr__(self) -> str:
        item = self.item.name if isinstance(self.item, TypeVar) else repr(self.item)
        return f"{self.factory.__name__}[{item}]"

    def substitute(self) -> Any:
        """The concrete ``Array[...]``/``Tensor[...]`` for the current binding."""
        item = self.item.bound_type() if isinstance(self.item, TypeVar) else self.item.substitute()
        return self.factory[item]


def unbound_var(item: object) -> TypeVar | None:
    """The unbound type parameter ``item`` names (directly, or inside Line/Atomic), or None."""
    if isinstance(item, TypeVar):
        return None if item.is_bound() else item
    if isinstance(item, GenericItem):
        return item.var
    return None


def resolve_item(item: Any) -> Any:
    """``item`` with a bound type parameter replaced by its element type."""
    if isinstance(item, TypeVar):
        return item.bound_type()
    if isinstance(item, GenericItem):
        return item.substitute()
    return item


def type_var_of(annotation: object) -> TypeVar | None:
    """The type parameter a kernel parameter's annotation names, or None for a concrete annotation."""
    if isinstance(annotation, TypeVar):
        return annotation
    if isinstance(annotation, GenericBuffer):
        return annotation.var
    return None


def binding_text(binding: dict[TypeVar, ScalarType]) -> str:
    """``F=f32,G=i32``: the binding's part of a cache key and of a name."""
    return ",".join(f"{var.name}={elem.name}" for var, elem in sorted(binding.items(), key=lambda kv: kv[0].name))
