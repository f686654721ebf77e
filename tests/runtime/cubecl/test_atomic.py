"""Port of CubeCL's ``atomic`` runtime tests.

Sources: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/atomic.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD: numeric ops, integer ops, max under contention)
and at the classic-era commit 3956d61536a93022980368e32385934ee5722195
(``test_regression_issue_1218``, removed at HEAD).

Instantiation as in ``mod.rs``: ``testgen_atomic_float!`` per FloatType (f16, bf16, f32, f64),
``testgen_atomic_int!`` per IntType (i8, i16, i32, i64), ``testgen_atomic_uint!`` per UintType
(u8, u16, u32, u64). The Rust comptime enum parameters (``NumericAtomicOp``, ``IntAtomicOp``)
are ``Comptime[str]`` parameters here, and their ``match`` is a comptime ``if``/``elif`` chain.
Rust skips an operation the device does not support (``AtomicUsage`` features); cubepy's public API has no
capability query, so every operation is expected to work.
Not ported: float atomics on vectors of 2 and 4 lanes (``Atomic<Vector<F, N>>``; cubepy's public API defines
``cp.Atomic[T]`` for scalar element types only).
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, Array, Comptime, cube, u32

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]
INTS = [cp.i8, cp.i16, cp.i32, cp.i64]
UINTS = [cp.u8, cp.u16, cp.u32, cp.u64]

NUMERIC_OPS = ["load", "store", "exchange", "add", "sub", "min", "max"]
INT_OPS = ["and", "or", "xor", "compare_exchange"]

# `numeric_expected`
NUMERIC_EXPECTED = {
    "load": 12,
    "store": 5,
    "exchange": 5,
    "add": 17,
    "sub": 7,
    "min": 5,
    "max": 12,
}

INT_ATOMIC_INITIAL_VALUE = 0b1010

# `int_expected`
INT_EXPECTED = {
    "and": 0b0010,
    "or": 0b1110,
    "xor": 0b1100,
    "compare_exchange": INT_ATOMIC_INITIAL_VALUE,
}


def filled_data(elem, vector_size, value):
    return np.full(vector_size, value).astype(elem.numpy)


@functools.cache
def make_kernel_atomic_numeric(T):
    @cube(launch=True)
    def kernel_atomic_numeric(
        input: Array[T],
        atomics: Array[cp.Atomic[T]],
        output: Array[T],
        op: Comptime[str],
    ):
        if UNIT_POS == 0:
            if op == "load":
                output[0] = atomics[0].load()
            elif op == "store":
                atomics[0].store(input[0])
            elif op == "exchange":
                atomics[0].exchange(T(5))
            elif op == "add":
                atomics[0].fetch_add(T(5))
            elif op == "sub":
                atomics[0].fetch_sub(T(5))
            elif op == "min":
                atomics[0].fetch_min(T(5))
            elif op == "max":
                atomics[0].fetch_max(T(5))

    return kernel_atomic_numeric


def run_atomic_numeric(client, T, vector_size, op):
    input_handle = client.create(filled_data(T, vector_size, 5))
    atomic_handle = client.create(filled_data(T, vector_size, 12))
    output_handle = client.create(filled_data(T, vector_size, 0))

    make_kernel_atomic_numeric(T).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        cp.ArrayArg(input_handle),
        cp.ArrayArg(atomic_handle),
        cp.ArrayArg(output_handle),
        op,
    )

    actual = client.read(output_handle if op == "load" else atomic_handle)
    expected = NUMERIC_EXPECTED[op]
    assert all(value == expected for value in actual.astype(np.float64)), f"{T.name} {op}: {actual} != {expected}"


@pytest.mark.parametrize("op", NUMERIC_OPS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_atomic_numeric_float(client, F, op):
    # `test_kernel_atomic_numeric_all_sizes`: vector sizes 1, 2, 4; only size 1 is expressible.
    run_atomic_numeric(client, F, 1, op)


@pytest.mark.parametrize("op", NUMERIC_OPS)
@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_atomic_numeric_int(client, Int, op):
    run_atomic_numeric(client, Int, 1, op)


@pytest.mark.parametrize("op", NUMERIC_OPS)
@pytest.mark.parametrize("U", UINTS, ids=lambda t: t.name)
def test_atomic_numeric_uint(client, U, op):
    run_atomic_numeric(client, U, 1, op)


@functools.cache
def make_kernel_atomic_int(Int):
    @cube(launch=True)
    def kernel_atomic_int(atomics: Array[cp.Atomic[Int]], output: Array[Int], op: Comptime[str]):
        if UNIT_POS == 0:
            if op == "and":
                atomics[0].fetch_and(Int(0b0110))
            elif op == "or":
                atomics[0].fetch_or(Int(0b0110))
            elif op == "xor":
                atomics[0].fetch_xor(Int(0b0110))
            elif op == "compare_exchange":
                # Rust: `compare_exchange_weak(I::from_int(12), I::from_int(5))`
                output[0] = atomics[0].compare_exchange(Int(12), Int(5))

    return kernel_atomic_int


def run_atomic_int(client, Int, op):
    handle = client.create(np.asarray([INT_ATOMIC_INITIAL_VALUE], dtype=Int.numpy))
    output_handle = client.create(np.asarray([0], dtype=Int.numpy))

    make_kernel_atomic_int(Int).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        cp.ArrayArg(handle),
        cp.ArrayArg(output_handle),
        op,
    )

    np.testing.assert_array_equal(client.read(handle), [INT_EXPECTED[op]])

    if op == "compare_exchange":
        np.testing.assert_array_equal(client.read(output_handle), [INT_ATOMIC_INITIAL_VALUE])


@pytest.mark.parametrize("op", INT_OPS)
@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_atomic_int(client, Int, op):
    run_atomic_int(client, Int, op)


@pytest.mark.parametrize("op", INT_OPS)
@pytest.mark.parametrize("U", UINTS, ids=lambda t: t.name)
def test_atomic_uint(client, U, op):
    run_atomic_int(client, U, op)


@functools.cache
def make_kernel_atomic_max_contention(Int):
    @cube(launch=True)
    def kernel_atomic_max_contention(atomics: Array[cp.Atomic[Int]]):
        atomics[0].fetch_max(Int(ABSOLUTE_POS))

    return kernel_atomic_max_contention


def run_atomic_max_contention(client, Int):
    # Many threads race `fetch_max` into one cell. The result must be the largest contribution.
    # 4 blocks of 32 threads contribute 0..=127 (within reach of i8).
    cube_dim = 32
    cube_count = 4
    n = cube_dim * cube_count

    handle = client.create(np.asarray([0], dtype=Int.numpy))

    make_kernel_atomic_max_contention(Int).launch(
        client, cp.CubeCount(cube_count), cp.CubeDim(cube_dim), cp.ArrayArg(handle)
    )

    np.testing.assert_array_equal(client.read(handle), [n - 1])


@pytest.mark.parametrize("Int", INTS, ids=lambda t: t.name)
def test_atomic_max_contention_int(client, Int):
    run_atomic_max_contention(client, Int)


@pytest.mark.parametrize("U", UINTS, ids=lambda t: t.name)
def test_atomic_max_contention_uint(client, U):
    run_atomic_max_contention(client, U)


@cube(launch=True)
def regression_issue_1218_kernel(x: Array[cp.Atomic[u32]]):
    x[0].store(0)


def test_regression_issue_1218(client):
    handle = client.create(np.asarray([10], dtype=np.uint32))

    regression_issue_1218_kernel.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    np.testing.assert_array_equal(client.read(handle), [0])
