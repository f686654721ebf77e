"""Port of CubeCL's ``plane`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/plane.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; superset of the classic file at 3956d6153, which
lacks ``test_plane_min_partial``).

``testgen_plane!`` runs per FloatType (f16, bf16, f32, f64) and, where the Rust test takes a
vectorization, for vector sizes 1, 2 and 4. ``test_plane_ballot`` is untyped.
The expected values are computed with the loops of the Rust test. Rust reads
``plane_size_max`` from the device for ``shuffle`` and ``shuffle_down``; the other tests hardcode
32, which is used everywhere here (the interp runtime's plane width).
``plane_inclusive_prod`` / ``plane_exclusive_prod`` have no name in cubepy's public API; their tests are
skipped while ``cubepy`` does not export them.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Line, Tensor, cube, u32

from .approx import assert_equals_approx

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]
VECTORIZATIONS = [1, 2, 4]
PLANE_SIZE = 32


def plane_operation(client, F, values, expected, kernel, cube_dim, vectorization):
    """``test_plane_operation``: one cube, a rank-1 tensor over the data, approx compare."""
    values = np.asarray(values, dtype=np.float32).astype(F.numpy)
    expected = np.asarray(expected, dtype=np.float32).astype(F.numpy)
    handle = client.create(values)

    kernel.launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(cube_dim),
        cp.TensorArg.from_raw_parts(handle, [1], [len(values)], line_size=vectorization),
    )

    assert_equals_approx(F, client.read(handle), expected, 1e-5)


# --- kernels ------------------------------------------------------------------------------


@functools.cache
def make_kernel_sum(F):
    @cube(launch=True)
    def kernel_sum(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_sum(val)

        if UNIT_POS == 0:
            output[0] = val2

    return kernel_sum


@functools.cache
def make_kernel_inclusive_sum(F):
    @cube(launch=True)
    def kernel_inclusive_sum(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_inclusive_sum(val)

        output[UNIT_POS] = val2

    return kernel_inclusive_sum


@functools.cache
def make_kernel_exclusive_sum(F):
    @cube(launch=True)
    def kernel_exclusive_sum(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_exclusive_sum(val)

        output[UNIT_POS] = val2

    return kernel_exclusive_sum


@functools.cache
def make_kernel_prod(F):
    @cube(launch=True)
    def kernel_prod(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_prod(val)

        if UNIT_POS == 0:
            output[0] = val2

    return kernel_prod


@functools.cache
def make_kernel_inclusive_prod(F):
    @cube(launch=True)
    def kernel_inclusive_prod(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_inclusive_prod(val)

        output[UNIT_POS] = val2

    return kernel_inclusive_prod


@functools.cache
def make_kernel_exclusive_prod(F):
    @cube(launch=True)
    def kernel_exclusive_prod(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_exclusive_prod(val)

        output[UNIT_POS] = val2

    return kernel_exclusive_prod


@functools.cache
def make_kernel_max(F):
    @cube(launch=True)
    def kernel_max(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_max(val)

        if UNIT_POS == 0:
            output[0] = val2

    return kernel_max


@functools.cache
def make_kernel_min(F):
    @cube(launch=True)
    def kernel_min(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_min(val)

        if UNIT_POS == 0:
            output[0] = val2

    return kernel_min


@functools.cache
def make_kernel_all(F):
    @cube(launch=True)
    def kernel_all(output: Tensor[F]):
        val = output[UNIT_POS]
        val2 = cp.plane_all(val < F(5.0))
        output[UNIT_POS] = F(val2)

    return kernel_all


@functools.cache
def make_kernel_any(F):
    @cube(launch=True)
    def kernel_any(output: Tensor[F]):
        val = output[UNIT_POS]
        val2 = cp.plane_any(val > F(5.0))
        output[UNIT_POS] = F(val2)

    return kernel_any


@functools.cache
def make_kernel_elect(F):
    @cube(launch=True)
    def kernel_elect(output: Tensor[F]):
        elect = cp.plane_elect()
        if elect:
            output[20] += F(1.0)

    return kernel_elect


@functools.cache
def make_kernel_broadcast(F):
    @cube(launch=True)
    def kernel_broadcast(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_broadcast(val, u32(2))

        if UNIT_POS == 0:
            output[0] = val2

    return kernel_broadcast


@cube(launch=True)
def kernel_ballot(output: Tensor[Line[u32]]):
    val2 = cp.plane_ballot(UNIT_POS < 8)

    if UNIT_POS == 0:
        output[0] = Line[u32](val2)


@functools.cache
def make_kernel_shuffle(F):
    @cube(launch=True)
    def kernel_shuffle(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_shuffle(val, 0)  # All lanes read from lane 0

        if UNIT_POS == 0:
            output[0] = val2

    return kernel_shuffle


@functools.cache
def make_kernel_shuffle_xor(F):
    @cube(launch=True)
    def kernel_shuffle_xor(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_shuffle_xor(val, 1)

        output[UNIT_POS] = val2

    return kernel_shuffle_xor


@functools.cache
def make_kernel_shuffle_up(F):
    @cube(launch=True)
    def kernel_shuffle_up(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_shuffle_up(val, 1)

        output[UNIT_POS] = val2

    return kernel_shuffle_up


@functools.cache
def make_kernel_shuffle_down(F):
    @cube(launch=True)
    def kernel_shuffle_down(output: Tensor[Line[F]]):
        val = output[UNIT_POS]
        val2 = cp.plane_shuffle_down(val, 1)

        output[UNIT_POS] = val2

    return kernel_shuffle_down


# --- expected values, as computed by the Rust tests ----------------------------------------


def iota(vectorization):
    return [float(x) for x in range(PLANE_SIZE * vectorization)]


def thirds(vectorization):
    """Values close to 1 to avoid overflow: x % 3 -> 0.5, 1.25, 1.75."""
    return [(0.5, 1.25, 1.75)[x % 3] for x in range(PLANE_SIZE * vectorization)]


def reduce_expected(values, vectorization, combine):
    expected = np.asarray(values, dtype=np.float32).copy()
    for k in range(1, PLANE_SIZE):
        for v in range(vectorization):
            expected[v] = combine(expected[v], np.float32(values[v + k * vectorization]))
    return expected


def scan_expected(values, vectorization, init, combine):
    values = np.asarray(values, dtype=np.float32)
    expected = values.copy() if init is None else np.full(len(values), init, dtype=np.float32)
    for k in range(1, PLANE_SIZE):
        offs_out = k * vectorization
        for k_1 in range(k):
            offs_in = k_1 * vectorization
            for v in range(vectorization):
                expected[v + offs_out] = combine(expected[v + offs_out], values[v + offs_in])
    return expected


# --- tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_sum(client, F, vectorization):
    values = iota(vectorization)
    expected = reduce_expected(values, vectorization, lambda a, b: a + b)
    plane_operation(client, F, values, expected, make_kernel_sum(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_inclusive_sum(client, F, vectorization):
    values = iota(vectorization)
    expected = scan_expected(values, vectorization, None, lambda a, b: a + b)
    plane_operation(client, F, values, expected, make_kernel_inclusive_sum(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_exclusive_sum(client, F, vectorization):
    values = iota(vectorization)
    expected = scan_expected(values, vectorization, 0.0, lambda a, b: a + b)
    plane_operation(client, F, values, expected, make_kernel_exclusive_sum(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_prod(client, F, vectorization):
    values = thirds(vectorization)
    expected = reduce_expected(values, vectorization, lambda a, b: a * b)
    plane_operation(client, F, values, expected, make_kernel_prod(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_inclusive_prod(client, F, vectorization):
    values = thirds(vectorization)
    expected = scan_expected(values, vectorization, None, lambda a, b: a * b)
    plane_operation(client, F, values, expected, make_kernel_inclusive_prod(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_exclusive_prod(client, F, vectorization):
    values = thirds(vectorization)
    expected = scan_expected(values, vectorization, 1.0, lambda a, b: a * b)
    plane_operation(client, F, values, expected, make_kernel_exclusive_prod(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_max(client, F, vectorization):
    values = iota(vectorization)
    values[16] = 999.0  # I don't want the max to always be the last element.
    expected = reduce_expected(values, vectorization, max)
    plane_operation(client, F, values, expected, make_kernel_max(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_min(client, F, vectorization):
    values = iota(vectorization)
    values[16] = -5.0  # I don't want the min to always be the first element.
    expected = reduce_expected(values, vectorization, min)
    plane_operation(client, F, values, expected, make_kernel_min(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_min_partial(client, F):
    # Plane reduction over a cube smaller than the plane, where the upper lanes are inactive.
    # Inputs are strictly positive so a fold reaching an inactive lane shows up in the result.
    vectorization = 1
    cube_dim = 4  # Below the minimum plane width of any supported backend.
    buffer_len = 32

    values = [float(x + 1) for x in range(buffer_len)]
    expected = list(values)
    expected[0] = min(values[:cube_dim], default=float("inf"))

    plane_operation(client, F, values, expected, make_kernel_min(F), cube_dim, vectorization)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_all(client, F):
    vectorization = 1  # Vectorization can't work for all/any
    # the predicate is x < 5 which is always satisfied at this step.
    values = [float(x % 5) for x in range(PLANE_SIZE * vectorization)]
    for k in range(vectorization):
        if k % 2 == 0:
            # Make all even batches false by setting an element to be > 5.
            values[4 * vectorization + k] = 10.0
    expected = [float((x % vectorization) % 2) for x in range(len(values))]

    plane_operation(client, F, values, expected, make_kernel_all(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_any(client, F):
    vectorization = 1  # Vectorization can't work for all/any
    # the predicate is x > 5 which is never satisfied at this step.
    values = [float(x % 5) for x in range(PLANE_SIZE * vectorization)]
    for k in range(vectorization):
        if k % 2 == 0:
            # Make all even batches true by setting an element to be > 5.
            values[4 * vectorization + k] = 10.0
    expected = [float(1 - (x % vectorization) % 2) for x in range(len(values))]

    plane_operation(client, F, values, expected, make_kernel_any(F), PLANE_SIZE, vectorization)


def test_plane_ballot(client):
    handle = client.empty((4,), np.uint32)
    # Rust passes shape [1] with line size 4 (classic CubeCL did not check it); cubepy's shapes are in
    # elements and must hold whole lines, so the same one-line tensor is shape [4].
    shape, strides = [4], [1]

    kernel_ballot.launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(32),
        cp.TensorArg.from_raw_parts(handle, strides, shape, line_size=4),
    )

    expected = [0b1111_1111, 0, 0, 0]
    np.testing.assert_array_equal(client.read(handle), expected)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_elect(client, F):
    values = [0.0] * PLANE_SIZE
    expected = list(values)
    expected[20] = 1.0

    plane_operation(client, F, values, expected, make_kernel_elect(F), PLANE_SIZE, 1)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_broadcast(client, F, vectorization):
    values = iota(vectorization)
    expected = list(values)
    for v in range(vectorization):
        expected[v] = values[v + 2 * vectorization]
    plane_operation(client, F, values, expected, make_kernel_broadcast(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_shuffle(client, F, vectorization):
    values = iota(vectorization)
    expected = list(values)
    # All lanes read from lane 0 (same as broadcast(value, 0))
    expected[:vectorization] = values[:vectorization]
    plane_operation(client, F, values, expected, make_kernel_shuffle(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_shuffle_xor(client, F, vectorization):
    values = iota(vectorization)
    expected = list(values)
    # XOR with mask=1: lane i gets value from lane (i XOR 1)
    for lane in range(PLANE_SIZE):
        partner = lane ^ 1
        for v in range(vectorization):
            expected[lane * vectorization + v] = values[partner * vectorization + v]
    plane_operation(client, F, values, expected, make_kernel_shuffle_xor(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_shuffle_up(client, F, vectorization):
    values = iota(vectorization)
    expected = list(values)
    # Shuffle up with delta=1: lane i gets value from lane (i - 1); lane 0 stays the same
    for lane in range(1, PLANE_SIZE):
        for v in range(vectorization):
            expected[lane * vectorization + v] = values[(lane - 1) * vectorization + v]
    plane_operation(client, F, values, expected, make_kernel_shuffle_up(F), PLANE_SIZE, vectorization)


@pytest.mark.parametrize("vectorization", VECTORIZATIONS)
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_plane_shuffle_down(client, F, vectorization):
    values = iota(vectorization)
    expected = list(values)
    # Shuffle down with delta=1: lane i gets value from lane (i + 1); the last lane stays the same
    for lane in range(PLANE_SIZE - 1):
        for v in range(vectorization):
            expected[lane * vectorization + v] = values[(lane + 1) * vectorization + v]
    plane_operation(client, F, values, expected, make_kernel_shuffle_down(F), PLANE_SIZE, vectorization)
