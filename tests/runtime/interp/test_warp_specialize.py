"""Warp-specialization building blocks on the interp and cpu runtimes: named barriers, setmaxnreg, try_wait_parity, elect.

Expected values are written by hand from the PTX ISA's rules (``bar.sync``/``bar.arrive`` count whole
planes; ``mbarrier.try_wait.parity`` succeeds once the phase of that parity completed); every kernel
launched is also assembled by ptxas for sm_90a (tests/conftest.py).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, PLANE_POS, UNIT_POS, Array, Comptime, f32, u32
from cubepy.errors import SanitizerError, SanitizerKind

SANITIZED = cp.client("interp", sanitize=True)


@cp.cube(launch=True)
def producer_plane_hands_over(src: Array[f32], out: Array[f32]):
    """Plane 0 fills the stage and arrives; planes 1..3 wait at named barrier 1 and read it."""
    stage = cp.SharedMemory[f32](96)
    if PLANE_POS == 0:
        for i in range(UNIT_POS, 96, 32):
            stage[i] = src[i] * f32(2)
        cp.named_barrier_arrive(1, 128)
    else:
        cp.named_barrier_sync(1, 128)
        out[UNIT_POS - 32] = stage[UNIT_POS - 32]


@pytest.mark.parametrize("sanitize", [False, True])
def test_a_producer_plane_hands_a_stage_to_three_consumer_planes(sanitize):
    client = cp.client("interp", sanitize=sanitize)
    src = np.arange(96, dtype=np.float32)
    out = client.zeros((96,), np.float32)
    producer_plane_hands_over.launch(client, 2, 128, cp.ArrayArg(client.create(src)), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), src * 2)


@cp.cube(launch=True)
def each_plane_its_own_barrier(out: Array[u32]):
    """Ids computed per plane: each plane completes barrier 1 + plane alone (32 units), twice."""
    cp.named_barrier_sync(1 + PLANE_POS, 32)
    cp.named_barrier_sync(1 + PLANE_POS, 32)
    out[UNIT_POS] = PLANE_POS


def test_planes_may_use_different_barrier_ids_in_one_instruction():
    out = SANITIZED.zeros((64,), np.uint32)
    each_plane_its_own_barrier.launch(SANITIZED, 1, 64, cp.ArrayArg(out))
    np.testing.assert_array_equal(SANITIZED.read(out), np.repeat([0, 1], 32))


@cp.cube(launch=True)
def sync_waits_for_a_plane_that_returned(out: Array[f32], units: u32):
    if PLANE_POS == 1:
        return
    cp.named_barrier_sync(3, units)  # BUG: plane 1 returned, so 32 of the 64 units arrive
    out[UNIT_POS] = f32(1)


def test_a_named_barrier_too_few_units_reach_is_a_deadlock_naming_id_and_counts():
    with pytest.raises(SanitizerError) as info:
        sync_waits_for_a_plane_that_returned.launch(
            SANITIZED, 1, 64, cp.ArrayArg(SANITIZED.zeros((64,), np.float32)), cp.ScalarArg(64, u32)
        )
    message = str(info.value)
    assert info.value.kind is SanitizerKind.BARRIER_DEADLOCK
    assert "named barrier 3 expects 64 units and 32 arrived (32 missing)" in message
    assert "test_warp_specialize.py:" in message and "unit (0, 0, 0) of cube (0, 0, 0)" in message


@cp.cube(launch=True)
def consumers_in_the_then_branch(out: Array[f32]):
    if PLANE_POS != 0:
        cp.named_barrier_sync(1, 64)
    else:
        cp.named_barrier_arrive(1, 64)
    out[UNIT_POS] = f32(1)


def test_a_sync_whose_arrivals_come_from_the_branch_run_later_suspends_until_they_come():
    out = SANITIZED.zeros((64,), np.float32)
    consumers_in_the_then_branch.launch(SANITIZED, 1, 64, cp.ArrayArg(out))
    np.testing.assert_array_equal(SANITIZED.read(out), np.ones(64, np.float32))


@cp.cube(launch=True)
def bad_runtime_named_barrier(out: Array[f32], barrier_id: u32, units: u32, part: u32):
    if UNIT_POS < part:
        cp.named_barrier_arrive(barrier_id, units)
    out[UNIT_POS] = f32(1)


@pytest.mark.parametrize(
    ("barrier_id", "units", "part", "kind", "detail"),
    [
        (16, 64, 64, SanitizerKind.NAMED_BARRIER_MISUSE, "named barrier id 16 is outside [0, 16)"),
        (1, 48, 64, SanitizerKind.NAMED_BARRIER_MISUSE, "unit count 48 is not a positive multiple of 32"),
        (1, 0, 64, SanitizerKind.NAMED_BARRIER_MISUSE, "unit count 0 is not a positive multiple of 32"),
        (1, 96, 64, SanitizerKind.NAMED_BARRIER_MISUSE, "unit count 96 exceeds the 64 units of the cube"),
        (1, 64, 16, SanitizerKind.PARTIAL_PLANE, "unit 16 of the plane is live but not here"),
    ],
)
def test_runtime_named_barrier_operands_are_checked(barrier_id, units, part, kind, detail):
    out = SANITIZED.zeros((64,), np.float32)
    with pytest.raises(SanitizerError) as info:
        bad_runtime_named_barrier.launch(
            SANITIZED, 1, 64, cp.ArrayArg(out), cp.ScalarArg(barrier_id, u32), cp.ScalarArg(units, u32),
            cp.ScalarArg(part, u32),
        )  # fmt: skip
    assert info.value.kind is kind and detail in str(info.value), str(info.value)


@cp.cube(launch=True)
def arrive_then_everyone_syncs(out: Array[f32]):
    if PLANE_POS == 0:
        cp.named_barrier_arrive(2, 64)
    cp.named_barrier_sync(2, 64)  # BUG: plane 0 arrives twice; 128 arrivals for a barrier of 64
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def two_counts_on_one_barrier(out: Array[f32]):
    if PLANE_POS == 0:
        cp.named_barrier_arrive(2, 64)
    else:
        cp.named_barrier_sync(2, 96)  # BUG: the plane before arrived expecting 64
    out[UNIT_POS] = f32(1)


@pytest.mark.lockstep_report("the order of the planes decides which arrival overflows or which count comes first")
@pytest.mark.parametrize(
    ("kernel", "detail"),
    [
        (arrive_then_everyone_syncs, "128 units arrive at named barrier 2, which completes at 64"),
        (two_counts_on_one_barrier, "reached with 96 units while units already arrived expecting 64"),
    ],
)
def test_more_arrivals_or_another_count_on_one_barrier(kernel, detail):
    for client in (cp.client("interp"), SANITIZED):  # a named barrier is checked with or without the sanitizer
        with pytest.raises(SanitizerError) as info:
            kernel.launch(client, 1, 96, cp.ArrayArg(client.zeros((96,), np.float32)))
        assert info.value.kind is SanitizerKind.NAMED_BARRIER_MISUSE and detail in str(info.value)


@cp.cube(launch=True)
def consumer_reads_after_named_barrier(out: Array[f32]):
    tile = cp.SharedMemory[f32](64)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.named_barrier_sync(1, 64)
    out[UNIT_POS] = tile[(UNIT_POS + 1) % 64]


@cp.cube(launch=True)
def consumer_reads_without_barrier(out: Array[f32]):
    tile = cp.SharedMemory[f32](64)
    tile[UNIT_POS] = f32(UNIT_POS)
    out[UNIT_POS] = tile[(UNIT_POS + 1) % 64]


def test_a_completed_named_barrier_orders_shared_accesses_for_the_race_checker():
    out = SANITIZED.zeros((64,), np.float32)
    consumer_reads_after_named_barrier.launch(SANITIZED, 1, 64, cp.ArrayArg(out))
    np.testing.assert_array_equal(SANITIZED.read(out), (np.arange(64) + 1) % 64)


@pytest.mark.lockstep_report("a plane that runs first reads its neighbour's slot before any write: uninitialized")
def test_without_the_named_barrier_the_race_checker_reports_a_race():
    out = SANITIZED.zeros((64,), np.float32)
    with pytest.raises(SanitizerError) as info:
        consumer_reads_without_barrier.launch(SANITIZED, 1, 64, cp.ArrayArg(out))
    assert info.value.kind is SanitizerKind.DATA_RACE


# -- setmaxnreg ------------------------------------------------------------------------------------------
@cp.cube(launch=True)
def producer_gives_registers_away(out: Array[f32], low: Comptime[int], high: Comptime[int]):
    if PLANE_POS == 0:
        cp.setmaxnreg(low, False)
    else:
        cp.setmaxnreg(high, True)
    out[UNIT_POS] = f32(UNIT_POS)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_setmaxnreg_changes_nothing_on_the_cpu(runtime):
    client = cp.client(runtime)
    out = client.zeros((128,), np.float32)
    producer_gives_registers_away.launch(client, 1, 128, cp.ArrayArg(out), 40, 232)
    np.testing.assert_array_equal(client.read(out), np.arange(128, dtype=np.float32))


@pytest.mark.parametrize(
    ("low", "high", "detail"),
    [
        (16, 232, "register count 16 is not a multiple of 8 in [24, 256]"),
        (40, 260, "register count 260 is not a multiple of 8 in [24, 256]"),
        (44, 232, "register count 44 is not a multiple of 8 in [24, 256]"),
    ],
)
def test_setmaxnreg_count_must_be_a_multiple_of_eight_in_range(low, high, detail):
    with pytest.raises(cp.ExpandError, match=re.escape(detail)) as info:
        producer_gives_registers_away.compile(
            128, cp.ArrayArg(cp.client("interp").zeros((128,), np.float32)), low, high
        )
    assert "test_warp_specialize.py:" in str(info.value)


# -- try_wait_parity ----------------------------------------------------------------------------------------
@cp.cube(launch=True)
def probe_arrive_probe(out: Array[u32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    before = bar.try_wait_parity(0)  # phase 0 has not completed
    if UNIT_POS == 0:
        bar.arrive()
    cp.sync_cube()
    after = bar.try_wait_parity(0)  # it has
    current = bar.try_wait_parity(1)  # phase 1 (parity 1) is the current one: not complete
    out[UNIT_POS] = u32(before) + u32(after) * 2 + u32(current) * 4


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_try_wait_parity_tells_whether_the_phase_of_that_parity_completed(runtime):
    client = cp.client(runtime)
    out = client.zeros((64,), np.uint32)
    probe_arrive_probe.launch(client, 2, 64, cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.full(64, 2))


@cp.cube(launch=True)
def spin_until_the_producer_arrives(out: Array[u32], rounds: Comptime[int]):
    """The last unit produces; everyone spins on try_wait_parity for each round's phase."""
    full = cp.Barrier.shared(1, UNIT_POS == 0)
    data = cp.SharedMemory[u32](1)
    for k in cp.unroll(range(rounds)):
        if UNIT_POS == CUBE_DIM - 1:
            data[0] = u32(k + 10)
            full.arrive()
        while not full.try_wait_parity(k % 2):
            pass
        out[UNIT_POS * rounds + k] = data[0]
        cp.sync_cube()


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_try_wait_loop_passes_each_phase_in_turn(runtime):
    client = cp.client(runtime)
    out = client.zeros((32 * 3,), np.uint32)
    spin_until_the_producer_arrives.launch(client, 1, 32, cp.ArrayArg(out), 3)
    np.testing.assert_array_equal(client.read(out).reshape(32, 3), np.tile([10, 11, 12], (32, 1)))


@cp.cube(launch=True)
def spin_with_one_arrival_missing(out: Array[u32]):
    bar = cp.Barrier.shared(2, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive()
    while not bar.try_wait_parity(0):  # BUG: the barrier needs two arrivals; one comes
        pass
    out[UNIT_POS] = u32(1)


@cp.cube(launch=True)
def spin_on_the_parity_of_a_phase_nobody_reaches(out: Array[u32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive()
    while not bar.try_wait_parity(1):  # BUG: phase 0 completed; parity 1 names phase 1, which nobody drives
        pass
    out[UNIT_POS] = u32(1)


@pytest.mark.parametrize(
    ("kernel", "kind", "detail"),
    [
        (spin_with_one_arrival_missing, SanitizerKind.BARRIER_DEADLOCK, "1 of 2 arrivals pending"),
        (spin_on_the_parity_of_a_phase_nobody_reaches, SanitizerKind.WRONG_PARITY, "phase 0 (parity 0) completed"),
    ],
)
def test_a_spin_nobody_can_end_is_reported_instead_of_hanging(kernel, kind, detail):
    client = cp.client("interp")
    with pytest.raises(SanitizerError) as info:
        kernel.launch(client, 1, 32, cp.ArrayArg(client.zeros((32,), np.uint32)))
    assert info.value.kind is kind and detail in str(info.value), str(info.value)
    assert "test_warp_specialize.py:" in str(info.value)


# -- elect and the proxy fence alias ---------------------------------------------------------------------
@cp.cube(launch=True)
def one_per_plane(out: Array[u32]):
    if cp.plane_elect():
        out[PLANE_POS] = UNIT_POS


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_plane_elect_picks_the_lowest_unit_of_each_plane(runtime):
    client = cp.client(runtime)
    out = client.zeros((4,), np.uint32)
    one_per_plane.launch(client, 1, 128, cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), [0, 32, 64, 96])


def test_fence_proxy_async_is_the_sync_async_proxy_shared_operation():
    assert cp.fence_proxy_async is cp.sync_async_proxy_shared


@cp.cube(launch=True)
def consumer_first_in_every_cube(out: Array[f32]):
    tile = cp.SharedMemory[f32](32)
    if PLANE_POS == 0:
        cp.named_barrier_sync(1, 64)  # runs first in lockstep: must wait in every cube, not only the last
        out[cp.CUBE_POS * 32 + UNIT_POS] = tile[UNIT_POS]
    else:
        tile[UNIT_POS - 32] = f32(cp.CUBE_POS * 100 + UNIT_POS)
        cp.named_barrier_arrive(1, 64)


def test_a_named_barrier_waits_in_every_cube_of_a_launch():
    out = SANITIZED.zeros((3 * 32,), np.float32)
    consumer_first_in_every_cube.launch(SANITIZED, 3, 64, cp.ArrayArg(out))
    expected = (np.arange(3)[:, None] * 100 + np.arange(32)[None, :] + 32).reshape(-1)
    np.testing.assert_array_equal(SANITIZED.read(out), expected.astype(np.float32))
