"""The cluster op family: text forms, and one negative test per rule its records check."""

from __future__ import annotations

import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Type, Variable, VarKind, constant, format_kernel, verify
from cubepy.ir import ops as o
from tests.irbuild import Ids, inst, kernel, param_buffer

F32, U32, I32, U64 = Type(ir.F32), Type(ir.U32), Type(ir.I32), Type(ir.U64)
SMEM = Variable(VarKind.SHARED, 0, F32, length=64, alignment=16)
BAR = Variable(VarKind.BARRIER, 0, U64)


def _kernel(body, params=()):
    return kernel(body, list(params), shared_memories=(SMEM,), barriers=(BAR,))


def _expect(rule: str, k) -> str:
    with pytest.raises(VerifyError) as info:
        verify(k)
    assert f"[{rule}]" in str(info.value), str(info.value)
    return str(info.value)


def test_well_formed_cluster_ops_verify_and_print():
    ids = Ids()
    value = ids.const(F32)
    rank, index = constant(1, U32), constant(3, U32)
    body = [
        inst(None, o.SyncCluster()),
        inst(value, o.ClusterLoad(SMEM, rank, index, True)),
        inst(None, o.ClusterStore(SMEM, rank, index, value)),
        inst(None, o.BarrierArriveCluster(BAR, rank)),
    ]
    k = _kernel(body)
    verify(k)
    text = format_kernel(k)
    for name in ("sync_cluster", "cluster_load", "cluster_store", "barrier_arrive_cluster"):
        assert name in text


def test_not_shared():
    ids = Ids()
    buffer = param_buffer(0, F32)
    message = _expect(
        "not-shared",
        _kernel([inst(ids.const(F32), o.ClusterLoad(buffer.var, constant(0, U32), constant(0, U32)))], [buffer]),
    )
    assert "a peer access names a shared memory" in message


def test_rank_type():
    ids = Ids()
    message = _expect(
        "type-mismatch", _kernel([inst(ids.const(F32), o.ClusterLoad(SMEM, constant(0, I32), constant(0, U32)))])
    )
    assert "the cube rank must be a u32 scalar" in message


def test_stored_value_type():
    _expect(
        "type-mismatch",
        _kernel([inst(None, o.ClusterStore(SMEM, constant(0, U32), constant(0, U32), constant(1, U32)))]),
    )


def test_not_barrier():
    message = _expect("not-barrier", _kernel([inst(None, o.BarrierArriveCluster(SMEM, constant(0, U32)))]))
    assert "expected an mbarrier" in message


def test_multicast_mask_type():
    tmap = Variable(VarKind.TENSOR_MAP, 0, F32)
    load = o.TmaLoad(BAR, tmap, SMEM, constant(0, U32), constant(64, U32), (constant(0, I32),), 1, constant(1, I32))
    k = kernel([inst(None, load)], [ir.Param(tmap, "m", "tensor_map")], barriers=(BAR,), shared_memories=(SMEM,))
    assert "multicast mask" in _expect("tma-operand-type", k)


def test_remote_arrival_on_an_array_needs_an_index_within_it():
    bars = Variable(VarKind.BARRIER, 0, U64, length=2)

    def arrays(body):
        return kernel(body, [], shared_memories=(SMEM,), barriers=(bars,))

    body = [inst(None, o.BarrierArriveCluster(bars, constant(0, U32)))]
    assert "name the element by an index" in _expect("barrier-index", arrays(body))
    body = [inst(None, o.BarrierArriveCluster(bars, constant(0, U32), index=constant(2, U32)))]
    assert "outside" in _expect("barrier-index", arrays(body))
    verify(arrays([inst(None, o.BarrierArriveCluster(bars, constant(0, U32), index=constant(1, U32)))]))
