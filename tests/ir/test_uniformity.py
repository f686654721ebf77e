"""The plane_uniform pass: which plane collectives the whole plane reaches together."""

from __future__ import annotations

import pytest

from cubepy.ir import BOOL, F32, U32, builtin, ops, walk
from cubepy.ir.uniformity import cube_uniform_control, plane_uniform_pass
from tests.irbuild import KernelBuilder, T, lit


def _flags(kb: KernelBuilder) -> list[bool]:
    """The ``uniform`` flag of every plane collective, in program order."""
    definition = plane_uniform_pass(kb.build())
    return [inst.operation.uniform for inst in walk(definition.body) if isinstance(inst.operation, ops.PlaneOp)]


def _sum(kb: KernelBuilder, out, value=None) -> None:
    pos = builtin("absolute_pos")
    value = value if value is not None else kb.index(out, pos)
    kb.store(out, pos, kb.plane("sum", value))


def test_straight_line_collective_is_uniform():
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    _sum(kb, out)
    assert _flags(kb) == [True]


def test_partial_planes_keep_the_active_mask():
    kb = KernelBuilder("k", cube_dim=(48, 1, 1))
    out = kb.array(T(F32))
    _sum(kb, out)
    assert _flags(kb) == [False]  # the second plane of each cube has 16 units
    kb = KernelBuilder("k", cube_dim=(16, 6, 1))
    out = kb.array(T(F32))
    _sum(kb, out)
    assert _flags(kb) == [True]  # 96 units: three whole planes


@pytest.mark.parametrize(
    "builtin_name, uniform",
    [("unit_pos", False), ("unit_pos_plane", False), ("absolute_pos", False), ("plane_pos", True), ("cube_pos", True)],
)
def test_if_on_a_builtin(builtin_name, uniform):
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    with kb.if_(kb.compare("eq", builtin(builtin_name), lit(0, U32))):
        _sum(kb, out)
    _sum(kb, out)  # after the if every unit is back
    assert _flags(kb) == [uniform, True]


def test_if_on_a_scalar_and_buffer_length_is_uniform_but_on_a_loaded_value_is_not():
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    with kb.if_(kb.compare("lt", n, kb.meta("len", out))):
        _sum(kb, out)
    with kb.if_(kb.compare("lt", kb.index(out, lit(0, U32)), lit(1.0, F32))):
        _sum(kb, out)
    assert _flags(kb) == [True, False]


def test_early_return_under_a_per_unit_condition_makes_the_rest_divergent():
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    _sum(kb, out)
    with kb.if_(kb.compare("ge", builtin("absolute_pos"), n)):
        kb.return_()
    _sum(kb, out)
    assert _flags(kb) == [True, False]


def test_early_return_of_the_whole_plane_keeps_it_uniform():
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    with kb.if_(kb.compare("ge", builtin("cube_pos"), n)):
        kb.return_()
    _sum(kb, out)
    assert _flags(kb) == [True]


def test_loop_with_per_unit_bounds_diverges_inside_and_reconverges_after():
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    acc = kb.mut(T(F32), lit(0.0, F32))
    with kb.range_loop(builtin("unit_pos"), kb.meta("len", out), lit(64, U32)):
        _sum(kb, out)
        kb.assign(acc, lit(1.0, F32))
    _sum(kb, out, acc)
    assert _flags(kb) == [False, True]


def test_loop_with_uniform_bounds_is_uniform_and_so_is_its_index():
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    with kb.range_loop(lit(0, U32), n) as i:
        with kb.if_(kb.compare("lt", i, lit(3, U32))):
            _sum(kb, out)
    assert _flags(kb) == [True]


@pytest.mark.parametrize("jump", ["break_", "continue_", "return_"])
def test_a_per_unit_jump_in_a_loop_makes_the_whole_body_divergent(jump):
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    with kb.range_loop(lit(0, U32), n):
        _sum(kb, out)  # before the jump, but a later iteration runs without the units that jumped
        with kb.if_(kb.compare("eq", builtin("unit_pos"), lit(3, U32))):
            getattr(kb, jump)()
    _sum(kb, out)
    assert _flags(kb) == [False, jump != "return_"]


def test_a_whole_plane_break_keeps_the_loop_uniform():
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    with kb.loop():
        _sum(kb, out)
        with kb.if_(kb.compare("eq", builtin("plane_pos"), n)):
            kb.break_()
    assert _flags(kb) == [True]


def test_a_mutable_local_assigned_under_divergence_is_divergent_everywhere():
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    flag = kb.mut(T(BOOL), lit(False, BOOL))
    with kb.if_(flag):  # read before the divergent assignment below: the fixed point still finds it
        _sum(kb, out)
    with kb.if_(kb.compare("eq", builtin("unit_pos"), lit(0, U32))):
        kb.assign(flag, lit(True, BOOL))
    with kb.if_(flag):
        _sum(kb, out)
    assert _flags(kb) == [False, False]


def test_uniform_reductions_give_uniform_values():
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    anyone = kb.plane("any", kb.compare("lt", kb.index(out, builtin("unit_pos")), lit(0.0, F32)))
    with kb.if_(anyone):
        _sum(kb, out)
    assert _flags(kb) == [True, True]


def test_the_flag_is_printed():
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    _sum(kb, out)
    text = str(next(i for i in walk(plane_uniform_pass(kb.build()).body) if i.op == "plane_sum"))
    assert "= plane_sum %" in text and text.split("  ;")[0].endswith(" {uniform=True}"), text


# -- cube_uniform_control: the branches and loops every running unit of a cube takes alike --------------


def _cube_uniform(kb: KernelBuilder) -> list[bool]:
    """For every branch and loop of the kernel in program order: whether the cube decides it alike."""
    definition = kb.build()
    decided = cube_uniform_control(definition)
    controls = (ops.branch.If, ops.branch.IfElse, ops.branch.RangeLoop, ops.branch.Loop)
    return [id(inst) in decided for inst in walk(definition.body) if isinstance(inst.operation, controls)]


@pytest.mark.parametrize(
    "builtin_name, uniform",
    [("cube_pos", True), ("cube_count", True), ("plane_pos", False), ("unit_pos_plane", False), ("unit_pos", False)],
)
def test_the_cube_decides_alike_only_on_builtins_equal_on_all_its_units(builtin_name, uniform):
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    with kb.if_(kb.compare("eq", builtin(builtin_name), lit(0, U32))):
        kb.store(out, lit(0, U32), lit(1.0, F32))
    assert _cube_uniform(kb) == [uniform]


def test_a_plane_reduction_is_not_cube_uniform():
    kb = KernelBuilder("k")
    out = kb.array(T(F32))
    total = kb.plane("sum", lit(1.0, F32))
    with kb.if_(kb.compare("lt", total, lit(3.0, F32))):
        kb.store(out, lit(0, U32), total)
    assert _cube_uniform(kb) == [False]


def test_a_return_leaves_the_units_still_running_alike():
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    with kb.if_(kb.compare("ge", builtin("unit_pos"), n)):
        kb.return_()
    with kb.range_loop(lit(0, U32), n):
        kb.store(out, builtin("unit_pos"), lit(1.0, F32))
    assert _cube_uniform(kb) == [False, True]


def test_a_per_unit_break_undoes_what_the_loop_body_decided_alike():
    kb = KernelBuilder("k")
    out, n = kb.array(T(F32)), kb.scalar(T(U32))
    with kb.range_loop(lit(0, U32), n):
        with kb.if_(kb.compare("lt", n, lit(4, U32))):  # uniform on the first walk of the body
            kb.store(out, lit(0, U32), lit(1.0, F32))
        with kb.if_(kb.compare("eq", builtin("unit_pos"), lit(3, U32))):
            kb.break_()
    assert _cube_uniform(kb) == [False, False, False]
