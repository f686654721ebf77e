"""Checked accesses of an array the launch found as long as a product of two arguments (``Param.len_as_product``,
``cubepy.ir.product_bounds``): a matmul epilogue's ``c[row * n + col]`` under ``row < m and col < n`` with ``c`` of
``m * n`` items, a layer norm's partial rows ``dw[(row % group) * n + col]``, a column sum's
``partial[r * out.len() + col]``.  Expected values come from numpy; the launch facts are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Line, Tensor, cube, f32, u32
from cubepy.frontend.argument_facts import find_products
from cubepy.ir import ProductFactor, VarKind, ops, walk


@cube(launch=True)
def epilogue(c: Array[f32], m: u32, n: u32):
    """c[row, col] = 100 * row + col of an m x n row-major c, one row per cube (a matmul's store)."""
    row = CUBE_POS
    col = UNIT_POS
    if row < m and col < n:
        c[u32(0) + row * n + col] = f32(row * u32(100) + col)


@cube(launch=True)
def partial_rows(x: Tensor[Line[f32]], partial: Array[Line[f32]], group: u32, first: u32):
    """partial[row % group, col] += x[row, col] in lines for the row ``first + CUBE_POS`` (a layer norm's partial
    rows of dW; past x's rows the checked read gives 0)."""
    lanes = x.line_size
    row = first + CUBE_POS
    n = x.shape(1) // lanes
    col = UNIT_POS
    if col < n:
        at = (row % group) * n + col
        partial[at] = partial[at] + x[row * n + col]


@cube(launch=True)
def column_sums(partial: Array[f32], out: Array[f32], rows: u32):
    """out[col] = sum over r < rows of partial[r * out.len() + col] (the layer norm's dW reduction)."""
    n = out.len()
    col = UNIT_POS
    if col < n:
        total = f32(0.0)
        for r in range(rows):
            total += partial[r * n + col]
        out[col] = total


@cube(launch=True)
def partial_tensor(x: Tensor[f32], dw: Tensor[f32], group: u32):
    """dw[row % group, col] = 2 * x[row, col] with dw a (group, n) tensor, row = CUBE_POS (a layer norm's partial
    rows, written as a tensor)."""
    row = CUBE_POS
    col = UNIT_POS
    if col < x.shape(1):
        dw[row % group, col] = x[row, col] * 2.0


@cube(launch=True)
def shifted(c: Array[f32], m: u32, n: u32):
    """``c[row * n + col + 1]`` under ``col + 1 < n``, the sum written in another order than the guard's."""
    row = CUBE_POS
    col = UNIT_POS * 2
    if row < m and u32(1) + col < n:
        c[row * n + col + 1] = f32(row * u32(100) + col + u32(1))


@cube(launch=True)
def loose(c: Array[f32], m: u32, n: u32):
    """``col <= n`` lets col reach n: the last row's ``c[row * n + n]`` is past the end."""
    row = CUBE_POS
    col = UNIT_POS
    if row < m and col <= n:
        c[row * n + col] = f32(1.0)


def _checked(compiled, slot: int) -> set[bool]:
    """The ``checked`` flags of the accesses of buffer ``slot``."""
    return {
        op.checked
        for op in (inst.operation for inst in walk(compiled.definition.body))
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.memory.kind is VarKind.GLOBAL and op.memory.id == slot
    }


def _expected_epilogue(m: int, n: int, size: int) -> np.ndarray:
    want = np.zeros(size, np.float32)
    rows, cols = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    flat = (rows * n + cols).ravel()
    keep = flat < size
    want[flat[keep]] = (100 * rows + cols).ravel()[keep]
    return want


def test_an_m_by_n_output_loses_its_check_under_row_and_column_guards():
    client = cp.client("interp")
    c = client.zeros(6 * 10, np.float32)
    compiled = epilogue.compile(cp.CubeDim(16), cp.ArrayArg(c), cp.ScalarArg(6, u32), cp.ScalarArg(10, u32))
    # 60 = 10 * 6: the inner factor is the first value in argument order that divides the length
    assert compiled.definition.params[0].len_as_product == (
        (ProductFactor("scalar", 1),),
        (ProductFactor("scalar", 0),),
    )
    assert "len = (scalar[1]) * (scalar[0])" in compiled.ir
    assert _checked(compiled, 0) == {False}


def test_a_square_output_lists_both_scalars_of_its_size():
    """m = n = 8: the launch cannot tell which one the kernel multiplies by, so each factor names both."""
    client = cp.client("interp")
    c = client.zeros(64, np.float32)
    compiled = epilogue.compile(cp.CubeDim(16), cp.ArrayArg(c), cp.ScalarArg(8, u32), cp.ScalarArg(8, u32))
    both = (ProductFactor("scalar", 0), ProductFactor("scalar", 1))
    assert compiled.definition.params[0].len_as_product == (both, both)
    assert "len = (scalar[0] = scalar[1]) * (scalar[0] = scalar[1])" in compiled.ir
    assert _checked(compiled, 0) == {False}
    epilogue.launch(client, cp.CubeCount(9), cp.CubeDim(16), cp.ArrayArg(c), 8, 8)
    np.testing.assert_array_equal(client.read(c), _expected_epilogue(8, 8, 64))
    epilogue.launch(client, cp.CubeCount(9), cp.CubeDim(16), cp.ArrayArg(c), 4, 16)  # 4 * 16: no longer alike
    np.testing.assert_array_equal(client.read(c)[:64], _expected_epilogue(4, 16, 64))


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_the_unchecked_store_writes_what_numpy_computes(kind):
    client = cp.client(kind)
    c = client.zeros(6 * 10, np.float32)
    epilogue.launch(client, cp.CubeCount(8), cp.CubeDim(16), cp.ArrayArg(c), 6, 10)  # cubes and units past m, n
    np.testing.assert_array_equal(client.read(c), _expected_epilogue(6, 10, 60))


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_a_warm_launch_with_another_product_compiles_a_checked_kernel(kind):
    """The same buffer with m = 7 (7 * 10 = 70 > 60 items): the fact no longer holds, so the launch must not reuse
    the kernel compiled without the check, although every argument keeps its divisibility."""
    client = cp.client(kind)
    c = client.zeros(60, np.float32)
    for _ in range(3):  # remembered as a warm launch (the cpu runtime remembers once its build is done)
        epilogue.launch(client, cp.CubeCount(8), cp.CubeDim(16), cp.ArrayArg(c), 6, 10)
    hits, misses = client.stats["hits"], client.stats["misses"]
    epilogue.launch(client, cp.CubeCount(8), cp.CubeDim(16), cp.ArrayArg(c), 6, 10)
    assert client.stats["hits"] == hits + 1
    epilogue.launch(client, cp.CubeCount(8), cp.CubeDim(16), cp.ArrayArg(c), 7, 10)
    assert client.stats["misses"] == misses + 1
    np.testing.assert_array_equal(client.read(c), _expected_epilogue(7, 10, 60))  # row 6 dropped past the end
    epilogue.launch(client, cp.CubeCount(8), cp.CubeDim(16), cp.ArrayArg(c), 6, 10)  # back to the first kernel
    assert client.stats["misses"] == misses + 1


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_partial_rows_by_remainder_in_lines(kind):
    client = cp.client(kind)
    rows, cols, group, lanes = 7, 16, 3, 4
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    hx, hp = client.create(x), client.zeros(group * cols, np.float32)
    args = (cp.TensorArg(hx, line_size=lanes), cp.ArrayArg(hp, line_size=lanes), cp.ScalarArg(group, u32))
    # len(partial) = 12 lines = group * (x.shape(1) // 4): the inner factor is the first value 4 divides
    compiled = partial_rows.compile(cp.CubeDim(8), *args, cp.ScalarArg(0, u32))
    assert compiled.definition.params[1].len_as_product == (
        (ProductFactor("scalar", 0),),
        (ProductFactor("shape", 0, 1),),
    )
    assert "len = (scalar[0]) * (shape global[0], 1) / 4" in compiled.ir
    assert _checked(compiled, 1) == {False}
    assert _checked(compiled, 0) == {True}  # x's row is first + CUBE_POS, which nothing bounds
    for first in (0, 3, 6):  # a group's rows in separate launches: no two cubes add into one row
        partial_rows.launch(client, cp.CubeCount(group), cp.CubeDim(8), *args, first)
    want = np.zeros((group, cols), np.float32)
    for row in range(rows):
        want[row % group] += x[row]
    np.testing.assert_array_equal(client.read(hp).reshape(group, cols), want)


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_a_factor_may_be_another_arrays_len(kind):
    client = cp.client(kind)
    rows, cols = 5, 24
    data = np.arange(rows * cols, dtype=np.float32)
    hp, ho = client.create(data), client.zeros(cols, np.float32)
    args = (cp.ArrayArg(hp), cp.ArrayArg(ho), cp.ScalarArg(rows, u32))
    compiled = column_sums.compile(cp.CubeDim(32), *args)
    assert compiled.definition.params[0].len_as_product == ((ProductFactor("scalar", 0),), (ProductFactor("len", 1),))
    assert _checked(compiled, 0) == {False}
    column_sums.launch(client, cp.CubeCount(1), cp.CubeDim(32), *args)
    np.testing.assert_array_equal(client.read(ho), data.reshape(rows, cols).sum(axis=0))


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_a_tensor_as_long_as_a_scalar_times_an_extent(kind):
    """dw is (group, n): its len is group * n with group a scalar, which its own shape(0) equals."""
    client = cp.client(kind)
    rows, cols, group = 3, 16, 4
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    hx, hd = client.create(x), client.zeros((group, cols), np.float32)
    args = (cp.TensorArg(hx), cp.TensorArg(hd), cp.ScalarArg(group, u32))
    compiled = partial_tensor.compile(cp.CubeDim(16), *args)
    outer, inner = compiled.definition.params[1].len_as_product
    assert outer == (ProductFactor("shape", 1, 0), ProductFactor("scalar", 0))
    assert inner == (ProductFactor("shape", 0, 1), ProductFactor("shape", 1, 1))
    assert _checked(compiled, 1) == {False}
    assert compiled.definition.params[0].len_as_product is None  # x: 3 * 16, extents alone
    partial_tensor.launch(client, cp.CubeCount(rows), cp.CubeDim(16), *args)
    want = np.zeros((group, cols), np.float32)
    want[:rows] = 2 * x
    np.testing.assert_array_equal(client.read(hd), want)


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_the_column_may_be_any_sum_a_guard_bounded(kind):
    client = cp.client(kind)
    c = client.zeros(6 * 10, np.float32)
    args = (cp.ArrayArg(c), cp.ScalarArg(6, u32), cp.ScalarArg(10, u32))
    assert _checked(shifted.compile(cp.CubeDim(8), *args), 0) == {False}
    shifted.launch(client, cp.CubeCount(7), cp.CubeDim(8), *args)
    want = np.zeros((6, 10), np.float32)
    want[:, 1::2] = 100 * np.arange(6)[:, None] + np.arange(1, 10, 2)[None, :]
    np.testing.assert_array_equal(client.read(c).reshape(6, 10), want)


def test_a_loose_guard_or_an_unrelated_length_keeps_the_check():
    client = cp.client("interp")
    c = client.zeros(60, np.float32)
    loose_kernel = loose.compile(cp.CubeDim(16), cp.ArrayArg(c), cp.ScalarArg(6, u32), cp.ScalarArg(10, u32))
    assert _checked(loose_kernel, 0) == {True}
    loose.launch(client, cp.CubeCount(8), cp.CubeDim(16), cp.ArrayArg(c), 6, 10)
    np.testing.assert_array_equal(client.read(c), np.ones(60, np.float32))  # c[60] (row 5, col 10) dropped
    other = client.zeros(61, np.float32)  # 61 is prime: no product of two arguments
    compiled = epilogue.compile(cp.CubeDim(16), cp.ArrayArg(other), cp.ScalarArg(6, u32), cp.ScalarArg(10, u32))
    assert compiled.definition.params[0].len_as_product is None
    assert _checked(compiled, 0) == {True}


def test_find_products_by_hand():
    """The inner factor is the first value in argument order that divides the length (in lines: a multiple of
    the line size whose quotient divides it), the outer the first value equal to its cofactor; 1 never counts."""

    class Buffer:
        def __init__(self, shape, line_size=1):
            self.shape, self.line_size = shape, line_size

    plan = ((0, "array"), (1, "tensor"), (2, "u32"), (3, "u32"))
    # 60 = 10 * 6: the tensor's 6 rows is the first value that divides 60, the second scalar its cofactor
    assert find_products(plan, (Buffer((60,)), Buffer((6, 4)), 7, 10)) == (
        (0, (((3, "scalar", 0),), ((1, "shape", 0),))),
    )
    # lines of 4: len 15 lines = 6 * (10 // 4)? 10 is no multiple of 4; 3 * (20 // 4) with 20 a scalar
    plan = ((0, "array"), (1, "u32"), (2, "u32"))
    assert find_products(plan, (Buffer((60,), 4), 10, 3)) == ()
    assert find_products(plan, (Buffer((60,), 4), 20, 3)) == ((0, (((2, "scalar", 0),), ((1, "scalar", 0),))),)
    assert find_products(plan, (Buffer((60,)), 60, 1)) == ()  # 60 * 1: a factor of 1 does not count
    # another array's len counts; the array itself does not
    plan = ((0, "array"), (1, "array"), (2, "u32"))
    assert find_products(plan, (Buffer((40,)), Buffer((8,)), 5)) == ((0, (((2, "scalar", 0),), ((1, "len", 0),))),)
    # a square product: every argument of the value is listed, so the kernel may multiply by either
    plan = ((0, "array"), (1, "u32"), (2, "u32"), (3, "u32"))
    alike = ((1, "scalar", 0), (2, "scalar", 0))
    assert find_products(plan, (Buffer((64,)), 8, 8, 4)) == ((0, (alike, alike)),)
