"""Warp-level matrix operations with per-unit register fragments: ``mma.sync``, ``ldmatrix``, ``stmatrix``.

Unlike ``cmma`` (whose fragments are opaque), a fragment here is a LOCAL_ARRAY that holds exactly the
registers one unit holds on hardware, element ``i`` being the PTX ISA's ``a_i`` / ``b_i`` / ``c_i`` /
``d_i``.  Which matrix element that is depends on the unit's lane (``UNIT_POS_PLANE``) and ``i``, by the
ISA's tables ("Matrix Fragments for mma.m16n8k16 / m16n8k8 / m16n8k32"), written here once as
:class:`FragmentMap` so the frontend's index helper and the interp's emulation read the same table.

``ldmatrix`` / ``stmatrix`` move ``count`` (1, 2 or 4) 8x8 matrices of 16-bit elements between shared
memory and fragments: lane ``8j + r`` gives the item offset of row ``r`` of matrix ``j`` (8 contiguous
items), and lane ``l`` holds, as its elements ``2j`` and ``2j + 1``, row ``l // 4``, columns
``2 (l % 4)`` and ``2 (l % 4) + 1`` of matrix ``j`` (``trans``: the transpose's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.types import BF16, F16, F32, I8, I16, I32, U16, ElemType
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

__all__ = [
    "LDMATRIX_COUNTS",
    "LDMATRIX_ELEMS",
    "MMA_RULES",
    "MMA_SHAPES",
    "FragmentMap",
    "Ldmatrix",
    "MmaShape",
    "MmaSync",
    "Stmatrix",
    "mma_shape",
]

# Rules this family adds to the verifier.
MMA_RULES = ("mma-fragment", "mma-type", "mma-shape", "ldmatrix")
LDMATRIX_COUNTS = (1, 2, 4)
LDMATRIX_ELEMS = (F16, BF16, I16, U16)  # any 16-bit element (the instructions move .b16)


@attrs.frozen
class FragmentMap:
    """Where element ``i`` of lane ``l``'s fragment sits in the operand's matrix (one PTX ISA table).

    With ``group = l >> 2`` and ``thread = l % 4`` (the ISA's ``groupID`` and ``threadID_in_group``):
    ``row = row_group * group + row_thread * thread + sum(row_bits[b] for each set bit b of i)``, and
    ``col`` likewise.  Every table of the supported shapes has this form.
    """

    length: int
    row_group: int
    row_thread: int
    row_bits: tuple[int, ...]
    col_group: int
    col_thread: int
    col_bits: tuple[int, ...]

    def row(self, lane: int, i: int) -> int:
        """The matrix row of element ``i`` of ``lane``."""
        return _affine(self.row_group, self.row_thread, self.row_bits, lane, i)

    def col(self, lane: int, i: int) -> int:
        """The matrix column of element ``i`` of ``lane``."""
        return _affine(self.col_group, self.col_thread, self.col_bits, lane, i)


def _affine(by_group: int, by_thread: int, bits: tuple[int, ...], lane: int, i: int) -> int:
    return by_group * (lane >> 2) + by_thread * (lane % 4) + sum(w for b, w in enumerate(bits) if (i >> b) & 1)


@attrs.frozen
class MmaShape:
    """One supported ``mma.sync`` form: matrix sizes, element types and the fragment tables."""

    name: str
    m: int
    n: int
    k: int
    inputs: tuple[ElemType, ...]
    accumulator: ElemType
    a: FragmentMap
    b: FragmentMap
    c: FragmentMap

    def fragment(self, operand: str) -> FragmentMap:
        """The table of operand ``"a"``, ``"b"``, ``"c"`` or ``"d"`` (d is laid out as c)."""
        return {"a": self.a, "b": self.b, "c": self.c, "d": self.c}[operand]


# Accumulators of every supported shape (PTX ISA: m16n8k8/k16/k32 C and D, .f32 or .s32):
# row = groupID (+8 for c2, c3), col = threadID_in_group * 2 + (i & 1).
_C = FragmentMap(4, 1, 0, (0, 8), 0, 2, (1, 0))
MMA_SHAPES: dict[str, MmaShape] = {
    shape.name: shape
    for shape in (
        # f16/bf16 A (16x16): row = groupID (+8 for a2, a3, a6, a7), col = threadID_in_group * 2 + (i & 1)
        # (+8 for a4..a7); B (16x8): row = threadID_in_group * 2 + (i & 1) (+8 for b2, b3), col = groupID.
        MmaShape(
            "m16n8k16",
            16,
            8,
            16,
            (F16, BF16),
            F32,
            FragmentMap(8, 1, 0, (0, 8, 0), 0, 2, (1, 0, 8)),
            FragmentMap(4, 0, 2, (1, 8), 1, 0, ()),
            _C,
        ),
        # tf32 (held in f32) A (16x8): row = groupID (+8 for a1, a3), col = threadID_in_group (+4 for a2, a3);
        # B (8x8): row = threadID_in_group (+4 for b1), col = groupID.
        MmaShape(
            "m16n8k8",
            16,
            8,
            8,
            (F32,),
            F32,
            FragmentMap(4, 1, 0, (8, 0), 0, 1, (0, 4)),
            FragmentMap(2, 0, 1, (4,), 1, 0, ()),
            _C,
        ),
        # s8 A (16x32): row = groupID (+8 for a4..a7, a12..a15), col = threadID_in_group * 4 + (i & 3)
        # (+16 for a8..a15); B (32x8): row = threadID_in_group * 4 + (i & 3) (+16 for b4..b7), col = groupID.
        MmaShape(
            "m16n8k32",
            16,
            8,
            32,
            (I8,),
            I32,
            FragmentMap(16, 1, 0, (0, 0, 8, 0), 0, 4, (1, 2, 0, 16)),
            FragmentMap(8, 0, 4, (1, 2, 16), 1, 0, ()),
            _C,
        ),
    )
}


def mma_shape(name: str) -> MmaShape:
    """The supported shape called ``name`` (ValueError naming the supported ones otherwise)."""
    try:
        return MMA_SHAPES[name]
    except KeyError:
        raise ValueError(f"mma.sync shape {name!r} is not supported; use one of {', '.join(MMA_SHAPES)}") from None


@attrs.frozen(repr=False)
class MmaSync(Operation):
    """``d = a @ b + c`` for the plane, each unit giving and receiving its own fragment registers."""

    a: Variable
    b: Variable
    c: Variable
    d: Variable
    shape: str = "m16n8k16"


@attrs.frozen(repr=False)
class Ldmatrix(Operation):
    """``fragment`` := ``count`` 8x8 matrices of ``memory``, each lane giving one row's item offset."""

    fragment: Variable
    memory: Variable
    offset: Variable
    count: int = 4
    trans: bool = False


@attrs.frozen(repr=False)
class Stmatrix(Operation):
    """``count`` 8x8 matrices of ``memory`` := the plane's ``fragment``s, each lane giving one row's offset."""

    memory: Variable
    offset: Variable
    fragment: Variable
    count: int = 4
    trans: bool = False


def _no_out(c: Checker, inst: Instruction) -> None:
    if inst.out is not None:
        c.fail("bad-out", inst, f"{inst.op} has no result, got {inst.out!r}")


def _fragment(
    c: Checker, inst: Instruction, what: str, var: Variable, elems: tuple[ElemType, ...], length: int
) -> None:
    if var.kind is not VarKind.LOCAL_ARRAY or var.type.line != 1:
        c.fail("mma-fragment", inst, f"{what} {var!r} is a {var.kind.value}, expected a local array fragment")
    if var.elem not in elems:
        c.fail("mma-type", inst, f"{what} {var!r} of {var.elem!r}; expected one of {elems}")
    if var.length != length:
        c.fail("mma-fragment", inst, f"{what} {var!r} holds {var.length} items, the fragment holds {length}")


def _check_mma(c: Checker, inst: Instruction, op: MmaSync) -> None:
    _no_out(c, inst)
    shape = MMA_SHAPES.get(op.shape)
    if shape is None:
        c.fail("mma-shape", inst, f"shape {op.shape!r}; expected one of {tuple(MMA_SHAPES)}")
    _fragment(c, inst, "a", op.a, shape.inputs, shape.a.length)
    _fragment(c, inst, "b", op.b, (op.a.elem,), shape.b.length)
    _fragment(c, inst, "c", op.c, (shape.accumulator,), shape.c.length)
    _fragment(c, inst, "d", op.d, (shape.accumulator,), shape.c.length)


def _check_matrix_move(c: Checker, inst: Instruction, op: Ldmatrix | Stmatrix) -> None:
    _no_out(c, inst)
    if op.count not in LDMATRIX_COUNTS:
        c.fail("ldmatrix", inst, f"count {op.count}; expected one of {LDMATRIX_COUNTS}")
    _fragment(c, inst, "fragment", op.fragment, LDMATRIX_ELEMS, 2 * op.count)
    if op.memory.kind is not VarKind.SHARED:
        c.fail("ldmatrix", inst, f"{op.memory!r} is {op.memory.kind.value} memory; the matrices live in shared memory")
    if op.memory.elem != op.fragment.elem or op.memory.type.line != 1:
        c.fail("mma-type", inst, f"shared memory of {op.memory.type!r} with a fragment of {op.fragment.elem!r}")
    c.int_scalar(inst, "row offset", op.offset)


for _cls, _record in (
    (MmaSync, OpRecord("mma_sync", "mma", reads=("a", "b", "c"), writes=("d",), checks=(_check_mma,))),
    (
        Ldmatrix,
        OpRecord("ldmatrix", "mma", reads=("memory",), writes=("fragment",), checks=(_check_matrix_move,)),
    ),
    (
        Stmatrix,
        OpRecord("stmatrix", "mma", reads=("fragment",), writes=("memory",), checks=(_check_matrix_move,)),
    ),
):
    declare(_record)(_cls)
