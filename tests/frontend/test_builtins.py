"""Topology builtins, synchronization, plane operations and math intrinsics."""

import math

import pytest

import cubepy.frontend as cp
from cubepy import ir
from cubepy.frontend import Array, cube, f32, i32, testing, u32

POSITION_BUILTINS = [name for name in cp.__all__ if name.isupper()]


def test_every_ir_builtin_has_a_module_level_object():
    assert sorted(n.lower() for n in POSITION_BUILTINS) == sorted(ir.BUILTINS)
    for name in POSITION_BUILTINS:
        assert getattr(cp, name).__doc__


@cube
def positions(a: Array[u32]):
    a[cp.ABSOLUTE_POS] = cp.UNIT_POS_X + cp.CUBE_POS_Y * cp.CUBE_DIM + cp.PLANE_DIM


def test_builtins_become_ir_builtin_variables():
    expansion = testing.expand(positions, Array[u32])
    names = {
        var.name
        for inst in expansion.instructions
        for var in inst.operation.operands()
        if var.kind is ir.VarKind.BUILTIN
    }
    assert names == {"absolute_pos", "unit_pos_x", "cube_pos_y", "cube_dim", "plane_dim"}


@cube
def syncs():
    cp.sync_cube()
    cp.sync_plane()
    cp.sync_async_proxy_shared()


def test_synchronization():
    assert testing.expand(syncs).ops == ["sync_cube", "sync_plane", "sync_async_proxy_shared"]


@cube
def planes(x: f32, flag: cp.boolean):
    return (
        cp.plane_sum(x),
        cp.plane_prod(x),
        cp.plane_min(x),
        cp.plane_max(x),
        cp.plane_inclusive_sum(x),
        cp.plane_exclusive_sum(x),
        cp.plane_all(flag),
        cp.plane_any(flag),
        cp.plane_ballot(flag),
        cp.plane_elect(),
        cp.plane_broadcast(x, 0),
        cp.plane_shuffle(x, cp.UNIT_POS_PLANE),
        cp.plane_shuffle_xor(x, 1),
        cp.plane_shuffle_up(x, 1),
        cp.plane_shuffle_down(x, 1),
    )


def test_plane_operations():
    expansion = testing.expand(planes, f32, cp.boolean)
    assert expansion.ops == [
        f"plane_{n}"
        for n in (
            "sum",
            "prod",
            "min",
            "max",
            "inclusive_sum",
            "exclusive_sum",
            "all",
            "any",
            "ballot",
            "elect",
            "broadcast",
            "shuffle",
            "shuffle_xor",
            "shuffle_up",
            "shuffle_down",
        )
    ]
    ballot = expansion.instructions[8]
    assert str(ballot.out.type) == "u32x4"


@cube
def math_ops(x: f32, n: i32):
    return (
        cp.exp(x),
        cp.log(x),
        cp.log1p(x),
        cp.sqrt(x),
        cp.rsqrt(x),
        cp.sin(x),
        cp.cos(x),
        cp.tan(x),
        cp.tanh(x),
        cp.erf(x),
        cp.powf(x, 2.0),
        cp.floor(x),
        cp.ceil(x),
        cp.round(x),
        cp.trunc(x),
        cp.recip(x),
        cp.abs(n),
        cp.min(x, 1.0),
        cp.max(n, 2),
        cp.clamp(x, 0.0, 1.0),
        cp.fma(x, x, x),
        cp.select(x > 0.0, x, 0.0),
    )


def test_math_intrinsics():
    assert testing.expand(math_ops, f32, i32).ops == [
        "exp",
        "log",
        "log1p",
        "sqrt",
        "rsqrt",
        "sin",
        "cos",
        "tan",
        "tanh",
        "erf",
        "powf",
        "floor",
        "ceil",
        "round",
        "trunc",
        "recip",
        "abs",
        "min",
        "max",
        "clamp",
        "fma",
        "gt",
        "select",
    ]


@cube
def int_math(n: u32):
    return cp.sqrt(n)


def test_float_math_on_integers_computes_in_f32():
    assert testing.expand(int_math, u32).ops == ["cast", "sqrt"]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: cp.min(2, 3), 2),
        (lambda: cp.max(2, 3, 7), 7),
        (lambda: cp.clamp(5, 0, 3), 3),
        (lambda: cp.sqrt(4.0), 2.0),
        (lambda: cp.abs(-2), 2),
        (lambda: cp.fma(2, 3, 4), 10),
        (lambda: cp.select(True, 1, 2), 1),
        (lambda: cp.floor(2.5), 2),
        (lambda: cp.recip(4.0), 0.25),
        (lambda: cp.erf(0.0), 0.0),
        (lambda: cp.rsqrt(4.0), 0.5),
    ],
)
def test_builtins_fold_on_comptime_values(call, expected):
    assert call() == expected


def test_every_builtin_has_a_docstring():
    for name in cp.__all__:
        value = getattr(cp, name)
        if callable(value) and not isinstance(value, type):
            assert value.__doc__, name


def test_unroll_and_runtime_outside_kernels():
    assert list(cp.unroll(range(3))) == [0, 1, 2]
    assert cp.runtime(3) == 3 and cp.comptime(4) == 4
    assert math.isclose(cp.powf(2, 0.5), math.sqrt(2))
