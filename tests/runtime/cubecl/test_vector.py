"""Port of CubeCL's ``vector`` runtime tests (``line`` in the classic naming).

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/vector.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; superset of the classic file at 3956d6153, which
lacks the dynamic extract/insert tests).

``testgen_vector!`` runs per FloatType (f16, bf16, f32, f64). ``Vector<F, N>`` is ``Line[F]`` with
the line size of the launch argument; ``vector.extract(i)`` / ``vector.insert(i, v)`` are
``line[i]`` / ``line[i] = v``. Where Rust loops over ``client.io_optimized_vector_sizes(size)``, the
sizes are those of a 128-bit load width (CubeCL's CUDA value): 1, 2, 4, ... up to 16 bytes.
Not ported: ``test_vector_index`` (builds a ``Vector::<F, N>::new(..)`` whose size comes from the
launch alone, with a scalar output array) and ``test_shared_memory`` (a ``Shared`` slice of
vectors): cubepy's public API has no way to spell a line of a given size outside an argument.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Line, cube, u32

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_bytes![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


def f64(array):
    return np.asarray(array).astype(np.float64)


def io_optimized_vector_sizes(elem):
    """``ComputeClient::io_optimized_vector_sizes`` with ``load_width = 128`` bits."""
    max_size = 128 // (elem.size * 8)
    return [2**i for i in reversed(range(max_size.bit_length()))]


@functools.cache
def make_kernel_vector_index_assign(F):
    @cube(launch_unchecked=True)
    def kernel_vector_index_assign(output: Array[Line[F]]):
        if UNIT_POS == 0:
            # Rust: `RuntimeCell::<Vector<F, N>>::new(output[0])`, `insert(0, 5)`, `consume()`.
            vector = output[0]
            vector[0] = F(5.0)
            output[0] = vector

    return kernel_vector_index_assign


@functools.cache
def make_kernel_vector_loop_unroll(F):
    @cube(launch_unchecked=True)
    def kernel_vector_loop_unroll(output: Array[Line[F]]):
        if UNIT_POS == 0:
            vector = output[0]
            for k in cp.unroll(range(vector.size)):
                vector[k] = vector[k] + F(k)
            output[0] = vector

    return kernel_vector_loop_unroll


@functools.cache
def make_kernel_vector_conditional(F):
    @cube(launch_unchecked=True)
    def kernel_vector_conditional(input: Array[Line[F]], flag: Array[u32], output: Array[Line[F]]):
        cond = flag[0] == u32(0)
        vector = input[0] if cond else input[1]
        output[0] = vector

    return kernel_vector_conditional


@functools.cache
def make_kernel_vector_extract_dynamic(F):
    @cube(launch_unchecked=True)
    def kernel_vector_extract_dynamic(input: Array[Line[F]], index: Array[u32], output: Array[F]):
        if UNIT_POS == 0:
            output[0] = input[0][cp.usize(index[0])]

    return kernel_vector_extract_dynamic


@functools.cache
def make_kernel_vector_insert_dynamic(F):
    @cube(launch_unchecked=True)
    def kernel_vector_insert_dynamic(index: Array[u32], output: Array[Line[F]]):
        if UNIT_POS == 0:
            vector = output[0]
            vector[cp.usize(index[0])] = F(5.0)
            output[0] = vector

    return kernel_vector_insert_dynamic


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_vector_index_assign(client, F):
    for vector_size in io_optimized_vector_sizes(F):
        handle = client.create(np.zeros(vector_size, dtype=F.numpy))

        make_kernel_vector_index_assign(F).launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(1),
            cp.ArrayArg(handle, line_size=vector_size),
        )

        expected = np.zeros(vector_size)
        expected[0] = 5.0
        np.testing.assert_array_equal(f64(client.read(handle))[:vector_size], expected)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_vector_loop_unroll(client, F):
    for vector_size in io_optimized_vector_sizes(F):
        handle = client.create(np.zeros(vector_size, dtype=F.numpy))

        make_kernel_vector_loop_unroll(F).launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(1),
            cp.ArrayArg(handle, line_size=vector_size),
        )

        expected = np.arange(vector_size, dtype=np.float64)
        np.testing.assert_array_equal(f64(client.read(handle))[:vector_size], expected)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_vector_conditional(client, F):
    vector_size = 8
    input_data = np.concatenate([np.full(vector_size, 1.0), np.full(vector_size, 2.0)])
    input = client.create(input_data.astype(F.numpy))
    output = client.create(np.zeros(vector_size, dtype=F.numpy))
    kernel = make_kernel_vector_conditional(F)

    flag = client.create(np.asarray([0], dtype=np.uint32))
    kernel.launch_unchecked(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        cp.ArrayArg(input, line_size=vector_size),
        cp.ArrayArg(flag),
        cp.ArrayArg(output, line_size=vector_size),
    )
    np.testing.assert_array_equal(f64(client.read(output)), [1.0] * vector_size)

    flag = client.create(np.asarray([1], dtype=np.uint32))
    kernel.launch_unchecked(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        cp.ArrayArg(input, line_size=vector_size),
        cp.ArrayArg(flag),
        cp.ArrayArg(output, line_size=vector_size),
    )
    np.testing.assert_array_equal(f64(client.read(output)), [2.0] * vector_size)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_vector_extract_dynamic(client, F):
    # A dynamic lane index on a wide vector: every lane is asked for in turn.
    vector_size = 8
    data = np.arange(1, vector_size + 1).astype(F.numpy)
    input = client.create(data)
    kernel = make_kernel_vector_extract_dynamic(F)

    for lane in range(vector_size):
        index = client.create(np.asarray([lane], dtype=np.uint32))
        output = client.create(as_type(F, 0.0))

        kernel.launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(1),
            cp.ArrayArg(input, line_size=vector_size),
            cp.ArrayArg(index),
            cp.ArrayArg(output),
        )

        assert f64(client.read(output))[0] == f64(data)[lane], f"lane {lane}"


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_vector_insert_dynamic(client, F):
    vector_size = 8
    kernel = make_kernel_vector_insert_dynamic(F)

    for lane in range(vector_size):
        index = client.create(np.asarray([lane], dtype=np.uint32))
        output = client.create(np.zeros(vector_size, dtype=F.numpy))

        kernel.launch_unchecked(
            client,
            cp.CubeCount(1, 1, 1),
            cp.CubeDim(1),
            cp.ArrayArg(index),
            cp.ArrayArg(output, line_size=vector_size),
        )

        expected = np.zeros(vector_size)
        expected[lane] = 5.0
        np.testing.assert_array_equal(f64(client.read(output))[:vector_size], expected, f"lane {lane}")


# --- impl_vector_comparison! --------------------------------------------------------------

# Expected lanes of `lhs.cmp(rhs)` for lhs = [0, 1, 2, 3], rhs = [0, 2, 1, 3].
COMPARISONS = {
    "equal": [1, 0, 0, 1],
    "not_equal": [0, 1, 1, 0],
    "less_than": [0, 1, 0, 0],
    "greater_than": [0, 0, 1, 0],
    "less_equal": [1, 1, 0, 1],
    "greater_equal": [1, 0, 1, 1],
}


@cube
def vector_equal(a, b):
    return a == b


@cube
def vector_not_equal(a, b):
    return a != b


@cube
def vector_less_than(a, b):
    return a < b


@cube
def vector_greater_than(a, b):
    return a > b


@cube
def vector_less_equal(a, b):
    return a <= b


@cube
def vector_greater_equal(a, b):
    return a >= b


CMP_FUNCTIONS = {
    "equal": vector_equal,
    "not_equal": vector_not_equal,
    "less_than": vector_less_than,
    "greater_than": vector_greater_than,
    "less_equal": vector_less_equal,
    "greater_equal": vector_greater_equal,
}


@functools.cache
def make_kernel_vector_cmp(F, cmp):
    func = CMP_FUNCTIONS[cmp]

    @cube(launch=True)
    def kernel_vector_cmp(lhs: Array[Line[F]], rhs: Array[Line[F]], output: Array[Line[u32]]):
        if UNIT_POS == 0:
            output[0] = Line[u32](func(lhs[0], rhs[0]))

    return kernel_vector_cmp


@pytest.mark.parametrize("cmp", list(COMPARISONS))
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_vector_comparison(client, F, cmp):
    lhs = client.create(as_type(F, 0.0, 1.0, 2.0, 3.0))
    rhs = client.create(as_type(F, 0.0, 2.0, 1.0, 3.0))
    output = client.empty((4,), np.uint32)

    make_kernel_vector_cmp(F, cmp).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        cp.ArrayArg(lhs, line_size=4),
        cp.ArrayArg(rhs, line_size=4),
        cp.ArrayArg(output, line_size=4),
    )

    np.testing.assert_array_equal(client.read(output), COMPARISONS[cmp])
