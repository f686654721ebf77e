"""One negative test per verifier rule, plus well-typed IR that passes."""

from __future__ import annotations

import pytest

from cubepy import ir
from cubepy.errors import VerifyError
from cubepy.ir import Scope, Type, Variable, VarKind, constant, verify
from cubepy.ir import ops as o
from cubepy.ir.ops import branch as b
from cubepy.ir.verifier import RULES
from tests.irbuild import Ids, inst, kernel
from tests.irbuild import param_buffer as buffer

BOOL, F32, U32 = Type(ir.BOOL), Type(ir.F32), Type(ir.U32)


def _expect(rule: str, k) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        verify(k)
    assert f"[{rule}]" in str(info.value)
    return info.value


def test_well_typed_kernel_passes():
    ids = Ids()
    x = buffer(0, F32)
    n, cond, v = ids.const(U32), ids.const(BOOL), ids.const(F32)
    pos = ir.builtin("absolute_pos")
    body = [
        inst(n, o.lookup("len")(x.var)),
        inst(cond, o.lookup("lt")(pos, n)),
        inst(None, b.If(cond, Scope((inst(v, o.Index(x.var, pos)), inst(None, o.IndexAssign(x.var, pos, v)))))),
    ]
    verify(kernel(body, [x]))


def test_error_names_source_line_and_instruction():
    ids = Ids()
    err = _expect(
        "type-mismatch", kernel([inst(ids.const(F32), o.lookup("add")(constant(1.0, F32), constant(1, U32)))])
    )
    assert "kernel.py:7" in str(err)
    assert "add 1.0f32, 1u32" in str(err)


def test_unknown_op_name():
    with pytest.raises(KeyError, match="no IR operation named 'frobnicate'"):
        o.lookup("frobnicate")


def test_unknown_op():
    import attrs

    @attrs.frozen
    class Mystery(o.Operation):
        """An operation class without a record."""

    _expect("unknown-op", kernel([inst(None, Mystery())]))


def test_a_records_own_checks_run():
    import attrs

    calls = []

    @attrs.frozen
    class Extra(o.Operation):
        RECORD = o.OpRecord("extra", "test", checks=(lambda checker, i, op: calls.append(op),))

    verify(kernel([inst(None, Extra())]))
    assert calls == [Extra()]


def test_undefined_operand():
    ids = Ids()
    ghost = ids.const(F32)
    _expect("undefined-operand", kernel([inst(ids.const(F32), o.lookup("neg")(ghost))]))


def test_local_defined_in_branch_is_not_visible_after():
    ids = Ids()
    inner = ids.const(F32)
    body = [
        inst(None, b.If(constant(True, BOOL), Scope((inst(inner, o.lookup("neg")(constant(1.0, F32))),)))),
        inst(ids.const(F32), o.lookup("neg")(inner)),
    ]
    _expect("undefined-operand", kernel(body))


def test_const_reassigned():
    ids = Ids()
    x = ids.const(F32)
    _expect("const-reassigned", kernel([inst(x, o.Assign(constant(1.0, F32))), inst(x, o.Assign(constant(2.0, F32)))]))


def test_bad_out():
    _expect(
        "bad-out", kernel([inst(Variable(VarKind.CONSTANT, 0, F32, value=1.0), o.lookup("neg")(constant(1.0, F32)))])
    )


def test_missing_out():
    _expect("missing-out", kernel([inst(None, o.lookup("add")(constant(1.0, F32), constant(1.0, F32)))]))


def test_type_mismatch():
    ids = Ids()
    _expect("type-mismatch", kernel([inst(ids.const(U32), o.lookup("add")(constant(1.0, F32), constant(1.0, F32)))]))


def test_type_mismatch_of_a_sync_plane_mask():
    _expect("type-mismatch", kernel([inst(None, o.SyncPlane(constant(-1, Type(ir.I32))))]))
    verify(kernel([inst(None, o.SyncPlane(constant(0xFFFF, U32)))]))  # a u32 mask is well formed


def test_elem_kind():
    ids = Ids()
    _expect("elem-kind", kernel([inst(ids.const(U32), o.lookup("sqrt")(constant(4, U32)))]))


def test_not_memory():
    ids = Ids()
    _expect("not-memory", kernel([inst(ids.const(F32), o.Index(constant(1.0, F32), constant(0, U32)))]))


def test_bad_index():
    x = buffer(0, F32)
    ids = Ids()
    _expect("bad-index", kernel([inst(ids.const(F32), o.Index(x.var, constant(0.5, F32)))], [x]))


def test_break_outside_loop():
    _expect("break-outside-loop", kernel([inst(None, b.Break())]))


def test_break_inside_loop_passes():
    verify(kernel([inst(None, b.Loop(Scope((inst(None, b.Break()),))))]))


def test_bad_param():
    wrong = ir.Param(Variable(VarKind.SCALAR, 0, F32), "x", "array")
    _expect("bad-param", kernel([], [wrong]))


def test_same_len_must_name_an_earlier_buffer():
    first = ir.Param(Variable(VarKind.GLOBAL, 0, F32), "a", "array")
    ahead = ir.Param(Variable(VarKind.GLOBAL, 1, F32), "b", "array", same_len=2)  # slot 2 is not earlier
    later = ir.Param(Variable(VarKind.GLOBAL, 2, F32), "c", "array")
    error = _expect("bad-param", kernel([], [first, ahead, later]))
    assert "same_len 2" in str(error)
    verify(kernel([], [first, ir.Param(Variable(VarKind.GLOBAL, 1, F32), "b", "array", same_len=0)]))


def test_bad_memory_decl():
    shared = Variable(VarKind.SHARED, 0, F32, length=16, alignment=24)
    _expect("bad-memory-decl", kernel([], shared_memories=(shared,)))


def _table_read(table: ir.ConstTable):
    """A kernel that declares ``table`` and reads its item 0."""
    out = Ids().const(table.var.type)
    return kernel([inst(out, o.Index(table.var, constant(0, U32)))], const_tables=(table,))


def test_a_const_table_read_passes():
    verify(_table_read(ir.const_table(0, ir.F32, (0.5, -1.0))))


def test_bad_const_table():
    _expect("bad-const-table", _table_read(ir.const_table(0, ir.F32, ())))  # empty


def test_bad_const_table_over_the_constant_bank():
    verify(_table_read(ir.const_table(0, ir.U8, (7,) * ir.MAX_CONST_BYTES)))  # exactly 64 KiB fits
    err = _expect("bad-const-table", _table_read(ir.const_table(0, ir.U8, (7,) * (ir.MAX_CONST_BYTES + 1))))
    assert "65537 bytes" in str(err)


def test_bad_const_table_over_the_bank_together():
    first, second = ir.const_table(0, ir.F32, (1.0,) * 8192), ir.const_table(1, ir.F32, (2.0,) * 8192)
    verify(kernel([], const_tables=(first,)))  # 32 KiB each: one fits, both exceed 64 KiB
    _expect("bad-const-table", kernel([], const_tables=(first, second, ir.const_table(2, ir.F32, (3.0,)))))


@pytest.mark.parametrize(
    "elem, values",
    [(ir.F32, (1,)), (ir.I32, (1.5,)), (ir.U8, (256,)), (ir.I8, (-129,)), (ir.BOOL, (1,)), (ir.I32, (True,))],
)
def test_bad_const_table_value_of_another_type(elem, values):
    err = _expect("bad-const-table", kernel([], const_tables=(ir.const_table(0, elem, values),)))
    assert "not a value of" in str(err)


def test_bad_const_table_length_mismatch():
    table = ir.const_table(0, ir.F32, (1.0, 2.0))
    wrong = ir.ConstTable(Variable(VarKind.CONST_TABLE, 0, F32, length=3), table.values)
    _expect("bad-const-table", kernel([], const_tables=(wrong,)))


def test_bad_const_table_read_but_not_declared():
    table = ir.const_table(0, ir.F32, (1.0, 2.0))
    out = Ids().const(F32)
    err = _expect("bad-const-table", kernel([inst(out, o.Index(table.var, constant(0, U32)))]))
    assert "not a table the kernel declares" in str(err)


def test_read_only_memory():
    table = ir.const_table(0, ir.F32, (1.0, 2.0))
    store = inst(None, o.IndexAssign(table.var, constant(0, U32), constant(3.0, F32)))
    err = _expect("read-only-memory", kernel([store], const_tables=(table,)))
    assert "index_assign writes const[0]" in str(err)


@pytest.mark.parametrize("kind", ["add", "load"])
def test_read_only_memory_has_no_atomics(kind):
    table = ir.const_table(0, ir.U32, (1, 2))
    op = o.lookup(f"atomic_{kind}")(table.var, constant(0, U32), None if kind == "load" else constant(1, U32))
    _expect("read-only-memory", kernel([inst(Ids().const(U32), op)], const_tables=(table,)))


def test_every_rule_has_a_negative_test():
    tested = {name[len("test_") :].replace("_", "-") for name in globals() if name.startswith("test_")}
    assert set(RULES) <= tested, set(RULES) - tested


def test_range_loop_index_is_visible_in_body_only():
    ids = Ids()
    i = ids.const(U32)
    loop = b.RangeLoop(
        i,
        constant(0, U32),
        constant(4, U32),
        constant(1, U32),
        False,
        Scope((inst(ids.const(U32), o.lookup("add")(i, constant(1, U32))),)),
    )
    verify(kernel([inst(None, loop)]))
    _expect("undefined-operand", kernel([inst(None, loop), inst(ids.const(U32), o.lookup("bitnot")(i))]))


def test_bad_unroll():
    ids = Ids()
    for bad in (0, -1):
        loop = b.RangeLoop(ids.const(U32), constant(0, U32), constant(4, U32), constant(1, U32), False, Scope(()), bad)
        err = _expect("bad-unroll", kernel([inst(None, loop)]))
        assert f"unroll count must be a positive int, got {bad}" in str(err)
    good = b.RangeLoop(ids.const(U32), constant(0, U32), constant(4, U32), constant(1, U32), False, Scope(()), 2)
    verify(kernel([inst(None, good)]))


def test_type_equality_is_by_value():
    assert Type(ir.F32, 4) == Type(ir.F32, 4)
    assert Type(ir.F32, 4) != Type(ir.F32, 2)


# -- warp specialization -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("barrier_id", "units", "detail"),
    [
        (16, 64, "named barrier id 16 is outside [0, 16)"),
        (1, 48, "unit count 48 is not a positive multiple of 32"),
        (1, 0, "unit count 0 is not a positive multiple of 32"),
        (1, 96, "unit count 96 exceeds the 64 units of the cube"),
    ],
)
@pytest.mark.parametrize("op", [o.NamedBarrierSync, o.NamedBarrierArrive], ids=["sync", "arrive"])
def test_comptime_named_barrier_operands(op, barrier_id, units, detail):
    error = _expect(
        "bad-immediate", kernel([inst(None, op(constant(barrier_id, U32), constant(units, U32)))], cube_dim=(64, 1, 1))
    )
    assert detail in str(error)


def test_named_barrier_operands_known_at_run_time_pass_and_are_u32():
    ids = Ids()
    runtime_id, runtime_units = ids.const(U32), ids.const(U32)
    verify(kernel([inst(runtime_id, o.lookup("add")(constant(1, U32), constant(2, U32))),
                   inst(runtime_units, o.lookup("add")(constant(32, U32), constant(32, U32))),
                   inst(None, o.NamedBarrierSync(runtime_id, runtime_units))], cube_dim=(64, 1, 1)))  # fmt: skip
    verify(kernel([inst(None, o.NamedBarrierArrive(constant(15, U32), constant(64, U32)))], cube_dim=(48, 1, 1)))
    _expect("type-mismatch", kernel([inst(None, o.NamedBarrierSync(constant(1, Type(ir.I32)), constant(32, U32)))]))


@pytest.mark.parametrize("count", [16, 20, 252, 264, 7.0, True])
def test_setmaxnreg_count_is_a_multiple_of_eight_in_24_to_256(count):
    error = _expect("bad-immediate", kernel([inst(None, o.SetMaxNReg(count, True))]))
    assert "[24, 256]" in str(error)


@pytest.mark.parametrize("count", [24, 32, 240, 256])
def test_setmaxnreg_accepts_the_ptx_counts(count):
    verify(kernel([inst(None, o.SetMaxNReg(count, False))]))


def test_setmaxnreg_increase_is_a_bool():
    _expect("bad-immediate", kernel([inst(None, o.SetMaxNReg(32, 1))]))  # type: ignore[arg-type]


def test_address_multiple_of_is_a_power_of_two_on_a_buffer():
    buffer = Variable(VarKind.GLOBAL, 0, F32)
    verify(kernel([], [ir.Param(buffer, "a", "array", address_multiple_of=16)]))
    error = _expect("bad-param", kernel([], [ir.Param(buffer, "a", "array", address_multiple_of=24)]))
    assert "address_multiple_of 24" in str(error)
    _expect("bad-param", kernel([], [ir.Param(buffer, "a", "array", address_multiple_of=0)]))
    scalar = Variable(VarKind.SCALAR, 0, U32)
    assert "only on a buffer" in str(
        _expect("bad-param", kernel([], [ir.Param(scalar, "n", "scalar", address_multiple_of=16)]))
    )


def test_multiple_of_is_a_power_of_two_on_an_integer_scalar_or_a_buffer():
    u32_scalar = Variable(VarKind.SCALAR, 0, U32)
    verify(kernel([], [ir.Param(u32_scalar, "n", "scalar", multiple_of=16)]))
    verify(kernel([], [ir.Param(Variable(VarKind.GLOBAL, 0, F32), "a", "array", multiple_of=16)]))  # its len()
    error = _expect("bad-param", kernel([], [ir.Param(u32_scalar, "n", "scalar", multiple_of=12)]))
    assert "multiple_of 12" in str(error)
    _expect("bad-param", kernel([], [ir.Param(Variable(VarKind.SCALAR, 0, F32), "x", "scalar", multiple_of=16)]))
    _expect("bad-param", kernel([], [ir.Param(Variable(VarKind.GLOBAL, 0, U32), "a", "array", multiple_of=6)]))
    tensor_map = ir.Param(Variable(VarKind.TENSOR_MAP, 0, U32), "t", "tensor_map", multiple_of=16)
    assert "multiple_of 16" in str(_expect("bad-param", kernel([], [tensor_map])))


def test_shape_and_stride_multiples_are_one_power_of_two_per_dimension_of_a_tensor():
    tensor = Variable(VarKind.GLOBAL, 0, F32)
    verify(kernel([], [ir.Param(tensor, "t", "tensor", rank=2, shape_multiple_of=(16, 1), stride_multiple_of=(1, 1))]))
    for bad in (
        ir.Param(tensor, "t", "tensor", rank=2, shape_multiple_of=(16,)),  # one per dimension
        ir.Param(tensor, "t", "tensor", rank=2, stride_multiple_of=(16, 3)),  # not a power of two
        ir.Param(tensor, "a", "array", shape_multiple_of=(16,)),  # an array has no shape words
    ):
        assert "_multiple_of" in str(_expect("bad-param", kernel([], [bad])))


def test_unit_strides_are_one_flag_per_dimension_of_a_tensor_of_known_rank():
    tensor = Variable(VarKind.GLOBAL, 0, F32)
    verify(kernel([], [ir.Param(tensor, "t", "tensor", rank=2, unit_strides=(False, True))]))
    for bad in (
        ir.Param(tensor, "t", "tensor", rank=2, unit_strides=(True,)),  # one per dimension
        ir.Param(tensor, "t", "tensor", unit_strides=(True,)),  # rank unknown
        ir.Param(tensor, "a", "array", unit_strides=(True,)),  # an array has no stride words
    ):
        assert "unit_strides" in str(_expect("bad-param", kernel([], [bad])))


def test_only_a_rank_2_tensor_of_single_items_is_contiguous():
    tensor = Variable(VarKind.GLOBAL, 0, F32)
    verify(kernel([], [ir.Param(tensor, "t", "tensor", rank=2, contiguous=True)]))
    lines = Variable(VarKind.GLOBAL, 0, Type(ir.F32, 4))
    for bad in (
        ir.Param(tensor, "t", "tensor", rank=3, contiguous=True),
        ir.Param(tensor, "t", "tensor", contiguous=True),  # rank unknown
        ir.Param(tensor, "a", "array", contiguous=True),
        ir.Param(lines, "t", "tensor", rank=2, contiguous=True),
    ):
        assert "contiguous" in str(_expect("bad-param", kernel([], [bad])))


def test_len_as_shape_names_a_dimension_of_an_earlier_tensor_of_known_rank():
    tensor = ir.Param(Variable(VarKind.GLOBAL, 0, F32), "x", "tensor", rank=2)
    weights = Variable(VarKind.GLOBAL, 1, F32)
    verify(kernel([], [tensor, ir.Param(weights, "w", "array", len_is_buffer_len=True, len_as_shape=(0, 1))]))
    unranked = ir.Param(Variable(VarKind.GLOBAL, 0, F32), "x", "tensor")
    for params in (
        [tensor, ir.Param(weights, "w", "array", len_is_buffer_len=True, len_as_shape=(0, 2))],  # no dimension 2
        [tensor, ir.Param(weights, "w", "array", len_as_shape=(0, 1))],  # its len is not its buffer's
        [unranked, ir.Param(weights, "w", "array", len_is_buffer_len=True, len_as_shape=(0, 1))],  # rank unknown
        [ir.Param(weights, "w", "array", len_is_buffer_len=True, len_as_shape=(0, 1)), tensor],  # not earlier
        [tensor, ir.Param(weights, "w", "tensor", rank=1, len_is_buffer_len=True, len_as_shape=(0, 1))],  # a tensor
    ):
        assert "len_as_shape" in str(_expect("bad-param", kernel([], params)))


def test_len_as_product_names_two_factors_that_exist():
    tensor = ir.Param(Variable(VarKind.GLOBAL, 0, F32), "x", "tensor", rank=2)
    rows = ir.Param(Variable(VarKind.SCALAR, 0, U32), "rows", "scalar")
    wide = ir.Param(Variable(VarKind.SCALAR, 1, Type(ir.U64)), "wide", "scalar")
    out = Variable(VarKind.GLOBAL, 1, F32)
    scalar, extent = ir.ProductFactor("scalar", 0), ir.ProductFactor("shape", 0, 1)

    def product(outer, inner, covering=True):
        return ir.Param(out, "out", "array", len_is_buffer_len=covering, len_as_product=(outer, inner))

    for good in (((scalar,), (extent,)), ((ir.ProductFactor("len", 0), scalar), (scalar,))):
        verify(kernel([], [tensor, product(*good), rows, wide]))
    for bad in (
        product((scalar,), (ir.ProductFactor("shape", 0, 2),)),  # x has no dimension 2
        product((ir.ProductFactor("scalar", 1),), (extent,)),  # a u64 scalar
        product((scalar, ir.ProductFactor("scalar", 5)), (extent,)),  # no such scalar
        product((ir.ProductFactor("len", 7),), (extent,)),  # no such buffer
        product((ir.ProductFactor("size", 0),), (extent,)),  # no such kind
        product((), (extent,)),  # a factor that names nothing
        product((scalar,), (extent,), covering=False),  # its len is not its buffer's
    ):
        assert "len_as_product" in str(_expect("bad-param", kernel([], [tensor, bad, rows, wide])))
    shape_of_array = ir.Param(Variable(VarKind.GLOBAL, 0, F32), "x", "array")
    bad = product((scalar,), (extent,))
    assert "len_as_product" in str(_expect("bad-param", kernel([], [shape_of_array, bad, rows, wide])))


def test_same_shape_names_an_earlier_tensor_of_the_same_rank():
    first = ir.Param(Variable(VarKind.GLOBAL, 0, F32), "x", "tensor", rank=2)
    second = Variable(VarKind.GLOBAL, 1, F32)
    verify(kernel([], [first, ir.Param(second, "out", "tensor", rank=2, same_shape=0)]))
    cube = ir.Param(Variable(VarKind.GLOBAL, 0, F32), "x", "tensor", rank=3)
    for params in (
        [first, ir.Param(second, "out", "tensor", rank=3, same_shape=0)],  # another rank
        [first, ir.Param(second, "out", "tensor", same_shape=0)],  # rank unknown
        [first, ir.Param(second, "out", "array", same_shape=0)],  # an array has no shape words
        [cube, ir.Param(second, "out", "tensor", rank=2, same_shape=0)],  # the earlier one has another rank
        [ir.Param(second, "out", "tensor", rank=2, same_shape=0), first],  # not earlier
        [first, ir.Param(second, "out", "tensor", rank=2, same_shape=1)],  # itself
    ):
        assert "same_shape" in str(_expect("bad-param", kernel([], params)))
