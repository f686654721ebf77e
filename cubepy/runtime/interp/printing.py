"""``debug_print`` on the interp: one line per active unit, in cube then unit order, to ``sys.stdout``.

Each line is ``[cube (x, y, z) unit (x, y, z)] `` and the format filled C's way (``cubepy.ir.printf``):
integers are read at their promoted width, signed for ``%d``/``%i`` and unsigned for ``%u``/``%o``/``%x``,
floats as f64.  The lines of one execution of the instruction come out together, cube by cube (x fastest),
and within a cube unit by unit (x fastest), when the instruction runs; a GPU prints the same lines in an
order of its own.  A line always ends with a newline (one is added when the format has none).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.ir import Instruction, printf
from cubepy.ir.ops import DebugPrint
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import Mask, numpy_dtype

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk


OP_FAMILIES = ("debug",)  # the IR op families handled here


def c_value(value: np.generic, conversion: printf.Conversion, bits: int) -> int | float | str:
    """What C's printf reads for ``conversion`` from an argument of ``bits`` bits holding ``value``."""
    if conversion.conv in printf.FLOAT_CONVERSIONS:
        return float(value)
    number = int(value) & ((1 << bits) - 1)  # the argument's bits
    if conversion.conv == "c":
        return chr(number & 0xFF)
    if conversion.conv in printf.UNSIGNED_CONVERSIONS or conversion.conv == "u":
        return number
    return number - (1 << bits) if number >> (bits - 1) else number  # %d, %i: read as signed


def convert(conversion: printf.Conversion, value: np.generic, bits: int) -> str:
    """The text C's printf writes for one conversion (Python's ``%`` does it, but for C's ``%#o``)."""
    argument = c_value(value, conversion, bits)
    letter = "d" if conversion.conv in ("i", "u") else conversion.conv
    if conversion.conv == "o" and "#" in conversion.spec:  # C: a leading 0; Python would write 0o
        spec = conversion.spec.replace("#", "")
        flags = spec[: len(spec) - len(spec.lstrip("-+ 0"))]
        width_text, _, precision = spec[len(flags) :].partition(".")
        digits = (f"%.{precision}o" % argument) if precision else f"{argument:o}"  # noqa: UP031
        digits = digits if digits.startswith("0") else "0" + digits
        width = int(width_text or 0)
        if "-" in flags:
            return digits.ljust(width)
        return digits.rjust(width, "0" if "0" in flags and not precision else " ")
    return f"%{conversion.spec}{letter}" % argument


def format_line(fmt: str, values: list[np.generic], bits: list[int]) -> str:
    """The text C's printf makes of canonical ``fmt`` and the promoted argument ``values`` (of ``bits`` each)."""
    parts, position, index = [], 0, 0
    for conversion in printf.conversions(fmt):
        parts.append(fmt[position : conversion.start])
        position = conversion.end
        if conversion.conv == "%":
            parts.append("%")
            continue
        parts.append(convert(conversion, values[index], bits[index]))
        index += 1
    parts.append(fmt[position:])
    return "".join(parts)


@implements(DebugPrint)
def run_debug_print(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Print the formatted line of every active unit, cube-major then unit, to ``sys.stdout``."""
    op = cast(DebugPrint, inst.operation)
    lanes = np.flatnonzero(mask.bits)
    columns = []
    bits = []
    for var in op.args:
        promoted = printf.promoted(var.elem)
        value = np.asarray(ctx.read(var))
        if value.dtype != numpy_dtype(var.elem):
            value = value.astype(numpy_dtype(var.elem))
        columns.append(np.broadcast_to(value, (ctx.lanes,)))
        bits.append(promoted.bits if not promoted.is_float else 64)
    topology = ctx.topology
    out = []
    for lane in lanes.tolist():
        text = format_line(op.format, [column[lane] for column in columns], bits)
        if not text.endswith("\n"):
            text += "\n"
        out.append(f"[cube {topology.cube_pos_of(lane)} unit {topology.unit_pos_of(lane)}] {text}")
    sys.stdout.write("".join(out))
