"""Cluster operations lower to the sm_90 PTX the ISA names, and ptxas accepts it.

The expected PTX is written as ``# CHECK`` comments in each kernel, matched by ``filecheck``.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, CUBE_POS_CLUSTER, UNIT_POS, Array, TensorMap, f32, i32, u32
from tests.filecheck import filecheck


@cp.cube(launch=True)
def peers_and_builtins(out: Array[u32]):
    # CHECK: mov.u32 {{%r[0-9]+}}, %cluster_ctarank;
    # CHECK: barrier.cluster.arrive;
    # CHECK: barrier.cluster.wait;
    # CHECK: mapa.shared::cluster.u32 [[PEER:%r[0-9]+]], {{%r[0-9]+}}, {{%r[0-9]+}};
    # CHECK: ld.shared::cluster.b32 {{%r[0-9]+}}, {{\[}}[[PEER]]{{\]}};
    # CHECK: st.shared::cluster.b32
    buf = cp.SharedMemory[u32](32)
    buf[UNIT_POS] = CUBE_POS + cp.CUBE_CLUSTER_DIM_X
    cp.sync_cluster()
    peer = (CUBE_POS_CLUSTER + 1) % cp.CUBE_CLUSTER_DIM
    out[CUBE_POS * 32 + UNIT_POS] = buf.peer(peer)[31 - UNIT_POS]
    buf.peer(peer)[UNIT_POS] = u32(7)
    cp.sync_cluster()


@cp.cube(launch=True)
def multicast_and_remote_arrive(src_map: TensorMap[f32], out: Array[f32]):
    # CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [{{%r[0-9]+}}], [{{%rd[0-9]+}}, {{{%r[0-9]+}}, {{%r[0-9]+}}}], [{{.*}}], {{%rs[0-9]+}};
    # CHECK: mapa.shared::cluster.u32 peer, {{%r[0-9]+}}, {{%r[0-9]+}};
    # CHECK-NEXT: mbarrier.arrive.release.cluster.shared::cluster.b64 _, [peer];
    full = cp.Barrier.shared(1, UNIT_POS == 0)
    done = cp.Barrier.shared(1, UNIT_POS == 0)
    tile = cp.SharedMemory.aligned(f32, 256, 1024)
    cp.sync_cluster()
    rank = CUBE_POS_CLUSTER
    if UNIT_POS == 0:
        full.arrive_and_expect_tx(1, 256 * 4)
        full.tma_load_2d(src_map, tile.slice(rank * 128, rank * 128 + 128), i32(rank * 8), i32(0), multicast=3)
    full.wait_parity(0)
    out[CUBE_POS * 32 + UNIT_POS] = tile[UNIT_POS]
    if UNIT_POS == 0:
        done.arrive_cluster(rank ^ 1)
    done.wait_parity(0)


def test_peer_accesses_and_builtins(tmp_path):
    client = cp.client("interp")
    compiled = peers_and_builtins.compile(cp.CubeDim(32), cp.ArrayArg(client.zeros(64, u32)))
    filecheck(peers_and_builtins, compiled.ptx, tmp_path)


def test_multicast_and_remote_arrival(tmp_path):
    client = cp.client("interp")
    src = client.create(np.zeros((16, 16), np.float32))
    compiled = multicast_and_remote_arrive.compile(
        cp.CubeDim(32), cp.TensorMapArg.tiled(cp.TensorArg(src), (8, 16)), cp.ArrayArg(client.zeros(64, f32))
    )
    filecheck(multicast_and_remote_arrive, compiled.ptx, tmp_path)


@pytest.mark.ptxas
@pytest.mark.parametrize("kernel", [peers_and_builtins, multicast_and_remote_arrive])
def test_ptxas_assembles_the_cluster_kernels_for_sm_90a(kernel):
    client = cp.client("interp")
    if kernel is peers_and_builtins:
        args = (cp.ArrayArg(client.zeros(64, u32)),)
    else:
        src = client.create(np.zeros((16, 16), np.float32))
        args = (cp.TensorMapArg.tiled(cp.TensorArg(src), (8, 16)), cp.ArrayArg(client.zeros(64, f32)))
    compiled = kernel.compile(cp.CubeDim(32), *args)
    assert compiled.cubin, compiled.ptxas_status
    assert compiled.resources.spill_store_bytes == 0
