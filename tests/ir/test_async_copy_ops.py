"""The cp.async op family: stable names, text forms, and one negative test per verifier rule."""

from __future__ import annotations

import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Type, Variable, VarKind, constant, format_kernel, verify
from cubepy.ir import ops as o
from cubepy.ir.ops.async_copy import ASYNC_COPY_RULES
from tests.irbuild import inst, kernel, param_buffer

F32, F16, U32 = Type(ir.F32), Type(ir.F16), Type(ir.U32)
SRC = param_buffer(0, F32, "a")
SMEM = Variable(VarKind.SHARED, 0, F32, length=64)
SMEM16 = Variable(VarKind.SHARED, 1, F16, length=64)


def _u32(value: int) -> Variable:
    return constant(value, U32)


def _copy(size=16, cache="ca", src=SRC.var, dst=SMEM, src_bytes=None, offset=None):
    return o.AsyncCopy(
        src, offset or _u32(0), dst, _u32(4), _u32(size) if src_bytes is None else src_bytes, size, cache
    )


def _verify(body) -> None:
    verify(kernel(body, [SRC], shared_memories=(SMEM, SMEM16)))


def _expect(rule: str, body) -> None:
    with pytest.raises(VerifyError) as info:
        _verify(body)
    assert f"[{rule}]" in str(info.value)


def test_every_op_has_its_stable_name_and_text_form():
    body = [
        inst(None, _copy(16, "cg")),
        inst(None, _copy(8, src_bytes=_u32(4))),
        inst(None, _copy(4)),
        inst(None, o.AsyncCommitGroup()),
        inst(None, o.AsyncWaitGroup(1)),
        inst(None, o.AsyncWaitGroup(0)),
    ]
    k = kernel(body, [SRC], shared_memories=(SMEM,))
    verify(k)
    assert [i.op for i in body] == [
        "async_copy",
        "async_copy",
        "async_copy",
        "async_commit_group",
        "async_wait_group",
        "async_wait_group",
    ]
    text = format_kernel(k)
    for line in (
        "async_copy global[0], 0u32, shared[0], 4u32, 16u32 {cache=cg}",
        "async_copy global[0], 0u32, shared[0], 4u32, 4u32 {size=8}",
        "async_copy global[0], 0u32, shared[0], 4u32, 4u32 {size=4}",
        "async_commit_group",
        "async_wait_group {pending=1}",
        "async_wait_group {pending=0}",
    ):
        assert line in text + "\n", (line, text)


def test_rules_are_listed():
    assert set(ASYNC_COPY_RULES) == {"async-copy-memory", "async-copy-size", "async-copy-type", "async-wait-count"}


def test_source_must_be_global():
    _expect("async-copy-memory", [inst(None, _copy(src=SMEM))])


def test_destination_must_be_shared():
    _expect("async-copy-memory", [inst(None, _copy(dst=SRC.var))])


@pytest.mark.parametrize("size", [0, 2, 12, 32, True])
def test_size_must_be_4_8_or_16(size):
    _expect("async-copy-size", [inst(None, _copy(size, src_bytes=_u32(0)))])


def test_cg_needs_16_bytes():
    _expect("async-copy-size", [inst(None, _copy(8, "cg"))])


def test_unknown_cache_hint():
    _expect("async-copy-size", [inst(None, _copy(16, "cs"))])


def test_constant_source_bytes_at_most_size():
    _expect("async-copy-size", [inst(None, _copy(8, src_bytes=_u32(12)))])


def test_element_types_must_match():
    _expect("async-copy-type", [inst(None, _copy(dst=SMEM16))])


def test_source_bytes_must_be_u32():
    _expect("async-copy-type", [inst(None, _copy(src_bytes=constant(16, Type(ir.I32))))])


def test_copy_holds_whole_elements():
    f64 = param_buffer(1, Type(ir.F64), "d")
    shared = Variable(VarKind.SHARED, 2, Type(ir.F64), length=8)
    body = [inst(None, o.AsyncCopy(f64.var, _u32(0), shared, _u32(0), _u32(4), 4, "ca"))]
    with pytest.raises(VerifyError, match=r"\[async-copy-type\]"):
        verify(kernel(body, [f64], shared_memories=(shared,)))


def test_offsets_must_be_integers():
    _expect("bad-index", [inst(None, _copy(offset=constant(1.0, F32)))])


def test_copy_has_no_result():
    out = Variable(VarKind.CONST, 0, U32)
    _expect("bad-out", [inst(out, _copy())])


@pytest.mark.parametrize("pending", [-1, 8, 63, True, 1.0])
def test_wait_count_in_0_to_7(pending):
    _expect("async-wait-count", [inst(None, o.AsyncWaitGroup(pending))])


def test_commit_has_no_result():
    _expect("bad-out", [inst(Variable(VarKind.CONST, 0, U32), o.AsyncCommitGroup())])
