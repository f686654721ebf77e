"""Port of CubeCL's ``assign`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/assign.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; a superset of the classic-era file at 3956d6153).

Instantiated like ``testgen_float!`` (FloatType in f16, bf16, f32, f64).
Not ported: ``test_assign_ref`` (passes ``&mut F`` to a cube function; Python has no references).
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, UNIT_POS, Array, Line, cube, u32

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_type![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


def f64(array):
    return np.asarray(array).astype(np.float64)


@functools.cache
def make_kernel_assign(F):
    @cube(launch=True)
    def kernel_assign(output: Array[F]):
        if UNIT_POS == 0:
            item = F(5.0)
            output[0] = item

    return kernel_assign


@functools.cache
def make_kernel_assign_one_tuple(F):
    @cube(launch=True)
    def kernel_assign_one_tuple(output: Array[F]):
        if UNIT_POS == 0:
            item = (F(5.0),)
            output[0] = item[0]

    return kernel_assign_one_tuple


@functools.cache
def make_kernel_add_assign_array(F):
    @cube(launch=True)
    def kernel_add_assign_array(output: Array[Line[F]]):
        if UNIT_POS == 0:
            output[0] = Line(F(5.0))
            output[0] += Line(F(1.0))

    return kernel_add_assign_array


@functools.cache
def make_kernel_add_assign_vector(F):
    # Rust: `let mut vector = Vector::new(F::new(1.0));` with N the launch vector size.
    # cubepy's public API has no constructor for a line of a given size, so the line is taken from the
    # output array (whose elements have that size) and every lane is set to 1.
    @cube(launch=True)
    def kernel_add_assign_vector(output: Array[Line[F]]):
        vector = output[0]
        for i in cp.unroll(range(vector.size)):
            vector[i] = F(1.0)

        if UNIT_POS == 0:
            for i in cp.unroll(range(vector.size)):
                vector[i] += F(i)
            output[0] = vector

    return kernel_add_assign_vector


@cube(launch=True)
def assign_mut_expression(output: Array[u32]):
    thread_idx = cp.usize(UNIT_POS)
    num_threads = cp.usize(CUBE_DIM)
    step = cp.usize(cp.runtime(256 // 2))

    while step > 0:
        # Rust: `for pos in range_stepped(thread_idx, step, num_threads)`
        for pos in range(thread_idx, step, num_threads):
            output[pos] = 0
        step //= 2


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_assign_scalar(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))

    make_kernel_assign(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    actual = client.read(handle)
    assert f64(actual)[0] == 5.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_assign_one_tuple(client, F):
    handle = client.create(as_type(F, 0.0))

    make_kernel_assign_one_tuple(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    actual = client.read(handle)
    assert f64(actual)[0] == 5.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_add_assign_array(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))
    vectorization = 2

    make_kernel_add_assign_array(F).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        cp.ArrayArg(handle, line_size=vectorization),
    )

    actual = client.read(handle)
    assert f64(actual)[0] == 6.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_add_assign_vector(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))
    vectorization = 2

    make_kernel_add_assign_vector(F).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        cp.ArrayArg(handle, line_size=vectorization),
    )

    actual = f64(client.read(handle))
    assert actual[0] == 1.0
    assert actual[1] == 2.0


def test_assign_mut_expr(client):
    # `#[ignore]`d upstream ("Broken right now, should be fixed with future frontend work");
    # the Rust test only checks that the kernel compiles, launches and can be read back.
    output = client.empty((128,), np.uint32)

    assign_mut_expression.launch(client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(output))

    assert client.read(output).shape == (128,)
