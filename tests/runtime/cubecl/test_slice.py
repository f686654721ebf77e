"""Port of CubeCL's ``slice`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/slice.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; same tests as the classic file at 3956d6153, whose
``input.slice(2, 4)`` / ``output.slice_mut(0, 2)`` spelling is the one cubepy has).

``testgen_slice!`` runs per FloatType (f16, bf16, f32, f64); ``test_slice_mut_len`` is untyped.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, cube, u32

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_bytes![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


@functools.cache
def make_slice_select(F):
    @cube(launch=True)
    def slice_select(input: Array[F], output: Array[F]):
        if UNIT_POS == 0:
            s = input.slice(2, 3)
            output[0] = s[0]

    return slice_select


@functools.cache
def make_slice_len(F):
    @cube(launch=True)
    def slice_len(input: Array[F], output: Array[u32]):
        if UNIT_POS == 0:
            s = input.slice(2, 4)
            output[0] = u32(s.len())

    return slice_len


@functools.cache
def make_slice_for(F):
    @cube(launch=True)
    def slice_for(input: Array[F], output: Array[F]):
        if UNIT_POS == 0:
            total = F(0.0)

            # Rust: `for item in &input[2..4] { sum += *item; }` (classic: `input.slice(2, 4)`).
            # cubepy's public API does not define iterating a slice; index it in a range loop.
            s = input.slice(2, 4)
            for i in range(0, s.len()):
                total += s[i]

            output[0] = total

    return slice_for


@functools.cache
def make_slice_mut_assign(F):
    @cube(launch=True)
    def slice_mut_assign(input: Array[F], output: Array[F]):
        if UNIT_POS == 0:
            slice_1 = output.slice(2, 3)
            slice_1[0] = input[0]

    return slice_mut_assign


@cube(launch=True)
def slice_mut_len(output: Array[u32]):
    if UNIT_POS == 0:
        # Rust: `output[..2].as_vectorized_mut()` (classic: `slice_mut(0, 2).into_vectorized()`);
        # the vectorized view of a line-size-1 slice is the slice itself.
        s = output.slice(0, 2)
        output[0] = u32(s.len())


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_slice_select(client, F):
    input = client.create(as_type(F, 0.0, 1.0, 2.0, 3.0, 4.0))
    output = client.empty((1,), F.numpy)

    make_slice_select(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(input), cp.ArrayArg(output))

    assert client.read(output).astype(np.float64)[0] == 2.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_slice_len(client, F):
    input = client.create(as_type(F, 0.0, 1.0, 2.0, 3.0, 4.0))
    output = client.empty((1,), np.uint32)

    make_slice_len(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(input), cp.ArrayArg(output))

    np.testing.assert_array_equal(client.read(output), [2])


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_slice_for(client, F):
    input = client.create(as_type(F, 0.0, 1.0, 2.0, 3.0, 4.0))
    output = client.create(as_type(F, 0.0))

    make_slice_for(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(input), cp.ArrayArg(output))

    assert client.read(output).astype(np.float64)[0] == 5.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_slice_mut_assign(client, F):
    input = client.create(as_type(F, 15.0))
    output = client.create(as_type(F, 0.0, 1.0, 2.0, 3.0, 4.0))

    make_slice_mut_assign(F).launch(
        client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(input), cp.ArrayArg(output)
    )

    np.testing.assert_array_equal(
        client.read(output)[0:5].astype(np.float64),
        as_type(F, 0.0, 1.0, 15.0, 3.0, 4.0).astype(np.float64),
    )


def test_slice_mut_len(client):
    output = client.empty((4,), np.uint32)

    slice_mut_len.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(output))

    assert client.read(output)[0] == 2
