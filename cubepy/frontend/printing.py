"""Printing from kernels: ``cp.debug_print(fmt, *values)`` and ``print(...)`` inside a cube function.

Both emit one ``debug_print`` instruction: every unit that runs it prints one line, prefixed with its cube
and unit positions (``[cube (0, 0, 0) unit (3, 0, 0)] x = 7``).  The format is C's printf with
``%d %i %u %o %x %X %c`` for integers, ``%e %f %g`` (and upper-case forms) for floats, flags, widths
and precisions; length modifiers (``%ld``, ``%lld``) are accepted and ignored, since the argument's type
decides.  ``%s`` prints a comptime value's text (a runtime value with the default conversion of its
type), ``%%`` a percent sign.  The format must be a comptime ``str``; the checks are done at expansion.

``print(a, b, sep=..., end=...)`` prints each comptime argument's text and each runtime value with its
type's default conversion (``%d`` signed, ``%u`` unsigned, ``%g`` float; a bool prints 0 or 1).  To print
while *expanding* (once, at trace time), call ``builtins.print``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, cast

from cubepy import ir
from cubepy.frontend import operations, source
from cubepy.frontend.mutability import check_bound
from cubepy.frontend.state import current_scope
from cubepy.frontend.values import ExpandBase, ExpandElement
from cubepy.ir import printf
from cubepy.ir.ops import DebugPrint

_PRINT_KEYWORDS = frozenset({"sep", "end", "file", "flush"})


def debug_print(fmt: str, *values: object) -> None:
    """Print ``fmt % values`` (C printf conversions) from every unit that runs it, one line each."""
    for value in values:
        check_bound(value)
    if not isinstance(fmt, str):
        source.fail(f"cp.debug_print: the format must be a comptime str, got {_describe(fmt)}")
    text, args = _format(fmt, values)
    _emit(text, args)


def kernel_print(print_fn: Callable[..., Any], *args: object, **keywords: object) -> Any:
    """``print(...)`` in a cube function: a device print (the user's own ``print`` is called as is)."""
    if print_fn is not builtins.print:
        return print_fn(*args, **keywords)
    unknown = set(keywords) - _PRINT_KEYWORDS
    if unknown:
        source.fail(f"print() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    if keywords.get("file") is not None:
        source.fail("print(file=...) is not supported in a kernel: device prints go to the standard output")
    texts = {}
    for name, default in (("sep", " "), ("end", "\n")):
        value = keywords.get(name, default)
        if value is not None and not isinstance(value, str):
            source.fail(f"print({name}=...) must be a comptime str or None in a kernel, got {_describe(value)}")
        texts[name] = default if value is None else value
    parts, elements = [], []
    for arg in args:
        check_bound(arg)
        if isinstance(arg, ExpandBase):
            element = _printable(arg, "print()")
            parts.append(_default_conversion(element.elem))
            elements.append(element)
        else:
            parts.append(printf.escape(str(arg)))
    text = printf.escape(texts["sep"]).join(parts) + printf.escape(texts["end"])
    _emit(text, elements)
    return None


def _format(fmt: str, values: tuple[object, ...]) -> tuple[str, list[ExpandElement]]:
    """The canonical format and the argument elements for ``fmt`` and ``values`` (ExpandError on a mismatch)."""
    out, args, position, remaining = [], [], 0, list(values)
    for conversion in printf.conversions(fmt):
        out.append(fmt[position : conversion.start])
        position = conversion.end
        written = fmt[conversion.start : conversion.end]
        if conversion.conv == "%":
            out.append("%%")
            continue
        if conversion.conv in ("", "*", "a", "A", "p"):
            what = {"": "is not a conversion", "*": "takes its width from an argument", "p": "prints a pointer"}.get(
                conversion.conv, "is a hexadecimal float"
            )
            source.fail(
                f"cp.debug_print: {written!r} at position {conversion.start} of {fmt!r} {what}, which a kernel "
                "cannot print; use %d %i %u %o %x %X %c, %e %f %g, %s, or %% for a percent sign"
            )
        if not remaining:
            source.fail(f"cp.debug_print: {fmt!r} has more conversions than the {len(values)} value(s) given")
        value = remaining.pop(0)
        if conversion.conv == "s":
            if not isinstance(value, ExpandBase):
                out.append(printf.escape(str(value)))
                continue
            element = _printable(value, "cp.debug_print")
            letter = _default_conversion(element.elem)[-1]
            conversion = printf.Conversion(conversion.start, conversion.end, conversion.spec, "", letter)
        else:
            element = _typed_argument(value, conversion, written)
        out.append(printf.canonical_conversion(conversion, element.elem))
        args.append(element)
    out.append(fmt[position:])
    if remaining:
        source.fail(
            f"cp.debug_print: {fmt!r} has {len(values) - len(remaining)} conversion(s) for {len(values)} "
            "values; add a conversion for each value"
        )
    return "".join(out), args


def _typed_argument(value: object, conversion: printf.Conversion, written: str) -> ExpandElement:
    """The element printed by an integer or float conversion, checked against the conversion's kind."""
    wants_float = conversion.conv in printf.FLOAT_CONVERSIONS
    if isinstance(value, ExpandBase):
        element = _printable(value, "cp.debug_print")
    elif operations.is_number(value):
        if wants_float and not isinstance(value, float):
            value = float(cast(float, value))  # a Python number: print it the way the format asks
        element = operations.as_element(value)
    else:
        source.fail(f"cp.debug_print: {written!r} needs a number, got {_describe(value)}; use %s for its text")
    if wants_float and not element.elem.is_float:
        source.fail(
            f"cp.debug_print: {written!r} needs a float, got a {element.elem.name}; cast it (f32(x)) or use "
            "%d/%u for an integer"
        )
    if not wants_float and element.elem.is_float:
        source.fail(
            f"cp.debug_print: {written!r} needs an integer, got a {element.elem.name}; use %f/%g for a "
            "float, or cast it (i32(x))"
        )
    return element


def _printable(value: ExpandBase, what: str) -> ExpandElement:
    element = operations.as_element(value, what)
    if element.type.line > 1:
        source.fail(
            f"{what}: a line of {element.type.line} cannot be printed as one value; print its lanes (v[0], v[1], ...)"
        )
    return element


def _default_conversion(elem: ir.ElemType) -> str:
    """The conversion ``print`` uses for a runtime value of ``elem``."""
    if elem.is_float:
        return "%g"
    if elem.kind == "uint":
        return "%llu" if elem.size == 8 else "%u"
    return "%lld" if elem.size == 8 else "%d"


def _describe(value: object) -> str:
    if isinstance(value, ExpandElement):
        return f"a runtime {value.type!r}"
    return f"a {type(value).__name__}"


def _emit(text: str, args: list[ExpandElement]) -> None:
    current_scope().append(DebugPrint(text, tuple(element.var for element in args)))
