"""``conv2d_fprop`` and ``conv2d_wgrad``: NHWC convolutions as implicit GEMMs read through layout views.

Both passes run one kernel, ``implicit_gemm``: a shared-memory tiled GEMM whose operands are views
(storage + ``Chain`` of conv layouts), so the im2col gather, padding and tails are all in the layouts
and every read is a checked read (zero outside the problem).  Inputs may be f16, bf16 or f32; products
accumulate in f32 and the result is f32.
"""

import functools

import attrs
import numpy as np

import cubepy as cp
from cubepy import CUBE_POS_X, CUBE_POS_Y, UNIT_POS_X, UNIT_POS_Y, Comptime, SharedMemory, Tensor, cube, f32
from cubepy_layouts.chain import Chain
from cubepy_layouts.conv.im2col import Im2colLayout
from cubepy_layouts.conv.nhwc import NhwcLayout
from cubepy_layouts.conv.out import OutLayout
from cubepy_layouts.conv.problem import ConvolutionProblem
from cubepy_layouts.conv.tma_fprop import fprop_tma_launch
from cubepy_layouts.conv.tma_gemm import tma_unsupported
from cubepy_layouts.conv.tma_wgrad import wgrad_tma_launch
from cubepy_layouts.conv.weight import WeightLayout
from cubepy_layouts.transpose import Transpose
from cubepy_layouts.view import View

INPUT_DTYPES = {"float16": cp.f16, "bfloat16": cp.bf16, "float32": cp.f32}


@attrs.frozen
class GemmTiling:
    """The blocking of the plain path: a ``tile_m x tile_n`` output block per cube, ``tile_k`` per stage.

    The kernel is square (one unit per output element, each loading one element of both staged tiles), so
    the three sizes must be equal, at most 32 (a cube of ``tile * tile`` units), and ``stages`` is 1.
    """

    tile_m: int = 16
    tile_n: int = 16
    tile_k: int = 16
    stages: int = 1

    def __attrs_post_init__(self) -> None:
        if not self.tile_m == self.tile_n == self.tile_k:
            raise cp.CubeError(
                f"GemmTiling: the plain conv kernel needs tile_m == tile_n == tile_k, got "
                f"{self.tile_m}, {self.tile_n}, {self.tile_k} (use GemmTiling.square(tile))"
            )
        if not 1 <= self.tile_m <= 32:
            raise cp.CubeError(f"GemmTiling: tile {self.tile_m} is outside 1..32 (a cube holds tile * tile units)")
        if self.stages != 1:
            raise cp.CubeError(
                f"GemmTiling: the plain conv kernel stages through shared memory once, got {self.stages}"
            )

    @classmethod
    def square(cls, tile: int) -> "GemmTiling":
        """A ``tile x tile`` output block per cube, staging ``tile`` of the reduction at a time."""
        return cls(tile, tile, tile)

    def cube_count(self, m: int, n: int) -> cp.CubeCount:
        """One cube per output block."""
        return cp.CubeCount(-(-n // self.tile_n), -(-m // self.tile_m))

    def cube_dim(self) -> cp.CubeDim:
        """One unit per element of the output block."""
        return cp.CubeDim(self.tile_n, self.tile_m)


DEFAULT_TILING = GemmTiling()


@functools.cache
def implicit_gemm_kernel(elem: cp.ScalarType):
    """The tiled GEMM ``out = lhs @ rhs`` over views, for inputs of element type ``elem``."""

    @cube(launch=True)
    def implicit_gemm(
        lhs_data: Tensor[elem],
        rhs_data: Tensor[elem],
        out_data: Tensor[f32],
        lhs_layout: Chain,
        rhs_layout: Chain,
        out_layout: Chain,
        tile: Comptime[int],
    ):
        """Each cube computes one ``tile x tile`` block; each unit one element of it."""
        lhs = View(lhs_data, lhs_layout)
        rhs = View(rhs_data, rhs_layout)
        out = View(out_data, out_layout)
        lhs_tile = SharedMemory[f32](tile * tile)
        rhs_tile = SharedMemory[f32](tile * tile)
        row = CUBE_POS_Y * tile + UNIT_POS_Y
        col = CUBE_POS_X * tile + UNIT_POS_X
        _m, k = lhs.shape()
        acc = f32(0.0)
        for k0 in range(0, k, tile):
            # checked reads: rows/cols past the GEMM and input pixels in the padding read as zero.
            lhs_tile[UNIT_POS_Y * tile + UNIT_POS_X] = f32(lhs.read_checked((row, k0 + UNIT_POS_X)))
            rhs_tile[UNIT_POS_Y * tile + UNIT_POS_X] = f32(rhs.read_checked((k0 + UNIT_POS_Y, col)))
            cp.sync_cube()
            for kk in cp.unroll(range(tile)):
                acc += lhs_tile[UNIT_POS_Y * tile + kk] * rhs_tile[kk * tile + UNIT_POS_X]
            cp.sync_cube()
        out.write_checked((row, col), acc)

    return implicit_gemm


def input_elem(handle) -> cp.ScalarType:
    """The element type of an input handle (f16, bf16 or f32)."""
    elem = INPUT_DTYPES.get(np.dtype(handle.dtype).name)
    if elem is None:
        raise cp.LaunchError(f"conv2d takes f16, bf16 or f32 inputs, got {np.dtype(handle.dtype).name}")
    return elem


def _check_shape(handle, expected: tuple[int, ...], name: str) -> None:
    if tuple(handle.shape) != tuple(expected):
        raise cp.LaunchError(f"{name} has shape {tuple(handle.shape)}, the problem expects {tuple(expected)}")


@attrs.frozen
class GemmLaunch:
    """Everything ``implicit_gemm`` is launched with: operands, layouts and blocking."""

    kind: str
    elem: cp.ScalarType
    args: tuple
    cube_count: cp.CubeCount
    cube_dim: cp.CubeDim
    tiling: GemmTiling

    def launch(self, client) -> None:
        """Run the kernel."""
        implicit_gemm_kernel(self.elem).launch(client, self.cube_count, self.cube_dim, *self.args)

    def compile(self, target: str = "sm_90a"):
        """The compiled kernel (IR, PTX and, with ptxas, its resource report)."""
        return implicit_gemm_kernel(self.elem).compile(self.cube_dim, *self.args, target=target)


def fprop_launch(x, w, out, problem: ConvolutionProblem, tiling: GemmTiling = DEFAULT_TILING) -> GemmLaunch:
    """The plain fprop: ``out (M=N*OH*OW, N=C_out) = im2col(x) (M, K) @ w (K=KH*KW*C_in, N)``."""
    _check_shape(x, problem.x_shape, "x")
    _check_shape(w, problem.w_shape, "w")
    m, n, _k = problem.gemm("fprop")
    lhs = Chain.Launch(
        NhwcLayout.for_tensor(problem.x_shape, spatial=True), Im2colLayout.from_problem(problem, "fprop")
    )
    rhs = Chain.Launch(NhwcLayout.for_tensor(problem.w_shape), WeightLayout.from_problem(problem))
    result = Chain.Launch(NhwcLayout.for_tensor(problem.out_shape), OutLayout.from_problem(problem))
    args = (cp.TensorArg(x), cp.TensorArg(w), cp.TensorArg(out), lhs, rhs, result, tiling.tile_k)
    return GemmLaunch("fprop", input_elem(x), args, tiling.cube_count(m, n), tiling.cube_dim(), tiling)


def wgrad_launch(x, dy, dw, problem: ConvolutionProblem, tiling: GemmTiling = DEFAULT_TILING) -> GemmLaunch:
    """The plain wgrad: ``dw (M=C_out, N=KH*KW*C_in) = dy^T (M, K=N*OH*OW) @ im2col(x) (K, N)``."""
    _check_shape(x, problem.x_shape, "x")
    _check_shape(dy, problem.out_shape, "dy")
    m, n, _k = problem.gemm("wgrad")
    lhs = Chain.Launch(
        NhwcLayout.for_tensor(problem.out_shape),
        Transpose.Launch(OutLayout.Launch(problem.pixels, problem.out_channels, problem.out_h, problem.out_w)),
    )
    rhs = Chain.Launch(
        NhwcLayout.for_tensor(problem.x_shape, spatial=True), Im2colLayout.from_problem(problem, "wgrad")
    )
    result = Chain.Launch(NhwcLayout.for_tensor(problem.w_shape), Transpose.Launch(WeightLayout.from_problem(problem)))
    args = (cp.TensorArg(dy), cp.TensorArg(x), cp.TensorArg(dw), lhs, rhs, result, tiling.tile_k)
    return GemmLaunch("wgrad", input_elem(x), args, tiling.cube_count(m, n), tiling.cube_dim(), tiling)


def use_tma(tma, problem: ConvolutionProblem, x) -> bool:
    """Whether a pass runs on TMA: forced by ``tma``, else when the problem and inputs allow it."""
    reason = tma_unsupported(problem, x.dtype)
    if tma and reason is not None:
        raise cp.LaunchError(f"the TMA path cannot run this problem: {reason}")
    return reason is None if tma is None else bool(tma)


def _plain_path(tma, tiling: GemmTiling | None, problem: ConvolutionProblem, x) -> bool:
    """Whether a pass runs the plain kernel: a ``tiling`` asks for it (and refuses ``tma=True``)."""
    if tiling is None:
        return not use_tma(tma, problem, x)
    if tma:
        raise cp.LaunchError("a GemmTiling blocks the plain path; it cannot be combined with tma=True")
    return True


def conv2d_fprop(client, x, w, problem: ConvolutionProblem, *, tma=None, tiling: GemmTiling | None = None):
    """``y = conv2d(x, w)`` (NHWC, weights (C_out, KH, KW, C_in)); returns an f32 handle of ``problem.out_shape``.

    ``tma`` and ``tiling`` choose the path and blocking as for ``conv2d_wgrad``.
    """
    if input_elem(x) != input_elem(w):
        raise cp.LaunchError(f"x and w differ in dtype: {x.dtype} and {w.dtype}")
    out = client.zeros(problem.out_shape, np.float32)
    if _plain_path(tma, tiling, problem, x):
        fprop_launch(x, w, out, problem, tiling or DEFAULT_TILING).launch(client)
    else:
        fprop_tma_launch(x, w, out, problem).launch(client)
    return out


def conv2d_wgrad(client, x, dy, problem: ConvolutionProblem, *, tma=None, tiling: GemmTiling | None = None):
    """``dw`` of ``conv2d`` for input ``x`` and out-gradient ``dy``; an f32 handle of ``problem.w_shape``.

    ``tma=None`` takes the TMA + tensor-core path when the inputs are f16/bf16 and the problem fits TMA's
    limits (``tma_unsupported``), else the plain path; ``True``/``False`` force one. A ``tiling`` runs the
    plain path with that blocking (``DEFAULT_TILING`` otherwise).
    """
    if input_elem(x) != input_elem(dy):
        raise cp.LaunchError(f"x and dy differ in dtype: {x.dtype} and {dy.dtype}")
    dw = client.zeros(problem.w_shape, np.float32)
    if _plain_path(tma, tiling, problem, x):
        wgrad_launch(x, dy, dw, problem, tiling or DEFAULT_TILING).launch(client)
    else:
        wgrad_tma_launch(x, dy, dw, problem).launch(client)
    return dw


# The cube shapes the tuned launchers time: square blocks of tile x tile units (plain ints, stored as JSON).
# The default blocking comes first, so CUBEPY_AUTOTUNE=0 runs what conv2d_fprop/conv2d_wgrad run.
CONV_TILINGS = ({"tile": DEFAULT_TILING.tile_m}, {"tile": 8}, {"tile": 32})


def _conv_key(x, other, problem: ConvolutionProblem) -> tuple:
    """What decides the blocking: the problem's sizes and the input element type."""
    return (attrs.astuple(problem), np.dtype(x.dtype).name)


@cp.autotune(configs=list(CONV_TILINGS), key=_conv_key)
def tuned_conv2d_fprop(client, x, w, problem: ConvolutionProblem, *, tile: int):
    """``conv2d_fprop`` on the plain path with the cube shape chosen by timing ``CONV_TILINGS`` once per problem,
    dtype and client (``tuned_conv2d_fprop.best(client, x, w, problem)`` says which)."""
    return conv2d_fprop(client, x, w, problem, tiling=GemmTiling.square(tile))


@cp.autotune(configs=list(CONV_TILINGS), key=_conv_key)
def tuned_conv2d_wgrad(client, x, dy, problem: ConvolutionProblem, *, tile: int):
    """``conv2d_wgrad`` on the plain path with the cube shape chosen by timing ``CONV_TILINGS`` once per problem,
    dtype and client (``tuned_conv2d_wgrad.best(client, x, dy, problem)`` says which)."""
    return conv2d_wgrad(client, x, dy, problem, tiling=GemmTiling.square(tile))
