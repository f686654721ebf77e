"""Debugging operations: ``debug_print``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir import printf
from cubepy.ir.ops.base import Operation
from cubepy.ir.variable import Variable

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction
    from cubepy.ir.verifier import _Checker


@attrs.frozen
class DebugPrint(Operation):
    """Every unit that runs it prints one line: ``format`` (canonical printf, see ``cubepy.ir.printf``) filled
    with ``args``, prefixed with its cube and unit positions.  No result; never removed as dead code."""

    NAME = "debug_print"
    format: str
    args: tuple[Variable, ...] = ()

    def attributes(self) -> dict[str, object]:
        """The format, quoted (it may hold newlines and spaces)."""
        return {"format": repr(self.format)}


def _check(checker: _Checker, inst: Instruction, op: DebugPrint) -> None:
    if inst.out is not None:
        checker.fail("no-result", inst, "debug_print has no result")
    used = [c for c in printf.conversions(op.format) if c.conv != "%"]
    if len(used) != len(op.args):
        checker.fail(
            "debug-print-arity", inst, f"the format has {len(used)} conversion(s) for {len(op.args)} argument(s)"
        )
    for conversion, var in zip(used, op.args):
        elem = var.elem
        if var.type.line != 1:
            checker.fail("debug-print-type", inst, f"{var!r} is a line; debug_print takes scalars")
        wants_float = conversion.conv in printf.FLOAT_CONVERSIONS
        if conversion.conv not in printf.FLOAT_CONVERSIONS | printf.INT_CONVERSIONS or wants_float != elem.is_float:
            checker.fail(
                "debug-print-type", inst, f"conversion %{conversion.spec}{conversion.conv} does not print a {elem.name}"
            )
        expected = "ll" if not elem.is_float and printf.promoted(elem).size == 8 else ""
        if conversion.length != expected:
            checker.fail(
                "debug-print-type",
                inst,
                f"conversion %{conversion.spec}{conversion.length}"
                f"{conversion.conv} of a {elem.name} needs the length modifier {expected!r}",
            )


def _register() -> None:
    from cubepy.ir.verifier import register_check

    register_check(DebugPrint, _check)


_register()
