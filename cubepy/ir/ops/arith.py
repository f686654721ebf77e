"""Arithmetic, comparison, conversion and assignment operations.

Lane-wise families (unary, binary, compare) have one class per member (``Exp``, ``Add``, ``Lt``),
made by ``_unary``/``_binary``/``_compare`` below; each line declares the member's record.  ``div``
is true division (floats only); ``floordiv``/``mod`` follow Python (floor, sign of divisor);
``div_trunc``/``rem_trunc`` follow C (integers only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import numpy as np

from cubepy.ir import numerics
from cubepy.ir import semantics as S
from cubepy.ir.ops.base import Operation, elem_of, same_as
from cubepy.ir.ops.lanewise import Fn, Rounding, Semantics
from cubepy.ir.ops.record import GIVEN, Check, Checker, ElemKind, OpRecord, ResultRule, declare, derive
from cubepy.ir.types import BOOL, F64, U32
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


def _semantics(kind: ElemKind, fn: Fn | Semantics) -> Semantics:
    """``fn`` for every element kind ``kind`` admits (a ready ``Semantics`` as is)."""
    if isinstance(fn, Semantics):
        return fn
    return Semantics(
        on_float=fn if kind in ("float", "number") else None,
        on_int=fn if kind in ("int", "number") else None,
        on_bool=fn if kind == "bool" else None,
    )


def _unary(
    name: str,
    kind: ElemKind,
    doc: str,
    fn: Fn | Semantics,
    result: ResultRule | None = None,
    *,
    math: str = "",
    foldable: bool = False,
) -> type[Unary]:
    """A unary member; ``math``: its libdevice and C library function (``__nv_<math>f`` / ``<math>f`` ...)."""
    record = OpRecord(
        name,
        "arith",
        result=result or same_as("input"),
        operand_kind=kind,
        kind_of=("input",),
        pure=True,
        foldable=foldable,
        doc=doc,
        semantics=_semantics(kind, fn),
        libdevice=math,
        c_library=math,
    )
    cls = derive(Unary, _class_name(name), record, __name__)
    assert issubclass(cls, Unary)
    return cls


def _binary(
    name: str,
    kind: ElemKind,
    doc: str,
    fn: Fn | Semantics,
    *,
    foldable: bool = True,
    math: str = "",
    c_library: str | None = None,
    checks: tuple[Check, ...] = (),
) -> type[Binary]:
    """A binary member; ``math`` as for ``_unary`` (``c_library=""``: the host target composes it)."""
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
        semantics=_semantics(kind, fn),
        libdevice=math,
        c_library=math if c_library is None else c_library,
    )
    cls = derive(Binary, _class_name(name), record, __name__)
    assert issubclass(cls, Binary)
    return cls


def _compare(name: str, doc: str, fn: Fn) -> type[Compare]:
    semantics = Semantics(S.halves_in_f32(fn), fn, fn, rounding="own")
    record = OpRecord(
        name,
        "arith",
        result=elem_of("lhs", BOOL),
        pure=True,
        foldable=True,
        checks=(_same_operands,),
        doc=doc,
        semantics=semantics,
    )
    cls = derive(Compare, _class_name(name), record, __name__)
    assert issubclass(cls, Compare)
    return cls


def _same_operands(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Compare)
    c.same_type(inst, "right operand", op.rhs.type, op.lhs.type)


_TO_BOOL = elem_of("input", BOOL)
_TO_U32 = elem_of("input", U32)
# The float function rounds its own result (computed in f64, or exact in the operands' own type).
_OWN: Rounding = "own"


def _own(fn: Fn) -> Semantics:
    return Semantics(on_float=fn, rounding=_OWN)


# -- unary -------------------------------------------------------------------------------------------
# Float math: the numpy function (computed in the type, f32 for f16/bf16, rounded once) and libdevice's.
Exp = _unary("exp", "float", "e raised to x.", np.exp, math="exp")
Log = _unary("log", "float", "The natural logarithm of x.", np.log, math="log")
Log1p = _unary("log1p", "float", "log(1 + x), accurate for small x.", np.log1p, math="log1p")
Sqrt = _unary("sqrt", "float", "The square root of x.", np.sqrt, foldable=True)
Rsqrt = _unary("rsqrt", "float", "1 / sqrt(x).", S.rsqrt)
Cbrt = _unary("cbrt", "float", "The cube root of x.", numerics.cbrt, math="cbrt")
Sin = _unary("sin", "float", "The sine of x (radians).", np.sin, math="sin")
Cos = _unary("cos", "float", "The cosine of x (radians).", np.cos, math="cos")
Tan = _unary("tan", "float", "The tangent of x (radians).", np.tan, math="tan")
Tanh = _unary("tanh", "float", "The hyperbolic tangent of x.", np.tanh, math="tanh")
Erf = _unary("erf", "float", "The error function of x.", _own(S.erf), math="erf")
Floor = _unary("floor", "float", "The largest integer value not above x.", np.floor, foldable=True)
Ceil = _unary("ceil", "float", "The smallest integer value not below x.", np.ceil, foldable=True)
Round = _unary("round", "float", "x rounded to the nearest integer value, ties to even.", np.rint, foldable=True)
Trunc = _unary("trunc", "float", "x rounded toward zero.", np.trunc, foldable=True)
Recip = _unary("recip", "float", "1 / x.", np.reciprocal, foldable=True)


def _wide_reciprocal(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.asarray(x, np.float64))


# The reciprocal the shared_reciprocal pass (cubepy.ir.reciprocal) multiplies f32 dividends by: for an f16, bf16 or
# f32 x (never an f64 subnormal, nor past f32's range) the GPU computes it as rcp.approx.ftz.f64 refined by two
# Newton steps, within 1.13 * 2^-53 of 1/x (exact for zeros, infinities and NaN); the interp and the cpu runtime
# divide, correctly rounded.  Either way x * it rounds to the f32 that x / divisor gives.  An f64 x: 1 / x exactly.
WideRecip = _unary(
    "wide_recip",
    "float",
    "1 / x in f64, within 1.13 * 2^-53 of it (correctly rounded off the GPU, and for an f64 x).",
    _own(_wide_reciprocal),
    elem_of("input", F64),
)
IsNan = _unary("is_nan", "float", "Whether x is NaN.", _own(S.is_nan), _TO_BOOL, foldable=True)
IsInf = _unary("is_inf", "float", "Whether x is infinite.", _own(S.is_inf), _TO_BOOL, foldable=True)
Asin = _unary("asin", "float", "The arcsine of x (radians).", np.arcsin, math="asin")
Acos = _unary("acos", "float", "The arccosine of x (radians).", np.arccos, math="acos")
Atan = _unary("atan", "float", "The arctangent of x (radians).", np.arctan, math="atan")
Sinh = _unary("sinh", "float", "The hyperbolic sine of x.", np.sinh, math="sinh")
Cosh = _unary("cosh", "float", "The hyperbolic cosine of x.", np.cosh, math="cosh")
Asinh = _unary("asinh", "float", "The inverse hyperbolic sine of x.", np.arcsinh, math="asinh")
Acosh = _unary("acosh", "float", "The inverse hyperbolic cosine of x.", np.arccosh, math="acosh")
Atanh = _unary("atanh", "float", "The inverse hyperbolic tangent of x.", np.arctanh, math="atanh")
Expm1 = _unary("expm1", "float", "exp(x) - 1, accurate for small x.", np.expm1, math="expm1")
ToDegrees = _unary("to_degrees", "float", "x (radians) converted to degrees.", np.degrees)
ToRadians = _unary("to_radians", "float", "x (degrees) converted to radians.", np.radians)
Exp2 = _unary("exp2", "float", "2 raised to x.", np.exp2, math="exp2")
Exp10 = _unary("exp10", "float", "10 raised to x.", S.exp10, math="exp10")
Log2 = _unary("log2", "float", "The base-2 logarithm of x.", np.log2, math="log2")
Log10 = _unary("log10", "float", "The base-10 logarithm of x.", np.log10, math="log10")
Erfc = _unary("erfc", "float", "1 - erf(x), accurate where erf(x) is near 1.", _own(S.erfc), math="erfc")
Lgamma = _unary(
    "lgamma",
    "float",
    "The natural logarithm of |gamma(x)| (+inf at the poles 0, -1, -2, ...).",
    _own(S.lgamma),
    math="lgamma",
)
Tgamma = _unary(
    "tgamma",
    "float",
    "The gamma function of x (+-inf at +-0, NaN at the negative integers).",
    _own(S.tgamma),
    math="tgamma",
)
Neg = _unary("neg", "number", "-x.", np.negative, foldable=True)
Abs = _unary("abs", "number", "|x|.", np.abs, foldable=True)
Bitnot = _unary("bitnot", "int", "~x (every bit flipped).", np.invert, foldable=True)
CountOnes = _unary(
    "count_ones", "int", "The number of set bits of x, as u32.", numerics.count_ones, _TO_U32, foldable=True
)
LeadingZeros = _unary(
    "leading_zeros",
    "int",
    "The number of leading zero bits of x, as u32.",
    numerics.leading_zeros,
    _TO_U32,
    foldable=True,
)
ReverseBits = _unary("reverse_bits", "int", "The bits of x in reverse order.", numerics.reverse_bits, foldable=True)
TrailingZeros = _unary(
    "trailing_zeros",
    "int",
    "The number of trailing zero bits of x (its width for 0), as u32.",
    numerics.trailing_zeros,
    _TO_U32,
    foldable=True,
)
FindFirstSet = _unary(
    "find_first_set",
    "int",
    "The 1-based position of the lowest set bit of x (0 for 0), as u32.",
    numerics.find_first_set,
    _TO_U32,
    foldable=True,
)
Not = _unary("not", "bool", "Logical not.", np.logical_not, foldable=True)

# -- binary ------------------------------------------------------------------------------------------
_MIN = Semantics.numbers(np.fmin, np.minimum)  # floats: the non-NaN operand
_MAX = Semantics.numbers(np.fmax, np.maximum)
Add = _binary("add", "number", "lhs + rhs (integers wrap).", np.add)
Sub = _binary("sub", "number", "lhs - rhs (integers wrap).", np.subtract)
Mul = _binary("mul", "number", "lhs * rhs (integers wrap).", np.multiply)
Floordiv = _binary(
    "floordiv",
    "number",
    "Floor division (Python's //); an integer zero divisor gives all ones.",
    Semantics.numbers(np.floor_divide, numerics.int_floordiv),
)
Mod = _binary(
    "mod",
    "number",
    "Remainder with the divisor's sign (Python's %); a zero divisor gives the dividend.",
    Semantics.numbers(np.remainder, numerics.int_mod),
)
Min = _binary("min", "number", "The smaller operand (floats: the non-NaN one).", _MIN)
Max = _binary("max", "number", "The larger operand (floats: the non-NaN one).", _MAX)
Div = _binary("div", "float", "True division.", np.true_divide)
Powf = _binary("powf", "float", "lhs raised to a float power.", np.power, foldable=False, math="pow")
Atan2 = _binary(
    "atan2", "float", "The angle of the point (rhs, lhs) (radians).", np.arctan2, foldable=False, math="atan2"
)
Hypot = _binary(
    "hypot", "float", "sqrt(lhs**2 + rhs**2) without undue overflow.", np.hypot, foldable=False, math="hypot"
)
Rhypot = _binary("rhypot", "float", "1 / hypot(lhs, rhs).", S.rhypot, foldable=False, math="rhypot", c_library="")
Copysign = _binary("copysign", "float", "The magnitude of lhs with the sign bit of rhs.", np.copysign, math="copysign")
Fmod = _binary(
    "fmod",
    "float",
    "C's fmod: lhs - n * rhs with n = trunc(lhs / rhs), exact; the sign of lhs.",
    np.fmod,
    math="fmod",
)
Remainder = _binary(
    "remainder",
    "float",
    "IEEE remainder: lhs - n * rhs with n = lhs / rhs rounded to even, exact.",
    S.remainder,
    math="remainder",
)
# Computed in the operands' own type: one ulp of f16 is not one ulp of f32.
Nextafter = _binary(
    "nextafter",
    "float",
    "The next representable value of the type after lhs toward rhs.",
    _own(S.nextafter),
    math="nextafter",
)
DivTrunc = _binary("div_trunc", "int", "Division truncating toward zero (C's /).", numerics.int_div_trunc)
RemTrunc = _binary("rem_trunc", "int", "Remainder with the dividend's sign (C's %).", numerics.int_rem_trunc)
Bitand = _binary("bitand", "int", "Bitwise and.", np.bitwise_and)
Bitor = _binary("bitor", "int", "Bitwise or.", np.bitwise_or)
Bitxor = _binary("bitxor", "int", "Bitwise exclusive or.", np.bitwise_xor)
Shl = _binary("shl", "int", "Shift left; an amount at or above the width gives 0.", numerics.shift_left)
Shr = _binary(
    "shr",
    "int",
    "Shift right (arithmetic for signed types); an amount at or above the width gives 0 or the sign fill.",
    numerics.shift_right,
)
MulHi = _binary("mul_hi", "int", "The high half of the double-width product.", numerics.mul_hi)
And = _binary("and", "bool", "Logical and.", np.logical_and)
Or = _binary("or", "bool", "Logical or.", np.logical_or)


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
        semantics=_own(S.powi),
        libdevice="powi",  # the C library has none: the host target uses pow
    ),
    __name__,
)

# -- compare -----------------------------------------------------------------------------------------
Eq = _compare("eq", "lhs == rhs.", np.equal)
Ne = _compare("ne", "lhs != rhs (NaN is unequal to everything).", np.not_equal)
Lt = _compare("lt", "lhs < rhs.", np.less)
Le = _compare("le", "lhs <= rhs.", np.less_equal)
Gt = _compare("gt", "lhs > rhs.", np.greater)
Ge = _compare("ge", "lhs >= rhs.", np.greater_equal)

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
        foldable=True,
        doc=_FMA_DOC,
        semantics=_own(S.fma),
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
        foldable=True,
        doc="min(max(input, lo), hi).",
        semantics=Semantics.numbers(S.clamp_float, S.clamp_int),
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
        semantics=Semantics(on_bool=np.where, rounding=_OWN),
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
        semantics=Semantics(S.cast, S.cast, S.cast, rounding=_OWN, result_dtype=True),
    )
)
@attrs.frozen(repr=False)
class Cast(Operation):
    """out = input converted to out's element type; a scalar input is broadcast to out's line."""

    input: Variable


@declare(
    OpRecord(
        "bitcast",
        "arith",
        result=GIVEN,
        pure=True,
        checks=(_check_bitcast,),
        doc="The bits of input reinterpreted.",
        no_semantics="reinterprets the bytes of a whole line, whose line size may change: not lane-wise",
    )
)
@attrs.frozen(repr=False)
class Bitcast(Operation):
    """out = the bits of input reinterpreted as out's type (same total size)."""

    input: Variable


@declare(
    OpRecord(
        "assign",
        "arith",
        result=same_as("input"),
        pure=True,
        doc="out = input.",
        no_semantics="the identity; fold_constants substitutes a literal input directly",
    )
)
@attrs.frozen(repr=False)
class Assign(Operation):
    """out = input; out is a mutable local (or a fresh immutable one)."""

    input: Variable


__all__ = ["BINARY_OPS", "COMPARE_OPS", "UNARY_OPS", "Assign", "Binary", "Bitcast", "Cast", "Clamp", "Compare"]
__all__ += ["Fma", "Select", "Unary", "Exp", "Log", "Log1p", "Sqrt", "Rsqrt", "Cbrt", "Sin", "Cos", "Tan", "Tanh"]
__all__ += [
    "Erf",
    "Floor",
    "Ceil",
    "Round",
    "Trunc",
    "Recip",
    "WideRecip",
    "IsNan",
    "IsInf",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
]
__all__ += ["Cosh", "Asinh", "Acosh", "Atanh", "Expm1", "ToDegrees", "ToRadians", "Exp2", "Exp10", "Log2", "Log10"]
__all__ += ["Erfc", "Lgamma", "Tgamma", "Neg", "Abs", "Bitnot", "CountOnes", "LeadingZeros", "ReverseBits"]
__all__ += ["TrailingZeros", "FindFirstSet", "Not", "Add", "Sub", "Mul", "Floordiv", "Mod", "Min", "Max", "Div"]
__all__ += ["Powf", "Atan2", "Hypot", "Rhypot", "Copysign", "Fmod", "Remainder", "Nextafter", "DivTrunc"]
__all__ += ["RemTrunc", "Bitand", "Bitor", "Bitxor", "Shl", "Shr", "MulHi", "And", "Or", "Powi", "Eq", "Ne", "Lt"]
__all__ += ["Le", "Gt", "Ge"]
