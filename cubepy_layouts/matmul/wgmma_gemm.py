"""A warp-specialized Hopper GEMM: TMA loads with the 128-byte swizzle, full/empty barriers, ``wgmma``.

``out (M x N) = a (M x K) @ b_t (N x K)^T``: B comes K-major (each of its N rows holds K values), the
form ``wgmma`` reads from shared memory without a transpose (cuBLAS's "TN"). With the default
``WgmmaGemmConfig`` a cube computes a ``128 x 128`` block of ``out`` with three warpgroups (384 units):

- warpgroups 0 and 1 are *consumers*: for each k tile of 64, warpgroup ``w`` waits for its stage's
  *full* phase, runs four ``wgmma`` steps (``m64n128k16``) on shared-memory descriptors of rows
  ``64 w ..`` of the A stage and the whole B stage (swizzle 128B: a row of 64 f16/bf16 is one 128-byte
  line), waits for them (``wgmma_wait_group(0)``) and releases the stage: its first unit arrives on the
  stage's *empty* barrier;
- the first plane of the last warpgroup is the *producer*; its other planes have nothing to do (a
  warpgroup is the unit the interp and the hardware schedule wgmma by, so the cube is whole warpgroups).
  For k tile ``t`` it waits until stage ``t % stages`` is empty and its elected unit expects both boxes'
  bytes and starts the TMA loads (A's ``tile_m x 64`` at ``(m0, k0)``, B's ``tile_n x 64`` at
  ``(n0, k0)``). TMA fills the parts of a box outside the matrices with zeros, so ragged M, N and K need
  no masking; the epilogue writes through a checked view.

With ``cluster_m = 2`` (the default) two cubes stacked along M form a cluster (``ClusterDim(1, 2)``): they
need the same B tile, so each loads half of its rows and **multicasts** them into both cubes' stage (one
TMA load feeding two SMs). A stage is then refilled only when every consumer warpgroup of both cubes has
released it: each cube's *empty* barrier expects ``consumers x cluster_m`` arrivals, and each consumer
warpgroup's first unit arrives on the stage's empty barrier of every cube of the cluster
(``arrive_cluster``). The cubes sync as a cluster after initialising their barriers (a peer must not
multicast into a barrier that does not exist yet) and before they exit (nor into a cube that left).

``WgmmaGemmConfig(consumers=1, tile_n=64, cluster_m=1)`` is the small form (a ``64 x 64`` block, two
warpgroups, no cluster). Limits: one ``wgmma`` group in flight per warpgroup (the wait follows each
commit). TMA needs each row of A and B to be a multiple of 16 bytes: K a multiple of 8.
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

TILE_K = 64  # the K of a stage: a row of 64 f16/bf16 is the 128-byte swizzle's line
WGMMA_M = 64  # the rows of one warpgroup's wgmma
WARPGROUP = 128
PLANES_PER_WARPGROUP = WARPGROUP // 32
K_STEP = 16  # the K of one f16/bf16 wgmma


@attrs.frozen
class WgmmaGemmConfig:
    """The GEMM's shape: ``consumers`` warpgroups of 64 rows each (the block is ``64 consumers x tile_n``),
    the depth of the ring of shared-memory stages, and how many cubes along M share B by multicast."""

    stages: int = 4
    cluster_m: int = 2
    consumers: int = 2
    tile_n: int = 128

    def __attrs_post_init__(self) -> None:
        if self.stages < 1:
            raise ValueError(f"stages must be at least 1, got {self.stages}")
        if self.cluster_m not in (1, 2, 4):
            raise ValueError(f"cluster_m must be 1, 2 or 4 (cubes sharing a B tile), got {self.cluster_m}")
        if self.consumers not in (1, 2):
            raise ValueError(f"consumers must be 1 or 2 warpgroups, got {self.consumers}")
        if self.tile_n not in (64, 128, 256):
            raise ValueError(f"tile_n must be 64, 128 or 256 (a wgmma N), got {self.tile_n}")

    @property
    def tile_m(self) -> int:
        """The rows of ``out`` one cube computes."""
        return self.consumers * WGMMA_M

    @property
    def shared_bytes(self) -> int:
        """The bytes of the stages (2-byte inputs)."""
        return self.stages * (self.tile_m + self.tile_n) * TILE_K * 2


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
        consumers: Comptime[int],
        tile_n: Comptime[int],
    ):
        """The ``(64 consumers) x tile_n`` block of ``out`` at ``(CUBE_POS_Y, CUBE_POS_X)``: the warpgroup after
        the consumers loads, consumer warpgroup ``w`` multiplies rows ``64 w ..`` of the block."""
        result = View(out, out_layout)
        tile_m = consumers * WGMMA_M
        a_items = tile_m * TILE_K
        b_items = tile_n * TILE_K
        m0 = CUBE_POS_Y * tile_m
        n0 = CUBE_POS_X * tile_n
        a_tiles = SharedMemory.aligned(elem, stages * a_items, 1024)
        b_tiles = SharedMemory.aligned(elem, stages * b_items, 1024)
        full = [cp.Barrier.shared(1, UNIT_POS == 0) for _ in range(stages)]
        # one arrival per consumer warpgroup of every cube sharing the stage, after its wgmma group completed
        empty = [cp.Barrier.shared(consumers * cluster_m, UNIT_POS == 0) for _ in range(stages)]
        rows = tile_n // cluster_m  # the rows of the B tile this cube loads and multicasts
        rank = CUBE_POS_CLUSTER
        if cluster_m > 1:
            cp.sync_cluster()  # every cube's barriers exist before a peer multicasts into them
        k_tiles = (k + (TILE_K - 1)) // TILE_K
        if PLANE_POS == consumers * PLANES_PER_WARPGROUP:  # the producer: the first plane after the consumers
            for round_start in range(0, k_tiles, stages):
                parity = (round_start // stages) % 2
                for s in cp.unroll(range(stages)):
                    tile = round_start + s
                    if tile < k_tiles:
                        empty[s].wait_parity(parity ^ 1)  # a fresh barrier passes parity 1 at once
                        if UNIT_POS == consumers * WARPGROUP:
                            full[s].arrive_and_expect_tx(1, (a_items + b_items) * elem.size)
                            a_stage = a_tiles.slice(s * a_items, (s + 1) * a_items)
                            b_stage = b_tiles.slice(s * b_items, (s + 1) * b_items)
                            full[s].tma_load_2d(a_map, a_stage, m0, tile * TILE_K)
                            if cluster_m == 1:
                                full[s].tma_load_2d(b_map, b_stage, n0, tile * TILE_K)
                            else:
                                part = b_stage.slice(rank * rows * TILE_K, (rank + 1) * rows * TILE_K)
                                mask = (1 << cluster_m) - 1
                                full[s].tma_load_2d(b_map, part, n0 + rank * rows, tile * TILE_K, multicast=mask)
        elif UNIT_POS < consumers * WARPGROUP:
            group = UNIT_POS // WARPGROUP
            unit = UNIT_POS % WARPGROUP
            acc = LocalArray[f32](tile_n // 2)
            for i in cp.unroll(range(tile_n // 2)):
                acc[i] = f32(0.0)
            for round_start in range(0, k_tiles, stages):
                parity = (round_start // stages) % 2
                for s in cp.unroll(range(stages)):
                    tile = round_start + s
                    if tile < k_tiles:
                        full[s].wait_parity(parity)
                        # 8-row groups are 1024 bytes apart; the swizzle makes the leading offset unused.
                        a_start = s * a_items + group * WGMMA_M * TILE_K  # this warpgroup's 64 rows of A
                        a_desc = cp.wgmma_descriptor(
                            a_tiles.slice(a_start, a_start + WGMMA_M * TILE_K), 16, 1024, "128B"
                        )
                        b_desc = cp.wgmma_descriptor(b_tiles.slice(s * b_items, (s + 1) * b_items), 16, 1024, "128B")
                        cp.wgmma_fence()
                        for kk in cp.unroll(range(TILE_K // K_STEP)):
                            step = u64(kk * K_STEP * elem.size // 16)  # the descriptor counts 16-byte units
                            cp.wgmma_mma_async(
                                acc, a_desc + step, b_desc + step, shape=(WGMMA_M, int(tile_n), K_STEP), elem=elem
                            )
                        cp.wgmma_commit_group()
                        cp.wgmma_wait_group(0)  # the whole warpgroup's reads of the stage are done
                        if unit == 0:  # the stage is free here: tell every cube that fills it
                            if cluster_m == 1:
                                empty[s].arrive()
                            else:
                                for peer in cp.unroll(range(cluster_m)):
                                    empty[s].arrive_cluster(u32(peer))
            for i in cp.unroll(range(tile_n // 2)):
                row, col = cp.wgmma_accumulator_position(unit, i)
                result.write_checked((m0 + group * WGMMA_M + row, n0 + col), out_elem(acc[i]))
        if cluster_m > 1:
            cp.sync_cluster()  # no cube leaves while a peer may still multicast or arrive into it

    return wgmma_gemm


@attrs.frozen
class WgmmaGemmLaunch:
    """Everything the GEMM is launched with."""

    kernel: Any  # the @cube(launch=True) kernel
    args: tuple
    cube_count: cp.CubeCount

    cube_dim: cp.CubeDim = cp.CubeDim(2 * WARPGROUP)

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
    rows = config.tile_n // config.cluster_m  # each cube of a cluster loads this many rows of the B tile
    maps = [
        cp.TensorMapArg.tiled(cp.TensorArg(a), (config.tile_m, TILE_K), swizzle="128B"),
        cp.TensorMapArg.tiled(cp.TensorArg(b_t), (rows, TILE_K), swizzle="128B"),
    ]
    kernel = wgmma_gemm_kernel(elem, _elem(out, OUTPUT_DTYPES, "out"))
    shape = (config.stages, config.cluster_m, config.consumers, config.tile_n)
    args = (*maps, cp.ArrayArg(out), RowMajorLayout.of(m, n), cp.ScalarArg(k, u32), *shape)
    m_tiles = -(-m // config.tile_m)
    m_tiles += -m_tiles % config.cluster_m  # whole clusters: a spare cube multiplies zeros and writes nothing
    cluster = cp.ClusterDim(1, config.cluster_m) if config.cluster_m > 1 else None
    count = cp.CubeCount(-(-n // config.tile_n), m_tiles, cluster=cluster)
    return WgmmaGemmLaunch(kernel, args, count, cp.CubeDim((config.consumers + 1) * WARPGROUP))


def wgmma_matmul(client, a, b_t, out_dtype=np.float32, config: WgmmaGemmConfig | None = None):
    """``a @ b_t.T`` for f16/bf16 handles ``a`` (M x K) and ``b_t`` (N x K); a new ``out_dtype`` handle (M x N).

    Any K: when K is not a multiple of 8 (TMA needs rows of a multiple of 16 bytes), both operands are first
    copied into buffers whose rows are padded with zeros to the next multiple of 8 (``pad_columns``), which
    add nothing to the products.  Without a ``config``: the default (B multicast across two cubes), or no
    cluster on a runtime that runs no clusters (the compiled cpu runtime)."""
    if config is None:
        config = WgmmaGemmConfig(cluster_m=1) if client.name == "cpu" else DEFAULT_WGMMA_CONFIG
    if len(a.shape) == 2 and len(b_t.shape) == 2 and a.shape[1] == b_t.shape[1] and a.shape[1] % 8:
        a, b_t = pad_columns(client, a, 8), pad_columns(client, b_t, 8)
    out = client.zeros((a.shape[0], b_t.shape[0]), out_dtype)
    wgmma_gemm_launch(a, b_t, out, config).launch(client)
    return out


def pad_columns(client, matrix, multiple: int):
    """A new handle holding the 2-D ``matrix`` with zero columns appended up to a multiple of ``multiple``."""
    rows, cols = matrix.shape
    padded = -(-cols // multiple) * multiple
    out = client.empty((rows, padded), matrix.dtype)
    elem = _elem(matrix, {**INPUT_DTYPES, **OUTPUT_DTYPES}, "the padded matrix")
    total = rows * padded
    kernel = _pad_kernel(elem)
    args = (cp.ArrayArg(matrix), cp.ArrayArg(out), cp.ScalarArg(cols, u32), cp.ScalarArg(padded, u32))
    kernel.launch(client, cp.CubeCount(max(1, -(-total // 256))), cp.CubeDim(256), *args)
    return out


_PAD_KERNELS: dict = {}


def _pad_kernel(elem: cp.ScalarType):
    if elem not in _PAD_KERNELS:

        @cube(launch=True)
        def pad_columns(src: Array[elem], dst: Array[elem], cols: u32, padded: u32):
            """dst (rows x padded) = src (rows x cols), then zeros."""
            i = cp.ABSOLUTE_POS
            if i < dst.len():
                row, col = i // padded, i % padded
                value = elem(0)
                if col < cols:
                    value = src[row * cols + col]
                dst[i] = value

        _PAD_KERNELS[elem] = pad_columns
    return _PAD_KERNELS[elem]
