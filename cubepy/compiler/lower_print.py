"""Lowering of ``debug_print``: a call to CUDA's ``vprintf(format, args)``.

The format is a private constant string in global memory, ``[cube (%u, %u, %u) unit (%u, %u, %u)] `` and
the instruction's canonical format (``cubepy.ir.printf``), ending with a newline.  The arguments are
packed into a local struct as C's variadic call would pass them: the six position registers as i32,
then each argument promoted (floats to f64, integers narrower than 32 bits and booleans to i32 by their
signedness), each at its natural alignment.  The interp prints the same text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.builtins import sreg
from cubepy.compiler.lower import lowers
from cubepy.ir import Instruction, Variable, printf
from cubepy.ir.ops import DebugPrint

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering

PREFIX = "[cube (%u, %u, %u) unit (%u, %u, %u)] "
POSITION_REGISTERS = ("ctaid.x", "ctaid.y", "ctaid.z", "tid.x", "tid.y", "tid.z")


def format_text(fmt: str) -> str:
    """The whole format ``vprintf`` gets for an instruction's canonical ``fmt``."""
    return PREFIX + fmt + ("" if fmt.endswith("\n") else "\n")


def _string_constant(lw: KernelLowering, text: str) -> ir.Value:
    """A pointer (generic address space) to a NUL-terminated copy of ``text`` in global memory."""
    data = bytearray(text.encode("utf-8") + b"\0")
    array = ir.ArrayType(lt.I8, len(data))
    gv = ir.GlobalVariable(lw.module, array, lw.module.get_unique_name("printf_format"), addrspace=1)
    gv.type = lt.GLOBAL_PTR  # opaque pointer, as for the other globals
    gv.linkage = "private"
    gv.global_constant = True
    gv.unnamed_addr = True
    gv.initializer = ir.Constant(array, data)
    gv.align = 1
    return lw.builder.addrspacecast(gv, lt.GENERIC_PTR)


def promoted_argument(lw: KernelLowering, var: Variable) -> ir.Value:
    """The value of ``var`` as C's variadic call passes it."""
    value = lw.value(var)
    elem = var.elem
    target = printf.promoted(elem)
    if elem.is_float:
        return value if elem == target else lw.builder.fpext(value, ir.DoubleType())
    if elem.is_bool:
        return lw.builder.zext(value, lt.I32)
    if elem.size < 4:
        extend = lw.builder.sext if elem.kind == "int" else lw.builder.zext
        return extend(value, lt.I32)
    return value


@lowers(DebugPrint)
def lower_debug_print(lw: KernelLowering, inst: Instruction) -> None:
    """``vprintf(format, &args)`` with the unit's position first."""
    op = cast(DebugPrint, inst.operation)
    b = lw.builder
    values = [sreg(lw, name) for name in POSITION_REGISTERS]
    values += [promoted_argument(lw, var) for var in op.args]
    struct = ir.LiteralStructType([value.type for value in values])
    args = lw.alloca(struct, lw.module.get_unique_name("printf_args"))
    for index, value in enumerate(values):
        slot = b.gep(args, [ir.Constant(lt.I32, 0), ir.Constant(lt.I32, index)], source_etype=struct)
        b.store(value, slot)
    vprintf = lw.declare("vprintf", lt.I32, [lt.GENERIC_PTR, lt.GENERIC_PTR])
    b.call(vprintf, [_string_constant(lw, format_text(op.format)), args])
