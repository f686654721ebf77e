"""Schedules of the interp: planes that run on their own, copies that land late, bugs that show.

A warp-specialized pipeline (one producer plane, two consumer planes, full/empty barriers over three stages)
completes with the numpy result under every schedule; a kernel missing a ``sync_cube`` and one missing a
barrier wait give the right answer under lockstep (the bug is hidden there) and a wrong one under random and
adversarial schedules, the same wrong one for the same seed.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, PLANE_POS, UNIT_POS, Array, Comptime, TensorMap, f32
from cubepy.runtime import interp

STAGES = 3
TILES = 8  # more than twice the stages: every stage is reused, the barriers go through several phases
ROWS = 4  # rows of a tile: a tile is 4 x 16 f32 = 256 bytes
CONSUMERS = 64  # two consumer planes
SCHEDULES = [("lockstep", None), ("random", 1), ("random", 2), ("random", 3), ("adversarial", None)]
IDS = ["lockstep", "random1", "random2", "random3", "adversarial"]


def _client(schedule: str, seed: int | None, sanitize: bool = False) -> cp.ComputeClient:
    return cp.client("interp", sanitize=sanitize, schedule=schedule, seed=seed)


@cp.cube(launch=True)
def warp_specialized_sum(tmap: TensorMap[f32], out: Array[f32], stages: Comptime[int], tiles: Comptime[int]):
    """Plane 0 loads tile k into stage k % stages; planes 1-2 add each tile's element of their unit."""
    full = [cp.Barrier.shared(1, UNIT_POS == 0) for _ in range(stages)]
    empty = [cp.Barrier.shared(CUBE_DIM - 32, UNIT_POS == 0) for _ in range(stages)]
    ring = [cp.SharedMemory.aligned(f32, 64, 128) for _ in range(stages)]
    if PLANE_POS == 0:
        if UNIT_POS == 0:
            for k in cp.unroll(range(tiles)):
                if k >= stages:  # the stage's previous tile must be released by every consumer
                    empty[k % stages].wait_parity((k // stages - 1) % 2)
                full[k % stages].tma_load_2d(tmap, ring[k % stages], k * 4, 0)
                full[k % stages].arrive_and_expect_tx(1, 256)
    else:
        acc = f32(0.0)
        for k in cp.unroll(range(tiles)):
            full[k % stages].wait_parity((k // stages) % 2)
            acc += ring[k % stages][UNIT_POS - 32]
            empty[k % stages].arrive()
        out[UNIT_POS - 32] = acc


@cp.cube(launch=True)
def reads_before_the_copy_lands(tmap: TensorMap[f32], out: Array[f32], tiles: Comptime[int], waits: Comptime[bool]):
    """Unit 0 loads ``tiles`` tiles; every unit adds its element of each (after the wait only when ``waits``)."""
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    ring = [cp.SharedMemory.aligned(f32, 64, 128) for _ in range(tiles)]
    if UNIT_POS == 0:
        for k in cp.unroll(range(tiles)):
            bar.tma_load_2d(tmap, ring[k], k * 4, 0)
        bar.arrive_and_expect_tx(1, 256 * tiles)
    if waits:
        bar.wait_parity(0)
    acc = f32(0.0)
    for k in cp.unroll(range(tiles)):
        acc += ring[k][UNIT_POS]
    out[UNIT_POS] = acc


@cp.cube(launch=True)
def neighbour_exchange(x: Array[f32], out: Array[f32], synced: Comptime[bool]):
    """Each unit stores 2 x, then reads the slot of the unit one plane further (a cube barrier between when ``synced``)."""
    slots = cp.SharedMemory[f32](128)
    slots[UNIT_POS] = x[UNIT_POS] * f32(2.0)
    if synced:
        cp.sync_cube()
    out[UNIT_POS] = slots[(UNIT_POS + 32) % CUBE_DIM]


def _tiles(client, tiles: int, seed: int = 0):
    values = np.random.default_rng(seed).standard_normal((tiles * ROWS, 16)).astype(np.float32)
    handle = client.create(values)
    return values, cp.TensorMapArg.tiled(cp.TensorArg(handle), (ROWS, 16))


def _run_pipeline(client) -> tuple[np.ndarray, np.ndarray]:
    values, tmap = _tiles(client, TILES)
    out = client.zeros((CONSUMERS,), np.float32)
    warp_specialized_sum.launch(
        client, cp.CubeCount(1, 1, 1), cp.CubeDim(96, 1, 1), tmap, cp.ArrayArg(out), STAGES, TILES
    )
    expected = values.reshape(TILES, CONSUMERS).sum(axis=0, dtype=np.float64)
    return client.read(out), expected


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES, ids=IDS)
def test_warp_specialized_pipeline_completes(schedule, seed):
    got, expected = _run_pipeline(_client(schedule, seed, sanitize=True))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_warp_specialized_pipeline_unsanitized_random():
    got, expected = _run_pipeline(_client("random", 11))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _read_early(client, waits: bool) -> tuple[np.ndarray, np.ndarray]:
    tiles = 4
    values, tmap = _tiles(client, tiles, seed=3)
    out = client.zeros((CONSUMERS,), np.float32)
    reads_before_the_copy_lands.launch(
        client, cp.CubeCount(1, 1, 1), cp.CubeDim(CONSUMERS, 1, 1), tmap, cp.ArrayArg(out), tiles, waits
    )
    return client.read(out), values.reshape(tiles, CONSUMERS).sum(axis=0, dtype=np.float64)


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES, ids=IDS)
def test_waiting_reader_sees_every_tile(schedule, seed):
    got, expected = _read_early(_client(schedule, seed), waits=True)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.cubepy_sanitize(False)  # the missing barrier wait is the point (the sanitizer would report it)
def test_missing_wait_is_hidden_by_lockstep():
    got, expected = _read_early(_client("lockstep", None), waits=False)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.cubepy_sanitize(False)  # the missing barrier wait is the point (the sanitizer would report it)
@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES[1:], ids=IDS[1:])
def test_missing_wait_gives_a_wrong_result(schedule, seed):
    got, expected = _read_early(_client(schedule, seed), waits=False)
    assert not np.allclose(got, expected, rtol=1e-5, atol=1e-5)
    again, _ = _read_early(_client(schedule, seed), waits=False)
    np.testing.assert_array_equal(again, got)  # the same seed, the same wrong result


def _exchange(client, synced: bool) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(128, dtype=np.float32) + 1
    out = client.zeros((128,), np.float32)
    neighbour_exchange.launch(
        client, cp.CubeCount(1, 1, 1), cp.CubeDim(128, 1, 1), cp.ArrayArg(client.create(x)), cp.ArrayArg(out), synced
    )
    return client.read(out), np.roll(x * 2, -32)


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES, ids=IDS)
def test_synced_exchange_is_right(schedule, seed):
    got, expected = _exchange(_client(schedule, seed, sanitize=True), synced=True)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.cubepy_sanitize(False)  # the missing sync_cube is the point; its race report is tested below
def test_missing_sync_is_hidden_by_lockstep():
    got, expected = _exchange(_client("lockstep", None), synced=False)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.cubepy_sanitize(False)  # the missing sync_cube is the point; its race report is tested below
@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES[1:], ids=IDS[1:])
def test_missing_sync_gives_a_wrong_result(schedule, seed):
    got, expected = _exchange(_client(schedule, seed), synced=False)
    assert (got != expected).any()
    again, _ = _exchange(_client(schedule, seed), synced=False)
    np.testing.assert_array_equal(again, got)


def test_missing_sync_is_a_race_under_the_sanitizer_with_the_schedule_named():
    with pytest.raises(cp.SanitizerError, match=r"schedule random:5") as info:
        _exchange(_client("random", 5, sanitize=True), synced=False)
    assert "test_schedules.py:" in str(info.value)


def test_deadlock_names_the_schedule():
    @cp.cube(launch=True)
    def waits_for_nobody(out: Array[f32]):
        bar = cp.Barrier.shared(CUBE_DIM + 1, UNIT_POS == 0)
        bar.arrive_and_wait()
        out[UNIT_POS] = f32(1.0)

    client = _client("adversarial", None)
    out = client.zeros((64,), np.float32)
    with pytest.raises(cp.SanitizerError, match=r"deadlock.*64 of 65 arrivals|deadlock") as info:
        waits_for_nobody.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(64, 1, 1), cp.ArrayArg(out))
    assert "schedule adversarial" in str(info.value)
    assert "1 of 65 arrivals pending" in str(info.value)


def test_schedule_keywords_are_checked():
    with pytest.raises(cp.CubeError, match="schedule 'sideways'"):
        cp.client("interp", schedule="sideways")
    # The API's signature is client("interp", sanitize=False, schedule="lockstep", seed=0): a seed with a
    # schedule that does not draw is accepted and changes nothing.
    assert cp.client("interp", schedule="adversarial", seed=3) is cp.client("interp", schedule="adversarial")
    assert cp.client("interp", sanitize=False, schedule="lockstep", seed=0) is cp.client("interp", schedule="lockstep")


@pytest.mark.cubepy_sanitize(False)  # runs the exchange without its sync_cube on purpose
def test_schedule_setting(monkeypatch):
    from cubepy import config

    monkeypatch.setenv("CUBEPY_SCHEDULE", "random:4")
    assert config.get("CUBEPY_SCHEDULE") == "random:4"
    got, expected = _exchange(cp.client("interp"), synced=False)  # the client names none: the setting decides
    assert (got != expected).any()
    monkeypatch.setenv("CUBEPY_SCHEDULE", "sideways")
    with pytest.raises(cp.CubeError, match="CUBEPY_SCHEDULE"):
        config.get("CUBEPY_SCHEDULE")


@cp.cube(launch=True)
def split_then_long_tail(out: Array[f32], split: Comptime[bool]):
    """Plane 1 waits for an arrival plane 0 makes in its own branch (when ``split``), then a long common tail."""
    bar = cp.Barrier.shared(32, UNIT_POS == 0)
    if split:
        if PLANE_POS == 1:
            bar.wait_parity(0)  # blocks until plane 0 below has arrived: the cube splits here
        else:
            bar.arrive()
    else:
        if PLANE_POS == 0:
            bar.arrive()
        bar.wait_parity(0)
    acc = f32(0.0)
    for i in range(64):
        acc += f32(i)
    out[UNIT_POS] = acc


def test_split_groups_merge_again_at_the_join():
    """Under lockstep the waiting plane is split off; once both halves reach the join they run the tail as one."""
    client = _client("lockstep", None)
    counts = {}
    for split in (False, True):
        out = client.zeros((64,), np.float32)
        with interp.counting() as counter:
            split_then_long_tail.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(64, 1, 1), cp.ArrayArg(out), split)
        np.testing.assert_array_equal(client.read(out), np.full(64, sum(range(64)), np.float32))
        counts[split] = counter.instructions
    tail = 64 * 3  # at least three instructions per iteration of the tail loop
    assert counts[True] < counts[False] + tail  # the tail ran once, not once per half


@cp.cube(launch=True)
def store_then_reuse(tmap: TensorMap[f32], src: Array[f32], waits_read: Comptime[bool]):
    """Unit 0 TMA-stores a 16 x 16 stage, then the stage is zeroed (after tma_group_wait_read only when ``waits_read``)."""
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = src[i]
    cp.sync_async_proxy_shared()
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, 0, 0)
        cp.tma_group_commit()
        if waits_read:
            cp.tma_group_wait_read(0)
    cp.sync_cube()
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = f32(0.0)
    if UNIT_POS == 0:
        cp.tma_group_wait(0)


def _store(client, waits_read: bool) -> tuple[np.ndarray, np.ndarray]:
    src = np.random.default_rng(5).standard_normal(256).astype(np.float32)
    dst = client.zeros((16, 16), np.float32)
    tmap = cp.TensorMapArg.tiled(cp.TensorArg(dst), (16, 16))
    store_then_reuse.launch(
        client, cp.CubeCount(1, 1, 1), cp.CubeDim(64, 1, 1), tmap, cp.ArrayArg(client.create(src)), waits_read
    )
    return client.read(dst), src.reshape(16, 16)


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES, ids=IDS)
def test_store_source_kept_until_the_read_wait(schedule, seed):
    got, expected = _store(_client(schedule, seed), waits_read=True)
    np.testing.assert_array_equal(got, expected)


def test_store_reads_its_source_when_it_lands():
    """Lockstep stores at issue, so reusing the stage early goes unseen; adversarial lands the store at the last
    legal point (the group wait), after the stage was zeroed."""
    got, expected = _store(_client("lockstep", None), waits_read=False)
    np.testing.assert_array_equal(got, expected)
    got, _ = _store(_client("adversarial", None), waits_read=False)
    np.testing.assert_array_equal(got, np.zeros((16, 16), np.float32))
