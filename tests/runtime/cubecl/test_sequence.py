"""Port of CubeCL's ``sequence`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/sequence.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; same tests as the classic file at 3956d6153).

``testgen_sequence!`` runs per FloatType (f16, bf16, f32, f64). ``terminate!()`` is ``return``.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, cube

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_bytes![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


@functools.cache
def make_sequence_for_loop(F):
    @cube(launch=True)
    def sequence_for_loop(output: Array[F]):
        if UNIT_POS != 0:
            return

        sequence = cp.Sequence()
        sequence.push(F(1.0))
        sequence.push(F(4.0))

        for value in sequence:
            output[0] += value

    return sequence_for_loop


@functools.cache
def make_sequence_index(F):
    @cube(launch=True)
    def sequence_index(output: Array[F]):
        if UNIT_POS != 0:
            return

        sequence = cp.Sequence()
        sequence.push(F(2.0))
        sequence.push(F(4.0))

        output[0] += sequence[0]
        # Rust: `*Sequence::<F>::index(&sequence, 1usize)`
        output[0] += sequence[1]

    return sequence_index


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_sequence_for_loop(client, F):
    handle = client.create(as_type(F, 0.0))

    make_sequence_for_loop(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    assert client.read(handle).astype(np.float64)[0] == 5.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_sequence_index(client, F):
    handle = client.create(as_type(F, 0.0))

    make_sequence_index(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    assert client.read(handle).astype(np.float64)[0] == 6.0
