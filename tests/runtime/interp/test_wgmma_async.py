"""wgmma is asynchronous on the interp: groups complete in order (``wgmma_wait_group(n)`` leaves exactly the
``n`` newest running), the shared tiles are read between issue and the covering wait (lockstep: at issue,
random: at a random turn, adversarial: at the wait), and the sanitizer reports a write into a tile a
started wgmma may still read, naming both lines.

References are float64 numpy; accumulators are mapped with the ISA's table (``tests.wgmma_hand.d_table``).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import cubepy as cp
from cubepy import PLANE_POS, UNIT_POS, Array, LocalArray, SharedMemory, TensorMap, cube, f16, f32, u64
from cubepy.errors import SanitizerError, SanitizerKind
from tests.wgmma_hand import d_table, swizzled_image

SCHEDULES = [
    {"schedule": "lockstep"},
    {"schedule": "random", "seed": 1},
    {"schedule": "random", "seed": 2},
    {"schedule": "adversarial"},
]
SCHEDULE_IDS = ["lockstep", "random:1", "random:2", "adversarial"]


def unpack(raw: np.ndarray, n: int) -> np.ndarray:
    """A 64 x n accumulator from each unit's raw registers (unit-major), by the ISA's table."""
    got = np.zeros((64, n), np.float32)
    for (unit, i), (r, col) in d_table(n).items():
        got[r, col] = raw[unit * (n // 2) + i]
    return got


# -- wait_group(n) --------------------------------------------------------------------------------------
@cube(launch=True)
def three_groups(a_img: Array[f16], b_img: Array[f16], out: Array[f32]):
    """Three groups (one wgmma each, 64 x 8 x 16, B scaled 1, 2, 3 by three B tiles); after each wait the
    three accumulators are stored: a group's product must appear exactly at the wait that retires it."""
    a_tile = SharedMemory[f16](64 * 16, alignment=1024)
    b_tile = SharedMemory[f16](3 * 8 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 128):
        a_tile[i] = a_img[i]
    for i in range(UNIT_POS, 3 * 8 * 16, 128):
        b_tile[i] = b_img[i]
    cp.sync_cube()
    accs = [LocalArray[f32](4) for _ in range(3)]
    for g in cp.unroll(range(3)):
        for i in cp.unroll(range(4)):
            accs[g][i] = f32(-1.0)
    a_desc = cp.wgmma_descriptor(a_tile, 16, 256, "32B")
    cp.wgmma_fence()
    for g in cp.unroll(range(3)):
        b_desc = cp.wgmma_descriptor(b_tile.slice(g * 128, (g + 1) * 128), 16, 256, "32B")
        cp.wgmma_mma_async(accs[g], a_desc, b_desc, shape=(64, 8, 16), elem=f16, scale_d=False)
        cp.wgmma_commit_group()
    for w in cp.unroll(range(3)):
        cp.wgmma_wait_group(2 - w)
        for g in cp.unroll(range(3)):
            for i in cp.unroll(range(4)):
                out[((w * 3 + g) * 128 + UNIT_POS) * 4 + i] = accs[g][i]


@pytest.mark.cubepy_sanitize(False)  # the early (pending) reads are the point
@pytest.mark.parametrize("options", SCHEDULES, ids=SCHEDULE_IDS)
def test_wait_group_n_retires_all_but_the_n_newest_groups(options):
    client = cp.client("interp", **options)  # no sanitizer: the early reads are the point
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 16)).astype(np.float16)
    bs = [rng.standard_normal((8, 16)).astype(np.float16) for _ in range(3)]
    b_img = np.concatenate([swizzled_image(b, "32B") for b in bs])
    out = client.zeros((9 * 128 * 4,), np.float32)
    three_groups.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(128),
        cp.ArrayArg(client.create(swizzled_image(a, "32B").view(np.float16))),
        cp.ArrayArg(client.create(b_img.view(np.float16))),
        cp.ArrayArg(out),
    )
    raw = client.read(out).reshape(3, 3, -1)
    for w in range(3):  # after wait_group(2 - w), groups 0..w are complete, the others untouched
        for g in range(3):
            got = unpack(raw[w, g], 8)
            if g <= w:
                reference = a.astype(np.float64) @ bs[g].astype(np.float64).T
                assert np.allclose(got, reference, rtol=2.0**-20, atol=1e-6), (w, g)
            else:
                assert (got == -1.0).all(), (w, g)


# -- two warpgroups, a TMA ring, and a stage released too early -----------------------------------------
K_TILES, STAGES, TILE = 4, 2, 64  # four 64-wide k tiles through two stages; a 64 x 64 block


def ring_kernel(early_release: bool):
    """Warpgroup 0 multiplies, keeping one wgmma group in flight (``wait_group(1)``); the first plane of
    warpgroup 1 loads A and B k tiles by TMA (128B swizzle) into a ring of two stages.  The correct
    consumer releases stage ``t - 1`` after the wait that retires its group; ``early_release`` releases
    stage ``t`` right after committing its group, while the wgmma may still read it."""

    @cube(launch=True)
    def ring(a_map: TensorMap[f16], b_map: TensorMap[f16], out: Array[f32]):
        items = TILE * TILE
        a_stages = SharedMemory.aligned(f16, STAGES * items, 1024)
        b_stages = SharedMemory.aligned(f16, STAGES * items, 1024)
        full = [cp.Barrier.shared(1, UNIT_POS == 0) for _ in range(STAGES)]
        empty = [cp.Barrier.shared(1, UNIT_POS == 0) for _ in range(STAGES)]
        if PLANE_POS == 4:  # the producer
            for t in cp.unroll(range(K_TILES)):
                s = t % STAGES
                empty[s].wait_parity((t // STAGES) % 2 ^ 1)
                if UNIT_POS == 128:
                    full[s].arrive_and_expect_tx(1, 2 * items * 2)
                    full[s].tma_load_2d(a_map, a_stages.slice(s * items, (s + 1) * items), 0, t * TILE)
                    full[s].tma_load_2d(b_map, b_stages.slice(s * items, (s + 1) * items), 0, t * TILE)
        elif UNIT_POS < 128:  # the consumer warpgroup
            acc = LocalArray[f32](TILE // 2)
            for i in cp.unroll(range(TILE // 2)):
                acc[i] = f32(0.0)
            cp.wgmma_fence()
            for t in cp.unroll(range(K_TILES)):
                s = t % STAGES
                full[s].wait_parity((t // STAGES) % 2)
                a_desc = cp.wgmma_descriptor(a_stages.slice(s * items, (s + 1) * items), 16, 1024, "128B")
                b_desc = cp.wgmma_descriptor(b_stages.slice(s * items, (s + 1) * items), 16, 1024, "128B")
                for kk in cp.unroll(range(TILE // 16)):
                    step = u64(kk * 2)
                    cp.wgmma_mma_async(acc, a_desc + step, b_desc + step, shape=(64, TILE, 16), elem=f16)
                cp.wgmma_commit_group()
                if early_release:
                    if UNIT_POS == 0:
                        empty[s].arrive()  # BUG: the group just committed may still read stage s
                    cp.wgmma_wait_group(1)
                else:
                    cp.wgmma_wait_group(1)  # the group of tile t - 1 is complete: its stage is free
                    if t > 0 and UNIT_POS == 0:
                        empty[(t - 1) % STAGES].arrive()
            cp.wgmma_wait_group(0)
            for i in cp.unroll(range(TILE // 2)):
                out[UNIT_POS * (TILE // 2) + i] = acc[i]

    return ring


RING = {early: ring_kernel(early) for early in (False, True)}


def _run_ring_kernel(kernel, client, seed: int):
    """(result 64 x 64, float64 reference, error bound) of A (64 x 256) @ B_t (64 x 256)^T through ``kernel``."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, K_TILES * TILE)).astype(np.float16)
    b_t = rng.standard_normal((64, K_TILES * TILE)).astype(np.float16)
    out = client.zeros((128 * TILE // 2,), np.float32)
    maps = [cp.TensorMapArg.tiled(cp.TensorArg(client.create(x)), (TILE, TILE), swizzle="128B") for x in (a, b_t)]
    kernel.launch(client, cp.CubeCount(1), cp.CubeDim(256), *maps, cp.ArrayArg(out))
    wide_a, wide_b = a.astype(np.float64), b_t.astype(np.float64)
    bound = K_TILES * 4 * 2.0**-23 * (np.abs(wide_a) @ np.abs(wide_b).T) + 1e-30
    return unpack(client.read(out), TILE), wide_a @ wide_b.T, bound


def run_ring(client, early_release: bool):
    """The one-consumer ring's result, reference and bound."""
    return _run_ring_kernel(RING[early_release], client, seed=11)


@pytest.mark.parametrize("options", SCHEDULES, ids=SCHEDULE_IDS)
def test_the_correct_ring_passes_every_schedule_with_the_sanitizer_on(options):
    got, reference, bound = run_ring(cp.client("interp", sanitize=True, **options), early_release=False)
    assert (np.abs(got - reference) <= bound).all()


@pytest.mark.cubepy_sanitize(False)  # the early release is the bug it runs; its report is tested below
def test_the_early_release_is_wrong_under_adversarial():
    got, reference, bound = run_ring(cp.client("interp", schedule="adversarial"), early_release=True)
    assert not (np.abs(got - reference) <= bound).all()


@pytest.mark.cubepy_sanitize(False)  # the early release is the bug it runs; its report is tested below
def test_the_early_release_is_right_under_lockstep_without_the_sanitizer():
    """Lockstep reads at issue, which hides the bug's values; the sanitizer (next test) still finds it."""
    got, reference, bound = run_ring(cp.client("interp"), early_release=True)
    assert (np.abs(got - reference) <= bound).all()


@pytest.mark.parametrize("options", SCHEDULES, ids=SCHEDULE_IDS)
def test_the_early_release_is_reported_naming_the_load_and_the_wgmma(options):
    with pytest.raises(SanitizerError) as info:
        run_ring(cp.client("interp", sanitize=True, **options), early_release=True)
    assert info.value.kind is SanitizerKind.WGMMA_OPERAND_OVERWRITE
    message = str(info.value)
    lines, first = inspect.getsourcelines(ring_kernel)
    load_line = first + next(i for i, text in enumerate(lines) if "tma_load_2d(a_map" in text)
    wgmma_line = first + next(i for i, text in enumerate(lines) if "cp.wgmma_mma_async(acc" in text)
    assert f"test_wgmma_async.py:{load_line}: wgmma operand overwrite: a TMA load writes shared byte" in message
    assert f"wgmma started at {__file__}:{wgmma_line}" in message


# -- a unit's store into a tile in flight, and a read of an accumulator in flight -------------------------
@cube(launch=True)
def store_into_the_tile(a_img: Array[f16], out: Array[f32]):
    tile = SharedMemory[f16](64 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 128):
        tile[i] = a_img[i]
    cp.sync_cube()
    acc = LocalArray[f32](4)
    desc = cp.wgmma_descriptor(tile, 16, 256, "32B")
    cp.wgmma_fence()
    cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16), elem=f16, scale_d=False)
    cp.wgmma_commit_group()
    tile[UNIT_POS + 256] = f16(0.0)  # rows 8.. of the A tile, which the wgmma may still read
    cp.wgmma_wait_group(0)
    for i in cp.unroll(range(4)):
        out[UNIT_POS * 4 + i] = acc[i]


def launch_store(client):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 16)).astype(np.float16)
    out = client.zeros((128 * 4,), np.float32)
    image = swizzled_image(a, "32B").view(np.float16)
    store_into_the_tile.launch(
        client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.create(image)), cp.ArrayArg(out)
    )
    return a, unpack(client.read(out), 8)


@pytest.mark.parametrize("options", SCHEDULES, ids=SCHEDULE_IDS)
def test_a_store_into_a_tile_in_flight_is_reported(options):
    with pytest.raises(SanitizerError) as info:
        launch_store(cp.client("interp", sanitize=True, **options))
    assert info.value.kind is SanitizerKind.WGMMA_OPERAND_OVERWRITE
    assert "a store writes shared byte" in str(info.value)


@pytest.mark.cubepy_sanitize(False)  # the store into a tile in flight is the point; its report is tested above
def test_a_store_into_a_tile_in_flight_changes_the_result_only_when_read_late():
    a, early = launch_store(cp.client("interp"))
    reference = a.astype(np.float64) @ a[:8].astype(np.float64).T
    assert np.allclose(early, reference, rtol=2.0**-20, atol=1e-6)  # lockstep: read at issue
    _, late = launch_store(cp.client("interp", schedule="adversarial"))
    assert not np.allclose(late, reference, rtol=2.0**-20, atol=1e-6)  # adversarial: read at the wait


# -- two consumer warpgroups, one issuing unit: the refill must wait for both warpgroups' waits --------
def shared_ring_kernel(synced: bool):
    """Both warpgroups multiply the same stages (their own copy of the 64 x 64 block); unit 0 refills stage
    ``s`` right after its own warpgroup's ``wait_group(0)``.  Warpgroup 1 may still be reading it unless a
    ``sync_cube`` (``synced``) orders both waits before the refill: the race of a two-warpgroup port of a
    single-partition pipeline, which lockstep (running both warpgroups together) never shows in values."""

    @cube(launch=True)
    def shared_ring(a_map: TensorMap[f16], b_map: TensorMap[f16], out: Array[f32]):
        items = TILE * TILE
        a_stages = SharedMemory.aligned(f16, STAGES * items, 1024)
        b_stages = SharedMemory.aligned(f16, STAGES * items, 1024)
        full = [cp.Barrier.shared(1, UNIT_POS == 0) for _ in range(STAGES)]
        if UNIT_POS == 0:
            for t in cp.unroll(range(STAGES)):
                full[t].arrive_and_expect_tx(1, 2 * items * 2)
                full[t].tma_load_2d(a_map, a_stages.slice(t * items, (t + 1) * items), 0, t * TILE)
                full[t].tma_load_2d(b_map, b_stages.slice(t * items, (t + 1) * items), 0, t * TILE)
        acc = LocalArray[f32](TILE // 2)
        for i in cp.unroll(range(TILE // 2)):
            acc[i] = f32(0.0)
        cp.wgmma_fence()
        for t in cp.unroll(range(K_TILES)):
            s = t % STAGES
            full[s].wait_parity((t // STAGES) % 2)
            a_desc = cp.wgmma_descriptor(a_stages.slice(s * items, (s + 1) * items), 16, 1024, "128B")
            b_desc = cp.wgmma_descriptor(b_stages.slice(s * items, (s + 1) * items), 16, 1024, "128B")
            for kk in cp.unroll(range(TILE // 16)):
                cp.wgmma_mma_async(acc, a_desc + u64(kk * 2), b_desc + u64(kk * 2), shape=(64, TILE, 16), elem=f16)
            cp.wgmma_commit_group()
            cp.wgmma_wait_group(0)
            if synced:
                cp.sync_cube()  # both warpgroups' waits come before the refill
            if t + STAGES < K_TILES and UNIT_POS == 0:
                full[s].arrive_and_expect_tx(1, 2 * items * 2)
                full[s].tma_load_2d(a_map, a_stages.slice(s * items, (s + 1) * items), 0, (t + STAGES) * TILE)
                full[s].tma_load_2d(b_map, b_stages.slice(s * items, (s + 1) * items), 0, (t + STAGES) * TILE)
        if UNIT_POS >= 128:
            for i in cp.unroll(range(TILE // 2)):
                out[(UNIT_POS - 128) * (TILE // 2) + i] = acc[i]

    return shared_ring


SHARED_RING = {synced: shared_ring_kernel(synced) for synced in (False, True)}


def run_shared_ring(client, synced: bool):
    """(warpgroup 1's result, float64 reference, error bound)."""
    return _run_ring_kernel(SHARED_RING[synced], client, seed=13)


@pytest.mark.parametrize("options", SCHEDULES, ids=SCHEDULE_IDS)
def test_a_refill_ordered_by_sync_cube_passes_every_schedule(options):
    got, reference, bound = run_shared_ring(cp.client("interp", sanitize=True, **options), synced=True)
    assert (np.abs(got - reference) <= bound).all()


@pytest.mark.parametrize("options", SCHEDULES, ids=SCHEDULE_IDS)
def test_a_refill_after_only_one_warpgroups_wait_is_reported_under_every_schedule(options):
    with pytest.raises(SanitizerError) as info:
        run_shared_ring(cp.client("interp", sanitize=True, **options), synced=False)
    assert info.value.kind is SanitizerKind.WGMMA_OPERAND_OVERWRITE
    lines, first = inspect.getsourcelines(shared_ring_kernel)
    wgmma_line = first + next(i for i, text in enumerate(lines) if "cp.wgmma_mma_async(acc" in text)
    assert f"wgmma started at {__file__}:{wgmma_line}" in str(info.value)


def test_the_cpu_runtime_runs_the_correct_ring_as_the_interp():
    """The cpu runtime computes each wgmma at issue (its fence, commit and wait do nothing): a correct
    pipeline gives the interp's bits; the asynchronous misuses above are the interp's sanitizer's to find."""
    got_cpu, reference, bound = run_ring(cp.client("cpu"), early_release=False)
    got_interp, _, _ = run_ring(cp.client("interp"), early_release=False)
    assert (np.abs(got_cpu - reference) <= bound).all()
    np.testing.assert_array_equal(got_cpu, got_interp)
