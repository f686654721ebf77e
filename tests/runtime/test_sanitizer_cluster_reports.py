"""The interp's sanitizer and schedules on cluster kernels: multicast destinations and peers that exit.

A cube that only *receives* a multicast TMA load has initialized shared memory once the copy lands (no
false ``uninitialized read``); a peer access that nothing orders before the peer's exit (the clusters
guide's example without its final ``sync_cluster``) is reported, naming the access and the peer's last
``sync_cluster``.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, CUBE_POS_CLUSTER, UNIT_POS, Array, TensorMap, f16, f32, i32, u32
from cubepy.errors import SanitizerError, SanitizerKind

SCHEDULES = [{}, {"schedule": "random", "seed": 1}, {"schedule": "random", "seed": 7}, {"schedule": "adversarial"}]
SCHEDULE_IDS = ["lockstep", "random1", "random7", "adversarial"]


def _line(kernel, marker: str) -> int:
    """The source line of ``kernel`` holding ``marker``."""
    lines, first = inspect.getsourcelines(kernel.fn if hasattr(kernel, "fn") else kernel.__wrapped__)
    return first + next(i for i, text in enumerate(lines) if marker in text)


# -- item: a cube that only receives a multicast load ---------------------------------------------------------
@cp.cube(launch=True)
def rank0_multicasts(src: TensorMap[f32], out: Array[f32], read_at: u32):
    full = cp.Barrier.shared(1, UNIT_POS == 0)
    tile = cp.SharedMemory.aligned(f32, 512, 1024)  # the load fills the first 256 items only
    cp.sync_cluster()  # both cubes' barriers exist before rank 0 multicasts into them
    if UNIT_POS == 0:
        full.arrive_and_expect_tx(1, 256 * 4)
        if CUBE_POS_CLUSTER == 0:
            full.tma_load_2d(src, tile.slice(0, 256), i32(0), i32(0), multicast=3)  # rank 1 issues nothing
    full.wait_parity(0)
    for i in range(UNIT_POS, 256, 32):
        out[CUBE_POS * 256 + i] = tile[(i + read_at) % 512]  # READ
    cp.sync_cluster()  # no cube exits while rank 0's copy may still land in it


def _multicast(client, read_at: int) -> np.ndarray:
    x = np.arange(16 * 16, dtype=np.float32).reshape(16, 16) * 0.5 - 7
    out = client.zeros((2 * 256,), np.float32)
    rank0_multicasts.launch(
        client,
        cp.CubeCount(2, cluster=cp.ClusterDim(2)),
        32,
        cp.TensorMapArg.tiled(cp.TensorArg(client.create(x)), (16, 16)),
        cp.ArrayArg(out),
        cp.ScalarArg(read_at, u32),
    )
    return x, client.read(out).reshape(2, 16, 16)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=SCHEDULE_IDS)
def test_a_cube_that_only_receives_a_multicast_load_reads_initialized_memory(schedule):
    x, got = _multicast(cp.client("interp", sanitize=True, **schedule), 0)
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], x)  # rank 1 received the whole tile from rank 0's load


def test_bytes_the_multicast_did_not_fill_are_still_an_uninitialized_read_in_the_receiver():
    # Items 256..511 of the tile are outside the box: reading them is a real bug in both cubes.
    with pytest.raises(SanitizerError) as info:
        _multicast(cp.client("interp", sanitize=True), 200)
    assert info.value.kind is SanitizerKind.UNINITIALIZED_READ
    assert f"test_sanitizer_cluster_reports.py:{_line(rank0_multicasts, '# READ')}" in str(info.value)


# -- item: a peer access after the peer may have exited -----------------------------------------------------
@cp.cube(launch=True)
def rotate_without_final_sync(out: Array[u32]):
    mine = cp.SharedMemory[u32](32)
    mine[UNIT_POS] = CUBE_POS * 100 + UNIT_POS
    cp.sync_cluster()  # every cube has filled its buffer
    nxt = (CUBE_POS_CLUSTER + 1) % cp.CUBE_CLUSTER_DIM
    out[CUBE_POS * 32 + UNIT_POS] = mine.peer(nxt)[UNIT_POS]  # BUG: no sync_cluster after this read


@cp.cube(launch=True)
def rotate(out: Array[u32]):
    mine = cp.SharedMemory[u32](32)
    mine[UNIT_POS] = CUBE_POS * 100 + UNIT_POS
    cp.sync_cluster()  # every cube has filled its buffer
    nxt = (CUBE_POS_CLUSTER + 1) % cp.CUBE_CLUSTER_DIM
    out[CUBE_POS * 32 + UNIT_POS] = mine.peer(nxt)[UNIT_POS]
    cp.sync_cluster()  # nobody leaves while a peer may still read its buffer


def _rotate(kernel, client) -> np.ndarray:
    out = client.zeros((4 * 32,), np.uint32)
    kernel.launch(client, cp.CubeCount(4, cluster=cp.ClusterDim(2)), 32, cp.ArrayArg(out))
    return client.read(out).reshape(4, 32)


def _rotated() -> np.ndarray:
    """What rotate computes, by hand: cube c reads the buffer of cube c ^ 1 (its pair's other rank)."""
    peer = np.array([1, 0, 3, 2])
    return peer[:, None] * 100 + np.arange(32)[None, :]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=SCHEDULE_IDS)
def test_a_peer_read_without_the_final_sync_cluster_is_reported_naming_both_lines(schedule):
    with pytest.raises(SanitizerError) as info:
        _rotate(rotate_without_final_sync, cp.client("interp", sanitize=True, **schedule))
    message = str(info.value)
    assert info.value.kind is SanitizerKind.DATA_RACE, message
    name = "test_sanitizer_cluster_reports.py"
    assert message.startswith(f"{__file__}:{_line(rotate_without_final_sync, '# BUG')}: data race:"), message
    assert f"last sync_cluster is at {__file__}:{_line(rotate_without_final_sync, 'filled its buffer')}" in message
    assert "peer cube (" in message and "add cp.sync_cluster()" in message and name in message


@pytest.mark.parametrize("schedule", SCHEDULES[1:], ids=SCHEDULE_IDS[1:])
def test_without_the_sanitizer_a_schedule_that_lets_the_peer_exit_first_reports_it(schedule):
    # adversarial and these seeds run one cube of a pair to its end before the other reads it
    with pytest.raises(SanitizerError, match=r"after every unit of that cube exited"):
        _rotate(rotate_without_final_sync, cp.client("interp", **schedule))


@pytest.mark.parametrize("schedule", SCHEDULES, ids=SCHEDULE_IDS)
def test_the_guide_example_with_its_final_sync_cluster_gives_no_report(schedule):
    got = _rotate(rotate, cp.client("interp", sanitize=True, **schedule))
    np.testing.assert_array_equal(got, _rotated())


@cp.cube(launch=True)
def hand_over_by_mbarrier(out: Array[u32]):
    # rank 1 writes into rank 0's buffer and arrives on rank 0's barrier; rank 0 waits before it reads and
    # exits, so the peer write is ordered before rank 0's exit without a final sync_cluster
    full = cp.Barrier.shared(32, UNIT_POS == 0)
    box = cp.SharedMemory[u32](32)
    cp.sync_cluster()  # rank 0's barrier exists before rank 1 arrives on it
    if CUBE_POS_CLUSTER == 1:
        box.peer(0)[UNIT_POS] = UNIT_POS * 3 + 1
        full.arrive_cluster(0)
    else:
        full.wait_parity(0)
        out[UNIT_POS] = box[UNIT_POS]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=SCHEDULE_IDS)
def test_a_peer_access_ordered_by_the_peers_mbarrier_wait_gives_no_report(schedule):
    client = cp.client("interp", sanitize=True, **schedule)
    out = client.zeros((32,), np.uint32)
    hand_over_by_mbarrier.launch(client, cp.CubeCount(2, cluster=cp.ClusterDim(2)), 32, cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.arange(32) * 3 + 1)


# -- bugs only the interp finds (docs/guide/cpu-runtime.md, "Bugs only the interp finds") ---------------------
# The cpu runtime lands every TMA copy at its issue and writes a wgmma result when it is computed, so these
# kernels give the right answer there with no report; the interp's sanitizer (or a schedule) reports each.
# Each row: the kernel of tests/reliability/test_sanitizer.py and the kind the interp reports.
INTERP_ONLY = [
    ("tma_stage_read_before_its_wait", SanitizerKind.TMA_UNCOVERED_ACCESS),
    ("wgmma_read_before_its_wait", SanitizerKind.WGMMA_PENDING_READ),
    ("tma_store_without_proxy_fence", SanitizerKind.MISSING_PROXY_FENCE),
]


def _cpu_client(**options):
    if "cpu" not in cp.runtimes():
        pytest.skip("the cpu runtime is not available on this machine")
    return cp.client("cpu", **options)


@pytest.mark.parametrize(("name", "kind"), INTERP_ONLY, ids=[name for name, _ in INTERP_ONLY])
def test_an_async_misuse_is_reported_by_the_interp_and_not_by_the_cpu_runtime(name, kind):
    from tests.reliability.sanitizer_launch import launch_kernel
    from tests.reliability.test_sanitizer import BUGGY

    kernel, _, extra, _ = next(entry for entry in BUGGY if entry[0].name == name)
    with pytest.raises(SanitizerError) as info:
        # lockstep: another schedule may meet the same bug from another side first (see test_sanitizer.py)
        launch_kernel(kernel, extra, cp.client("interp", sanitize=True, schedule="lockstep"))
    assert info.value.kind is kind
    launch_kernel(kernel, extra, _cpu_client(sanitize=True))  # no report: the docs say so


def test_the_warp_specialization_guides_skip_full_wait_bug_is_silent_on_cpu():
    # The interp's report is tests/layouts/test_tma_ws.py::test_a_consumer_that_skips_its_wait_is_caught_by_the_sanitizer
    from tests.layouts.test_tma_ws import SHAPES, problem_of, run_fprop

    got, expected = run_fprop(_cpu_client(sanitize=True), problem_of(SHAPES[0]), np.float16, skip_full_wait=True)
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-3)  # the right answer, no report


def test_a_tma_store_source_reused_before_its_read_wait_is_seen_only_by_an_interp_schedule():
    # The interp's side is tests/runtime/interp/test_schedules.py::test_store_reads_its_source_when_it_lands
    from tests.runtime.interp.test_schedules import _store

    got, expected = _store(_cpu_client(), waits_read=False)
    np.testing.assert_array_equal(got, expected)  # the store read its source at issue
    got, _ = _store(cp.client("interp", schedule="adversarial"), waits_read=False)
    assert not np.array_equal(got, expected)  # the store landed after the stage was zeroed


def test_a_named_barrier_reached_by_part_of_a_plane_is_reported_only_by_the_interp():
    from tests.runtime.interp.test_warp_specialize import bad_runtime_named_barrier

    def launch(client):
        out = client.zeros((64,), np.float32)
        args = (cp.ScalarArg(1, u32), cp.ScalarArg(64, u32), cp.ScalarArg(16, u32))
        bad_runtime_named_barrier.launch(client, 1, 64, cp.ArrayArg(out), *args)

    with pytest.raises(SanitizerError) as info:
        launch(cp.client("interp", sanitize=True))
    assert info.value.kind is SanitizerKind.PARTIAL_PLANE
    launch(_cpu_client(sanitize=True))


# -- what docs/guide/clusters.md states about the multicast mask and the errors --------------------------------
@cp.cube(launch=True)
def rank0_loads_into_rank1_only(src: TensorMap[f32], out: Array[f32]):
    full = cp.Barrier.shared(1, UNIT_POS == 0)
    tile = cp.SharedMemory.aligned(f32, 256, 1024)
    cp.sync_cluster()
    if UNIT_POS == 0:
        if CUBE_POS_CLUSTER == 1:
            full.arrive_and_expect_tx(1, 256 * 4)  # only the destination expects the bytes
        else:
            full.arrive()
            full.tma_load_2d(src, tile, i32(0), i32(0), multicast=2)  # the issuer is not in its mask
    full.wait_parity(0)
    if CUBE_POS_CLUSTER == 1:
        for i in range(UNIT_POS, 256, 32):
            out[i] = tile[i]
    cp.sync_cluster()


@pytest.mark.parametrize("schedule", SCHEDULES, ids=SCHEDULE_IDS)
def test_a_multicast_issuer_need_not_be_in_its_own_mask(schedule):
    client = cp.client("interp", sanitize=True, **schedule)
    x = np.arange(256, dtype=np.float32).reshape(16, 16)
    out = client.zeros((256,), np.float32)
    rank0_loads_into_rank1_only.launch(
        client,
        cp.CubeCount(2, cluster=cp.ClusterDim(2)),
        32,
        cp.TensorMapArg.tiled(cp.TensorArg(client.create(x)), (16, 16)),
        cp.ArrayArg(out),
    )
    np.testing.assert_array_equal(client.read(out).reshape(16, 16), x)


def test_the_cluster_size_limit_is_checked_by_cluster_dim_and_the_multiple_by_cube_count():
    with pytest.raises(cp.LaunchError, match=r"ClusterDim\(3, 3, 1\) has 9 cubes; a cluster holds at most 8"):
        cp.ClusterDim(3, 3)
    with pytest.raises(cp.LaunchError, match=r"x = 3 is not a multiple of the cluster's x = 2"):
        cp.CubeCount(3, cluster=cp.ClusterDim(2))


def _wgmma_tile_kernel(start: int, per_unit: bool):
    """One 64x8x16 wgmma whose descriptor starts ``start`` f16 items into the tile (or differs per unit)."""

    @cp.cube(launch=True)
    def kernel(out: Array[f32]):
        tile = cp.SharedMemory[f16](64 * 32, alignment=1024)
        for i in range(UNIT_POS, 64 * 32, 128):
            tile[i] = f16(1)
        cp.sync_cube()
        acc = cp.LocalArray[f32](4)
        desc = cp.wgmma_descriptor(tile.slice(start, 64 * 16 + start), 128, 256)
        if per_unit:
            desc = desc + cp.u64(UNIT_POS // 64)  # BUG: the second half of the warpgroup passes another tile
        cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16), elem=cp.f16, scale_d=False)
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        if UNIT_POS < 64:
            out[UNIT_POS] = acc[0]

    return kernel


def _run_wgmma(kernel, client):
    kernel.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((64,), np.float32)))


def test_a_misaligned_wgmma_descriptor_start_is_reported_by_the_interp_only():
    kernel = _wgmma_tile_kernel(4, False)  # 4 f16 = 8 bytes: not a multiple of 16
    with pytest.raises(SanitizerError, match=r"start must be 16-byte aligned, got shared byte 8") as info:
        _run_wgmma(kernel, cp.client("interp"))
    assert info.value.kind is SanitizerKind.WGMMA_MISUSE
    _run_wgmma(kernel, _cpu_client())  # no report there (the docs' table says so)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_descriptor_that_differs_across_the_warpgroup_is_reported(runtime):
    client = cp.client("interp") if runtime == "interp" else _cpu_client()
    with pytest.raises(SanitizerError) as info:
        _run_wgmma(_wgmma_tile_kernel(0, True), client)
    assert info.value.kind is SanitizerKind.WGMMA_MISUSE
