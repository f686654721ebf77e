"""Port of CubeCL's ``index`` runtime tests.

Sources: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/index.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD: ``test_shuffle``, ``test_destructurable``) and at
the classic-era commit 3956d61536a93022980368e32385934ee5722195 (``test_assign_index``: the checked
launch policy, out-of-bounds write dropped and out-of-bounds read giving 0; removed at HEAD where
checked mode clamps instead).

``test_assign_index`` runs per FloatType (f16, bf16, f32, f64), the others once.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, Array, cube, u32

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_type![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


@functools.cache
def make_kernel_assign(F):
    @cube(launch=True)
    def kernel_assign(output: Array[F]):
        if UNIT_POS == 0:
            item = F(5.0)
            # Assign normally.
            output[0] = item

            # out of bounds write should not show up in the array.
            output[4] = F(10.0)

            # out of bounds read should be read as 0.
            output[1] = output[4]

    return kernel_assign


@pytest.mark.cubepy_sanitize(False)  # CubeCL's test of checked mode: the out-of-bounds accesses are the point
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_assign_index(client, F):
    # Rust binds the first 3 elements of the 4-element buffer [0, 1, 123, 6]
    # (`handle.offset_end(size_of::<F>())`, `ArrayArg::from_raw_parts(handle_slice, 3)`).
    # cubepy's public API has no sub-range of a handle, so the array is a 3-element buffer.
    handle = client.create(as_type(F, 0.0, 1.0, 123.0))

    make_kernel_assign(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    actual = client.read(handle).astype(np.float64)
    assert actual[0] == 5.0
    assert actual[1] == 0.0
    assert actual[2] == 123.0


@cube(launch=True)
def shuffle_kernel(orders: Array[u32]):
    if UNIT_POS < 2:
        order = cp.LocalArray[u32](2)
        order[0] = 0
        order[1] = 1

        i = ABSOLUTE_POS & 1
        tmp = order[i]
        order[i] = 9
        order[i ^ 1] = tmp

        base = ABSOLUTE_POS * 2
        orders[base] = order[0]
        orders[base + 1] = order[1]


@cube(launch=True)
def destructurable_kernel(orders: Array[u32]):
    if UNIT_POS == 0:
        order = cp.LocalArray[u32](4)
        order[0] = orders[0]
        order[1] = orders[1]
        order[2] = orders[2]
        order[3] = orders[3]
        # Rust: `let len = order.len().comptime();`
        length = 4

        for i in cp.unroll(range(length)):
            order[i] += order[length - i - 1] + i

        for i in cp.unroll(range(length)):
            # ABSOLUTE_POS prevents constant inlining and keeps index dynamic
            orders[ABSOLUTE_POS + i + 4] = order[i]


def test_shuffle(client):
    # Regression test for invalid `CopyTransform`
    handle = client.empty((4,), np.uint32)

    shuffle_kernel.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(2), cp.ArrayArg(handle))

    np.testing.assert_array_equal(client.read(handle), [9, 0, 1, 9])


def test_destructurable(client):
    # Test to ensure destructuring arrays doesn't break anything
    handle = client.create(np.asarray([1, 2, 3, 4, 10, 10, 10, 10], dtype=np.uint32))

    destructurable_kernel.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(2), cp.ArrayArg(handle))

    np.testing.assert_array_equal(client.read(handle), [1, 2, 3, 4, 5, 6, 11, 12])
