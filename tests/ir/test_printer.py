"""The IR text form: one instance of every operation prints with its own name."""

from __future__ import annotations

import textwrap

import attrs

from cubepy import ir
from cubepy.ir import Scope, Type, Variable, VarKind, constant, format_kernel, format_variable
from cubepy.ir import ops as o
from cubepy.ir.ops import branch as b
from tests.irbuild import Ids, inst, kernel
from tests.irbuild import param_buffer as buffer

BOOL, F32, U32 = Type(ir.BOOL), Type(ir.F32), Type(ir.U32)


def _placeholder(field, f: Variable, empty: Scope):
    """A value of the field's kind: a variable, a scope, a tuple of either, or the field's default."""
    if field.default is not attrs.NOTHING:
        return field.default
    kind = str(field.type)
    if "Scope" in kind and "tuple" in kind:
        return ((1, empty),)
    if "Scope" in kind:
        return empty
    if "tuple" in kind:
        return (f,)
    if kind in ("bool", "'bool'"):
        return False
    if kind in ("int", "'int'"):
        return 0
    if kind in ("str", "'str'"):
        return "a"
    return f


def _every_operation():
    """One instance of every declared operation (operands are placeholders: the printer only shows them)."""
    f = constant(1.5, F32)
    empty = Scope()
    return [
        cls(**{field.name: _placeholder(field, f, empty) for field in attrs.fields(cls)}) for cls in o.all_operations()
    ]


def test_every_operation_prints_its_name():
    for operation in _every_operation():
        text = ir.format_scope(Scope((inst(None, operation),)))
        assert operation.name in text, (operation, text)


def test_names_are_stable_lowercase():
    names = [op.name for op in _every_operation()]
    assert all(n == n.lower() for n in names)
    assert len(set(names)) == len(names)
    for expected in (
        "neg",
        "add",
        "lt",
        "fma",
        "index",
        "atomic_add",
        "plane_sum",
        "sync_cube",
        "range_loop",
        "barrier_arrive_expect_tx",
        "tma_load_im2col",
        "tma_store",
        "cmma_execute",
        "cmma_load",
    ):
        assert expected in names


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
        inst(n, o.lookup("len")(x.var)),
        inst(cond, o.lookup("lt")(pos, n)),
        inst(
            None, b.IfElse(cond, Scope((inst(v, o.Index(x.var, pos, checked=True)),)), Scope((inst(None, b.Return()),)))
        ),
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


def test_const_tables_print_every_value():
    tables = (ir.const_table(0, ir.F32, (0.5, -2.0, float("inf"))), ir.const_table(1, ir.BOOL, (True, False)))
    out = Ids().const(F32)
    body = [inst(out, o.Index(tables[0].var, constant(1, U32)))]
    assert format_kernel(kernel(body, const_tables=tables)) == textwrap.dedent("""\
        kernel k cube_dim=(32, 1, 1) unchecked
          const[0]: f32[3] = [0.5, -2.0, inf]
          const[1]: bool[2] = [true, false]
        {
          %0: f32 = index const[0], 1u32  ; kernel.py:7
        }""")
