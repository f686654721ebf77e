"""The verifier's rules for ``mma_sync``, ``ldmatrix`` and ``stmatrix`` (``cubepy.ir.ops.mma``)."""

from __future__ import annotations

import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Variable, VarKind, constant, verify
from cubepy.ir import ops as o
from tests.irbuild import inst, kernel


def local(slot: int, elem, length: int) -> Variable:
    return Variable(VarKind.LOCAL_ARRAY, slot, ir.Type(elem), length=length)


A16, B16, C32, D32 = local(0, ir.F16, 8), local(1, ir.F16, 4), local(2, ir.F32, 4), local(3, ir.F32, 4)
A8, B8, C_S32 = local(4, ir.I8, 16), local(5, ir.I8, 8), local(6, ir.I32, 4)
X4 = local(7, ir.F16, 8)
LOCALS = (A16, B16, C32, D32, A8, B8, C_S32, X4)
SMEM = Variable(VarKind.SHARED, 0, ir.Type(ir.F16), length=256)
SMEM_F32 = Variable(VarKind.SHARED, 1, ir.Type(ir.F32), length=256)
ROW = constant(0, ir.Type(ir.U32))


def _kernel(operation):
    return kernel([inst(None, operation)], local_arrays=LOCALS, shared_memories=(SMEM, SMEM_F32))


def _expect(rule: str, operation) -> None:
    with pytest.raises(VerifyError, match=rf"\[{rule}\]"):
        verify(_kernel(operation))


def test_well_formed_operations_verify():
    verify(_kernel(o.MmaSync(A16, B16, C32, D32, "m16n8k16")))
    verify(_kernel(o.MmaSync(A8, B8, C_S32, C_S32, "m16n8k32")))
    verify(_kernel(o.Ldmatrix(X4, SMEM, ROW, 4, True)))
    verify(_kernel(o.Stmatrix(SMEM, ROW, X4, 4, False)))


def test_verifier_rules():
    assert set(o.MMA_RULES) == {"mma-fragment", "mma-type", "mma-shape", "ldmatrix"}
    _expect("mma-shape", o.MmaSync(A16, B16, C32, D32, "m16n16k16"))
    _expect("mma-fragment", o.MmaSync(B16, B16, C32, D32, "m16n8k16"))  # a holds 4 items, not 8
    _expect("mma-type", o.MmaSync(A16, B8, C32, D32, "m16n8k16"))  # b of another type than a
    _expect("mma-type", o.MmaSync(A8, B8, C32, D32, "m16n8k32"))  # s8 accumulates in s32
    _expect("mma-fragment", o.MmaSync(A16, B16, SMEM_F32, D32, "m16n8k16"))  # c in shared memory
    _expect("ldmatrix", o.Ldmatrix(X4, SMEM, ROW, 3, False))
    _expect("mma-fragment", o.Ldmatrix(X4, SMEM, ROW, 2, False))  # x2 fills 4 items
    _expect("mma-type", o.Ldmatrix(C32, SMEM_F32, ROW, 2, False))  # 32-bit items
    _expect("mma-type", o.Stmatrix(SMEM_F32, ROW, X4, 4, False))


def test_fragment_tables_are_bijections_onto_the_matrices():
    """Every element of every operand's matrix is held by exactly one (lane, register) pair."""
    for shape in o.MMA_SHAPES.values():
        for operand, (rows, cols) in (("a", (shape.m, shape.k)), ("b", (shape.k, shape.n)), ("c", (shape.m, shape.n))):
            table = shape.fragment(operand)
            held = sorted((table.row(lane, i), table.col(lane, i)) for lane in range(32) for i in range(table.length))
            assert held == [(r, c) for r in range(rows) for c in range(cols)], (shape.name, operand)
