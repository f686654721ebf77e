"""Port of CubeCL's ``synchronization`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/synchronization.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD), with the cube sizes of the classic file at
3956d61536a93022980368e32385934ee5722195 (HEAD derives them from ``max_units_per_cube``, which
gives the same sizes on any device with at least 64 units per cube).

``testgen_sync_plane!`` is untyped (``F = f32``). ``terminate!()`` is ``return``; a scalar
``Shared::<F>::new()`` is a one-element ``SharedMemory``.
Not ported: the ``workgroup_uniform_load*`` tests (no such intrinsic in cubepy's public API, and the Rust
intrinsic takes a reference to a shared-memory element).
"""

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, cube, f32, u32


@cube(launch=True)
def kernel_test_sync_cube(buffer: Array[u32], out: Array[u32]):
    unit_pos = cp.usize(UNIT_POS)
    buffer[unit_pos] = UNIT_POS
    cp.sync_cube()
    if unit_pos != 0:
        out[unit_pos] = buffer[unit_pos - 1] + buffer[unit_pos]


def test_sync_cube(client):
    dim_x = 8
    units = dim_x * 2

    handle = client.empty((32,), np.uint32)
    test = client.empty((32,), np.uint32)

    kernel_test_sync_cube.launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(dim_x, 2),
        cp.ArrayArg(test),
        cp.ArrayArg(handle),
    )

    actual = client.read(handle)
    expected = [max(2 * i - 1, 0) for i in range(units)]
    np.testing.assert_array_equal(actual[1:units], expected[1:units])


@cube(launch=True)
def kernel_test_finished_sync_cube(buffer: Array[u32], out: Array[u32]):
    unit_pos = cp.usize(UNIT_POS)
    buffer[unit_pos] = UNIT_POS
    if UNIT_POS > 16:
        return
    cp.sync_cube()
    cp.sync_cube()
    if UNIT_POS != 0:
        out[unit_pos] = buffer[unit_pos - 1] + buffer[unit_pos]
    cp.sync_cube()


def test_finished_sync_cube(client):
    dim_x = 8
    checked = min(8, dim_x * 2)

    handle = client.empty((32,), np.uint32)
    test = client.empty((32,), np.uint32)

    kernel_test_finished_sync_cube.launch(
        client,
        cp.CubeCount(2, 1, 1),
        cp.CubeDim(dim_x, 2),
        cp.ArrayArg(test),
        cp.ArrayArg(handle),
    )

    actual = client.read(handle)
    expected = [max(2 * i - 1, 0) for i in range(checked)]
    np.testing.assert_array_equal(actual[1:checked], expected[1:checked])


# CUDA gives units of the second plane no order with unit 0's write (only sync_cube would), and the
# test checks only the first plane: the sanitizer rightly reports the race, so skip it under sanitize.
@cube(launch=True)
def kernel_test_sync_plane(out: Array[f32]):
    shared_memory = cp.SharedMemory[f32](1)

    if UNIT_POS == 0:
        shared_memory[0] = f32(1)

    cp.sync_plane()

    out[UNIT_POS] = shared_memory[0]


@pytest.mark.races_by_design
def test_sync_plane(client):
    # First 32 elements should be 1, while last 32 elements may or may not be 1
    handle = client.empty((64,), np.float32)

    kernel_test_sync_plane.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(32, 2), cp.ArrayArg(handle))

    actual = client.read(handle)
    np.testing.assert_array_equal(actual[0:32], [1.0] * 32)


@cube(launch=True)
def kernel_test_sync_cube_shared(out: Array[f32]):
    shared_memory = cp.SharedMemory[f32](1)

    if UNIT_POS == 0:
        shared_memory[0] = f32(1)

    cp.sync_cube()

    out[UNIT_POS] = shared_memory[0]


def test_sync_cube_shared(client):
    # All 64 elements should be 1
    max_cube_count = 64
    handle = client.empty((max_cube_count,), np.float32)

    kernel_test_sync_cube_shared.launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(max_cube_count // 2, 2),
        cp.ArrayArg(handle),
    )

    actual = client.read(handle)
    np.testing.assert_array_equal(actual[0:max_cube_count], [1.0] * max_cube_count)
