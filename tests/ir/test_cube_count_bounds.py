"""A launch's number of cubes as a fact (``KernelDefinition.cube_count_as``): a launch of one cube per row of a
tensor proves the row ``CUBE_POS`` in range, so ``x[CUBE_POS * x.stride(0) + col]`` under ``col < x.shape(1)``
and ``mean[CUBE_POS]`` need no check.  Expected values come from numpy."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Tensor, cube, f32, u32
from cubepy.errors import VerifyError
from cubepy.ir import F32, U32, ProductFactor, Type, VarKind, ops, verify, walk
from tests.irbuild import KernelBuilder


@cube(launch=True)
def row_scale(x: Tensor[f32], out: Tensor[f32], mean: Array[f32]):
    """out[r] = 2 * x[r] for the row r = CUBE_POS, and mean[r] its first item (or 0 for rows of none); strides
    written out."""
    row = CUBE_POS
    n = x.shape(1)
    col = UNIT_POS
    if col < n:
        out[row * out.stride(0) + col] = x[row * x.stride(0) + col] * 2.0
    if col == u32(0):
        mean[row] = x[row * n]


@cube(launch=True)
def rows_of_scalar(c: Array[f32], m: u32, n: u32):
    """c[row, col] = row for the row CUBE_POS of an m x n c: m only bounds the row through the cube count."""
    col = UNIT_POS
    if col < n:
        c[CUBE_POS * n + col] = f32(CUBE_POS)


def _checked(compiled) -> dict[int, set[bool]]:
    """Buffer slot -> the ``checked`` flags of its accesses."""
    found: dict[int, set[bool]] = {}
    for inst in walk(compiled.definition.body):
        op = inst.operation
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.memory.kind is VarKind.GLOBAL:
            found.setdefault(op.memory.id, set()).add(op.checked)
    return found


def _rows(client, rows: int = 5, cols: int = 24):
    data = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    x, out, mean = client.create(data), client.zeros((rows, cols), np.float32), client.zeros(rows, np.float32)
    return data, (x, out, mean), (cp.TensorArg(x), cp.TensorArg(out), cp.ArrayArg(mean))


def test_one_cube_per_row_drops_the_row_checks():
    client = cp.client("interp")
    _, _, args = _rows(client)
    compiled = row_scale.compile(cp.CubeDim(32), *args, cube_count=cp.CubeCount(5))
    assert ProductFactor("shape", 0, 0) in compiled.definition.cube_count_as
    assert ProductFactor("len", 2) in compiled.definition.cube_count_as
    assert "cube count = shape global[0], 0" in compiled.ir
    # x[row * n] (the mean's read) keeps its check: n may be 0, and then x[0] is past x's end
    assert _checked(compiled) == {0: {False, True}, 1: {False}, 2: {False}}
    for count in (None, cp.CubeCount(6)):  # compiled for any count, or for one cube more than rows
        other = row_scale.compile(cp.CubeDim(32), *args, cube_count=count)
        assert other.definition.cube_count_as == ()
        assert _checked(other) == {0: {True}, 1: {True}, 2: {True}}


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_a_warm_launch_with_more_cubes_compiles_the_checked_kernel(kind):
    client = cp.client(kind)
    data, (x, out, mean), args = _rows(client)
    for _ in range(3):  # remembered as a warm launch
        row_scale.launch(client, cp.CubeCount(5), cp.CubeDim(32), *args)
    np.testing.assert_array_equal(client.read(out), 2 * data)
    np.testing.assert_array_equal(client.read(mean), data[:, 0])
    misses = client.stats["misses"]
    row_scale.launch(client, cp.CubeCount(7), cp.CubeDim(32), *args)  # cubes 5 and 6 are past the rows
    assert client.stats["misses"] == misses + 1
    np.testing.assert_array_equal(client.read(out), 2 * data)
    np.testing.assert_array_equal(client.read(mean), data[:, 0])


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_a_scalar_equal_to_the_cube_count_bounds_the_row(kind):
    client = cp.client(kind)
    c = client.zeros(4 * 12, np.float32)
    args = (cp.ArrayArg(c), cp.ScalarArg(4, u32), cp.ScalarArg(12, u32))
    compiled = rows_of_scalar.compile(cp.CubeDim(16), *args, cube_count=4)
    assert compiled.definition.cube_count_as == (ProductFactor("scalar", 0),)
    assert _checked(compiled) == {0: {False}}
    rows_of_scalar.launch(client, cp.CubeCount(4), cp.CubeDim(16), *args)
    np.testing.assert_array_equal(client.read(c).reshape(4, 12), np.repeat(np.arange(4.0), 12).reshape(4, 12))
    rows_of_scalar.launch(client, cp.CubeCount(2, 3), cp.CubeDim(16), *args)  # 6 cubes: rows 4, 5 are dropped
    np.testing.assert_array_equal(client.read(c).reshape(4, 12), np.repeat(np.arange(4.0), 12).reshape(4, 12))


def test_cube_count_as_names_parameters_that_exist():
    kb = KernelBuilder()
    kb.array(Type(F32), "out")
    kb.scalar(Type(U32), "rows")
    good = kb.build()
    verify(attrs.evolve(good, cube_count_as=(ProductFactor("scalar", 0), ProductFactor("len", 0))))
    for bad in (ProductFactor("scalar", 1), ProductFactor("shape", 0, 0), ProductFactor("len", 3)):
        with pytest.raises(VerifyError, match="cube_count_as"):
            verify(attrs.evolve(good, cube_count_as=(bad,)))
