"""Port of CubeCL's integer ``unary`` runtime tests (``testgen_unary_int!``, per IntType: i8, i16, i32, i64).

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/unary.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e; the float half is ``test_unary.py``.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, Line, cube, u32
from tests.runtime.cubecl.unary import INTS, as_int, run_unary_fixed

# --- integer unary ops (testgen_unary_int!, IntType) ---------------------------------------


def run_unary_int(client, Int, func, cases):
    """``test_unary_impl_int!``: input and output of the same integer type."""
    run_unary_fixed(client, Int, Int, func, cases)


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_abs_int(client, Int):
    values = as_int(Int, 3, -5, 0, -127)
    expected = as_int(Int, 3, 5, 0, 127)
    run_unary_int(client, Int, cp.abs, [(v, values, expected) for v in (1, 2, 4)])


@functools.cache
def make_vector_sum_int_kernel(Int):
    @cube(launch_unchecked=True)
    def test_function(input: Array[Line[Int]], output: Array[Line[Int]]):
        if ABSOLUTE_POS < input.len():
            output[ABSOLUTE_POS] = Line[Int](cp.vector_sum(input[ABSOLUTE_POS]))

    return test_function


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_vector_sum_int(client, Int):
    kernel = make_vector_sum_int_kernel(Int)
    cases = [
        # (values, cube_dim, input vectorization, output elements, expected)
        (as_int(Int, 3, -5, 7, -2), 4, 1, 4, as_int(Int, 3, -5, 7, -2)),  # vec1: identity
        (as_int(Int, 1, 3, 2, 5), 2, 2, 2, as_int(Int, 4, 7)),  # vec2: sum pairs
        (as_int(Int, 1, 2, 3, 4), 1, 4, 1, as_int(Int, 10)),  # vec4: sum all 4
    ]
    for values, cube_dim, vectorization, out_len, expected in cases:
        output_handle = client.empty((out_len,), Int.numpy)

        kernel.launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(cube_dim),
            cp.ArrayArg(client.create(values), line_size=vectorization),
            cp.ArrayArg(output_handle, line_size=1),
        )

        np.testing.assert_array_equal(client.read(output_handle), expected)


def shift(Int, value):
    """``shift!``: ``value << (size_of::<I>() - 1) * 8`` on an i64, then ``I::new``."""
    shifted = (value << ((Int.size - 1) * 8)) & 0xFFFF_FFFF_FFFF_FFFF
    return int(np.asarray(shifted, dtype=np.uint64).astype(np.int64))


def norm_lead(Int, value):
    """``norm_lead!``: ``value + (size_of::<I>() - 1) * 8``."""
    return value + (Int.size - 1) * 8


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_count_ones(client, Int):
    run_unary_fixed(
        client,
        Int,
        u32,
        cp.count_ones,
        [
            (1, as_int(Int, 0b1110_0010, 0b1000_0000, 0b1111_1111), [4, 1, 8]),
            (2, as_int(Int, 0b1110_0010, 0b1000_0000, 0b1111_1111, 0b1100_0001), [4, 1, 8, 3]),
            (4, as_int(Int, 0b1110_0010, 0b1000_0000, 0b1111_1111, 0b1100_0001), [4, 1, 8, 3]),
        ],
    )


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_reverse_bits(client, Int):
    four = as_int(Int, 0b1110_0010, 0b1000_0000, 0b1111_1111, 0b1100_0001)
    expected_four = as_int(
        Int,
        shift(Int, 0b0100_0111),
        shift(Int, 0b0000_0001),
        shift(Int, 0b1111_1111),
        shift(Int, 0b1000_0011),
    )
    run_unary_int(
        client,
        Int,
        cp.reverse_bits,
        [
            (1, four[:3], expected_four[:3]),
            (2, four, expected_four),
            (4, four, expected_four),
        ],
    )


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_leading_zeros(client, Int):
    run_unary_fixed(
        client,
        Int,
        u32,
        cp.leading_zeros,
        [
            (
                1,
                as_int(Int, 0b1110_0010, 0b0000_0000, 0b0010_1111),
                [norm_lead(Int, 0), norm_lead(Int, 8), norm_lead(Int, 2)],
            ),
            (
                2,
                as_int(Int, 0b1110_0010, 0b0000_0000, 0b0010_1111, 0b1111_1111),
                [norm_lead(Int, 0), norm_lead(Int, 8), norm_lead(Int, 2), norm_lead(Int, 0)],
            ),
            (
                4,
                as_int(Int, 0b1110_0010, 0b0000_0000, 0b0010_1111, 0b1111_1111),
                [norm_lead(Int, 0), norm_lead(Int, 8), norm_lead(Int, 2), norm_lead(Int, 0)],
            ),
        ],
    )


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_trailing_zeros(client, Int):
    bits = Int.size * 8
    run_unary_fixed(
        client,
        Int,
        u32,
        cp.trailing_zeros,
        [
            (1, as_int(Int, 0b1110_0010, 0b0000_0000, 0b0010_1000), [1, bits, 3]),
            (2, as_int(Int, 0b1110_0010, 0b0000_0000, 0b0010_1000, 0b1111_1111), [1, bits, 3, 0]),
            (4, as_int(Int, 0b1110_0010, 0b0000_0000, 0b0010_1000, 0b1111_1111), [1, bits, 3, 0]),
        ],
    )


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_find_first_set(client, Int):
    run_unary_fixed(
        client,
        Int,
        u32,
        cp.find_first_set,
        [
            (1, as_int(Int, 0b1110_0010, 0b0000_0000, 0b1111_1111), [2, 0, 1]),
            (2, as_int(Int, 0b1110_0010, 0b0000_0000, 0b1111_1111, 0b1000_0000), [2, 0, 1, 8]),
            (4, as_int(Int, 0b1110_0010, 0b0000_0000, 0b1111_1111, 0b1000_0000), [2, 0, 1, 8]),
        ],
    )
