"""The format strings of ``debug_print``: C printf conversions, canonical for the argument types.

A ``debug_print`` instruction holds a format in *canonical* form: every conversion is
``%[flags][width][.precision][ll]C`` with ``C`` one of ``d i u o x X c e E f F g G`` and ``ll`` exactly
when its argument is a 64-bit integer; ``%%`` is a literal percent.  Arguments are passed with C's
variadic promotions (``promoted``): floats as f64, integers narrower than 32 bits and booleans as a
32-bit integer of their signedness.  Both back ends print the same text from it: the interp with
Python's ``%`` operator on the promoted values, the GPU through ``vprintf``.
"""

from __future__ import annotations

import re

import attrs

from cubepy.ir.types import F64, I32, U32, ElemType

# %[flags][width][.precision][length]conversion; `*` widths are not supported (they take an argument).
SPEC = re.compile(
    r"%(?P<flags>[-+ #0]*)(?P<width>\d+)?(?:\.(?P<precision>\d*))?"
    r"(?P<length>hh|h|ll|l|j|z|t|L|q)?(?P<conv>[diouxXeEfFgGcsaAp%*])?"
)
INT_CONVERSIONS = frozenset("diouxXc")
FLOAT_CONVERSIONS = frozenset("eEfFgG")
UNSIGNED_CONVERSIONS = frozenset("ouxX")  # the argument's bits read as unsigned (C's conversion)


@attrs.frozen
class Conversion:
    """One ``%`` conversion of a format: where it is, its flags/width/precision text and its letter."""

    start: int
    end: int
    spec: str  # flags, width and precision, as written ("-08.3")
    length: str  # the length modifier as written ("" when none)
    conv: str  # the conversion letter; "%" for a literal percent


def conversions(text: str) -> list[Conversion]:
    """Every ``%`` conversion of ``text``, in order (``%%`` included, with ``conv == "%"``).

    A ``%`` that does not start a valid conversion gives ``conv == ""`` (the caller reports it).
    """
    found = []
    for match in SPEC.finditer(text):
        spec = (match["flags"] or "") + (match["width"] or "")
        if match["precision"] is not None:
            spec += "." + match["precision"]
        found.append(Conversion(match.start(), match.end(), spec, match["length"] or "", match["conv"] or ""))
    return found


def promoted(elem: ElemType) -> ElemType:
    """The type C's variadic call passes a value of ``elem`` as: f64 for floats, 32 bits or more for integers."""
    if elem.is_float:
        return F64
    if elem.is_bool:
        return I32
    if elem.size < 4:
        return I32 if elem.kind == "int" else U32
    return elem


def canonical_conversion(conversion: Conversion, elem: ElemType) -> str:
    """The canonical text of ``conversion`` for an argument of ``elem`` (its length modifier set by type)."""
    length = "ll" if promoted(elem).size == 8 and not elem.is_float else ""
    return f"%{conversion.spec}{length}{conversion.conv}"


def escape(text: str) -> str:
    """``text`` as literal format text (``%`` doubled)."""
    return text.replace("%", "%%")
