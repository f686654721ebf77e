"""Verifier rule ``bad-memory-decl`` for shared memories that view another's bytes (``SharedMemory.alias``)."""

from __future__ import annotations

import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Type, Variable, VarKind, verify
from tests.irbuild import kernel

F16, F32 = Type(ir.F16), Type(ir.F32)
ROOT = Variable(VarKind.SHARED, 0, F16, length=256, alignment=16)


def _expect(detail: str, shared=(), local=()) -> None:
    with pytest.raises(VerifyError) as info:
        verify(kernel([], shared_memories=tuple(shared), local_arrays=tuple(local)))
    assert "[bad-memory-decl]" in str(info.value) and detail in str(info.value)


def test_a_view_inside_an_earlier_memory_verifies():
    view = Variable(VarKind.SHARED, 1, F32, length=64, aliases=(0, 256))
    verify(kernel([], shared_memories=(ROOT, view)))


def test_a_view_of_a_later_or_unknown_memory():
    view = Variable(VarKind.SHARED, 1, F32, length=4, aliases=(0, 0))
    _expect("not an earlier shared memory", shared=(view, ROOT))
    _expect("not an earlier shared memory", shared=(ROOT, Variable(VarKind.SHARED, 2, F32, length=4, aliases=(7, 0))))


def test_a_view_of_a_view():
    view = Variable(VarKind.SHARED, 1, F32, length=4, aliases=(0, 0))
    _expect(
        "not an earlier shared memory", shared=(ROOT, view, Variable(VarKind.SHARED, 2, F32, length=1, aliases=(1, 0)))
    )


@pytest.mark.parametrize("length, offset", [(65, 256), (4, 6), (4, -4)])
def test_a_view_that_does_not_fit_at_an_item_boundary(length, offset):
    view = Variable(VarKind.SHARED, 1, F32, length=length, aliases=(0, offset))
    _expect("does not fit", shared=(ROOT, view))


def test_only_shared_memory_views_other_bytes():
    local = Variable(VarKind.LOCAL_ARRAY, 0, F32, length=4, aliases=(0, 0))
    _expect("only shared memory views other bytes", shared=(ROOT,), local=(local,))
