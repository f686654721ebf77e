"""The TMA implicit GEMM shared by the TMA conv passes: tensor-map operands, a stage pipeline, tensor cores.

One plane computes a ``16 x 16`` block of ``out = lhs @ rhs``.  ``lhs`` (``(batch, m, k)``) and ``rhs``
(``(batch, k, n)``) are views over tensor maps through type-erased layouts (``VirtualLayout``), so fprop
and wgrad share this kernel; how each pass's layouts lay the tiles out in shared memory is comptime
(``a_layout``, ``b_layout``).  Per stage the elected unit expects both boxes' bytes on the stage's
barrier and starts both loads; ``stages`` buffers rotate so the next loads fly while the plane
multiplies.  The accumulator goes through shared memory to ``out`` with a checked view.
"""

import attrs
import numpy as np

import cubepy as cp
from cubepy import CUBE_POS_X, CUBE_POS_Y, UNIT_POS, Comptime, SharedMemory, Tensor, TensorMap, cube, f32, u32, usize
from cubepy_layouts.chain import Chain
from cubepy_layouts.conv.problem import ConvolutionProblem
from cubepy_layouts.view import View
from cubepy_layouts.virtual import VirtualLayout

TILE = 16  # the cmma shape: every tile is 16 x 16 and every stage reduces 16 along k
TILE_ITEMS = TILE * TILE
TMA_ELEMS = {"float16": cp.f16, "bfloat16": cp.bf16}


@attrs.frozen
class TmaGemmConfig:
    """The blocking of the TMA paths: 16 x 16 x 16 tiles on one plane, ``stages`` buffers in flight."""

    stages: int = 2
    tile_m: int = TILE
    tile_n: int = TILE
    tile_k: int = TILE


DEFAULT_CONFIG = TmaGemmConfig()


def padded_channels(problem: ConvolutionProblem) -> int:
    """Input channels rounded up to the tile, so a tile never straddles two filter taps."""
    return -(-problem.in_channels // TILE) * TILE


def tma_unsupported(problem: ConvolutionProblem, dtype) -> str | None:
    """Why the TMA paths cannot run ``problem`` for inputs of ``dtype`` (None when they can)."""
    name = np.dtype(dtype).name
    if name not in TMA_ELEMS:
        return f"tensor cores take f16 or bf16 inputs, got {name}"
    if problem.in_channels % 8 or problem.out_channels % 8:
        return (
            f"TMA needs 16-byte aligned rows: C_in ({problem.in_channels}) and C_out ({problem.out_channels}) "
            "must be multiples of 8"
        )
    if max(problem.stride) > 8:
        return f"TMA im2col strides are at most 8, got {problem.stride}"
    for k, d, p in zip(problem.kernel, problem.dilation, problem.padding):
        if p > 128 or d * (k - 1) - p > 128 or d * (k - 1) > 255:
            return "the padding or the dilated filter is too large for a 2-D im2col tensor map"
    return None


@cube
def issue_stage(bar, lhs, rhs, a_stage, b_stage, m0, n0, k0):
    """The elected unit expects both boxes' bytes and starts both loads onto ``bar``."""
    if UNIT_POS == 0:
        bar.arrive_and_expect_tx(1, u32(2 * TILE_ITEMS * a_stage.elem.size))
        lhs.tensor_map_load(bar, a_stage, (usize(0), m0, k0))
        rhs.tensor_map_load(bar, b_stage, (usize(0), k0, n0))


def _tma_gemm_kernel(elem: cp.ScalarType):
    @cube(launch=True)
    def conv2d_tma_gemm(
        lhs_map: TensorMap[elem],
        rhs_map: TensorMap[elem],
        out_data: Tensor[f32],
        lhs_layout: VirtualLayout,
        rhs_layout: VirtualLayout,
        out_layout: Chain,
        a_layout: Comptime[str],
        b_layout: Comptime[str],
        stages: Comptime[int],
    ):
        """One plane computes the ``16 x 16`` block of ``out`` at ``(CUBE_POS_Y, CUBE_POS_X)``."""
        lhs = View(lhs_map, lhs_layout)  # (batch, m, k)
        rhs = View(rhs_map, rhs_layout)  # (batch, k, n)
        out = View(out_data, out_layout)  # (m, n)
        m0 = CUBE_POS_Y * TILE
        n0 = CUBE_POS_X * TILE
        a_tiles = SharedMemory.aligned(elem, stages * TILE_ITEMS, 128)
        b_tiles = SharedMemory.aligned(elem, stages * TILE_ITEMS, 128)
        bars = cp.Barrier.shared_array(stages, 1, UNIT_POS == 0)
        acc = cp.cmma.Matrix[f32].from_value(cp.cmma.MatrixIdent.ACCUMULATOR, TILE, TILE, TILE, None, 0.0)
        a = cp.cmma.Matrix[elem].uninitialized(cp.cmma.MatrixIdent.A, TILE, TILE, TILE, a_layout)
        b = cp.cmma.Matrix[elem].uninitialized(cp.cmma.MatrixIdent.B, TILE, TILE, TILE, b_layout)
        _batches, _m, k = lhs.shape()
        k_tiles = (k + (TILE - 1)) // TILE
        for s in cp.unroll(range(stages)):
            if s < k_tiles:
                issue_stage(
                    bars[s],
                    lhs,
                    rhs,
                    a_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS),
                    b_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS),
                    m0,
                    n0,
                    s * TILE,
                )
        for round_start in range(0, k_tiles, stages):
            phase = (round_start // stages) % 2
            for s in cp.unroll(range(stages)):
                tile = round_start + s
                if tile < k_tiles:
                    a_stage = a_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS)
                    b_stage = b_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS)
                    bars[s].wait_parity(phase)
                    cp.cmma.load(a, a_stage, TILE)
                    cp.cmma.load(b, b_stage, TILE)
                    # every unit has its registers: the stage may be refilled while the plane multiplies.
                    cp.sync_cube()
                    if tile + stages < k_tiles:
                        issue_stage(bars[s], lhs, rhs, a_stage, b_stage, m0, n0, (tile + stages) * TILE)
                    cp.cmma.execute(a, b, acc, acc)
        result = SharedMemory[f32](TILE_ITEMS)
        cp.cmma.store(result, acc, TILE, cp.cmma.MatrixLayout.ROW_MAJOR)
        cp.sync_cube()
        for i in cp.range(UNIT_POS, TILE_ITEMS, 32, unroll=1):  # the epilogue: registers matter more than ILP
            out.write_checked((m0 + i // TILE, n0 + i % TILE), result[i])

    return conv2d_tma_gemm


_KERNELS: dict = {}


def tma_gemm_kernel(elem: cp.ScalarType):
    """The TMA GEMM kernel for inputs of ``elem`` (f16 or bf16), built once per type."""
    if elem not in _KERNELS:
        _KERNELS[elem] = _tma_gemm_kernel(elem)
    return _KERNELS[elem]


@attrs.frozen
class TmaGemmLaunch:
    """Everything the TMA GEMM kernel is launched with, for one pass of one problem."""

    kind: str
    elem: cp.ScalarType
    args: tuple
    cube_count: cp.CubeCount
    config: TmaGemmConfig

    cube_dim = cp.CubeDim(32)

    def launch(self, client) -> None:
        """Run the kernel."""
        tma_gemm_kernel(self.elem).launch(client, self.cube_count, self.cube_dim, *self.args)

    def compile(self, target: str = "sm_90a"):
        """The compiled kernel (IR, PTX and, with ptxas, its resource report)."""
        return tma_gemm_kernel(self.elem).compile(self.cube_dim, *self.args, target=target)


def im2col_map(x, problem: ConvolutionProblem):
    """The im2col tensor map of the input: 16 pixels of 16 channels per load, the conv's corners and strides."""
    span = [d * (k - 1) for d, k in zip(problem.dilation, problem.kernel)]
    return cp.TensorMapArg.im2col(
        cp.TensorArg(x),
        channels_per_pixel=TILE,
        pixels_per_column=TILE,
        lower_corner=[-p for p in problem.padding],
        upper_corner=[p - s for p, s in zip(problem.padding, span)],
        elem_stride=(1, *problem.stride, 1),
    )


def check_tma(problem: ConvolutionProblem, x) -> cp.ScalarType:
    """The input element type, or ``LaunchError`` when the TMA paths cannot run ``problem``."""
    reason = tma_unsupported(problem, x.dtype)
    if reason is not None:
        raise cp.LaunchError(f"the TMA path cannot run this problem: {reason}")
    return TMA_ELEMS[np.dtype(x.dtype).name]
