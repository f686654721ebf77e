"""Cooperative matrix (tensor core) operations on 16x16x16 fragments, with their verifier rules.

A fragment is a LOCAL_ARRAY variable: the registers one unit holds of a matrix that the 32 units of a
plane hold together (how the elements are spread over units is the back end's business; programs only
touch fragments through these operations).  ``ident`` says which operand it is: ``"a"`` (m x k),
``"b"`` (k x n) or ``"accumulator"`` (m x n); ``layout`` is how memory holds the matrix: ``"row"``
(``m[i][j]`` at ``offset + i*stride + j``) or ``"col"`` (``offset + j*stride + i``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.types import BF16, F16, F32, U32, ElemType, Type
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

__all__ = [
    "CMMA_RULES",
    "CMMA_SHAPE",
    "CmmaCast",
    "CmmaExecute",
    "CmmaFill",
    "CmmaLoad",
    "CmmaStore",
    "fragment_length",
]

CMMA_SHAPE = (16, 16, 16)
IDENTS = ("a", "b", "accumulator")
LAYOUTS = ("row", "col")
INPUT_ELEMS = (F16, BF16)
ACCUMULATOR_ELEMS = (F32, F16)
# Rules this family adds to the verifier.
CMMA_RULES = ("not-fragment", "cmma-type", "cmma-layout")


def fragment_length(ident: str, elem: ElemType) -> int:
    """Elements one unit holds of a 16x16x16 fragment: what ``wmma`` keeps in registers."""
    if ident == "accumulator":
        return 8
    return 16 if elem == F16 else 8  # f16: 8 x f16x2 registers; bf16: 4 x b32 registers


@attrs.frozen(repr=False)
class CmmaFill(Operation):
    """Set every element of ``fragment`` to ``value``."""

    fragment: Variable
    value: Variable
    ident: str = "accumulator"


@attrs.frozen(repr=False)
class CmmaLoad(Operation):
    """Load ``fragment`` from ``memory[offset..]`` (items ``stride`` apart between rows/columns)."""

    fragment: Variable
    memory: Variable
    offset: Variable
    stride: Variable
    ident: str = "a"
    layout: str = "row"


@attrs.frozen(repr=False)
class CmmaExecute(Operation):
    """``d = a @ b + c`` for the plane (all its units take part)."""

    a: Variable
    b: Variable
    c: Variable
    d: Variable
    a_layout: str = "row"
    b_layout: str = "row"


@attrs.frozen(repr=False)
class CmmaStore(Operation):
    """Store the accumulator ``fragment`` to ``memory[offset..]``."""

    memory: Variable
    offset: Variable
    fragment: Variable
    stride: Variable
    layout: str = "row"


@attrs.frozen(repr=False)
class CmmaCast(Operation):
    """``output = input`` converted element by element (accumulator fragments)."""

    input: Variable
    output: Variable


def _fragment(c: Checker, inst: Instruction, var: Variable, ident: str) -> None:
    if var.kind is not VarKind.LOCAL_ARRAY:
        c.fail("not-fragment", inst, f"{var!r} is a {var.kind.value}, expected a cmma fragment")
    elems = ACCUMULATOR_ELEMS if ident == "accumulator" else INPUT_ELEMS
    if var.elem not in elems:
        c.fail("cmma-type", inst, f"a {ident} fragment of {var.elem!r}; expected one of {elems}")
    if var.length != fragment_length(ident, var.elem):
        c.fail(
            "not-fragment",
            inst,
            f"{var!r} holds {var.length} items, a {ident} fragment of {var.elem!r} "
            f"holds {fragment_length(ident, var.elem)}",
        )


def _layout(c: Checker, inst: Instruction, layout: str) -> None:
    if layout not in LAYOUTS:
        c.fail("cmma-layout", inst, f"layout {layout!r}; expected one of {LAYOUTS}")


def _no_out(c: Checker, inst: Instruction) -> None:
    if inst.out is not None:
        c.fail("bad-out", inst, f"{inst.op} has no result, got {inst.out!r}")


def _memory(c: Checker, inst: Instruction, var: Variable, fragment: Variable) -> None:
    if var.kind not in (VarKind.SHARED, VarKind.GLOBAL):
        c.fail("not-fragment", inst, f"cmma memory {var!r} must be shared or global memory")
    if var.elem != fragment.elem or var.type.line != 1:
        c.fail("cmma-type", inst, f"memory of {var.type!r} with a fragment of {fragment.elem!r}")


def _check_fill(c: Checker, inst: Instruction, op: CmmaFill) -> None:
    _no_out(c, inst)
    if op.ident not in IDENTS:
        c.fail("not-fragment", inst, f"ident {op.ident!r}; expected one of {IDENTS}")
    _fragment(c, inst, op.fragment, op.ident)
    if op.value.type != Type(op.fragment.elem):
        c.fail("cmma-type", inst, f"fill value {op.value!r} for a fragment of {op.fragment.elem!r}")


def _check_load(c: Checker, inst: Instruction, op: CmmaLoad) -> None:
    _no_out(c, inst)
    if op.ident not in IDENTS:
        c.fail("not-fragment", inst, f"ident {op.ident!r}; expected one of {IDENTS}")
    _fragment(c, inst, op.fragment, op.ident)
    _memory(c, inst, op.memory, op.fragment)
    _layout(c, inst, op.layout)
    c.int_scalar(inst, "offset", op.offset)
    if op.stride.type != Type(U32):
        c.fail("cmma-type", inst, f"stride {op.stride!r} must be u32")


def _check_execute(c: Checker, inst: Instruction, op: CmmaExecute) -> None:
    _no_out(c, inst)
    _fragment(c, inst, op.a, "a")
    _fragment(c, inst, op.b, "b")
    _fragment(c, inst, op.c, "accumulator")
    _fragment(c, inst, op.d, "accumulator")
    if op.a.elem != op.b.elem or op.c.elem != F32 or op.d.elem != F32:
        c.fail(
            "cmma-type",
            inst,
            f"execute takes a, b of one input type and f32 accumulators, got "
            f"{op.a.elem!r}, {op.b.elem!r}, {op.c.elem!r}, {op.d.elem!r}",
        )
    _layout(c, inst, op.a_layout)
    _layout(c, inst, op.b_layout)


def _check_store(c: Checker, inst: Instruction, op: CmmaStore) -> None:
    _no_out(c, inst)
    _fragment(c, inst, op.fragment, "accumulator")
    _memory(c, inst, op.memory, op.fragment)
    _layout(c, inst, op.layout)
    c.int_scalar(inst, "offset", op.offset)
    if op.stride.type != Type(U32):
        c.fail("cmma-type", inst, f"stride {op.stride!r} must be u32")


def _check_cast(c: Checker, inst: Instruction, op: CmmaCast) -> None:
    _no_out(c, inst)
    _fragment(c, inst, op.input, "accumulator")
    _fragment(c, inst, op.output, "accumulator")


for _cls, _record in (
    (CmmaFill, OpRecord("cmma_fill", "cmma", writes=("fragment",), checks=(_check_fill,))),
    (CmmaLoad, OpRecord("cmma_load", "cmma", reads=("memory",), writes=("fragment",), checks=(_check_load,))),
    (CmmaExecute, OpRecord("cmma_execute", "cmma", writes=("d",), checks=(_check_execute,))),
    (CmmaStore, OpRecord("cmma_store", "cmma", writes=("memory",), checks=(_check_store,))),
    (CmmaCast, OpRecord("cmma_cast", "cmma", writes=("output",), checks=(_check_cast,))),
):
    declare(_record)(_cls)
