"""Math intrinsics, ``select``, truncating division and the comptime/runtime markers.

Every function folds on the host when all its arguments are comptime (``cp.min(2, 3)`` is ``2``; a
math function computes its IR operation's own semantics in f64, ``cp.lgamma(2.5)`` included) and
otherwise emits one IR instruction (after converting the operands to one type: integers are
computed in f32 by the float-only functions, 64-bit integers in f64).
"""

from __future__ import annotations

import builtins as _py
import math
from collections.abc import Callable, Iterable
from typing import Any

from cubepy.frontend import elem as elems
from cubepy.frontend import operations, source
from cubepy.frontend.flow import RangeHint, Unroll
from cubepy.frontend.mutability import check_bound
from cubepy.frontend.state import active_state
from cubepy.frontend.values import ExpandBase, ExpandElement, fail_needs_comptime
from cubepy.ir import ops as irops


def _unary(op: str, doc: str) -> Callable[[Any], Any]:
    def function(x: Any) -> Any:
        return operations.unary(op, x)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = doc
    return function


abs = _unary("abs", "|x|.")  # noqa: A001
# Every float unary operation of the IR is a math function of the same name, documented by its record
# (``cp.exp``, ``cp.cbrt`` ...): a new one needs no line here.  ``is_nan``/``is_inf`` are defined below;
# ``wide_recip`` is the shared_reciprocal pass's (an f64 result within 1.13 * 2^-53 on the GPU), not a user's.
RECORD_FUNCTIONS: tuple[str, ...] = tuple(
    cls.RECORD.name
    for cls in irops.UNARY_OPS
    if cls.RECORD.operand_kind == "float" and cls.RECORD.name not in ("is_nan", "is_inf", "wide_recip")
)
for _name in RECORD_FUNCTIONS:
    globals()[_name] = _unary(_name, irops.lookup(_name).RECORD.doc)


def _int_unary(op: str, doc: str) -> Callable[[Any], Any]:
    def function(x: Any) -> Any:
        if not isinstance(x, ExpandBase):
            source.fail(f"cp.{op} needs a runtime integer (a Python int has no width)")
        return operations.unary(op, x)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = doc
    return function


count_ones = _int_unary("count_ones", "The number of set bits of x, as u32.")
reverse_bits = _int_unary("reverse_bits", "The bits of x in reverse order.")
leading_zeros = _int_unary("leading_zeros", "The number of leading zero bits of x, as u32.")
trailing_zeros = _int_unary("trailing_zeros", "The number of trailing zero bits of x (its width for 0), as u32.")
find_first_set = _int_unary("find_first_set", "The 1-based position of the lowest set bit of x (0 for 0), as u32.")


def is_nan(x: Any) -> Any:
    """Whether x is NaN (lane by lane)."""
    if not isinstance(x, ExpandBase):
        return operations.fold_comptime("is_nan", x)
    return operations.unary("is_nan", x)


def is_inf(x: Any) -> Any:
    """Whether x is infinite (lane by lane)."""
    if not isinstance(x, ExpandBase):
        return operations.fold_comptime("is_inf", x)
    return operations.unary("is_inf", x)


def powf(base: Any, exponent: Any) -> Any:
    """base raised to the (float) exponent."""
    if not isinstance(base, ExpandBase) and not isinstance(exponent, ExpandBase):
        return operations.fold_comptime("powf", base, exponent)
    a, b = operations.unify((base, exponent), "powf") or source.fail("powf expects numbers")
    if not a.elem.is_float:
        a, b = operations.cast(a, operations.float_for(a.elem)), operations.cast(b, operations.float_for(a.elem))
    return operations.emit(irops.Powf(a.var, b.var))


def _float_binary(op: str, a: Any, b: Any) -> Any:
    if not isinstance(a, ExpandBase) and not isinstance(b, ExpandBase):
        return operations.fold_comptime(op, a, b)
    x, y = operations.unify((a, b), op) or source.fail(f"{op} expects numbers")
    if not x.elem.is_float:
        x, y = operations.cast(x, operations.float_for(x.elem)), operations.cast(y, operations.float_for(x.elem))
    return operations.emit(irops.lookup(op)(x.var, y.var))


def atan2(y: Any, x: Any) -> Any:
    """The angle of the point (x, y) in radians, in [-pi, pi]."""
    return _float_binary("atan2", y, x)


def hypot(a: Any, b: Any) -> Any:
    """sqrt(a * a + b * b) without undue overflow."""
    return _float_binary("hypot", a, b)


def copysign(magnitude: Any, sign: Any) -> Any:
    """The magnitude of ``magnitude`` with the sign bit of ``sign``."""
    return _float_binary("copysign", magnitude, sign)


def fmod(a: Any, b: Any) -> Any:
    """C's fmod: ``a - n * b`` with ``n = trunc(a / b)``, exact, with the sign of ``a`` (``%`` floors instead)."""
    return _float_binary("fmod", a, b)


def remainder(a: Any, b: Any) -> Any:
    """The IEEE remainder: ``a - n * b`` with ``n = a / b`` rounded to the nearest even integer, exact."""
    return _float_binary("remainder", a, b)


def nextafter(x: Any, toward: Any) -> Any:
    """The next value of ``x``'s float type after ``x`` in the direction of ``toward``."""
    return _float_binary("nextafter", x, toward)


def modf(x: Any) -> Any:
    """``(fractional part, integral part)`` of ``x``, both with the sign of ``x`` (Python's math.modf)."""
    if not isinstance(x, ExpandBase):
        return math.modf(x)
    x = operations.as_element(x)
    if not x.elem.is_float:
        x = operations.cast(x, operations.float_for(x.elem))
    whole = operations.unary("trunc", x)
    # x - trunc(x) is exact; an infinity has no fraction (0 with its sign), and -2.0 gives -0.0 as in C.
    fraction = operations.select(is_inf(x), 0.0, x - whole)
    return copysign(fraction, x), whole


def rhypot(a: Any, b: Any) -> Any:
    """1 / hypot(a, b)."""
    return _float_binary("rhypot", a, b)


def mul_hi(a: Any, b: Any) -> Any:
    """The high half of the double-width product of two integers of one type."""
    if not isinstance(a, ExpandBase) and not isinstance(b, ExpandBase):
        source.fail("cp.mul_hi needs a runtime integer (a Python int has no width)")
    x, y = operations.unify((a, b), "mul_hi") or source.fail("mul_hi expects integers")
    if not x.elem.is_int:
        source.fail(f"mul_hi needs integer operands, got {x.type!r}")
    return operations.emit(irops.MulHi(x.var, y.var))


def vector_sum(x: Any) -> Any:
    """The sum of the lanes of a line (a scalar is returned as is)."""
    if not isinstance(x, ExpandBase):
        return x
    x = operations.as_element(x)
    total = x[0] if x.type.line > 1 else x
    for lane in _py.range(1, x.type.line):
        total = operations.binary("add", total, x[lane])
    return total


def dot(a: Any, b: Any) -> Any:
    """The dot product of two lines: the sum of their lane-wise products."""
    return vector_sum(operations.binary("mul", a, b))


def magnitude(x: Any) -> Any:
    """The Euclidean length of a line: sqrt(dot(x, x))."""
    return operations.unary("sqrt", dot(x, x))


def normalize(x: Any) -> Any:
    """x divided by its magnitude (NaN lanes for a zero line)."""
    return operations.binary("truediv", x, magnitude(x))


def min(a: Any, b: Any, *more: Any) -> Any:  # noqa: A001
    """The smallest of the arguments."""
    result = operations.binary("min", a, b)
    for value in more:
        result = operations.binary("min", result, value)
    return result


def max(a: Any, b: Any, *more: Any) -> Any:  # noqa: A001
    """The largest of the arguments."""
    result = operations.binary("max", a, b)
    for value in more:
        result = operations.binary("max", result, value)
    return result


def clamp(x: Any, lo: Any, hi: Any) -> Any:
    """x limited to [lo, hi]: min(max(x, lo), hi)."""
    return operations.clamp(x, lo, hi)


def fma(a: Any, b: Any, c: Any) -> Any:
    """a * b + c with a single rounding."""
    return operations.fma(a, b, c)


def select(cond: Any, then: Any, otherwise: Any) -> Any:
    """then where cond holds, otherwise elsewhere (lane by lane; both sides are evaluated)."""
    check_bound(cond)
    return operations.select(cond, then, otherwise)


def div_trunc(a: Any, b: Any) -> Any:
    """Integer division rounding toward zero (C's `/`), unlike Python's flooring `//`."""
    if not isinstance(a, ExpandBase) and not isinstance(b, ExpandBase):
        quotient = _py.abs(a) // _py.abs(b)
        return quotient if (a >= 0) == (b >= 0) else -quotient
    return operations.binary("div_trunc", a, b)


def rem_trunc(a: Any, b: Any) -> Any:
    """The remainder of div_trunc, with the sign of the dividend (C's `%`)."""
    if not isinstance(a, ExpandBase) and not isinstance(b, ExpandBase):
        return a - b * div_trunc(a, b)
    return operations.binary("rem_trunc", a, b)


def comptime(value: Any) -> Any:
    """Assert that ``value`` is known at expansion time and return its Python value."""
    check_bound(value)
    if isinstance(value, ExpandBase) and not operations.is_comptime(value):
        fail_needs_comptime(value, "cp.comptime: expected a comptime value, got a runtime value")
    return operations.comptime_value(value)


def runtime(value: Any) -> Any:
    """Make a Python number a runtime value (a constant that still adapts to the other operand's type)."""
    check_bound(value)
    if active_state() is None or isinstance(value, ExpandBase):
        return value
    if not operations.is_number(value):
        source.fail(f"cp.runtime expects a number, got {type(value).__name__}")
    number = value.item() if hasattr(value, "item") else value
    element = operations.literal(number, elems.literal_elem(value))
    return ExpandElement(element.var, element.state, literal=not isinstance(number, bool))


def range(*args: Any, unroll: int | None = None) -> RangeHint:  # noqa: A001 - cp.range mirrors range
    """``range(start, stop, step)`` as a runtime loop with an unroll hint for the compiled back ends.

    ``unroll=1`` keeps the loop rolled (CUDA's ``#pragma unroll 1``: PTX ``.pragma "nounroll"``), ``unroll=N``
    unrolls it N times, ``None`` leaves it to LLVM and ptxas as a plain ``range`` does.  The interp runs it as
    ``range``.  For a loop unrolled at expansion time (comptime bounds) use ``cp.unroll``.
    """
    if not 1 <= len(args) <= 3:
        source.fail(f"cp.range expected 1 to 3 positional arguments, got {len(args)}")
    if unroll is not None and (isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1):
        source.fail(f"cp.range: unroll must be a positive int or None, got {unroll!r}")
    return RangeHint(args, unroll)


def unroll(iterable: Iterable[Any]) -> Unroll:
    """Iterate ``iterable`` (comptime bounds) at expansion time: the loop body is emitted once per value."""
    return Unroll(iterable)


def bitcast(value: Any, elem: Any) -> ExpandElement:
    """The bits of ``value`` reinterpreted as element type ``elem`` (same total size)."""
    x = operations.as_element(value)
    target = x.type.with_elem(elems.to_elem(elem))
    if target.size != x.type.size:
        source.fail(f"bitcast from {x.type!r} to {target!r} changes the size")
    return operations.emit(irops.Bitcast(x.var), target)


# Every public function of this module is part of the kernel language (``cubepy`` re-exports ``__all__``): an
# intrinsic is exported by being defined here.
__all__ = [
    *RECORD_FUNCTIONS,
    *(
        name
        for name, value in list(globals().items())
        if not name.startswith("_")
        and name not in RECORD_FUNCTIONS
        and callable(value)
        and getattr(value, "__module__", None) == __name__
    ),
]
