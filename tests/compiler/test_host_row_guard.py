"""Row guards on the host: a plain kernel ``prefix; if x < n: body`` runs each row's admitted units with the
guard known (``cubepy.compiler.targets.host_row_guard``).  The bits must be the interp's, including rows cut
by ``n``, a position that wraps inside a row (the row then runs as written) and the guard's other terms; and
the vectorized row must not be masked loads and stores."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import (
    ABSOLUTE_POS,
    ABSOLUTE_POS_X,
    ABSOLUTE_POS_Y,
    CUBE_POS,
    UNIT_POS,
    UNIT_POS_PLANE,
    UNIT_POS_X,
    Array,
    Tensor,
    cube,
    f32,
    u32,
)
from cubepy.compiler.emit_host import compile_host
from cubepy.compiler.targets.host_row_guard import find_row_guard
from examples.vector_add import vector_add
from tests.compiler.fission import _arrays, _definition, on_interp_and_cpu


@cube(launch=True)
def shifted_fill(out: Array[u32], offset: u32, n: u32):
    """out[p] = p + 1 where ``(p + offset) mod 2**32 < n``: with a large ``offset`` the position wraps."""
    if ABSOLUTE_POS + offset < n:
        out[ABSOLUTE_POS] = ABSOLUTE_POS + u32(1)


@cube(launch=True)
def flagged_scale(data: Array[f32], out: Array[f32], flag: u32, n: u32):
    """out[p] = 2 * data[p] for p < n, only when ``flag`` is 1 (a term independent of the unit), written
    ``n > p``."""
    if flag == u32(1) and n > ABSOLUTE_POS:
        out[ABSOLUTE_POS] = data[ABSOLUTE_POS] * f32(2.0)


@cube(launch=True)
def interior_copy(grid: Tensor[f32], out: Tensor[f32]):
    """out[i, j] = grid[i, j] + 1 inside the grid: a 2-D cube's guard, ``i < rows`` the same for a row of units."""
    i = ABSOLUTE_POS_Y
    j = ABSOLUTE_POS_X
    if i < grid.shape(0) and j < grid.shape(1):
        out[i, j] = grid[i, j] + f32(1.0)


def test_a_ragged_last_cube_writes_only_below_n_and_keeps_the_rest():
    n, size = 1000, 1280  # 5 cubes of 256; the guard cuts the 4th cube at 232 units and admits none of the 5th
    data = np.arange(size, dtype=np.float32) * np.float32(0.5)

    def make(client):
        return client.create(data), client.create(np.full(size, -1.0, np.float32))

    def launch(client, src, dst):
        args = (cp.ArrayArg(src), cp.ArrayArg(dst), cp.ScalarArg(1, u32), cp.ScalarArg(n, u32))
        flagged_scale.launch(client, cp.CubeCount(5), cp.CubeDim(256), *args)

    interp, cpu = on_interp_and_cpu(launch, make)
    want = np.where(np.arange(size) < n, data * 2, -1).astype(np.float32)
    np.testing.assert_array_equal(interp[1], want)
    np.testing.assert_array_equal(cpu[1].view(np.uint32), interp[1].view(np.uint32))


def test_a_false_term_beside_the_position_admits_no_unit():
    def make(client):
        return client.create(np.ones(512, np.float32)), client.create(np.full(512, 7.0, np.float32))

    def launch(client, src, dst):
        args = (cp.ArrayArg(src), cp.ArrayArg(dst), cp.ScalarArg(0, u32), cp.ScalarArg(512, u32))
        flagged_scale.launch(client, cp.CubeCount(2), cp.CubeDim(256), *args)

    interp, cpu = on_interp_and_cpu(launch, make)
    np.testing.assert_array_equal(interp[1], np.full(512, 7.0, np.float32))
    np.testing.assert_array_equal(cpu[1], interp[1])


@pytest.mark.parametrize(
    ("offset", "n"),
    [
        (2**32 - 100, 50),  # wraps inside the first cube's row: positions 100 .. 149 pass
        (2**32 - 256, 10),  # wraps exactly at the second cube's first unit
        (2**32 - 1, 2**32 - 1),  # every position but 0 passes (p - 1 < 2**32 - 1)
        (5, 300),  # no wrap: positions 0 .. 294
    ],
)
def test_a_position_that_wraps_inside_a_row_gives_the_interps_bits(offset, n):
    def make(client):
        return (client.zeros(768, np.uint32),)

    def launch(client, out):
        shifted_fill.launch(
            client, cp.CubeCount(3), cp.CubeDim(256), cp.ArrayArg(out), cp.ScalarArg(offset, u32), cp.ScalarArg(n, u32)
        )

    interp, cpu = on_interp_and_cpu(launch, make)
    positions = np.arange(768, dtype=np.uint64)
    passes = (positions + offset) % 2**32 < n
    np.testing.assert_array_equal(interp[0], np.where(passes, positions + 1, 0).astype(np.uint32))
    np.testing.assert_array_equal(cpu[0], interp[0])


def test_a_two_dimensional_cube_cut_in_both_directions():
    rows, cols = 37, 45  # cubes of 32 x 8: the last column of cubes and the last row are both cut
    grid = np.random.default_rng(5).standard_normal((rows, cols)).astype(np.float32)

    def make(client):
        return client.create(grid), client.create(np.full((rows, cols), 9.0, np.float32))

    def launch(client, src, dst):
        interior_copy.launch(client, cp.CubeCount(2, 5), cp.CubeDim(32, 8), cp.TensorArg(src), cp.TensorArg(dst))

    interp, cpu = on_interp_and_cpu(launch, make)
    np.testing.assert_array_equal(interp[1], grid + np.float32(1.0))
    np.testing.assert_array_equal(cpu[1].view(np.uint32), interp[1].view(np.uint32))


def test_the_admitted_row_is_plain_vector_code():
    cpu = cp.client("cpu")
    # arrays of one length, as a launch finds them: the guard on out.len() then proves every access
    args = [cp.ArrayArg(cpu.create(np.ones(1000, np.float32))) for _ in range(3)]
    host = compile_host(vector_add.compile(cp.CubeDim(256), *args).definition)
    assert host.shape == "plain"
    assert "masked.store" not in host.llvm_opt and "masked.load" not in host.llvm_opt
    assert "x float>" in host.llvm_opt, "the admitted row was not vectorized"


@cube(launch=True)
def guard_then_store(out: Array[u32], n: u32):
    """A store after the ``if``: not a row guard (skipped units must still store)."""
    if ABSOLUTE_POS < n:
        out[ABSOLUTE_POS] = u32(1)
    out[ABSOLUTE_POS + n] = u32(2)


@cube(launch=True)
def read_before_guard(out: Array[u32], n: u32):
    """A buffer read before the ``if``: not a row guard."""
    bound = out[0]
    if ABSOLUTE_POS < bound + n:
        out[ABSOLUTE_POS] = u32(1)


@cube(launch=True)
def doubled_position(out: Array[u32], n: u32):
    """``2 * unit_pos_x < n``: the position is not tid.x plus a constant part."""
    if UNIT_POS_X * u32(2) < n:
        out[UNIT_POS_X] = u32(1)


@cube(launch=True)
def limit_per_unit(out: Array[u32]):
    """A limit that depends on the unit: not a row guard."""
    if UNIT_POS < UNIT_POS_PLANE + u32(3):
        out[UNIT_POS] = u32(1)


@cube(launch=True)
def guard_on_cube(out: Array[u32], n: u32):
    """No term depends on tid.x: not a row guard (the driver's plain loop is already right)."""
    if CUBE_POS < n:
        out[UNIT_POS] = u32(1)


@cube(launch=True)
def shifted_guard(out: Array[u32], n: u32, offset: u32):
    """``(offset + cube_pos * 4) + unit_pos_x < n``: tid.x plus a value independent of it."""
    start = offset + CUBE_POS * u32(4)
    if start + UNIT_POS_X < n:
        out[UNIT_POS_X] = u32(1)


def _u32s(count: int) -> tuple:
    return tuple(cp.ScalarCompilationArg("u32") for _ in range(count))


@pytest.mark.parametrize(
    ("kernel", "args", "found"),
    [
        (vector_add, _arrays("f32", "f32", "f32"), True),
        (shifted_guard, (*_arrays("u32"), *_u32s(2)), True),
        (flagged_scale, (*_arrays("f32", "f32"), *_u32s(2)), True),
        (guard_then_store, (*_arrays("u32"), *_u32s(1)), False),
        (read_before_guard, (*_arrays("u32"), *_u32s(1)), False),
        (doubled_position, (*_arrays("u32"), *_u32s(1)), False),
        (limit_per_unit, _arrays("u32"), False),
        (guard_on_cube, (*_arrays("u32"), *_u32s(1)), False),
    ],
)
def test_which_bodies_are_row_guards(kernel, args, found):
    guard = find_row_guard(_definition(kernel, cp.CubeDim(64), *args))
    assert (guard is not None) == found
