"""A warp-specialized Hopper GEMM as CUTLASS builds it: TMA loads with the 128-byte swizzle, full/empty
barriers, ``wgmma`` with two groups in flight, ``setmaxnreg``, a TMA-store epilogue, a persistent scheduler.

``out (M x N) = a (M x K) @ B`` where B is given either as ``b_t`` (N x K, each row holds K values: the
K-major form ``wgmma`` reads without a transpose, cuBLAS's "TN"; ``b_major="nk"``, the default) or as ``b``
(K x N, numpy's form; ``b_major="kn"``, read through MN-major descriptors).  With the default
``WgmmaGemmConfig`` a cube computes a ``128 x 128`` block of ``out`` with three warpgroups (384 units):

- warpgroups 0 and 1 are *consumers* (``setmaxnreg`` raises them to 232 registers): for each k tile of 64,
  warpgroup ``w`` waits for its stage's *full* phase, starts four ``wgmma`` steps (``m64n128k16``) on
  shared-memory descriptors of rows ``64 w ..`` of the A stage and the whole B stage (swizzle 128B: a row
  of 64 f16/bf16 is one 128-byte line), commits them and waits until at most one group is still running
  (``wgmma_wait_group(1)``): the *previous* k tile's group is then complete and its stage is released (its
  first unit arrives on that stage's *empty* barrier), while this tile's group still runs;
- the last warpgroup is the *producer* (``setmaxnreg`` lowers it to 40 registers); its first plane loads.
  For k tile ``t`` it waits until stage ``t % stages`` is empty and its elected unit expects both boxes'
  bytes and starts the TMA loads.  TMA fills the parts of a box outside the matrices with zeros, so
  ragged M, N and K need no masking;
- the epilogue adds an optional bias (one f32 per column), applies an optional activation (``"relu"``,
  ``"gelu"``), converts to the output type and, when the output's rows are a multiple of 16 bytes and
  shared memory has room, writes each warpgroup's 64 rows into a shared tile that one unit stores with a
  TMA store (which drops what lies past the matrix); otherwise it stores from registers through a checked
  view.

With ``cluster_m = 2`` (the default) two cubes stacked along M form a cluster: they need the same B tile,
so each loads half of it and **multicasts** it into both cubes' stage.  A stage is then refilled only when
every consumer warpgroup of both cubes has released it: each cube's *empty* barrier expects
``consumers x cluster_m`` arrivals and each consumer warpgroup's first unit arrives on that stage's empty
barrier in every cube of the cluster (``arrive_cluster``).  The cubes sync as a cluster after initialising
their barriers and before they exit.

``persistent=True`` launches ``num_sms`` cubes (rounded down to whole clusters; the device's count on a
cuda client, else 132, an H100/H200) that walk the cluster tiles in steps of the number of clusters,
``raster_group`` N tiles of one cluster row before moving down M.  The barriers' phases run on across
tiles (each stage keeps its parity bit).  fp8 inputs (``e4m3``, ``e5m2``) take 128 values of K per stage
(still one 128-byte line) and B K-major only.
"""

from typing import Any

import attrs
import ml_dtypes
import numpy as np

import cubepy as cp
from cubepy import Array, cube, u32
from cubepy_layouts.matmul.mma_sync import OUTPUT_DTYPES, RowMajorLayout, _elem
from cubepy_layouts.matmul.wgmma_kernel import (
    WARPGROUP,
    WGMMA_M,
    epilogue_reuses_stages,
    tile_k_of,
    wgmma_gemm_kernel,
)

TILE_K = 64  # the K of a stage of f16/bf16: a row of 64 values is the 128-byte swizzle's line
INPUT_DTYPES = {
    "float16": cp.f16,
    "bfloat16": cp.bf16,
    np.dtype(ml_dtypes.float8_e4m3fn).name: cp.e4m3,
    np.dtype(ml_dtypes.float8_e5m2).name: cp.e5m2,
}
FP8 = (cp.e4m3, cp.e5m2)
SHARED_LIMIT = 227 * 1024  # the most dynamic shared memory a cube of sm_90 may opt in to
BARRIER_BYTES = 1024  # room for the barriers beside the stages (and their alignment)
H100_SMS = 132  # the SMs of an H100 / H200 SXM: the persistent grid when no cuda device tells
ACTIVATIONS = (None, "relu", "gelu")


@attrs.frozen
class WgmmaGemmConfig:
    """The GEMM's shape and features: ``consumers`` warpgroups of 64 rows (the block is ``64 consumers x
    tile_n``), the depth of the ring of stages, how many cubes along M share B by multicast, how many wgmma
    groups each consumer keeps in flight, the register split (``(producer, consumer)``, ``(0, 0)`` for none),
    the epilogue (``"auto"``: TMA store when it can, ``"tma"``, ``"direct"``), and the persistent scheduler."""

    stages: int = 4
    cluster_m: int = 2
    consumers: int = 2
    tile_n: int = 128
    in_flight: int = 2
    registers: tuple = (40, 232)
    epilogue: str = "auto"
    persistent: bool = False
    num_sms: int | None = None
    raster_group: int = 8

    def __attrs_post_init__(self) -> None:
        if self.stages < 1:
            raise ValueError(f"stages must be at least 1, got {self.stages}")
        if self.cluster_m not in (1, 2, 4):
            raise ValueError(f"cluster_m must be 1, 2 or 4 (cubes sharing a B tile), got {self.cluster_m}")
        if self.consumers not in (1, 2):
            raise ValueError(f"consumers must be 1 or 2 warpgroups, got {self.consumers}")
        if self.tile_n not in (64, 128, 256):
            raise ValueError(f"tile_n must be 64, 128 or 256 (a wgmma N), got {self.tile_n}")
        if self.in_flight not in (1, 2):
            raise ValueError(f"in_flight must be 1 or 2 wgmma groups, got {self.in_flight}")
        if len(self.registers) != 2 or any(r and not (24 <= r <= 256 and r % 8 == 0) for r in self.registers):
            raise ValueError(
                f"registers must be (producer, consumer), each 0 or a multiple of 8 in [24, 256]: {self.registers}"
            )
        producer, consumer = self.registers
        if producer and consumer and (producer + self.consumers * consumer) * WARPGROUP > 65536:
            raise ValueError(f"registers {self.registers}: more than the SM's 65536 for {self.consumers} consumers")
        if self.epilogue not in ("auto", "tma", "direct"):
            raise ValueError(f"epilogue must be 'auto', 'tma' or 'direct', got {self.epilogue!r}")
        if self.num_sms is not None and self.num_sms < self.cluster_m:
            raise ValueError(f"num_sms ({self.num_sms}) must hold at least one cluster of {self.cluster_m}")
        if self.raster_group < 1:
            raise ValueError(f"raster_group must be at least 1, got {self.raster_group}")

    @property
    def tile_m(self) -> int:
        """The rows of ``out`` one cube computes."""
        return self.consumers * WGMMA_M

    @property
    def shared_bytes(self) -> int:
        """The bytes of the stages (one 128-byte line per row, whatever the input type)."""
        return self.stages * (self.tile_m + self.tile_n) * TILE_K * 2

    def epilogue_bytes(self, out_size: int) -> int:
        """The shared memory the TMA-store epilogue adds to the stages for outputs of ``out_size`` bytes: its tile,
        or nothing when the tile takes the bytes of the A stages (not persistent, the tile fits in them)."""
        if epilogue_reuses_stages(self.persistent, self.tile_m, self.tile_n, out_size, self.stages):
            return 0
        return self.tile_m * self.tile_n * out_size


DEFAULT_WGMMA_CONFIG = WgmmaGemmConfig()

# The configurations ``tuned_wgmma_matmul`` times (plain values: a chosen one is stored as JSON).
GEMM_CONFIGS = (
    {"stages": 4, "cluster_m": 2, "consumers": 2, "tile_n": 128},
    {"stages": 4, "cluster_m": 1, "consumers": 2, "tile_n": 128},
    {"stages": 3, "cluster_m": 2, "consumers": 2, "tile_n": 256},
    {"stages": 4, "cluster_m": 2, "consumers": 2, "tile_n": 128, "persistent": True},
    {"stages": 6, "cluster_m": 2, "consumers": 1, "tile_n": 128},
    {"stages": 4, "cluster_m": 1, "consumers": 1, "tile_n": 64},
)


@attrs.frozen
class WgmmaGemmLaunch:
    """Everything the GEMM is launched with."""

    kernel: Any  # the @cube(launch=True) kernel
    args: tuple
    cube_count: cp.CubeCount

    cube_dim: cp.CubeDim = cp.CubeDim(2 * WARPGROUP)
    out: Any = None  # the output handle

    def launch(self, client) -> None:
        """Run the kernel."""
        self.kernel.launch(client, self.cube_count, self.cube_dim, *self.args)

    def compile(self, target: str = "sm_90a"):
        """The compiled kernel (PTX and, with ptxas, its resources)."""
        return self.kernel.compile(self.cube_dim, *self.args, target=target)


def uses_tma_store(config: WgmmaGemmConfig, n: int, out_size: int) -> bool:
    """Whether the epilogue goes through shared memory and a TMA store: rows of ``out`` a multiple of 16 bytes
    (TMA's rule) and the shared tile beside the stages within the cube's shared memory."""
    fits = config.shared_bytes + config.epilogue_bytes(out_size) + BARRIER_BYTES <= SHARED_LIMIT
    addressable = (n * out_size) % 16 == 0
    if config.epilogue == "tma" and not (fits and addressable):
        why = "rows of out are not a multiple of 16 bytes" if not addressable else "the tile does not fit"
        raise cp.LaunchError(f"wgmma_gemm: epilogue='tma' but {why}")
    return config.epilogue != "direct" and fits and addressable


def default_num_sms(client=None) -> int:
    """The SMs a persistent launch fills: the cuda device's count, else an H100/H200's 132."""
    info = getattr(getattr(client, "device", None), "info", None)
    return int(getattr(info, "multiprocessors", H100_SMS))


def wgmma_gemm_launch(
    a,
    b_t,
    out,
    config: WgmmaGemmConfig = DEFAULT_WGMMA_CONFIG,
    *,
    b_major: str = "nk",
    bias=None,
    activation: str | None = None,
    num_sms: int | None = None,
    _padded: bool = False,
) -> WgmmaGemmLaunch:
    """The launch of ``out (M x N) = act(a (M x K) @ B + bias)`` for row-major handles, B being ``b_t`` (N x K)
    with ``b_major="nk"`` or K x N with ``b_major="kn"``; ``bias`` an f32 handle of N values or None."""
    if len(a.shape) != 2 or len(b_t.shape) != 2 or len(out.shape) != 2:
        raise cp.LaunchError("wgmma_gemm takes 2-D a (M x K), b (N x K or K x N) and out (M x N)")
    if b_major not in ("nk", "kn"):
        raise cp.LaunchError(f"wgmma_gemm: b_major must be 'nk' (N x K) or 'kn' (K x N), got {b_major!r}")
    if activation not in ACTIVATIONS:
        raise cp.LaunchError(f"wgmma_gemm: activation must be None, 'relu' or 'gelu', got {activation!r}")
    m, k = a.shape
    n, k_b = b_t.shape if b_major == "nk" else b_t.shape[::-1]
    if _padded and b_major == "kn":  # wgmma_matmul's zero padding: a's extra K columns, b's extra N columns
        k_b, n = k, out.shape[1]
    if k != k_b or tuple(out.shape) != (m, n):
        raise cp.LaunchError(
            f"wgmma_gemm: shapes {tuple(a.shape)} @ {tuple(b_t.shape)} ({b_major}) -> {tuple(out.shape)}"
        )
    elem = _elem(a, INPUT_DTYPES, "a")
    if _elem(b_t, INPUT_DTYPES, "b") != elem:
        raise cp.LaunchError(f"wgmma_gemm: a and b differ in dtype: {a.dtype} and {b_t.dtype}")
    if elem in FP8 and b_major == "kn":
        raise cp.LaunchError("wgmma_gemm: fp8 wgmma reads B K-major only: pass it N x K (b_major='nk')")
    per_line = 16 // elem.size
    if k % per_line:
        raise cp.LaunchError(
            f"wgmma_gemm: TMA needs rows of a multiple of 16 bytes: K ({k}) must be a multiple of {per_line}"
        )
    if b_major == "kn" and b_t.shape[1] % per_line:
        raise cp.LaunchError(f"wgmma_gemm: TMA needs rows of b (K x N) of 16-byte multiples: N ({n}) % {per_line}")
    out_elem = _elem(out, OUTPUT_DTYPES, "out")
    tile_k = tile_k_of(elem)
    if b_major == "nk":
        b_box = (config.tile_n // config.cluster_m, tile_k)  # each cube of a cluster loads these rows of B
    else:
        b_box = (tile_k // config.cluster_m, 64)  # k rows of one 64-column block
    maps = [
        cp.TensorMapArg.tiled(cp.TensorArg(a), (config.tile_m, tile_k), swizzle="128B"),
        cp.TensorMapArg.tiled(cp.TensorArg(b_t), b_box, swizzle="128B"),
    ]
    tma_store = uses_tma_store(config, n, np.dtype(out.dtype).itemsize)
    out_arg: cp.TensorMapArg | cp.ArrayArg
    if tma_store:
        out_arg = cp.TensorMapArg.tiled(cp.TensorArg(out), (WGMMA_M, config.tile_n))
    else:
        out_arg = cp.ArrayArg(out)
    if bias is not None:
        if tuple(bias.shape) != (n,) or np.dtype(bias.dtype) != np.float32:
            raise cp.LaunchError(
                f"wgmma_gemm: bias must be an f32 handle of N={n} values, got {bias.shape} {bias.dtype}"
            )
    bias_arg = cp.ArrayArg(bias) if bias is not None else 0  # a comptime placeholder without one
    m_tiles = -(-m // config.tile_m)
    m_tiles += -m_tiles % config.cluster_m  # whole clusters: a spare cube multiplies zeros and writes nothing
    n_tiles = -(-n // config.tile_n)
    kernel = wgmma_gemm_kernel(elem, out_elem, tma_store, bias is not None)
    comptime = (
        config.stages,
        config.cluster_m,
        config.consumers,
        config.tile_n,
        b_major == "kn",
        config.in_flight,
        tuple(config.registers),
        config.persistent,
        config.raster_group,
        activation or "none",
    )
    args = (
        *maps,
        out_arg,
        bias_arg,
        RowMajorLayout.of(m, n),
        cp.ScalarArg(k, u32),
        cp.ScalarArg(m_tiles, u32),
        cp.ScalarArg(n_tiles, u32),
        *comptime,
    )
    if config.persistent:
        sms = num_sms or config.num_sms or H100_SMS
        clusters = max(1, min(sms // config.cluster_m, (m_tiles // config.cluster_m) * n_tiles))
        cluster = cp.ClusterDim(config.cluster_m, 1) if config.cluster_m > 1 else None
        count = cp.CubeCount(clusters * config.cluster_m, 1, cluster=cluster)
    else:
        cluster = cp.ClusterDim(1, config.cluster_m) if config.cluster_m > 1 else None
        count = cp.CubeCount(n_tiles, m_tiles, cluster=cluster)
    return WgmmaGemmLaunch(kernel, args, count, cp.CubeDim((config.consumers + 1) * WARPGROUP), out)


def wgmma_matmul(
    client,
    a,
    b_t=None,
    out_dtype=np.float32,
    config: WgmmaGemmConfig | None = None,
    *,
    b=None,
    b_major: str = "nk",
    bias=None,
    activation: str | None = None,
):
    """``act(a @ B + bias)`` for f16/bf16/fp8 handles ``a`` (M x K) and B; a new ``out_dtype`` handle (M x N).

    B is ``b_t`` (N x K, positional, ``b_major="nk"``), or K x N: ``b=`` (numpy's form) or ``b_t`` with
    ``b_major="kn"`` (f16/bf16 only).  ``bias``: an f32 handle of N values added to every row; ``activation``:
    None, ``"relu"`` or ``"gelu"`` (erf form), applied after the bias.  Any K (and any N for a K x N B):
    operands whose rows TMA cannot address (not a multiple of 16 bytes) are first copied into buffers
    padded with zero columns (``pad_columns``), which add nothing to the products.  Without a ``config``:
    the default (B multicast across two cubes), or no cluster on the cpu runtime, which runs no clusters."""
    if (b_t is None) == (b is None):
        raise cp.LaunchError("wgmma_matmul: pass B once, as b_t (N x K, positional) or as b= (K x N)")
    if b is not None:
        b_t, b_major = b, "kn"
    if config is None:
        config = WgmmaGemmConfig(cluster_m=1) if client.name == "cpu" else DEFAULT_WGMMA_CONFIG
    sms = default_num_sms(client) if config.persistent and config.num_sms is None else None
    padded = False
    if len(a.shape) == 2 and len(b_t.shape) == 2:
        per_line = 16 // np.dtype(a.dtype).itemsize
        n = b_t.shape[0] if b_major == "nk" else b_t.shape[1]
        if a.shape[1] % per_line:
            a, padded = pad_columns(client, a, per_line), True
            if b_major == "nk":
                b_t = pad_columns(client, b_t, per_line)  # for "kn", B's rows past K are TMA's zero fill
        if b_major == "kn" and n % per_line:
            b_t, padded = pad_columns(client, b_t, per_line), True  # out's extra columns are never stored
    else:
        n = b_t.shape[0]
    out = client.zeros((a.shape[0], n), out_dtype)
    launch = wgmma_gemm_launch(
        a, b_t, out, config, b_major=b_major, bias=bias, activation=activation, num_sms=sms, _padded=padded
    )
    launch.launch(client)
    return out


@cp.autotune(configs=list(GEMM_CONFIGS), key=lambda a, b_t, *rest, **kw: (tuple(a.shape), tuple(b_t.shape)))
def tuned_wgmma_matmul(client, a, b_t, out_dtype=np.float32, **fields):
    """``wgmma_matmul(client, a, b_t, out_dtype)`` with the configuration chosen by timing ``GEMM_CONFIGS``
    once per shape and client (``tuned_wgmma_matmul.best(client, a, b_t)`` says which;
    ``CUBEPY_AUTOTUNE=0`` takes the first).  On the cpu runtime, which runs no clusters, ``cluster_m`` is 1."""
    if client.name == "cpu":
        fields = {**fields, "cluster_m": 1}
    return wgmma_matmul(client, a, b_t, out_dtype, WgmmaGemmConfig(**fields))


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
