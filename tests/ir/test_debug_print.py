"""The ``debug_print`` record: its verifier rules, one negative test each, and a well-formed print."""

from __future__ import annotations

import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Type, constant, verify
from cubepy.ir import ops as o
from tests.irbuild import Ids, inst, kernel

F32, U32, I64 = Type(ir.F32), Type(ir.U32), Type(ir.I64)


def _expect(rule: str, operation: o.Operation, out=None) -> str:
    with pytest.raises(VerifyError) as info:
        verify(kernel([inst(out, operation)]))
    assert f"[{rule}]" in str(info.value)
    return str(info.value)


def test_a_canonical_print_passes():
    verify(
        kernel([inst(None, o.DebugPrint("%u %lld %g %%\n", (constant(1, U32), constant(2, I64), constant(0.5, F32))))])
    )


def test_no_result():
    _expect("bad-out", o.DebugPrint("x"), out=Ids().const(U32))


def test_arity():
    text = _expect("debug-print-arity", o.DebugPrint("%u %u", (constant(1, U32),)))
    assert "2 conversion(s) for 1 argument(s)" in text


@pytest.mark.parametrize(
    ("fmt", "arg", "words"),
    [
        ("%d", constant(0.5, F32), "conversion %d does not print a f32"),
        ("%f", constant(1, U32), "conversion %f does not print a u32"),
        ("%d", constant(1, I64), "of a i64 needs the length modifier 'll'"),
        ("%lld", constant(1, U32), "of a u32 needs the length modifier ''"),
        ("%s", constant(1, U32), "conversion %s does not print a u32"),
        ("%g", constant(1.0, Type(ir.F32, 4)), "is a line"),
    ],
)
def test_type(fmt, arg, words):
    assert words in _expect("debug-print-type", o.DebugPrint(fmt, (arg,)))


def test_the_text_form_quotes_the_format():
    text = ir.format_scope(ir.Scope((inst(None, o.DebugPrint("v=%u\n", (constant(3, U32),))),)))
    assert "debug_print 3u32 {format='v=%u\\n'}" in text
