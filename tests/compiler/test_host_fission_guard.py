"""Row guards inside loop fission: a stretch (or a lockstep round) whose per-unit code is ``prefix; if x < n:
...`` runs the units the guard admits with the test known, as plain vector code, and skips the others;
where ``x`` wraps inside a row, the row runs as written.  Results are checked against numpy sums in the same
order and bit for bit against the interp."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, Array, SharedMemory, cube, f32, u32
from cubepy.compiler.emit_host import compile_host
from tests.compiler.fission import _definition, on_interp_and_cpu

UNITS, ROUNDS = 64, 4


@cube(launch=True)
def guarded_rounds(data: Array[f32], out: Array[f32], offset: u32, limit: u32):
    """Each unit adds the items its guard admits, round by round; a barrier makes the kernel fission-shaped."""
    acc = f32(0.0)
    for k in range(ROUNDS):
        if offset + UNIT_POS + k * 8 < limit:
            acc += data[UNIT_POS + k * UNITS]
    cp.sync_cube()
    out[UNIT_POS] = acc


def _expected_rounds(data: np.ndarray, offset: int, limit: int) -> np.ndarray:
    acc = np.zeros(UNITS, np.float32)
    for k in range(ROUNDS):
        for unit in range(UNITS):
            if (offset + unit + k * 8) % 2**32 < limit:
                acc[unit] = np.float32(acc[unit] + data[unit + k * UNITS])
    return acc


@pytest.mark.parametrize(
    ("offset", "limit"),
    [(0, 1000), (0, 37), (2**32 - 40, 20), (5, 3), (2**32 - 70, 2**32 - 10)],
    ids=["all", "ragged", "wraps-in-row", "none", "wraps-past-limit"],
)
def test_a_guarded_lockstep_round_adds_what_the_guard_admits(offset, limit):
    data = np.random.default_rng(offset % 97 + limit % 89).standard_normal(UNITS * ROUNDS).astype(np.float32)

    def make(client):
        return client.create(data), client.zeros(UNITS, np.float32)

    def launch(client, source, out):
        cube_args = (cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(source), cp.ArrayArg(out))
        guarded_rounds.launch(client, *cube_args, cp.ScalarArg(offset, u32), cp.ScalarArg(limit, u32))

    (_, interp), (_, cpu) = on_interp_and_cpu(launch, make)
    np.testing.assert_array_equal(interp, _expected_rounds(data, offset, limit))
    np.testing.assert_array_equal(cpu.view(np.uint32), interp.view(np.uint32))


def test_the_admitted_units_of_a_round_are_split_off_as_plain_vector_code():
    args = (cp.BufferCompilationArg("f32", 1), cp.BufferCompilationArg("f32", 1), cp.ScalarArg(0, u32))
    host = compile_host(_definition(guarded_rounds, cp.CubeDim(UNITS), *args, cp.ScalarArg(9, u32)))
    assert host.shape == "unit loops"
    assert "unit_x.known" in host.llvm and "llvm.assume" in host.llvm
    # the admitted units' loads are plain vector loads: no mask left from the guard or the checked read
    assert "masked.load" not in host.llvm_opt.split("unit_x.tested")[0]


@cube(launch=True)
def after_barrier(data: Array[f32], out: Array[f32], n: u32):
    """A stretch after a barrier ending in a guarded store of another unit's item."""
    tile = SharedMemory[f32](UNITS)
    tile[UNIT_POS] = data[ABSOLUTE_POS]
    cp.sync_cube()
    if ABSOLUTE_POS < n:
        out[ABSOLUTE_POS] = tile[UNITS - 1 - UNIT_POS] * f32(2.0)


@cube(launch=True)
def position_kept(out: Array[f32], offset: u32, n: u32):
    """A value of the guard's prefix lives on past the barrier, in the frame (a float is not recomputed): the
    stretch runs as written, so that every unit stores it."""
    position = offset + UNIT_POS
    half = f32(position) * f32(0.5)
    if position < n:
        out[UNIT_POS] = f32(1.0)
    cp.sync_cube()
    out[UNIT_POS + UNITS] = half


@pytest.mark.parametrize("cube_dim", [(UNITS,), (16, 4)], ids=["1d", "2d"])
@pytest.mark.parametrize("n", [0, 1, 100, 130, 1000])
def test_a_guarded_stretch_after_a_barrier_writes_below_n_only(n, cube_dim):
    data = np.arange(3 * UNITS, dtype=np.float32)

    def make(client):
        return client.create(data), client.create(np.full(3 * UNITS, -1, np.float32))

    def launch(client, source, out):
        cube_args = (cp.CubeCount(3), cp.CubeDim(*cube_dim), cp.ArrayArg(source), cp.ArrayArg(out))
        after_barrier.launch(client, *cube_args, cp.ScalarArg(n, u32))

    (_, interp), (_, cpu) = on_interp_and_cpu(launch, make)
    dim_x = cube_dim[0]
    dim_y = UNITS // dim_x
    expected = np.full(3 * UNITS, -1, np.float32)
    for cube_pos in range(3):  # ABSOLUTE_POS is x-major over the grid: y * (3 * dim_x) + x
        positions = [y * 3 * dim_x + cube_pos * dim_x + x for y in range(dim_y) for x in range(dim_x)]
        for unit, position in enumerate(positions):
            if position < n:
                expected[position] = data[positions[UNITS - 1 - unit]] * 2
    np.testing.assert_array_equal(interp, expected)
    np.testing.assert_array_equal(cpu, interp)


def test_a_prefix_value_used_after_the_barrier_is_stored_by_every_unit():
    def make(client):
        return (client.zeros(2 * UNITS, np.float32),)

    def launch(client, out):
        position_kept.launch(
            client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(out), cp.ScalarArg(7, u32), cp.ScalarArg(20, u32)
        )

    (interp,), (cpu,) = on_interp_and_cpu(launch, make)
    positions = np.arange(UNITS) + 7
    expected = np.concatenate([(positions < 20).astype(np.float32), positions.astype(np.float32) * 0.5])
    np.testing.assert_array_equal(interp, expected)
    np.testing.assert_array_equal(cpu, interp)


@cube(launch=True)
def picked_units(out: Array[u32], lane: u32, unit: u32):
    """Stretches that each end in an ``if`` only some units enter: one lane of each plane, one unit of the cube
    (``UNIT_POS == unit``), one by its absolute position with the operands the other way round."""
    cp.sync_cube()
    if cp.UNIT_POS_PLANE == lane:
        out[cp.PLANE_POS] = UNIT_POS + 1
    cp.sync_cube()
    if UNIT_POS == unit:
        out[4] = UNIT_POS + 100
    cp.sync_cube()
    if unit + 3 == ABSOLUTE_POS:
        out[5] = ABSOLUTE_POS + 1000


def _picked_expected(lane: int, unit: int) -> np.ndarray:
    expected = np.zeros(6, np.uint32)
    for plane in range(2):
        if lane < 32:
            expected[plane] = plane * 32 + lane + 1
    if unit < UNITS:
        expected[4] = unit + 100
    if (unit + 3) % 2**32 < UNITS:
        expected[5] = (unit + 3) % 2**32 + 1000
    return expected


@pytest.mark.parametrize("cube_dim", [(UNITS,), (32, 2), (16, 4)], ids=["64", "32x2", "16x4"])
@pytest.mark.parametrize(("lane", "unit"), [(0, 0), (5, 17), (31, 63), (32, 64), (2**32 - 1, 2**32 - 2)])
def test_a_unit_or_a_lane_per_plane_picked_by_equality(lane, unit, cube_dim):
    def make(client):
        return (client.zeros(6, np.uint32),)

    def launch(client, out):
        scalars = (cp.ScalarArg(lane, u32), cp.ScalarArg(unit, u32))
        picked_units.launch(client, cp.CubeCount(1), cp.CubeDim(*cube_dim), cp.ArrayArg(out), *scalars)

    (interp,), (cpu,) = on_interp_and_cpu(launch, make)
    np.testing.assert_array_equal(interp, _picked_expected(lane, unit))
    np.testing.assert_array_equal(cpu, interp)


def test_equality_guards_run_only_the_units_they_pick():
    args = (cp.BufferCompilationArg("u32", 1), cp.ScalarArg(0, u32), cp.ScalarArg(0, u32))
    whole_planes = compile_host(_definition(picked_units, cp.CubeDim(UNITS), *args))
    assert whole_planes.llvm.count("unit_x.lane") > 0 and whole_planes.llvm.count("unit_x.known") > 0
    half_planes = compile_host(_definition(picked_units, cp.CubeDim(16, 4), *args))
    assert "unit_x.lane" not in half_planes.llvm  # a row of 16 is not whole planes: that stretch runs as written
