"""Debugging operations: ``debug_print``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir import printf
from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.variable import Variable

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

__all__ = ["DebugPrint"]


def _check_format(c: Checker, inst: Instruction, op: Operation) -> None:
    """One canonical conversion per argument, of the argument's kind and with its length modifier."""
    assert isinstance(op, DebugPrint)
    if inst.out is not None:
        c.fail("bad-out", inst, f"debug_print has no result, got {inst.out!r}")
    used = [conversion for conversion in printf.conversions(op.format) if conversion.conv != "%"]
    if len(used) != len(op.args):
        c.fail("debug-print-arity", inst, f"the format has {len(used)} conversion(s) for {len(op.args)} argument(s)")
    for conversion, var in zip(used, op.args):
        elem = var.elem
        if var.type.line != 1:
            c.fail("debug-print-type", inst, f"{var!r} is a line; debug_print takes scalars")
        wants_float = conversion.conv in printf.FLOAT_CONVERSIONS
        if conversion.conv not in printf.FLOAT_CONVERSIONS | printf.INT_CONVERSIONS or wants_float != elem.is_float:
            c.fail(
                "debug-print-type", inst, f"conversion %{conversion.spec}{conversion.conv} does not print a {elem.name}"
            )
        expected = "ll" if not elem.is_float and printf.promoted(elem).size == 8 else ""
        if conversion.length != expected:
            c.fail(
                "debug-print-type",
                inst,
                f"conversion %{conversion.spec}{conversion.length}{conversion.conv} of a {elem.name} needs the "
                f"length modifier {expected!r}",
            )


@declare(OpRecord("debug_print", "debug", checks=(_check_format,), doc="Print one line per unit that runs it."))
@attrs.frozen(repr=False)
class DebugPrint(Operation):
    """Every unit that runs it prints one line: ``format`` (canonical printf, see ``cubepy.ir.printf``) filled
    with ``args``, prefixed with its cube and unit positions.  No result; never removed as dead code."""

    format: str
    args: tuple[Variable, ...] = ()

    def attributes(self) -> dict[str, object]:
        """The format, quoted (it may hold newlines and spaces)."""
        return {"format": repr(self.format)}
