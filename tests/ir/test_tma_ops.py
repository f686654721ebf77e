"""The barrier and TMA op family: stable names, text forms, and one negative test per verifier rule."""

from __future__ import annotations

import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Param, Type, Variable, VarKind, constant, format_kernel, verify
from cubepy.ir import ops as o
from cubepy.ir.ops.tma import TMA_RULES
from tests.irbuild import Ids, inst, kernel

BOOL, F32, U32 = Type(ir.BOOL), Type(ir.F32), Type(ir.U32)

U64 = Type(ir.U64)
I32 = Type(ir.I32)
U16 = Type(ir.U16)
BAR = Variable(VarKind.BARRIER, 0, U64)
TMAP = Variable(VarKind.TENSOR_MAP, 0, F32)
SMEM = Variable(VarKind.SHARED, 0, F32, length=512, alignment=128)
MAP_PARAM = Param(TMAP, "m", "tensor_map")


def _u32(value: int) -> Variable:
    return constant(value, U32)


def _i32(value: int) -> Variable:
    return constant(value, I32)


def _kernel(body, barriers=(BAR,)):
    return kernel(body, [MAP_PARAM], barriers=barriers, shared_memories=(SMEM,))


def _init():
    return inst(None, o.BarrierInit(BAR, _u32(32), constant(True, BOOL)))


def _expect(rule: str, body, **kw) -> None:
    with pytest.raises(VerifyError) as info:
        verify(_kernel(body, **kw))
    assert f"[{rule}]" in str(info.value)


def _load(coords=(8, 0), rank=2, smem=SMEM, tmap=TMAP, bar=BAR):
    return o.TmaLoad(bar, tmap, smem, _u32(0), _u32(512), tuple(_i32(c) for c in coords), rank)


def test_every_op_has_its_stable_name_and_text_form():
    ids = Ids()
    token, token2 = ids.const(U64), ids.const(U64)
    body = [
        _init(),
        inst(None, _load()),
        inst(
            None,
            o.TmaLoadIm2col(
                BAR,
                TMAP,
                SMEM,
                _u32(128),
                _u32(128),
                (_i32(0), _i32(-1), _i32(-1), _i32(0)),
                (constant(1, U16), constant(2, U16)),
                4,
            ),
        ),
        inst(token, o.BarrierArriveExpectTx(BAR, _u32(1), _u32(2048))),
        inst(None, o.BarrierWait(BAR, token)),
        inst(None, o.BarrierExpectTx(BAR, _u32(16))),
        inst(token2, o.BarrierArrive(BAR)),
        inst(None, o.BarrierWaitParity(BAR, _u32(1))),
        inst(None, o.TmaStore(TMAP, SMEM, _u32(0), _u32(512), (_i32(8), _i32(16)), 2)),
        inst(None, o.TmaGroupCommit()),
        inst(None, o.TmaGroupWait(0)),
        inst(None, o.TmaGroupWaitRead(1)),
    ]
    k = _kernel(body)
    verify(k)
    assert [i.op for i in body] == [
        "barrier_init",
        "tma_load",
        "tma_load_im2col",
        "barrier_arrive_expect_tx",
        "barrier_wait",
        "barrier_expect_tx",
        "barrier_arrive",
        "barrier_wait_parity",
        "tma_store",
        "tma_group_commit",
        "tma_group_wait",
        "tma_group_wait_read",
    ]
    text = format_kernel(k)
    assert "  barrier[0]: barrier" in text
    for line in (
        "barrier_init barrier[0], 32u32, true",
        "tma_load barrier[0], tmap[0], shared[0], 0u32, 512u32, 8i32, 0i32 {rank=2}",
        "tma_load_im2col barrier[0], tmap[0], shared[0], 128u32, 128u32, 0i32, -1i32, -1i32, 0i32, 1u16, 2u16 {rank=4}",
        "%0: u64 = barrier_arrive_expect_tx barrier[0], 1u32, 2048u32",
        "barrier_wait barrier[0], %0",
        "barrier_expect_tx barrier[0], 16u32",
        "%1: u64 = barrier_arrive barrier[0]",
        "barrier_wait_parity barrier[0], 1u32",
        "tma_store tmap[0], shared[0], 0u32, 512u32, 8i32, 16i32 {rank=2}",
        "tma_group_commit",
        "tma_group_wait {pending=0}",
        "tma_group_wait_read {pending=1}",
    ):
        assert line in text, line


def test_rules_are_listed():
    assert set(TMA_RULES) == {
        "not-barrier",
        "barrier-index",
        "not-tensor-map",
        "not-shared",
        "tma-rank",
        "tma-operand-type",
        "bad-immediate",
    }


def test_not_barrier_kind():
    _expect("not-barrier", [inst(Ids().const(U64), o.BarrierArrive(SMEM))])


def test_not_barrier_undeclared():
    _expect("not-barrier", [_init()], barriers=())


def test_not_tensor_map():
    _expect("not-tensor-map", [_init(), inst(None, _load(tmap=Variable(VarKind.SHARED, 0, F32, length=512)))])


def test_not_shared():
    local = Variable(VarKind.LOCAL_ARRAY, 0, F32, length=512)
    _expect("not-shared", [_init(), inst(None, _load(smem=local))])


def test_tma_rank_coordinate_count():
    _expect("tma-rank", [_init(), inst(None, _load(coords=(1, 2, 3), rank=2))])


def test_tma_rank_out_of_range():
    _expect("tma-rank", [_init(), inst(None, _load(coords=(1, 2, 3, 4, 5, 6), rank=6))])


def test_tma_rank_im2col_offsets():
    op = o.TmaLoadIm2col(BAR, TMAP, SMEM, _u32(0), _u32(512), (_i32(0),) * 4, (constant(1, U16),), 4)
    _expect("tma-rank", [_init(), inst(None, op)])


def test_tma_operand_type_coordinate():
    op = o.TmaLoad(BAR, TMAP, SMEM, _u32(0), _u32(512), (_u32(0), _i32(0)), 2)
    _expect("tma-operand-type", [_init(), inst(None, op)])


def test_tma_operand_type_element_mismatch():
    smem = Variable(VarKind.SHARED, 0, U32, length=512)
    _expect("tma-operand-type", [_init(), inst(None, _load(smem=smem))])


def test_tma_operand_type_token():
    _expect("tma-operand-type", [_init(), inst(Ids().const(U32), o.BarrierArrive(BAR))])


def test_tma_operand_type_arrival_count():
    _expect("tma-operand-type", [inst(None, o.BarrierInit(BAR, constant(1.0, F32), constant(True, BOOL)))])


def test_bad_immediate():
    _expect("bad-immediate", [inst(None, o.TmaGroupWait(-1))])


def test_bad_out_on_a_copy():
    _expect("bad-out", [_init(), inst(Ids().const(U32), _load())])


def test_missing_token():
    _expect("missing-out", [_init(), inst(None, o.BarrierArrive(BAR))])


# -- arrays of barriers ----------------------------------------------------------------------------------
BARS = Variable(VarKind.BARRIER, 1, U64, length=4)


def _array_init():
    return inst(None, o.BarrierInit(BARS, _u32(1), constant(True, BOOL)))


def test_an_array_element_is_printed_with_its_index_and_the_array_with_its_count():
    ids = Ids()
    stage, token = ids.const(U32), ids.const(U64)
    body = [
        _array_init(),
        inst(token, o.BarrierArrive(BARS, index=stage)),
        inst(None, o.BarrierWaitParity(BARS, _u32(0), index=_u32(3))),
        inst(None, o.TmaLoad(BARS, TMAP, SMEM, _u32(0), _u32(512), (_i32(8), _i32(0)), 2, index=stage)),
    ]
    k = _kernel([inst(stage, o.Cast(_u32(2))), *body], barriers=(BARS,))
    verify(k)
    text = format_kernel(k)
    assert "  barrier[1]: barrier x 4" in text
    for line in (
        "barrier_init barrier[1], 1u32, true",
        "%1: u64 = barrier_arrive barrier[1][%0]",
        "barrier_wait_parity barrier[1][3u32], 0u32",
        "tma_load barrier[1][%0], tmap[0], shared[0], 0u32, 512u32, 8i32, 0i32 {rank=2}",
    ):
        assert line in text, line


def test_barrier_index_an_array_element_needs_an_index():
    token = Ids().const(U64)
    _expect("barrier-index", [_array_init(), inst(token, o.BarrierArrive(BARS))], barriers=(BARS,))


def test_barrier_index_constant_outside_the_array():
    op = o.BarrierWaitParity(BARS, _u32(0), index=_u32(4))
    _expect("barrier-index", [_array_init(), inst(None, op)], barriers=(BARS,))


def test_barrier_index_is_a_u32():
    op = o.BarrierExpectTx(BARS, _u32(16), index=_i32(1))
    _expect("barrier-index", [_array_init(), inst(None, op)], barriers=(BARS,))


def test_a_single_barrier_takes_index_zero():
    verify(_kernel([_init(), inst(None, o.BarrierWaitParity(BAR, _u32(0), index=_u32(0)))]))
    _expect("barrier-index", [_init(), inst(None, o.BarrierWaitParity(BAR, _u32(0), index=_u32(1)))])


def test_an_empty_barrier_array_is_a_bad_declaration():
    empty = Variable(VarKind.BARRIER, 2, U64, length=0)
    _expect("bad-memory-decl", [], barriers=(empty,))
