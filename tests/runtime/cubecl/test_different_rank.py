"""Port of CubeCL's ``different_rank`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/different_rank.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; same tests as the classic file at 3956d6153).

``testgen_different_rank!`` runs per FloatType (f16, bf16, f32, f64). The launch covers 32 units
for 4 lines of 2, so the checked launch drops the out-of-bounds accesses of the other units.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Line, Tensor, cube

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_bytes![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


@functools.cache
def make_kernel_different_rank(F):
    @cube(launch=True)
    def kernel_different_rank(lhs: Tensor[Line[F]], rhs: Tensor[Line[F]], output: Tensor[Line[F]]):
        output[ABSOLUTE_POS] = lhs[ABSOLUTE_POS] + rhs[ABSOLUTE_POS]

    return kernel_different_rank


def run_different_rank(client, F, shapes, strides):
    shape_lhs, shape_rhs, shape_out = shapes
    strides_lhs, strides_rhs, strides_out = strides
    vectorisation = 2

    handle_lhs = client.create(as_type(F, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0))
    handle_rhs = client.create(as_type(F, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0))
    handle_out = client.create(as_type(F, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))

    lhs = cp.TensorArg.from_raw_parts(handle_lhs, strides_lhs, shape_lhs, line_size=vectorisation)
    rhs = cp.TensorArg.from_raw_parts(handle_rhs, strides_rhs, shape_rhs, line_size=vectorisation)
    out = cp.TensorArg.from_raw_parts(handle_out, strides_out, shape_out, line_size=vectorisation)

    cube_dim = 16  # min(16, max_cube_dim.x)
    cube_count = 32 // cube_dim

    make_kernel_different_rank(F).launch(client, cp.CubeCount(cube_count, 1, 1), cp.CubeDim(cube_dim), lhs, rhs, out)

    np.testing.assert_array_equal(
        client.read(handle_out).astype(np.float64),
        as_type(F, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0, 17.0).astype(np.float64),
    )


@pytest.mark.cubepy_sanitize(False)  # CubeCL's test: the checked launch drops the extra units' accesses on purpose
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_kernel_different_rank_first_biggest(client, F):
    run_different_rank(
        client,
        F,
        ([2, 2, 2], [8], [2, 4]),
        ([8, 4, 1], [1], [4, 1]),
    )


@pytest.mark.cubepy_sanitize(False)  # CubeCL's test: the checked launch drops the extra units' accesses on purpose
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_kernel_different_rank_last_biggest(client, F):
    run_different_rank(
        client,
        F,
        ([2, 4], [8], [2, 2, 2]),
        ([4, 1], [1], [8, 4, 1]),
    )
