"""Arithmetic, comparison, conversion and assignment operations.

Lane-wise families (unary, binary, compare) have one class per member (``Exp``, ``Add``, ``Lt``),
made by ``_unary``/``_binary``/``_compare`` below; each line declares the member's record.  ``div``
is true division (floats only); ``floordiv``/``mod`` follow Python (floor, sign of divisor);
``div_trunc``/``rem_trunc`` follow C (integers only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation, elem_of, same_as
from cubepy.ir.ops.record import GIVEN, Check, Checker, ElemKind, OpRecord, ResultRule, declare, derive
from cubepy.ir.types import BOOL, U32
from cubepy.ir.variable import Variable

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction


@attrs.frozen(repr=False)
class Unary(Operation):
    """out = op(input), lane-wise."""

    input: Variable


@attrs.frozen(repr=False)
class Binary(Operation):
    """out = lhs op rhs, lane-wise; operands and result share one item type (powi: int exponent)."""

    lhs: Variable
    rhs: Variable


@attrs.frozen(repr=False)
class Compare(Operation):
    """out = lhs op rhs as a bool (or a line of bools)."""

    lhs: Variable
    rhs: Variable


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _unary(name: str, kind: ElemKind, doc: str, result: ResultRule | None = None) -> type[Unary]:
    record = OpRecord(
        name, "arith", result=result or same_as("input"), operand_kind=kind, kind_of=("input",), pure=True, doc=doc
    )
    cls = derive(Unary, _class_name(name), record, __name__)
    assert issubclass(cls, Unary)
    return cls


def _binary(
    name: str, kind: ElemKind, doc: str, *, foldable: bool = True, checks: tuple[Check, ...] = ()
) -> type[Binary]:
    record = OpRecord(
        name,
        "arith",
        result=same_as("lhs"),
        operand_kind=kind,
        kind_of=("lhs",),
        same_type=("lhs", "rhs"),
        pure=True,
        foldable=foldable,
        checks=checks,
        doc=doc,
    )
    cls = derive(Binary, _class_name(name), record, __name__)
    assert issubclass(cls, Binary)
    return cls


def _compare(name: str, doc: str) -> type[Compare]:
    record = OpRecord(
        name, "arith", result=elem_of("lhs", BOOL), pure=True, foldable=True, checks=(_same_operands,), doc=doc
    )
    cls = derive(Compare, _class_name(name), record, __name__)
    assert issubclass(cls, Compare)
    return cls


def _same_operands(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Compare)
    c.same_type(inst, "right operand", op.rhs.type, op.lhs.type)


_TO_BOOL = elem_of("input", BOOL)
_TO_U32 = elem_of("input", U32)

# -- unary -------------------------------------------------------------------------------------------
Exp = _unary("exp", "float", "e raised to x.")
Log = _unary("log", "float", "The natural logarithm of x.")
Log1p = _unary("log1p", "float", "log(1 + x), accurate for small x.")
Sqrt = _unary("sqrt", "float", "The square root of x.")
Rsqrt = _unary("rsqrt", "float", "1 / sqrt(x).")
Cbrt = _unary("cbrt", "float", "The cube root of x.")
Sin = _unary("sin", "float", "The sine of x (radians).")
Cos = _unary("cos", "float", "The cosine of x (radians).")
Tan = _unary("tan", "float", "The tangent of x (radians).")
Tanh = _unary("tanh", "float", "The hyperbolic tangent of x.")
Erf = _unary("erf", "float", "The error function of x.")
Floor = _unary("floor", "float", "The largest integer value not above x.")
Ceil = _unary("ceil", "float", "The smallest integer value not below x.")
Round = _unary("round", "float", "x rounded to the nearest integer value, ties to even.")
Trunc = _unary("trunc", "float", "x rounded toward zero.")
Recip = _unary("recip", "float", "1 / x.")
IsNan = _unary("is_nan", "float", "Whether x is NaN.", _TO_BOOL)
IsInf = _unary("is_inf", "float", "Whether x is infinite.", _TO_BOOL)
Asin = _unary("asin", "float", "The arcsine of x (radians).")
Acos = _unary("acos", "float", "The arccosine of x (radians).")
Atan = _unary("atan", "float", "The arctangent of x (radians).")
Sinh = _unary("sinh", "float", "The hyperbolic sine of x.")
Cosh = _unary("cosh", "float", "The hyperbolic cosine of x.")
Asinh = _unary("asinh", "float", "The inverse hyperbolic sine of x.")
Acosh = _unary("acosh", "float", "The inverse hyperbolic cosine of x.")
Atanh = _unary("atanh", "float", "The inverse hyperbolic tangent of x.")
Expm1 = _unary("expm1", "float", "exp(x) - 1, accurate for small x.")
ToDegrees = _unary("to_degrees", "float", "x (radians) converted to degrees.")
ToRadians = _unary("to_radians", "float", "x (degrees) converted to radians.")
Exp2 = _unary("exp2", "float", "2 raised to x.")
Exp10 = _unary("exp10", "float", "10 raised to x.")
Log2 = _unary("log2", "float", "The base-2 logarithm of x.")
Log10 = _unary("log10", "float", "The base-10 logarithm of x.")
Erfc = _unary("erfc", "float", "1 - erf(x), accurate where erf(x) is near 1.")
Lgamma = _unary("lgamma", "float", "The natural logarithm of |gamma(x)| (+inf at the poles 0, -1, -2, ...).")
Tgamma = _unary("tgamma", "float", "The gamma function of x (+-inf at +-0, NaN at the negative integers).")
Neg = _unary("neg", "number", "-x.")
Abs = _unary("abs", "number", "|x|.")
Bitnot = _unary("bitnot", "int", "~x (every bit flipped).")
CountOnes = _unary("count_ones", "int", "The number of set bits of x, as u32.", _TO_U32)
LeadingZeros = _unary("leading_zeros", "int", "The number of leading zero bits of x, as u32.", _TO_U32)
ReverseBits = _unary("reverse_bits", "int", "The bits of x in reverse order.")
TrailingZeros = _unary(
    "trailing_zeros", "int", "The number of trailing zero bits of x (its width for 0), as u32.", _TO_U32
)
FindFirstSet = _unary(
    "find_first_set", "int", "The 1-based position of the lowest set bit of x (0 for 0), as u32.", _TO_U32
)
Not = _unary("not", "bool", "Logical not.")

# -- binary ------------------------------------------------------------------------------------------
Add = _binary("add", "number", "lhs + rhs (integers wrap).")
Sub = _binary("sub", "number", "lhs - rhs (integers wrap).")
Mul = _binary("mul", "number", "lhs * rhs (integers wrap).")
Floordiv = _binary("floordiv", "number", "Floor division (Python's //); an integer zero divisor gives all ones.")
Mod = _binary("mod", "number", "Remainder with the divisor's sign (Python's %); a zero divisor gives the dividend.")
Min = _binary("min", "number", "The smaller operand (floats: the non-NaN one).")
Max = _binary("max", "number", "The larger operand (floats: the non-NaN one).")
Div = _binary("div", "float", "True division.")
Powf = _binary("powf", "float", "lhs raised to a float power.", foldable=False)
Atan2 = _binary("atan2", "float", "The angle of the point (rhs, lhs) (radians).", foldable=False)
Hypot = _binary("hypot", "float", "sqrt(lhs**2 + rhs**2) without undue overflow.", foldable=False)
Rhypot = _binary("rhypot", "float", "1 / hypot(lhs, rhs).", foldable=False)
Copysign = _binary("copysign", "float", "The magnitude of lhs with the sign bit of rhs.")
Fmod = _binary("fmod", "float", "C's fmod: lhs - n * rhs with n = trunc(lhs / rhs), exact; the sign of lhs.")
Remainder = _binary("remainder", "float", "IEEE remainder: lhs - n * rhs with n = lhs / rhs rounded to even, exact.")
Nextafter = _binary("nextafter", "float", "The next representable value of the type after lhs toward rhs.")
DivTrunc = _binary("div_trunc", "int", "Division truncating toward zero (C's /).")
RemTrunc = _binary("rem_trunc", "int", "Remainder with the dividend's sign (C's %).")
Bitand = _binary("bitand", "int", "Bitwise and.")
Bitor = _binary("bitor", "int", "Bitwise or.")
Bitxor = _binary("bitxor", "int", "Bitwise exclusive or.")
Shl = _binary("shl", "int", "Shift left; an amount at or above the width gives 0.")
Shr = _binary(
    "shr", "int", "Shift right (arithmetic for signed types); an amount at or above the width gives 0 or the sign fill."
)
MulHi = _binary("mul_hi", "int", "The high half of the double-width product.")
And = _binary("and", "bool", "Logical and.")
Or = _binary("or", "bool", "Logical or.")


def _check_powi(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Binary)
    if not op.lhs.elem.is_float or not op.rhs.elem.is_int:
        c.fail(
            "elem-kind",
            inst,
            f"powi needs a float base and an integer exponent, got {op.lhs.type!r} and {op.rhs.type!r}",
        )
    if op.rhs.type.line not in (1, op.lhs.type.line):
        c.fail("type-mismatch", inst, "powi exponent line size differs from the base's")


Powi = derive(
    Binary,
    "Powi",
    OpRecord(
        "powi",
        "arith",
        result=same_as("lhs"),
        pure=True,
        checks=(_check_powi,),
        doc="A float raised to an integer power.",
    ),
    __name__,
)

# -- compare -----------------------------------------------------------------------------------------
Eq = _compare("eq", "lhs == rhs.")
Ne = _compare("ne", "lhs != rhs (NaN is unequal to everything).")
Lt = _compare("lt", "lhs < rhs.")
Le = _compare("le", "lhs <= rhs.")
Gt = _compare("gt", "lhs > rhs.")
Ge = _compare("ge", "lhs >= rhs.")

UNARY_OPS: tuple[type[Unary], ...] = tuple(
    cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, Unary) and cls is not Unary
)
BINARY_OPS: tuple[type[Binary], ...] = tuple(
    cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, Binary) and cls is not Binary
)
COMPARE_OPS: tuple[type[Compare], ...] = (Eq, Ne, Lt, Le, Gt, Ge)


# -- the other arithmetic operations -------------------------------------------------------------------
def _check_select(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Select)
    out = c.need_out(inst)
    if not op.cond.elem.is_bool or op.cond.type.line not in (1, out.type.line):
        c.fail("type-mismatch", inst, f"select condition has type {op.cond.type!r}, expected bool")


def _check_cast(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Cast)
    out = c.need_out(inst)
    if op.input.type.line not in (1, out.type.line):
        c.fail("type-mismatch", inst, f"cast from {op.input.type!r} to {out.type!r} changes the line size")


def _check_bitcast(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Bitcast)
    out = c.need_out(inst)
    if op.input.type.size != out.type.size:
        c.fail(
            "type-mismatch",
            inst,
            f"bitcast from {op.input.type!r} ({op.input.type.size} bytes) to {out.type!r} ({out.type.size} bytes)",
        )


_FMA_DOC = "out = a * b + c with one rounding."


@declare(
    OpRecord(
        "fma",
        "arith",
        result=same_as("a"),
        operand_kind="float",
        kind_of=("a",),
        same_type=("a", "b", "c"),
        pure=True,
        doc=_FMA_DOC,
    )
)
@attrs.frozen(repr=False)
class Fma(Operation):
    """out = a * b + c with one rounding."""

    a: Variable
    b: Variable
    c: Variable


@declare(
    OpRecord(
        "clamp",
        "arith",
        result=same_as("input"),
        operand_kind="number",
        kind_of=("input",),
        same_type=("input", "lo", "hi"),
        pure=True,
        doc="min(max(input, lo), hi).",
    )
)
@attrs.frozen(repr=False)
class Clamp(Operation):
    """out = min(max(input, lo), hi)."""

    input: Variable
    lo: Variable
    hi: Variable


@declare(
    OpRecord(
        "select",
        "arith",
        result=same_as("then"),
        same_type=("then", "otherwise"),
        pure=True,
        checks=(_check_select,),
        doc="cond ? then : otherwise.",
    )
)
@attrs.frozen(repr=False)
class Select(Operation):
    """out = cond ? then : otherwise (lane-wise when cond is a line)."""

    cond: Variable
    then: Variable
    otherwise: Variable


@declare(
    OpRecord(
        "cast",
        "arith",
        result=GIVEN,
        pure=True,
        foldable=True,
        checks=(_check_cast,),
        doc="Conversion to the result's element type.",
    )
)
@attrs.frozen(repr=False)
class Cast(Operation):
    """out = input converted to out's element type; a scalar input is broadcast to out's line."""

    input: Variable


@declare(
    OpRecord(
        "bitcast", "arith", result=GIVEN, pure=True, checks=(_check_bitcast,), doc="The bits of input reinterpreted."
    )
)
@attrs.frozen(repr=False)
class Bitcast(Operation):
    """out = the bits of input reinterpreted as out's type (same total size)."""

    input: Variable


@declare(OpRecord("assign", "arith", result=same_as("input"), pure=True, doc="out = input."))
@attrs.frozen(repr=False)
class Assign(Operation):
    """out = input; out is a mutable local (or a fresh immutable one)."""

    input: Variable


__all__ = [
    "BINARY_OPS",
    "COMPARE_OPS",
    "UNARY_OPS",
    "Assign",
    "Binary",
    "Bitcast",
    "Cast",
    "Clamp",
    "Compare",
    "Fma",
    "Select",
    "Unary",
    "Exp",
    "Log",
    "Log1p",
    "Sqrt",
    "Rsqrt",
    "Cbrt",
    "Sin",
    "Cos",
    "Tan",
    "Tanh",
    "Erf",
    "Floor",
    "Ceil",
    "Round",
    "Trunc",
    "Recip",
    "IsNan",
    "IsInf",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Expm1",
    "ToDegrees",
    "ToRadians",
    "Exp2",
    "Exp10",
    "Log2",
    "Log10",
    "Erfc",
    "Lgamma",
    "Tgamma",
    "Neg",
    "Abs",
    "Bitnot",
    "CountOnes",
    "LeadingZeros",
    "ReverseBits",
    "TrailingZeros",
    "FindFirstSet",
    "Not",
    "Add",
    "Sub",
    "Mul",
    "Floordiv",
    "Mod",
    "Min",
    "Max",
    "Div",
    "Powf",
    "Atan2",
    "Hypot",
    "Rhypot",
    "Copysign",
    "Fmod",
    "Remainder",
    "Nextafter",
    "DivTrunc",
    "RemTrunc",
    "Bitand",
    "Bitor",
    "Bitxor",
    "Shl",
    "Shr",
    "MulHi",
    "And",
    "Or",
    "Powi",
    "Eq",
    "Ne",
    "Lt",
    "Le",
    "Gt",
    "Ge",
]
