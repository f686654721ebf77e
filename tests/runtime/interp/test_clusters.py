"""Clusters on the interp: launch shapes, the cluster builtins, ``sync_cluster``, distributed shared memory,
remote mbarrier arrivals and TMA multicast; errors for ranks and masks outside the cluster.

Expected values are written out here from the cluster's definition (ranks x fastest, clusters tiling the grid),
not from the emulation.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, CUBE_POS_CLUSTER, UNIT_POS, Array, TensorMap, f32, i32, u32
from cubepy.errors import LaunchError, SanitizerError, SanitizerKind, TmaMisuseError

SCHEDULES = [{}, {"schedule": "random", "seed": 4}, {"schedule": "adversarial"}, {"sanitize": True}]


def _rank_and_peer_cube(cube: int, count: tuple[int, int], cluster: tuple[int, int], peer_rank: int) -> tuple[int, int]:
    """By hand: a cube's rank in its cluster and the linear index of the cube at ``peer_rank`` of that cluster."""
    nx, _ = count
    cx, cy = cluster
    x, y = cube % nx, cube // nx
    rank = x % cx + (y % cy) * cx
    px, py = x - x % cx + peer_rank % cx, y - y % cy + peer_rank // cx
    return rank, px + py * nx


@cp.cube(launch=True)
def cluster_builtins(out: Array[u32]):
    if UNIT_POS == 0:
        out[CUBE_POS * 8 + 0] = cp.CUBE_POS_CLUSTER
        out[CUBE_POS * 8 + 1] = cp.CUBE_POS_CLUSTER_X
        out[CUBE_POS * 8 + 2] = cp.CUBE_POS_CLUSTER_Y
        out[CUBE_POS * 8 + 3] = cp.CUBE_POS_CLUSTER_Z
        out[CUBE_POS * 8 + 4] = cp.CUBE_CLUSTER_DIM
        out[CUBE_POS * 8 + 5] = cp.CUBE_CLUSTER_DIM_X
        out[CUBE_POS * 8 + 6] = cp.CUBE_CLUSTER_DIM_Y
        out[CUBE_POS * 8 + 7] = cp.CUBE_CLUSTER_DIM_Z


@pytest.mark.parametrize(("count", "cluster"), [((6, 2, 2), (3, 2, 1)), ((4, 2, 4), (2, 1, 2)), ((5, 1, 1), None)])
def test_cluster_builtins_give_the_rank_and_shape(count, cluster):
    client = cp.client("interp")
    cubes = int(np.prod(count))
    out = client.zeros((cubes * 8,), np.uint32)
    grid = cp.CubeCount(*count, cluster=None if cluster is None else cp.ClusterDim(*cluster))
    cluster_builtins.launch(client, grid, 32, cp.ArrayArg(out))
    cx, cy, cz = cluster or (1, 1, 1)
    nx, ny, _ = count
    expected = []
    for cube in range(cubes):
        x, y, z = cube % nx, (cube // nx) % ny, cube // (nx * ny)
        rx, ry, rz = x % cx, y % cy, z % cz
        expected.append([rx + ry * cx + rz * cx * cy, rx, ry, rz, cx * cy * cz, cx, cy, cz])
    np.testing.assert_array_equal(client.read(out).reshape(cubes, 8), np.array(expected))


@cp.cube(launch=True)
def exchange_with_next_rank(out: Array[u32]):
    """Each cube fills its buffer, then reads the next rank's buffer backwards and writes into the previous's."""
    buf = cp.SharedMemory[u32](32)
    mailbox = cp.SharedMemory[u32](32)
    buf[UNIT_POS] = CUBE_POS * 100 + UNIT_POS
    cp.sync_cluster()
    size = cp.CUBE_CLUSTER_DIM
    nxt = (CUBE_POS_CLUSTER + 1) % size
    prev = (CUBE_POS_CLUSTER + size - 1) % size
    value = buf.peer(nxt)[31 - UNIT_POS]
    mailbox.peer(prev)[UNIT_POS] = value
    cp.sync_cluster()
    out[CUBE_POS * 32 + UNIT_POS] = mailbox[UNIT_POS]


@pytest.mark.parametrize("options", SCHEDULES, ids=["lockstep", "random", "adversarial", "sanitize"])
def test_distributed_shared_memory_round_trip(options):
    client = cp.client("interp", **options)
    count, cluster = (4, 2), (2, 2)
    out = client.zeros((8 * 32,), np.uint32)
    exchange_with_next_rank.launch(client, cp.CubeCount(*count, cluster=cp.ClusterDim(*cluster)), 32, cp.ArrayArg(out))
    # cube c's mailbox was written by the cube of rank(c) + 1, which read rank(c) + 2's buffer backwards
    expected = np.zeros((8, 32), np.uint32)
    for cube in range(8):
        rank, _ = _rank_and_peer_cube(cube, count, cluster, 0)
        _, source = _rank_and_peer_cube(cube, count, cluster, (rank + 2) % 4)
        expected[cube] = source * 100 + 31 - np.arange(32)
    np.testing.assert_array_equal(client.read(out).reshape(8, 32), expected)


@cp.cube(launch=True)
def multicast_halves(src_map: TensorMap[f32], out: Array[f32]):
    """Each cube of a 2-cube cluster loads 8 of the tile's 16 rows and multicasts them to both; then each frees
    the other's copy of ``done`` (a remote arrival) and waits for its own."""
    full = cp.Barrier.shared(1, UNIT_POS == 0)
    done = cp.Barrier.shared(1, UNIT_POS == 0)
    tile = cp.SharedMemory.aligned(f32, 256, 1024)
    cp.sync_cluster()  # every peer's barriers are initialised before anyone multicasts into them
    rank = CUBE_POS_CLUSTER
    if UNIT_POS == 0:
        full.arrive_and_expect_tx(1, 256 * 4)
        full.tma_load_2d(src_map, tile.slice(rank * 128, rank * 128 + 128), i32(rank * 8), i32(0), multicast=3)
    full.wait_parity(0)
    for i in range(UNIT_POS, 256, 32):
        out[CUBE_POS * 256 + i] = tile[i]
    if UNIT_POS == 0:
        done.arrive_cluster(rank ^ 1)
    done.wait_parity(0)


@pytest.mark.parametrize("options", SCHEDULES, ids=["lockstep", "random", "adversarial", "sanitize"])
def test_a_multicast_load_lands_in_every_cube_of_the_mask(options):
    client = cp.client("interp", **options)
    src = np.arange(16 * 20, dtype=np.float32).reshape(16, 20)
    out = client.zeros((6 * 256,), np.float32)
    multicast_halves.launch(
        client,
        cp.CubeCount(6, cluster=cp.ClusterDim(2)),
        32,
        cp.TensorMapArg.tiled(cp.TensorArg(client.create(src)), (8, 16)),
        cp.ArrayArg(out),
    )
    np.testing.assert_array_equal(client.read(out).reshape(6, 16, 16), np.broadcast_to(src[:, :16], (6, 16, 16)))


@cp.cube(launch=True)
def multicast_with_mask(src_map: TensorMap[f32], out: Array[f32], mask: u32):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    tile = cp.SharedMemory.aligned(f32, 128, 1024)
    cp.sync_cluster()
    if UNIT_POS == 0 and CUBE_POS_CLUSTER == 0:
        bar.tma_load_2d(src_map, tile, i32(0), i32(0), multicast=mask)
    out[CUBE_POS] = f32(1)


def test_a_multicast_mask_outside_the_cluster_is_a_tma_misuse():
    client = cp.client("interp")
    src = client.create(np.zeros((8, 16), np.float32))
    with pytest.raises(TmaMisuseError, match=r"multicast mask 0x4 names no cube or cubes outside the cluster of 2"):
        multicast_with_mask.launch(
            client,
            cp.CubeCount(2, cluster=cp.ClusterDim(2)),
            32,
            cp.TensorMapArg.tiled(cp.TensorArg(src), (8, 16)),
            cp.ArrayArg(client.zeros((2,), np.float32)),
            cp.ScalarArg(4, u32),
        )


@cp.cube(launch=True)
def peer_access(out: Array[u32], rank: u32, index: u32):
    buf = cp.SharedMemory[u32](32)
    buf[UNIT_POS] = UNIT_POS
    cp.sync_cluster()
    out[CUBE_POS * 32 + UNIT_POS] = buf.peer(rank)[index]
    cp.sync_cluster()


def test_a_rank_outside_the_cluster_is_an_out_of_bounds_error_naming_the_cluster():
    client = cp.client("interp")
    out = client.zeros((64,), np.uint32)
    with pytest.raises(SanitizerError) as info:
        peer_access.launch(client, cp.CubeCount(2, cluster=cp.ClusterDim(2)), 32, cp.ArrayArg(out), 2, 0)
    assert info.value.kind is SanitizerKind.OUT_OF_BOUNDS
    assert "cube rank 2 is outside the cluster of 2 cubes (ClusterDim(2, 1, 1))" in str(info.value)
    assert "test_clusters.py:" in str(info.value)
    assert client.read(out).tolist() == [0] * 64  # a failed launch writes nothing


@pytest.mark.cubepy_sanitize(False)  # its first launch reads out of range unsanitized on purpose (gives 0)
def test_a_peer_index_out_of_range_reads_zero_in_checked_mode_and_is_reported_by_the_sanitizer():
    client = cp.client("interp")
    out = client.zeros((64,), np.uint32)
    peer_access.launch(client, cp.CubeCount(2, cluster=cp.ClusterDim(2)), 32, cp.ArrayArg(out), 1, 40)
    assert client.read(out).tolist() == [0] * 64
    sanitized = cp.client("interp", sanitize=True)
    with pytest.raises(SanitizerError, match=r"out-of-bounds read of shared memory \d+ at index 40 \(length 32\)"):
        peer_access.launch(
            sanitized,
            cp.CubeCount(2, cluster=cp.ClusterDim(2)),
            32,
            cp.ArrayArg(sanitized.zeros((64,), np.uint32)),
            1,
            40,
        )


@cp.cube(launch=True)
def one_cube_skips_the_cluster_barrier(out: Array[u32]):
    if CUBE_POS_CLUSTER == 0 and UNIT_POS < 32:
        out[CUBE_POS] = u32(1)
        cp.sync_cluster()  # BUG: rank 0's second plane waits at the named barrier below, never here
    else:
        cp.named_barrier_sync(1, 64)  # completes in rank 1; in rank 0 it waits for the plane at the cluster barrier


def test_a_cluster_barrier_that_cannot_complete_is_a_deadlock():
    client = cp.client("interp")
    with pytest.raises(SanitizerError) as info:
        one_cube_skips_the_cluster_barrier.launch(
            client, cp.CubeCount(2, cluster=cp.ClusterDim(2)), 64, cp.ArrayArg(client.zeros((2,), np.uint32))
        )
    assert info.value.kind is SanitizerKind.BARRIER_DEADLOCK
    assert "sync_cluster can never complete: 32 of the cluster's 128 units arrived" in str(info.value)
    assert "named barrier 1 expects 64 units and 32 arrived" in str(info.value)


def test_launch_shapes_are_checked():
    with pytest.raises(LaunchError, match=r"x = 3 is not a multiple of the cluster's x = 2"):
        cp.CubeCount(3, cluster=cp.ClusterDim(2))
    with pytest.raises(LaunchError, match=r"ClusterDim\(4, 4, 1\) has 16 cubes; a cluster holds at most 8"):
        cp.ClusterDim(4, 4)
    with pytest.raises(LaunchError, match=r"expected a cp.ClusterDim"):
        cp.CubeCount(2, cluster=(2, 1, 1))


def test_the_cpu_runtime_refuses_cluster_launches_and_peer_accesses_with_the_reason():
    client = cp.client("cpu")
    out = client.zeros((64,), np.uint32)
    with pytest.raises(LaunchError, match="the cpu runtime runs no clusters"):
        cluster_builtins.launch(client, cp.CubeCount(2, cluster=cp.ClusterDim(2)), 32, cp.ArrayArg(out))
    with pytest.raises(cp.CubeError, match="need a cluster launch, which the cpu runtime does not run"):
        peer_access.launch(client, 2, 32, cp.ArrayArg(out), 0, 0)
    cluster_builtins.launch(client, 2, 32, cp.ArrayArg(out))  # without clusters: each cube is a cluster of one
    np.testing.assert_array_equal(client.read(out)[:16].reshape(2, 8), [[0, 0, 0, 0, 1, 1, 1, 1]] * 2)
