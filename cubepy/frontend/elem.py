"""Element types users write (``f32``, ``u32``, ...), ``Line[T]``, ``Comptime[X]`` and Python literals.

An element type object is three things at once: an annotation (``x: f32``), a cast inside kernels
(``f32(x)``; on a Python number it gives a typed runtime constant) and, outside kernels, a numpy
scalar constructor (``f32(1.5)`` is ``np.float32(1.5)``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from cubepy import ir
from cubepy.ir.types import elem_of_numpy

if TYPE_CHECKING:
    from cubepy.frontend.generics import GenericItem

PY_NUMBER = (bool, int, float, np.bool_, np.integer, np.floating)


class ScalarType:
    """A user-facing element type: ``.name``, ``.size`` (bytes), ``.numpy`` (dtype) and ``.ir``."""

    __slots__ = ("ir",)

    def __init__(self, elem: ir.ElemType) -> None:
        self.ir = elem

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype of this type (bf16 loads ``ml_dtypes`` when first asked)."""
        return self.ir.numpy

    @property
    def name(self) -> str:
        """The element type's name (``"f32"``)."""
        return self.ir.name

    @property
    def size(self) -> int:
        """Bytes per element."""
        return self.ir.size

    def __call__(self, value: Any = 0) -> Any:
        """Inside a kernel: cast ``value`` to this type; outside: a numpy scalar of this type."""
        from cubepy.frontend import operations
        from cubepy.frontend.state import active_state

        if active_state() is None:
            return self.numpy.type(value)
        return operations.cast(value, self.ir)

    new = __call__
    cast_from = __call__

    def max_value(self) -> int | float:
        """The largest finite value of this type (a comptime Python number)."""
        return _limits(self.ir)[1]

    def min_value(self) -> int | float:
        """The lowest finite value of this type (a comptime Python number)."""
        return _limits(self.ir)[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ScalarType) and other.ir == self.ir

    def __hash__(self) -> int:
        return hash(("ScalarType", self.ir.name))

    def __repr__(self) -> str:
        return self.ir.name

    def __reduce__(self) -> tuple[Callable[[str], ScalarType], tuple[str]]:
        return (_scalar_by_name, (self.ir.name,))


SCALAR_TYPES: dict[str, ScalarType] = {e.name: ScalarType(e) for e in ir.ALL_ELEM_TYPES}

f16, bf16, f32, f64 = (SCALAR_TYPES[n] for n in ("f16", "bf16", "f32", "f64"))
i8, i16, i32, i64 = (SCALAR_TYPES[n] for n in ("i8", "i16", "i32", "i64"))
u8, u16, u32, u64 = (SCALAR_TYPES[n] for n in ("u8", "u16", "u32", "u64"))
boolean, usize = SCALAR_TYPES["bool"], SCALAR_TYPES["usize"]
# 8-bit floats (OCP FP8): stored, converted by cast (f32/f16 <-> fp8, saturating) and fed to wgmma.
e4m3, e5m2 = SCALAR_TYPES["e4m3"], SCALAR_TYPES["e5m2"]


def _scalar_by_name(name: str) -> ScalarType:
    return SCALAR_TYPES[name]


def scalar_type(elem: ir.ElemType) -> ScalarType:
    """The user-facing type object of an IR element type."""
    return SCALAR_TYPES[elem.name]


def to_elem(spec: Any) -> ir.ElemType:
    """The IR element type of ``spec`` (a ScalarType, an ir.ElemType, a numpy dtype, a Line type or a bound TypeVar)."""
    if isinstance(spec, ScalarType):
        return spec.ir
    bound_type = getattr(type(spec), "bound_type", None)  # a generic kernel's TypeVar (cubepy.frontend.generics)
    if bound_type is not None:
        return cast(ir.ElemType, bound_type(spec).ir)
    if isinstance(spec, ir.ElemType):
        return spec
    if isinstance(spec, LineType):
        return spec.elem.ir
    try:
        dtype = np.dtype(spec)
    except TypeError:
        dtype = None
    elem = None if dtype is None else elem_of_numpy(dtype)
    if elem is not None:
        return elem
    raise TypeError(f"{spec!r} is not an element type (expected f32, u32, ...)")


_ELEM_OF_DTYPE: dict[np.dtype, ir.ElemType | None] = {}


def elem_of_dtype(dtype: np.dtype) -> ir.ElemType | None:
    """The IR element type of a numpy dtype, or None."""
    found: ir.ElemType | Literal[False] | None = _ELEM_OF_DTYPE.get(dtype, False)
    if found is False:
        try:
            found = to_elem(dtype)
        except TypeError:
            found = None
        _ELEM_OF_DTYPE[dtype] = found
    return found


def _limits(elem: ir.ElemType) -> tuple[int | float, int | float]:
    if elem.is_bool:
        return (False, True)
    dtype = elem.numpy
    if elem.is_float or elem.is_fp8:
        info = sys.modules["ml_dtypes"].finfo(dtype) if elem is ir.BF16 or elem.is_fp8 else np.finfo(dtype)
        return (float(info.min), float(info.max))
    info = np.iinfo(dtype)
    return (int(info.min), int(info.max))


def literal_elem(value: Any) -> ir.ElemType:
    """The default element type of a Python literal: bool, i32 for ints, f32 for floats; numpy keeps its own."""
    if isinstance(value, np.generic):
        elem = elem_of_dtype(value.dtype)
        if elem is not None:
            return elem
    if isinstance(value, (bool, np.bool_)):
        return ir.BOOL
    if isinstance(value, (int, np.integer)):
        return ir.I32
    return ir.F32


def fits(value: Any, elem: ir.ElemType) -> bool:
    """Whether the Python number ``value`` is exactly representable as a literal of ``elem``."""
    if elem.is_bool:
        return isinstance(value, (bool, np.bool_))
    if isinstance(value, (bool, np.bool_)):
        return not elem.is_bool
    if elem.is_float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not overflows(value, elem)
    if isinstance(value, (float, np.floating)):
        return False
    low, high = _limits(elem)
    return low <= int(value) <= high


def overflows(value: Any, elem: ir.ElemType) -> bool:
    """Whether the finite number ``value`` rounds to infinity in float type ``elem`` (inf and nan do not)."""
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond the f64 range
        return True
    if not math.isfinite(as_float):
        return not isinstance(value, (float, np.floating))  # a huge int overflows; inf/nan literals do not
    with np.errstate(over="ignore"):
        return not np.isfinite(np.asarray(as_float, dtype=np.float64).astype(elem.numpy))


def convert_literal(value: Any, elem: ir.ElemType) -> bool | int | float:
    """``value`` as a Python value of ``elem``, rounded as the element type stores it (f16 rounds)."""
    if elem.is_bool:
        return bool(value)
    if elem.is_float:
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            return value
        return float(np.asarray(value, dtype=np.float64).astype(elem.numpy).astype(np.float64))
    return int(value)


def cast_literal(value: Any, elem: ir.ElemType) -> bool | int | float:
    """Convert a literal as a runtime cast would (floats truncate toward zero, integers wrap)."""
    with np.errstate(all="ignore"):
        source = np.asarray(value)
        converted = source.astype(elem.numpy)
    item = converted.item()
    return convert_literal(item, elem)


class LineType:
    """``Line[T]`` (line size set by the launch argument) or ``Line[T, N]`` (fixed size N)."""

    __slots__ = ("elem", "size")

    def __init__(self, elem: ScalarType, size: int | None = None) -> None:
        self.elem = elem
        self.size = size

    def __call__(self, value: Any) -> Any:
        """Cast a line to element type T lane by lane (a scalar is cast and broadcast on use)."""
        from cubepy.frontend import operations

        return operations.cast(value, self.elem.ir, line=self.size)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LineType) and (other.elem, other.size) == (self.elem, self.size)

    def __hash__(self) -> int:
        return hash(("Line", self.elem, self.size))

    def __repr__(self) -> str:
        return f"Line[{self.elem!r}]" if self.size is None else f"Line[{self.elem!r}, {self.size}]"


class Line:
    """SIMD lines: ``Line[T]`` in annotations, ``Line(x)`` broadcasts a scalar, ``Line[T](x)`` casts."""

    def __new__(cls, value: Any, size: int | None = None) -> Any:
        from cubepy.frontend import operations

        return operations.broadcast(value, size)

    def __class_getitem__(cls, item: Any) -> LineType | GenericItem:
        from cubepy.frontend import generics

        elem, size = item if isinstance(item, tuple) else (item, None)
        var = generics.unbound_var(elem)
        if var is not None:  # Line[F] in a generic kernel's annotation: substituted when it is bound
            return generics.GenericItem(cls, var, None if size is None else int(size))
        elem = generics.resolve_item(elem)
        return LineType(_as_scalar_type(elem)) if size is None else LineType(_as_scalar_type(elem), int(size))


def _as_scalar_type(spec: Any) -> ScalarType:
    if isinstance(spec, ScalarType):
        return spec
    return scalar_type(to_elem(spec))


class ComptimeType:
    """``Comptime[X]``: a parameter or field that is a plain Python value, part of the cache key."""

    __slots__ = ("inner",)

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComptimeType) and other.inner == self.inner

    def __hash__(self) -> int:
        return hash(("Comptime", repr(self.inner)))

    def __repr__(self) -> str:
        return f"Comptime[{getattr(self.inner, '__name__', self.inner)!r}]"


class Comptime:
    """``Comptime[X]`` marks a comptime parameter or field (any hashable Python value)."""

    def __class_getitem__(cls, item: Any) -> ComptimeType:
        return ComptimeType(item)


def is_comptime_annotation(annotation: object) -> bool:
    """Whether an annotation is ``Comptime`` or ``Comptime[X]``."""
    return annotation is Comptime or isinstance(annotation, ComptimeType)
