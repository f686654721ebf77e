"""Port of CubeCL's ``binary`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/binary.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; superset of the classic file at 3956d6153).

``testgen_binary!`` runs per FloatType (f16, bf16, f32, f64); ``testgen_binary_untyped!``
(``test_mulhi``, ``test_self_div``) runs once.

``Vector::dot``, ``atan2``, ``hypot``, ``rhypot`` and ``mul_hi`` have no name in cubepy's public API; their
tests are written against the names ``cp.dot``, ``cp.atan2``, ``cp.hypot``, ``cp.rhypot`` and
``cp.mul_hi`` and are skipped while ``cubepy`` does not export them.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, Line, cube, i32, u32

from .approx import assert_equals_approx

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_type![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


@functools.cache
def make_binary_kernel(F, func):
    # `test_binary_impl!`'s kernel: `Vector::cast_from($binary_func(lhs[i], rhs[i]))`.
    @cube(launch_unchecked=True)
    def test_function(lhs: Array[Line[F]], rhs: Array[Line[F]], output: Array[Line[F]]):
        if ABSOLUTE_POS < rhs.len():
            output[ABSOLUTE_POS] = Line[F](func(lhs[ABSOLUTE_POS], rhs[ABSOLUTE_POS]))

    return test_function


def run_binary(client, F, func, cases):
    kernel = make_binary_kernel(F, func)
    for input_vectorization, out_vectorization, lhs, rhs, expected in cases:
        lhs = as_type(F, *lhs)
        rhs = as_type(F, *rhs)
        expected = as_type(F, *expected)
        output_handle = client.empty((len(expected),), F.numpy)
        lhs_handle = client.create(lhs)
        rhs_handle = client.create(rhs)

        kernel.launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(len(lhs) // input_vectorization),
            cp.ArrayArg(lhs_handle, line_size=input_vectorization),
            cp.ArrayArg(rhs_handle, line_size=input_vectorization),
            cp.ArrayArg(output_handle, line_size=out_vectorization),
        )

        assert_equals_approx(F, client.read(output_handle), expected, 0.001)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_dot(client, F):
    run_binary(
        client,
        F,
        cp.dot,
        [
            (1, 1, [1.0, -3.1, -2.4, 15.1], [-1.0, 23.1, -1.4, 5.1], [-1.0, -71.61, 3.36, 77.01]),
            (2, 1, [1.0, -3.1, -2.4, 15.1], [-1.0, 23.1, -1.4, 5.1], [-72.61, 80.37]),
            (4, 1, [1.0, -3.1, -2.4, 15.1], [-1.0, 23.1, -1.4, 5.1], [7.76]),
            (
                4,
                1,
                [1.0, -3.1, -2.4, 15.1, -1.0, 23.1, -1.4, 5.1],
                [-1.0, 23.1, -1.4, 5.1, 1.0, -3.1, -2.4, 15.1],
                [7.76, 7.76],
            ),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_powf(client, F):
    run_binary(
        client,
        F,
        cp.powf,
        [
            (2, 2, [2.0, -3.0, 2.0, 81.0], [3.0, 2.0, -1.0, 0.5], [8.0, 9.0, 0.5, 9.0]),
            (4, 4, [2.0, -3.0, 2.0, 81.0], [3.0, 2.0, -1.0, 0.5], [8.0, 9.0, 0.5, 9.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_atan2(client, F):
    run_binary(
        client,
        F,
        cp.atan2,
        [
            (
                1,
                1,
                [0.0, 1.0, -1.0, 1.0, -1.0],
                [1.0, 0.0, 0.0, 1.0, -1.0],
                [0.0, 1.5707964, -1.5707964, 0.7853982, -2.3561945],
            ),
            (
                2,
                2,
                [0.0, 1.0, -1.0, 1.0],
                [1.0, 0.0, 0.0, 1.0],
                [0.0, 1.5707964, -1.5707964, 0.7853982],
            ),
            (
                4,
                4,
                [0.0, 1.0, -1.0, 1.0],
                [1.0, 0.0, 0.0, 1.0],
                [0.0, 1.5707964, -1.5707964, 0.7853982],
            ),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_hypot(client, F):
    run_binary(
        client,
        F,
        cp.hypot,
        [
            (1, 1, [3.0, 0.0, 5.0, 0.0], [4.0, 5.0, 0.0, 0.0], [5.0, 5.0, 5.0, 0.0]),
            (2, 2, [3.0, 0.0, 5.0, 8.0], [4.0, 5.0, 0.0, 15.0], [5.0, 5.0, 5.0, 17.0]),
            (4, 4, [-3.0, 0.0, -5.0, -8.0], [-4.0, -5.0, 0.0, 15.0], [5.0, 5.0, 5.0, 17.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_rhypot(client, F):
    run_binary(
        client,
        F,
        cp.rhypot,
        [
            (1, 1, [3.0, 0.0, 5.0, 0.0], [4.0, 5.0, 0.0, 0.0], [0.2, 0.2, 0.2, np.inf]),
            (2, 2, [3.0, 0.0, 5.0, 0.3], [4.0, 5.0, 0.0, 0.4], [0.2, 0.2, 0.2, 2.0]),
            (4, 4, [0.0, 0.0, -5.0, -0.3], [-1.0, -5.0, 0.0, -0.4], [1.0, 0.2, 0.2, 2.0]),
        ],
    )


@functools.cache
def make_powi_kernel(F):
    @cube(launch_unchecked=True)
    def test_powi_kernel(lhs: Array[Line[F]], rhs: Array[Line[i32]], output: Array[Line[F]]):
        if ABSOLUTE_POS < rhs.len():
            # Rust: `Powi::powi(lhs, rhs)`; cubepy's public API: `**` with an integer exponent is powi.
            output[ABSOLUTE_POS] = lhs[ABSOLUTE_POS] ** rhs[ABSOLUTE_POS]

    return test_powi_kernel


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_powi(client, F):
    kernel = make_powi_kernel(F)
    cases = [
        (2, [2.0, -3.0, 2.0, 81.0], [3, 2, -1, 1], [8.0, 9.0, 0.5, 81.0]),
        (4, [2.0, -3.0, 2.0, 81.0], [3, 2, -1, 1], [8.0, 9.0, 0.5, 81.0]),
    ]
    for input_vectorization, lhs, rhs, expected in cases:
        lhs = as_type(F, *lhs)
        rhs = np.asarray(rhs, dtype=np.int32)
        expected = as_type(F, *expected)
        output_handle = client.empty((len(expected),), F.numpy)

        kernel.launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(len(lhs) // input_vectorization),
            cp.ArrayArg(client.create(lhs), line_size=input_vectorization),
            cp.ArrayArg(client.create(rhs), line_size=input_vectorization),
            cp.ArrayArg(output_handle, line_size=input_vectorization),
        )

        assert_equals_approx(F, client.read(output_handle), expected, 0.001)


@functools.cache
def make_fma_kernel(F):
    @cube(launch_unchecked=True)
    def test_fma_kernel(a: Array[Line[F]], b: Array[Line[F]], c: Array[Line[F]], output: Array[Line[F]]):
        if ABSOLUTE_POS < c.len():
            output[ABSOLUTE_POS] = cp.fma(a[ABSOLUTE_POS], b[ABSOLUTE_POS], c[ABSOLUTE_POS])

    return test_fma_kernel


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_fma(client, F):
    kernel = make_fma_kernel(F)
    a = as_type(F, 1.0, -3.1, -2.4, 15.1)
    b = as_type(F, -1.0, 23.1, -1.4, 5.1)
    c = as_type(F, 2.0, 0.5, -1.0, -8.0)
    expected = as_type(F, 1.0, -71.11, 2.36, 69.01)
    for input_vectorization in (1, 2, 4):
        output_handle = client.empty((len(expected),), F.numpy)

        kernel.launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(len(a) // input_vectorization),
            cp.ArrayArg(client.create(a), line_size=input_vectorization),
            cp.ArrayArg(client.create(b), line_size=input_vectorization),
            cp.ArrayArg(client.create(c), line_size=input_vectorization),
            cp.ArrayArg(output_handle, line_size=input_vectorization),
        )

        assert_equals_approx(F, client.read(output_handle), expected, 0.001)


@functools.cache
def make_mulhi_kernel():
    @cube(launch_unchecked=True)
    def test_mulhi_kernel(lhs: Array[Line[u32]], rhs: Array[Line[u32]], output: Array[Line[u32]]):
        if ABSOLUTE_POS < rhs.len():
            output[ABSOLUTE_POS] = cp.mul_hi(lhs[ABSOLUTE_POS], rhs[ABSOLUTE_POS])

    return test_mulhi_kernel


def test_mulhi(client):
    kernel = make_mulhi_kernel()
    cases = [
        (1, [1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 0, 0]),
        (
            1,
            [0xFFFFFFFF, 0x80000000, 0x55555555, 0x10000000],
            [0x10000, 2, 4, 0x20000000],
            [0x0000FFFF, 1, 1, 0x2000000],
        ),
        (
            1,
            [0xFFFFFFFF, 0xFFFFFFFF, 0x80000000, 0x10000],
            [0xFFFFFFFF, 2, 0x80000000, 0x10000],
            [0xFFFFFFFE, 1, 0x40000000, 1],
        ),
    ]
    for input_vectorization, lhs, rhs, expected in cases:
        lhs = np.asarray(lhs, dtype=np.uint32)
        rhs = np.asarray(rhs, dtype=np.uint32)
        output_handle = client.empty((len(expected),), np.uint32)

        kernel.launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(len(lhs) // input_vectorization),
            cp.ArrayArg(client.create(lhs), line_size=input_vectorization),
            cp.ArrayArg(client.create(rhs), line_size=input_vectorization),
            cp.ArrayArg(output_handle, line_size=input_vectorization),
        )

        np.testing.assert_array_equal(client.read(output_handle), np.asarray(expected, np.uint32))


@cube(launch=True)
def kernel_self_div(output: Array[u32]):
    if ABSOLUTE_POS < output.len():
        value = output[ABSOLUTE_POS]
        # Rust `value / value` on u32 is integer division: `//` here.
        output[ABSOLUTE_POS] = value // value


def test_self_div(client):
    handle = client.create(np.asarray([7, 1, 255, 42], dtype=np.uint32))

    kernel_self_div.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(4), cp.ArrayArg(handle))

    actual = client.read(handle)
    assert actual.size == 4, "a failed launch reads back nothing"
    np.testing.assert_array_equal(actual, [1, 1, 1, 1])
