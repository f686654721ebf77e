"""The IR text form: one instance of every operation prints with its own name."""

from __future__ import annotations

import textwrap

from cubepy import ir
from cubepy.ir import Scope, Variable, VarKind, constant, format_kernel, format_variable
from cubepy.ir import ops as o
from cubepy.ir.ops import branch as b

from .irbuild import BOOL, F32, U32, Ids, buffer, inst, kernel


def _every_operation():
    ids = Ids()
    f, u, flag = constant(1.5, F32), constant(3, U32), constant(True, BOOL)
    x = Variable(VarKind.GLOBAL, 0, F32)
    line = Variable(VarKind.MUT, 99, ir.Type(ir.F32, 4))
    empty = Scope()
    return [
        o.Unary("neg", f), o.Binary("add", f, f), o.Compare("lt", f, f), o.Fma(f, f, f), o.Clamp(f, f, f),
        o.Select(flag, f, f), o.Cast(u), o.Bitcast(u), o.Assign(f), o.Index(x, u), o.IndexAssign(x, u, f),
        o.ExtractLane(line, u), o.InsertLane(line, u, f), o.Metadata("len", x), o.AtomicOp("add", x, u, f),
        o.AtomicCompareExchange(x, u, f, f), o.SyncCube(), o.SyncPlane(), o.SyncProxyShared(),
        o.PlaneOp("sum", f), b.If(flag, empty), b.IfElse(flag, empty, empty), b.Switch(u, ((1, empty),), empty),
        b.RangeLoop(ids.const(U32), u, u, u, False, empty), b.Loop(empty), b.Break(), b.Continue(), b.Return(),
    ]


def test_every_operation_prints_its_name():
    for operation in _every_operation():
        text = ir.format_scope(Scope((inst(None, operation),)))
        assert operation.name in text, (operation, text)


def test_names_are_stable_lowercase():
    names = [op.name for op in _every_operation()]
    assert all(n == n.lower() for n in names)
    assert names[:3] == ["neg", "add", "lt"]
    assert "atomic_add" in names and "plane_sum" in names and "index" in names


def test_variable_forms():
    assert format_variable(ir.builtin("absolute_pos")) == "@absolute_pos"
    assert format_variable(constant(2, U32)) == "2u32"
    assert format_variable(constant(True, BOOL)) == "true"
    assert format_variable(Variable(VarKind.MUT, 3, F32)) == "%m3"
    assert format_variable(Variable(VarKind.SHARED, 1, F32, length=8)) == "shared[1]"


def test_kernel_golden_text():
    ids = Ids()
    x = buffer(0, F32, "x")
    n, cond, v = ids.const(U32), ids.const(BOOL), ids.const(F32)
    pos = ir.builtin("absolute_pos")
    body = [
        inst(n, o.Metadata("len", x.var)),
        inst(cond, o.Compare("lt", pos, n)),
        inst(None, b.IfElse(cond, Scope((inst(v, o.Index(x.var, pos, checked=True)),)),
                            Scope((inst(None, b.Return()),)))),
    ]
    text = format_kernel(kernel(body, [x], checked=True))
    assert text == textwrap.dedent("""\
        kernel k cube_dim=(32, 1, 1) checked
          param x: global[0]: f32 (array)
        {
          %0: u32 = len global[0]  ; kernel.py:7
          %1: bool = lt @absolute_pos, %0  ; kernel.py:7
          if_else %1 {  ; kernel.py:7
            %2: f32 = index global[0], @absolute_pos {checked=True}  ; kernel.py:7
          } else {
            return  ; kernel.py:7
          }
        }""")
