"""The wgmma op family: fragment maps against the ISA's figures (hand tables), and its verifier rules."""

from __future__ import annotations

import numpy as np
import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Type, Variable, VarKind, constant, format_kernel, verify
from cubepy.ir import ops as o
from tests.irbuild import Ids, inst, kernel
from tests.wgmma_hand import a_table, d_table

U64, U32, F32, BOOL = Type(ir.U64), Type(ir.U32), Type(ir.F32), Type(ir.BOOL)
SMEM = Variable(VarKind.SHARED, 0, Type(ir.F16), length=4096, alignment=1024)


@pytest.mark.parametrize("n", [8, 64, 136, 256])
def test_the_accumulator_map_is_the_isas(n):
    table = d_table(n)
    for (unit, i), spot in table.items():
        assert o.accumulator_position(unit, i) == spot
    # Every element of the 64 x N tile is held exactly once.
    assert sorted(table.values()) == [(r, c) for r in range(64) for c in range(n)]


def test_a_few_accumulator_spots_read_off_the_isa_figure():
    # unit 0: d0 (0, 0), d1 (0, 1), d2 (8, 0), d3 (8, 1), d4 (0, 8); unit 5 (g 1, t 1): d0 (1, 2);
    # unit 32 (warp 1): d0 (16, 0); unit 127 (warp 3, g 7, t 3): d0 (55, 6), d3 (63, 7).
    expected = {(0, 0): (0, 0), (0, 1): (0, 1), (0, 2): (8, 0), (0, 3): (8, 1), (0, 4): (0, 8), (5, 0): (1, 2)}
    expected |= {(32, 0): (16, 0), (127, 0): (55, 6), (127, 3): (63, 7)}
    for (unit, i), spot in expected.items():
        assert o.accumulator_position(unit, i) == spot


@pytest.mark.parametrize(("size", "k"), [(2, 16), (4, 8), (1, 32)])
def test_the_a_register_maps_are_the_isas(size, k):
    table = a_table(size)
    for (unit, i), spot in table.items():
        assert o.a_position(size, unit, i) == spot
    assert sorted(table.values()) == [(r, c) for r in range(64) for c in range(k)]


def test_the_maps_work_on_numpy_arrays_too():
    units, regs = np.meshgrid(np.arange(128), np.arange(32), indexing="ij")
    rows, cols = o.accumulator_position(units, regs)
    table = d_table(64)
    assert all((rows[u, i], cols[u, i]) == table[u, i] for u in range(128) for i in range(32))


# -- verifier rules -----------------------------------------------------------------------------------------
def _acc(n: int, elem=ir.F32) -> Variable:
    return Variable(VarKind.LOCAL_ARRAY, 1, Type(elem), length=n // 2)


def _mma(d, a, b, n=64, elem=ir.F16, scale=True):
    return o.WgmmaMmaAsync(d, a, b, constant(scale, BOOL), n, elem)


def _body(*operations):
    ids = Ids()
    desc = ids.const(U64)
    head = [inst(desc, o.WgmmaDescriptor(SMEM, constant(0, U32), constant(16, U32), constant(1024, U32), "128B"))]
    return desc, head + [inst(None, op(desc) if callable(op) else op) for op in operations]


def _verify(*operations):
    _desc, body = _body(*operations)
    return kernel(body, cube_dim=(128, 1, 1), shared_memories=(SMEM,))


def test_a_correct_sequence_verifies_and_prints():
    definition = _verify(o.WgmmaFence(), lambda d: _mma(_acc(64), d, d), o.WgmmaCommitGroup(), o.WgmmaWaitGroup(0))
    verify(definition)
    text = format_kernel(definition)
    for name in ("wgmma_descriptor", "wgmma_fence", "wgmma_mma_async", "wgmma_commit_group", "wgmma_wait_group"):
        assert name in text


@pytest.mark.parametrize(
    ("rule", "make", "detail"),
    [
        ("wgmma-shape", lambda d: _mma(Variable(VarKind.LOCAL_ARRAY, 1, F32, length=6), d, d, n=12), "N = 12"),
        ("wgmma-operand", lambda d: _mma(_acc(32), d, d, n=64), "local array of 32 f32"),
        ("wgmma-operand", lambda d: _mma(_acc(64, ir.F16), d, d), "local array of 32 f32"),
        ("wgmma-type", lambda d: _mma(_acc(64), d, d, elem=ir.I8), "inputs of i8"),
        (
            "wgmma-operand",
            lambda d: _mma(_acc(64), Variable(VarKind.LOCAL_ARRAY, 2, Type(ir.F16), length=4), d),
            "A in registers must be a local array of 8 f16",
        ),
        ("wgmma-operand", lambda d: _mma(_acc(64), d, constant(0, U32)), "B must be a u64 matrix descriptor"),
        ("bad-immediate", o.WgmmaWaitGroup(8), "0..7"),
    ],
)
def test_each_rule_rejects_its_bad_operation(rule, make, detail):
    with pytest.raises(VerifyError) as info:
        verify(_verify(make))
    assert f"[{rule}]" in str(info.value) and detail in str(info.value)


def test_a_descriptor_of_global_memory_or_an_unknown_swizzle_is_refused():
    glob = Variable(VarKind.GLOBAL, 0, Type(ir.F16))
    ids = Ids()
    bad = o.WgmmaDescriptor(glob, constant(0, U32), constant(16, U32), constant(16, U32), "none")
    with pytest.raises(VerifyError, match="describes shared memory"):
        verify(kernel([inst(ids.const(U64), bad)], cube_dim=(128, 1, 1)))
    bad = o.WgmmaDescriptor(SMEM, constant(0, U32), constant(16, U32), constant(16, U32), "16B")
    with pytest.raises(VerifyError, match="swizzle '16B'"):
        verify(kernel([inst(ids.const(U64), bad)], cube_dim=(128, 1, 1), shared_memories=(SMEM,)))
