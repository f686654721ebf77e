"""cmma fragments, named barriers, predicate barriers and plane matches on the compiled cpu runtime, against
numpy and the interp.

Expected values are computed here with numpy (float64 products) or written by hand; the cpu and interp
results must also be bit-equal, since both run the same emulation of fragments and the same barrier rules.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import PLANE_POS, UNIT_POS, Array, SharedMemory, f16, f32, u32
from cubepy.errors import SanitizerError, SanitizerKind

Matrix, Ident, Layout = cp.cmma.Matrix, cp.cmma.MatrixIdent, cp.cmma.MatrixLayout


@cp.cube(launch=True)
def two_plane_products(a: Array[f16], b: Array[f16], out: Array[f32]):
    """Plane p computes a_p @ b + p (a_p the p-th 16x16 block of rows of a), through shared memory."""
    a_tile = SharedMemory[f16](512)
    b_tile = SharedMemory[f16](256)
    for i in range(UNIT_POS, 512, 64):
        a_tile[i] = a[i]
    for i in range(UNIT_POS, 256, 64):
        b_tile[i] = b[i]
    cp.sync_cube()
    lhs = Matrix[f16].from_slice(Ident.A, 16, 16, 16, Layout.ROW_MAJOR, a_tile.slice(PLANE_POS * 256, 512), 16)
    rhs = Matrix[f16].from_slice(Ident.B, 16, 16, 16, Layout.ROW_MAJOR, b_tile, 16)
    acc = Matrix[f32].from_value(Ident.ACCUMULATOR, 16, 16, 16, None, f32(PLANE_POS))
    cp.cmma.execute(lhs, rhs, acc, acc)
    cp.cmma.store(out.slice(PLANE_POS * 256, PLANE_POS * 256 + 256), acc, 16, Layout.COL_MAJOR)


def test_cmma_products_of_two_planes_match_numpy_and_the_interp():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((32, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    results = {}
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        out = client.zeros((512,), np.float32)
        two_plane_products.launch(
            client,
            3,
            64,
            cp.ArrayArg(client.create(a.ravel())),
            cp.ArrayArg(client.create(b.ravel())),
            cp.ArrayArg(out),
        )
        results[runtime] = client.read(out)
    for plane in range(2):
        expected = a[16 * plane : 16 * plane + 16].astype(np.float64) @ b.astype(np.float64) + plane
        got = results["cpu"][256 * plane : 256 * plane + 256].reshape(16, 16).T  # stored column-major
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(results["cpu"], results["interp"])


@cp.cube(launch=True)
def tile_past_the_end(out: Array[f32]):
    acc = Matrix[f32].from_value(Ident.ACCUMULATOR, 16, 16, 16, None, f32(1))
    cp.cmma.store(out, acc, 16, Layout.ROW_MAJOR)  # BUG: out holds 200 items, the tile reaches 255


def test_a_cmma_tile_outside_its_buffer_is_reported_as_on_the_interp():
    messages = []
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        out = client.zeros((200,), np.float32)
        with pytest.raises(SanitizerError) as info:
            tile_past_the_end.launch(client, 1, 32, cp.ArrayArg(out))
        assert info.value.kind is SanitizerKind.OUT_OF_BOUNDS
        assert client.read(out).tolist() == [0.0] * 200  # nothing written
        messages.append(str(info.value))
    assert "out-of-bounds cmma access of global buffer 0 (out): offset 0, stride 16 (length 200)" in messages[1]
    assert messages[0].split("\n")[0].split(": ", 1)[1] == messages[1].split("\n")[0].split(": ", 1)[1]


@cp.cube(launch=True)
def half_a_plane_fills(out: Array[f32]):
    acc = Matrix[f32].uninitialized(Ident.ACCUMULATOR, 16, 16, 16)
    if UNIT_POS < 16:
        cp.cmma.fill(acc, 1.0)  # BUG: wmma is .aligned, the whole plane must execute it
    cp.cmma.store(out, acc, 16, Layout.ROW_MAJOR)


def test_a_fragment_op_run_by_part_of_a_plane_is_a_partial_plane_error():
    client = cp.client("cpu")
    with pytest.raises(SanitizerError) as info:
        half_a_plane_fills.launch(client, 1, 32, cp.ArrayArg(client.zeros((256,), np.float32)))
    assert info.value.kind is SanitizerKind.PARTIAL_PLANE and "every unit of the plane" in str(info.value)


@cp.cube(launch=True)
def producer_and_consumers(src: Array[f32], out: Array[f32]):
    """Plane 0 doubles src into a stage and arrives on barrier 1; planes 1..3 sync there and copy it out, twice."""
    stage = cp.SharedMemory[f32](96)
    for round_ in range(2):
        if PLANE_POS == 0:
            for i in range(UNIT_POS, 96, 32):
                stage[i] = src[i] * f32(2 + round_)
            cp.named_barrier_arrive(1, 128)
            cp.named_barrier_sync(2, 128)  # the consumers have read the stage
        else:
            cp.named_barrier_sync(1, 128)
            out[cp.CUBE_POS * 192 + round_ * 96 + UNIT_POS - 32] = stage[UNIT_POS - 32]
            cp.named_barrier_arrive(2, 128)


def test_named_barriers_hand_stages_from_a_producer_plane_to_consumers():
    src = np.arange(96, dtype=np.float32)
    expected = np.tile(np.concatenate([src * 2, src * 3]), 3)
    for runtime in ("cpu", "interp"):
        client = cp.client(runtime)
        out = client.zeros((3 * 192,), np.float32)
        producer_and_consumers.launch(client, 3, 128, cp.ArrayArg(client.create(src)), cp.ArrayArg(out))
        np.testing.assert_array_equal(client.read(out), expected)


@cp.cube(launch=True)
def one_plane_missing(out: Array[f32], units: u32):
    if PLANE_POS == 1:
        return
    cp.named_barrier_sync(3, units)  # BUG: plane 1 returned, so 32 of the 64 units arrive
    out[UNIT_POS] = f32(1)


def test_a_named_barrier_that_cannot_complete_is_a_deadlock_with_the_interps_words():
    client = cp.client("cpu")
    with pytest.raises(SanitizerError) as info:
        one_plane_missing.launch(client, 1, 64, cp.ArrayArg(client.zeros((64,), np.float32)), cp.ScalarArg(64, u32))
    assert info.value.kind is SanitizerKind.BARRIER_DEADLOCK
    assert "named barrier 3 expects 64 units and 32 arrived (32 missing)" in str(info.value)
    assert "test_tensor_cores_and_named_barriers_on_cpu.py:" in str(info.value)


@pytest.mark.parametrize(
    ("units", "detail"),
    [(48, "unit count 48 is not a positive multiple of 32"), (96, "unit count 96 exceeds the 64 units of the cube")],
)
def test_named_barrier_operands_are_checked_on_cpu(units, detail):
    client = cp.client("cpu")
    with pytest.raises(SanitizerError) as info:
        one_plane_missing.launch(client, 1, 64, cp.ArrayArg(client.zeros((64,), np.float32)), cp.ScalarArg(units, u32))
    assert info.value.kind is SanitizerKind.NAMED_BARRIER_MISUSE and detail in str(info.value)


@cp.cube(launch=True)
def votes_and_counts(values: Array[u32], out: Array[u32]):
    """A plane sum, a match and a counting barrier in one kernel (the driver with plane and barrier waits)."""
    v = values[cp.CUBE_POS * 64 + UNIT_POS]
    total = cp.plane_sum(v)
    same = cp.plane_match_any(v % 4)
    count = cp.sync_cube_count(v % 3 == 0)
    every = cp.sync_cube_and(v < 1000)
    some = cp.sync_cube_or(v == 7)
    base = (cp.CUBE_POS * 64 + UNIT_POS) * 5
    out[base] = total
    out[base + 1] = same
    out[base + 2] = count
    out[base + 3] = u32(every)
    out[base + 4] = u32(some)


def test_predicate_barriers_and_matches_beside_plane_sums_match_the_interp_and_numpy():
    values = np.random.default_rng(4).integers(0, 1000, size=3 * 64).astype(np.uint32)
    results = []
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        out = client.zeros((3 * 64 * 5,), np.uint32)
        votes_and_counts.launch(client, 3, 64, cp.ArrayArg(client.create(values)), cp.ArrayArg(out))
        results.append(client.read(out).reshape(3, 2, 32, 5))
    np.testing.assert_array_equal(results[1], results[0])
    got, planes = results[1], values.reshape(3, 2, 32)
    np.testing.assert_array_equal(got[..., 0], np.broadcast_to(planes.sum(axis=2, keepdims=True), (3, 2, 32)))
    lanes = 1 << np.arange(32, dtype=np.uint64)
    same = (planes[..., :, None] % 4 == planes[..., None, :] % 4) * lanes
    np.testing.assert_array_equal(got[..., 1], same.sum(axis=-1).astype(np.uint32))
    cubes = values.reshape(3, 64)
    np.testing.assert_array_equal(got[..., 2].reshape(3, 64)[:, 0], (cubes % 3 == 0).sum(axis=1))
    assert got[..., 3].all()
    np.testing.assert_array_equal(got[..., 4].reshape(3, 64)[:, 0], (cubes == 7).any(axis=1).astype(np.uint32))
