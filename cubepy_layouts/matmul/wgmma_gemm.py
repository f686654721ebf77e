"""A warp-specialized Hopper GEMM: TMA loads with the 128-byte swizzle, full/empty barriers, ``wgmma``.

``out (M x N) = a (M x K) @ b_t (N x K)^T``: B comes K-major (each of its N rows holds K values), the
form ``wgmma`` reads from shared memory without a transpose (cuBLAS's "TN"). A cube computes a
``64 x 64`` block of ``out`` with two warpgroups (256 units):

- units 0-127 are one *consumer* warpgroup: for each k tile of 64 it waits for its stage's *full*
  phase, runs four ``wgmma`` steps of K = 16 on shared-memory descriptors (swizzle 128B: a row of 64
  f16/bf16 is one 128-byte line), waits for them (``wgmma_wait_group(0)``) and releases the stage
  (its 128 units arrive on the stage's *empty* barrier);
- plane 4 (the first of the second warpgroup) is the *producer*; planes 5-7 have nothing to do (a
  warpgroup is the unit the interp and the hardware schedule wgmma by, so the cube is whole warpgroups).
  For k tile ``t`` it waits until stage ``t % stages`` is empty and its
  elected unit expects both boxes' bytes and starts the two TMA loads (``64 x 64`` of A at
  ``(m0, k0)``, ``64 x 64`` of B at ``(n0, k0)``). TMA fills the parts of a box outside the matrices
  with zeros, so ragged M, N and K need no masking; the epilogue writes through a checked view.

With ``cluster_m = 2`` (the default) two cubes stacked along M form a cluster (``ClusterDim(1, 2)``): they
need the same B tile, so each loads half of its rows and **multicasts** them into both cubes' stage (one
TMA load feeding two SMs). A stage is then refilled only when both cubes' consumers have released it:
each cube's *empty* barrier expects one arrival per cube of the cluster, and after its ``wgmma`` group
completes the consumer warpgroup's first unit arrives on the stage's empty barrier of every cube of the
cluster (``arrive_cluster``). The cubes sync as a cluster after initialising their barriers (a peer must
not multicast into a barrier that does not exist yet) and before they exit (nor into a cube that left).

Limits: one consumer warpgroup (``64 x 64`` per cube), one ``wgmma`` group in flight. TMA needs each row
of A and B to be a multiple of 16 bytes: K a multiple of 8.
"""

from typing import Any

import attrs
import numpy as np

import cubepy as cp
from cubepy import (
    CUBE_POS_CLUSTER,
    CUBE_POS_X,
    CUBE_POS_Y,
    PLANE_POS,
    UNIT_POS,
    Array,
    Comptime,
    LocalArray,
    SharedMemory,
    TensorMap,
    cube,
    f32,
    u32,
    u64,
)
from cubepy_layouts.matmul.mma_sync import INPUT_DTYPES, OUTPUT_DTYPES, RowMajorLayout, _elem
from cubepy_layouts.view import View

TILE = 64  # M, N and K of a block: a row of 64 f16/bf16 is the 128-byte swizzle's line
TILE_ITEMS = TILE * TILE
WARPGROUP = 128
K_STEP = 16  # the K of one f16/bf16 wgmma
PRODUCER_UNIT = WARPGROUP  # the first unit of plane 4


@attrs.frozen
class WgmmaGemmConfig:
    """The depth of the ring of shared-memory stages, and how many cubes along M share B by multicast."""

    stages: int = 3
    cluster_m: int = 2

    def __attrs_post_init__(self) -> None:
        if self.stages < 1:
            raise ValueError(f"stages must be at least 1, got {self.stages}")
        if self.cluster_m not in (1, 2, 4):
            raise ValueError(f"cluster_m must be 1, 2 or 4 (cubes sharing a B tile), got {self.cluster_m}")


DEFAULT_WGMMA_CONFIG = WgmmaGemmConfig()


def wgmma_gemm_kernel(elem: cp.ScalarType, out_elem: cp.ScalarType):
    """The GEMM kernel for inputs of ``elem`` (f16, bf16) and output of ``out_elem``, built once per pair."""
    key = (elem, out_elem)
    if key not in _KERNELS:
        _KERNELS[key] = _wgmma_gemm_kernel(elem, out_elem)
    return _KERNELS[key]


_KERNELS: dict = {}


def _wgmma_gemm_kernel(elem: cp.ScalarType, out_elem: cp.ScalarType):
    @cube(launch=True)
    def wgmma_gemm(
        a_map: TensorMap[elem],
        b_map: TensorMap[elem],
        out: Array[out_elem],
        out_layout: RowMajorLayout,
        k: u32,
        stages: Comptime[int],
        cluster_m: Comptime[int],
    ):
        """The ``64 x 64`` block of ``out`` at ``(CUBE_POS_Y, CUBE_POS_X)``: plane 4 loads, planes 0-3 multiply."""
        result = View(out, out_layout)
        m0 = CUBE_POS_Y * TILE
        n0 = CUBE_POS_X * TILE
        a_tiles = SharedMemory.aligned(elem, stages * TILE_ITEMS, 1024)
        b_tiles = SharedMemory.aligned(elem, stages * TILE_ITEMS, 1024)
        full = [cp.Barrier.shared(1, UNIT_POS == 0) for _ in range(stages)]
        # one arrival per cube sharing the stage: its consumers' first unit, after their wgmma group completed
        empty = [cp.Barrier.shared(cluster_m, UNIT_POS == 0) for _ in range(stages)]
        rows = TILE // cluster_m  # the rows of the B tile this cube loads and multicasts
        rank = CUBE_POS_CLUSTER
        if cluster_m > 1:
            cp.sync_cluster()  # every cube's barriers exist before a peer multicasts into them
        k_tiles = (k + (TILE - 1)) // TILE
        if PLANE_POS == 4:
            for round_start in range(0, k_tiles, stages):
                parity = (round_start // stages) % 2
                for s in cp.unroll(range(stages)):
                    tile = round_start + s
                    if tile < k_tiles:
                        empty[s].wait_parity(parity ^ 1)  # a fresh barrier passes parity 1 at once
                        if UNIT_POS == PRODUCER_UNIT:
                            full[s].arrive_and_expect_tx(1, 2 * TILE_ITEMS * elem.size)
                            a_stage = a_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS)
                            b_stage = b_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS)
                            full[s].tma_load_2d(a_map, a_stage, m0, tile * TILE)
                            if cluster_m == 1:
                                full[s].tma_load_2d(b_map, b_stage, n0, tile * TILE)
                            else:
                                part = b_stage.slice(rank * rows * TILE, (rank + 1) * rows * TILE)
                                mask = (1 << cluster_m) - 1
                                full[s].tma_load_2d(b_map, part, n0 + rank * rows, tile * TILE, multicast=mask)
        elif UNIT_POS < WARPGROUP:
            acc = LocalArray[f32](TILE // 2)
            for i in cp.unroll(range(TILE // 2)):
                acc[i] = f32(0.0)
            for round_start in range(0, k_tiles, stages):
                parity = (round_start // stages) % 2
                for s in cp.unroll(range(stages)):
                    tile = round_start + s
                    if tile < k_tiles:
                        full[s].wait_parity(parity)
                        # 8-row groups are 1024 bytes apart; the swizzle makes the leading offset unused.
                        a_desc = cp.wgmma_descriptor(
                            a_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS), 16, 1024, "128B"
                        )
                        b_desc = cp.wgmma_descriptor(
                            b_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS), 16, 1024, "128B"
                        )
                        cp.wgmma_fence()
                        for kk in cp.unroll(range(TILE // K_STEP)):
                            step = u64(kk * K_STEP * elem.size // 16)  # the descriptor counts 16-byte units
                            cp.wgmma_mma_async(acc, a_desc + step, b_desc + step, shape=(TILE, TILE, K_STEP), elem=elem)
                        cp.wgmma_commit_group()
                        cp.wgmma_wait_group(0)  # the whole warpgroup's reads of the stage are done
                        if UNIT_POS == 0:  # the stage is free here: tell every cube that fills it
                            if cluster_m == 1:
                                empty[s].arrive()
                            else:
                                for peer in cp.unroll(range(cluster_m)):
                                    empty[s].arrive_cluster(u32(peer))
            for i in cp.unroll(range(TILE // 2)):
                row, col = cp.wgmma_accumulator_position(UNIT_POS, i)
                result.write_checked((m0 + row, n0 + col), out_elem(acc[i]))
        if cluster_m > 1:
            cp.sync_cluster()  # no cube leaves while a peer may still multicast or arrive into it

    return wgmma_gemm


@attrs.frozen
class WgmmaGemmLaunch:
    """Everything the GEMM is launched with."""

    kernel: Any  # the @cube(launch=True) kernel
    args: tuple
    cube_count: cp.CubeCount

    cube_dim = cp.CubeDim(2 * WARPGROUP)

    def launch(self, client) -> None:
        """Run the kernel."""
        self.kernel.launch(client, self.cube_count, self.cube_dim, *self.args)

    def compile(self, target: str = "sm_90a"):
        """The compiled kernel (PTX and, with ptxas, its resources)."""
        return self.kernel.compile(self.cube_dim, *self.args, target=target)


def wgmma_gemm_launch(a, b_t, out, config: WgmmaGemmConfig = DEFAULT_WGMMA_CONFIG) -> WgmmaGemmLaunch:
    """The launch of ``out (M x N) = a (M x K) @ b_t (N x K)^T`` for row-major handles."""
    if len(a.shape) != 2 or len(b_t.shape) != 2 or len(out.shape) != 2:
        raise cp.LaunchError("wgmma_gemm takes 2-D a (M x K), b_t (N x K) and out (M x N)")
    (m, k), (n, k_b) = a.shape, b_t.shape
    if k != k_b or tuple(out.shape) != (m, n):
        raise cp.LaunchError(f"wgmma_gemm: shapes {tuple(a.shape)} @ {tuple(b_t.shape)}^T -> {tuple(out.shape)}")
    elem = _elem(a, INPUT_DTYPES, "a")
    if _elem(b_t, INPUT_DTYPES, "b_t") != elem:
        raise cp.LaunchError(f"wgmma_gemm: a and b_t differ in dtype: {a.dtype} and {b_t.dtype}")
    if k % 8:
        raise cp.LaunchError(f"wgmma_gemm: TMA needs rows of a multiple of 16 bytes: K ({k}) must be a multiple of 8")
    rows = TILE // config.cluster_m  # each cube of a cluster loads this many rows of the B tile
    maps = [
        cp.TensorMapArg.tiled(cp.TensorArg(a), (TILE, TILE), swizzle="128B"),
        cp.TensorMapArg.tiled(cp.TensorArg(b_t), (rows, TILE), swizzle="128B"),
    ]
    kernel = wgmma_gemm_kernel(elem, _elem(out, OUTPUT_DTYPES, "out"))
    args = (*maps, cp.ArrayArg(out), RowMajorLayout.of(m, n), cp.ScalarArg(k, u32), config.stages, config.cluster_m)
    m_tiles = -(-m // TILE)
    m_tiles += -m_tiles % config.cluster_m  # whole clusters: a spare cube multiplies zeros and writes nothing
    cluster = cp.ClusterDim(1, config.cluster_m) if config.cluster_m > 1 else None
    return WgmmaGemmLaunch(kernel, args, cp.CubeCount(-(-n // TILE), m_tiles, cluster=cluster))


def wgmma_matmul(client, a, b_t, out_dtype=np.float32, config: WgmmaGemmConfig | None = None):
    """``a @ b_t.T`` for f16/bf16 handles ``a`` (M x K) and ``b_t`` (N x K); a new ``out_dtype`` handle (M x N).

    Without a ``config``: the default (B multicast across two cubes), or no cluster on a runtime that runs
    no clusters (the compiled cpu runtime)."""
    if config is None:
        config = WgmmaGemmConfig(cluster_m=1) if client.name == "cpu" else DEFAULT_WGMMA_CONFIG
    out = client.zeros((a.shape[0], b_t.shape[0]), out_dtype)
    wgmma_gemm_launch(a, b_t, out, config).launch(client)
    return out
