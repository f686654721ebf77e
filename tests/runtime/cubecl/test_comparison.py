"""Port of CubeCL's ``comparison`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/comparison.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; superset of the classic file at 3956d6153, which
lacks ``test_nan_ordering`` and ``test_folded_vector``).

``testgen_comparison!`` is untyped. As in Rust, the expected values of the vectorized u32
comparisons are computed on the host with the same operator.
"""

import functools
import operator

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, Line, cube, f32, u32

U32_MAX = 0xFFFF_FFFF


@cube
def cmp_gt(a, b):
    return a > b


@cube
def cmp_lt(a, b):
    return a < b


@cube
def cmp_ge(a, b):
    return a >= b


@cube
def cmp_le(a, b):
    return a <= b


@cube
def cmp_eq(a, b):
    return a == b


@cube
def cmp_ne(a, b):
    return a != b


# name -> (cube function used in the kernel, host operator used for the expectation)
COMPARISONS = {
    "gt": (cmp_gt, operator.gt),
    "lt": (cmp_lt, operator.lt),
    "ge": (cmp_ge, operator.ge),
    "le": (cmp_le, operator.le),
    "eq": (cmp_eq, operator.eq),
    "ne": (cmp_ne, operator.ne),
}


@functools.cache
def make_compare_kernel(cmp):
    func = COMPARISONS[cmp][0]

    @cube(launch_unchecked=True)
    def test_function(lhs: Array[Line[u32]], rhs: Array[Line[u32]], output: Array[Line[u32]]):
        if ABSOLUTE_POS < rhs.len():
            output[ABSOLUTE_POS] = Line[u32](func(lhs[ABSOLUTE_POS], rhs[ABSOLUTE_POS]))

    return test_function


@pytest.mark.parametrize("cmp", list(COMPARISONS))
def test_compare_u32(client, cmp):
    # test_gt / test_lt / test_ge / test_le / test_eq / test_ne
    vectorization = 4
    lhs = np.asarray([0, 1, U32_MAX, 42], dtype=np.uint32)
    rhs = np.asarray([0, 2, 0, 10], dtype=np.uint32)
    output_handle = client.empty((len(lhs),), np.uint32)

    make_compare_kernel(cmp).launch_unchecked(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(len(lhs) // vectorization),
        cp.ArrayArg(client.create(lhs), line_size=vectorization),
        cp.ArrayArg(client.create(rhs), line_size=vectorization),
        cp.ArrayArg(output_handle, line_size=vectorization),
    )

    actual = client.read(output_handle)
    host_op = COMPARISONS[cmp][1]
    for i in range(len(lhs)):
        left, right = int(lhs[i]), int(rhs[i])
        result = int(host_op(left, right))
        assert actual[i] == result, f"{left} {right} should give {result} but gave {actual[i]}"


@cube(launch_unchecked=True)
def nan_ordering_kernel(lhs: Array[f32], rhs: Array[f32], output: Array[u32]):
    if ABSOLUTE_POS < lhs.len():
        left = lhs[ABSOLUTE_POS]
        right = rhs[ABSOLUTE_POS]
        bits = u32(0)
        if left < right:
            bits += 1
        if left <= right:
            bits += 2
        if left > right:
            bits += 4
        if left >= right:
            bits += 8
        if left == right:
            bits += 16
        output[ABSOLUTE_POS] = bits


def test_nan_ordering(client):
    # `<`, `<=`, `>`, `>=` and `==` are ordered: false whenever an operand is NaN.
    nan = np.float32("nan")
    lhs = np.asarray([1.0, nan, nan, 1.0, 2.0], dtype=np.float32)
    rhs = np.asarray([nan, 1.0, nan, 2.0, 1.0], dtype=np.float32)
    output_handle = client.empty((len(lhs),), np.uint32)

    nan_ordering_kernel.launch_unchecked(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(len(lhs)),
        cp.ArrayArg(client.create(lhs)),
        cp.ArrayArg(client.create(rhs)),
        cp.ArrayArg(output_handle),
    )

    actual = client.read(output_handle)
    for i in range(len(lhs)):
        left, right = lhs[i], rhs[i]
        expected = (
            int(left < right)
            + int(left <= right) * 2
            + int(left > right) * 4
            + int(left >= right) * 8
            + int(left == right) * 16
        )
        assert actual[i] == expected, (
            f"comparing {left} with {right}: expected bits {expected:05b}, "
            f"got {int(actual[i]):05b} (bit order: <, <=, >, >=, ==)"
        )


@cube(launch_unchecked=True)
def kernel_folded(output: Array[Line[u32]]):
    if ABSOLUTE_POS < output.len():
        value = output[ABSOLUTE_POS]

        same = value == value
        below_min = value < Line(u32(0))  # u32::MIN

        output[ABSOLUTE_POS] = Line[u32](same) + Line[u32](below_min) * Line(u32(2))


def test_folded_vector(client):
    # Comparing a vector with itself folds at compile time; the answer is still per lane.
    handle = client.create(np.asarray([7, 0, 3, 0], dtype=np.uint32))

    kernel_folded.launch_unchecked(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle, line_size=4))

    actual = client.read(handle)
    assert actual.size == 4, "a failed launch reads back nothing"
    # Equal to itself everywhere, below `u32::MIN` nowhere.
    np.testing.assert_array_equal(actual, [1, 1, 1, 1])
