"""The interp's lockstep execution: builtins, divergent branches, loops, exits, chunking, errors."""

from __future__ import annotations

import numpy as np
import pytest

from cubepy.errors import SanitizerError
from cubepy.ir import KernelDefinition, Param, Scope, Variable, VarKind, ops
from cubepy.ir.ops import OpRecord
from cubepy.ir.ops.base import Operation
from cubepy.ir.scope import Instruction
from cubepy.runtime.interp import InterpreterError
from cubepy.runtime.interp import launch as interp_launch

from .irb import F32, I32, LOC, U32, Builder, bi, c, launch


def vector_add_kernel(ty=F32, cube_dim=(64, 1, 1)) -> KernelDefinition:
    b = Builder()
    x, y, out = b.buffer(ty, "x"), b.buffer(ty, "y"), b.buffer(ty, "out")
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, b.meta("len", out))):
        b.store(out, pos, b.binary("add", b.load(x, pos), b.load(y, pos)))
    return b.kernel(cube_dim)


def test_vector_add_with_tail_guard():
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 0.5, dtype=np.float32)
    _, _, out = launch(vector_add_kernel(), 16, [x, y, np.zeros(n, np.float32)])
    np.testing.assert_array_equal(out, x + y)


def test_builtins_follow_cubecl_formulas():
    names = [
        "absolute_pos",
        "absolute_pos_x",
        "absolute_pos_y",
        "absolute_pos_z",
        "unit_pos",
        "unit_pos_x",
        "unit_pos_y",
        "unit_pos_z",
        "cube_pos",
        "cube_pos_x",
        "cube_pos_y",
        "cube_pos_z",
        "cube_dim",
        "cube_count",
        "cube_count_y",
        "plane_dim",
        "plane_pos",
        "unit_pos_plane",
    ]
    dim, count = (8, 5, 2), (3, 2, 2)
    b = Builder()
    outs = [b.buffer(U32, name) for name in names]
    for name, out in zip(names, outs):
        b.store(out, bi("absolute_pos"), bi(name))
    total = np.prod(dim) * np.prod(count)
    results = dict(zip(names, launch(b.kernel(dim), count, [np.zeros(total, np.uint32) for _ in names])))

    # Reference: loop over every unit with CubeCL's formulas.
    gx, gy = count[0] * dim[0], count[1] * dim[1]
    for cz in range(count[2]):
        for cy in range(count[1]):
            for cx in range(count[0]):
                for uz in range(dim[2]):
                    for uy in range(dim[1]):
                        for ux in range(dim[0]):
                            ax, ay, az = cx * dim[0] + ux, cy * dim[1] + uy, cz * dim[2] + uz
                            pos = az * gx * gy + ay * gx + ax
                            unit = uz * dim[0] * dim[1] + uy * dim[0] + ux
                            expected = {
                                "absolute_pos": pos,
                                "absolute_pos_x": ax,
                                "absolute_pos_y": ay,
                                "absolute_pos_z": az,
                                "unit_pos": unit,
                                "unit_pos_x": ux,
                                "unit_pos_y": uy,
                                "unit_pos_z": uz,
                                "cube_pos": cz * count[0] * count[1] + cy * count[0] + cx,
                                "cube_pos_x": cx,
                                "cube_pos_y": cy,
                                "cube_pos_z": cz,
                                "cube_dim": 80,
                                "cube_count": 12,
                                "cube_count_y": 2,
                                "plane_dim": 32,
                                "plane_pos": unit // 32,
                                "unit_pos_plane": unit % 32,
                            }
                            for name in names:
                                assert results[name][pos] == expected[name], (name, cx, cy, cz, ux, uy, uz)


def test_divergent_if_else_assigns_mutable_per_lane():
    b = Builder()
    out = b.buffer(U32)
    pos = bi("unit_pos")
    value = b.mut(U32, c(0))
    even = b.compare("eq", b.binary("mod", pos, c(2)), c(0))
    b.if_else(even, lambda: b.assign(value, b.binary("mul", pos, c(10))), lambda: b.assign(value, c(7)))
    b.store(out, pos, value)
    (result,) = launch(b.kernel((48, 1, 1)), 1, [np.zeros(48, np.uint32)])
    lanes = np.arange(48)
    np.testing.assert_array_equal(result, np.where(lanes % 2 == 0, lanes * 10, 7))


def test_nested_if_only_masked_lanes_write():
    b = Builder()
    out = b.buffer(U32)
    pos = bi("unit_pos")
    with b.if_(b.compare("gt", pos, c(10))):
        with b.if_(b.compare("lt", pos, c(20))):
            b.store(out, pos, c(1))
    (result,) = launch(b.kernel(), 1, [np.zeros(32, np.uint32)])
    np.testing.assert_array_equal(result, ((np.arange(32) > 10) & (np.arange(32) < 20)).astype(np.uint32))


def test_range_loop_per_lane_trip_counts():
    # out[u] = sum(range(u)) with a per-lane end, and an inclusive descending loop with a negative step.
    b = Builder()
    out, down = b.buffer(U32), b.buffer(I32)
    pos = bi("unit_pos")
    total = b.mut(U32, c(0))
    with b.range_loop(c(0), pos) as i:
        b.assign(total, b.binary("add", total, i))
    b.store(out, pos, total)
    count = b.mut(I32, c(0, I32))
    with b.range_loop(b.cast(pos, I32), c(-3, I32), c(-2, I32), inclusive=True) as j:
        b.assign(count, b.binary("add", count, c(1, I32)))
        _ = j
    b.store(down, pos, count)
    result, counts = launch(b.kernel(), 1, [np.zeros(32, np.uint32), np.zeros(32, np.int32)])
    lanes = np.arange(32)
    np.testing.assert_array_equal(result, lanes * (lanes - 1) // 2)
    np.testing.assert_array_equal(counts, [len(range(u, -4, -2)) for u in lanes])


def test_break_continue_return_divergence():
    # for i in 0..10: if i == unit % 7: break; if i odd: continue; acc += i
    # and units >= 28 return before storing.
    b = Builder()
    out = b.buffer(U32)
    pos = bi("unit_pos")
    acc = b.mut(U32, c(0))
    stop = b.binary("mod", pos, c(7))
    with b.range_loop(c(0), c(10)) as i:
        with b.if_(b.compare("eq", i, stop)):
            b.break_()
        with b.if_(b.compare("eq", b.binary("mod", i, c(2)), c(1))):
            b.continue_()
        with b.if_(b.compare("ge", pos, c(28))):
            b.return_()
        b.assign(acc, b.binary("add", acc, i))
    b.store(out, pos, acc)
    (result,) = launch(b.kernel(), 1, [np.full(32, 99, np.uint32)])
    expected = []
    for u in range(32):
        total, returned = 0, False
        for i in range(10):
            if i == u % 7:
                break
            if i % 2:
                continue
            if u >= 28:
                returned = True
                break
            total += i
        expected.append(99 if returned else total)
    np.testing.assert_array_equal(result, expected)


def test_loop_until_every_lane_breaks():
    # while True: n += 1; if n * n > unit: break
    b = Builder()
    out = b.buffer(U32)
    pos = bi("unit_pos")
    n = b.mut(U32, c(0))
    with b.loop():
        b.assign(n, b.binary("add", n, c(1)))
        with b.if_(b.compare("gt", b.binary("mul", n, n), pos)):
            b.break_()
    b.store(out, pos, n)
    (result,) = launch(b.kernel((64, 1, 1)), 1, [np.zeros(64, np.uint32)])
    np.testing.assert_array_equal(result, [int(np.floor(np.sqrt(u))) + 1 for u in range(64)])


def test_return_in_loop_skips_rest_of_kernel():
    b = Builder()
    out = b.buffer(U32)
    pos = bi("unit_pos")
    with b.loop():
        with b.if_(b.compare("lt", pos, c(5))):
            b.return_()
        b.break_()
    b.store(out, pos, c(1))
    (result,) = launch(b.kernel(), 1, [np.zeros(32, np.uint32)])
    np.testing.assert_array_equal(result, (np.arange(32) >= 5).astype(np.uint32))


def test_switch_cases_and_default():
    b = Builder()
    out = b.buffer(U32)
    pos = bi("unit_pos")
    value = b.binary("mod", pos, c(4))
    b.switch(
        value,
        {0: lambda: b.store(out, pos, c(100)), 2: lambda: b.store(out, pos, c(200))},
        lambda: b.store(out, pos, c(5)),
    )
    (result,) = launch(b.kernel(), 1, [np.zeros(32, np.uint32)])
    expected = np.select([np.arange(32) % 4 == 0, np.arange(32) % 4 == 2], [100, 200], 5)
    np.testing.assert_array_equal(result, expected)


def test_uniform_switch_value():
    b = Builder()
    out = b.buffer(U32)
    b.switch(c(3), {3: lambda: b.store(out, bi("unit_pos"), c(1))})
    (result,) = launch(b.kernel(), 1, [np.zeros(32, np.uint32)])
    assert result.sum() == 32


def test_many_chunks_give_the_same_result(monkeypatch):
    monkeypatch.setattr(interp_launch, "MAX_LANES_PER_CHUNK", 128)
    n = 5000
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    _, _, out = launch(vector_add_kernel(), 80, [x, x, np.zeros(n, np.float32)])
    np.testing.assert_array_equal(out, x + x)


def test_scalar_parameter():
    b = Builder()
    out = b.buffer(F32)
    scale = b.scalar(F32)
    b.store(out, bi("unit_pos"), b.binary("mul", b.cast(bi("unit_pos"), F32), scale))
    (result,) = launch(b.kernel(), 1, [np.zeros(32, np.float32)], scalars=[np.float32(2.5)])
    np.testing.assert_array_equal(result, np.arange(32) * 2.5)


class Unknown(Operation):
    """An operation with a record that no back end implements (not declared, so not in the op registry)."""

    RECORD = OpRecord("unknown", "test")


def test_unimplemented_operation_is_named():
    kernel = KernelDefinition("k", (), Scope((Instruction(None, Unknown(), LOC),)), (1, 1, 1))
    with pytest.raises(
        InterpreterError, match="op unknown is not supported by back end interp: no implementation is registered"
    ):
        launch(kernel, 1)


def test_internal_failure_names_instruction_and_location():
    # An undefined local cannot pass the verifier; the interp still reports it with the instruction.
    ghost = Variable(VarKind.CONST, 99, U32)
    out = Variable(VarKind.GLOBAL, 0, U32)
    body = Scope((Instruction(None, ops.IndexAssign(out, c(0), ghost), LOC),))
    kernel = KernelDefinition("k", (Param(out, "out", "array"),), body, (1, 1, 1))
    with pytest.raises(InterpreterError, match=r"user_kernel.py:42: .*index_assign.*read before"):
        launch(kernel, 1, [np.zeros(1, np.uint32)])


def test_sanitizer_error_is_not_wrapped():
    b = Builder()
    out = b.buffer(U32)
    b.store(out, c(5), c(1))
    with pytest.raises(SanitizerError):
        launch(b.kernel((1, 1, 1)), 1, [np.zeros(1, np.uint32)])
