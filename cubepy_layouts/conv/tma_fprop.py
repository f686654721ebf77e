"""The TMA forward pass: ``y (M = N*OH*OW, N = C_out) = im2col(x) (M, K = taps * padded C_in) @ w (K, N)``.

- lhs: an im2col box of 16 consecutive output pixels by 16 channels of one tap, through
  ``TmaIm2colLayout``: the smem tile is ``A`` row-major;
- rhs: a tiled box ``[16 out channels, 1 tap, 16 channels]`` of the filter seen as ``(C_out, taps, C_in)``,
  through ``TmaWeightLayout``: the smem tile is ``B`` column-major.

Channels are padded per tap to the tile on both sides (out-of-bounds channels are zero-filled), so
the two operands agree on every reduction index.  The result is written through ``OutLayout``.
"""

import numpy as np

import cubepy as cp
from cubepy_layouts.chain import Chain
from cubepy_layouts.conv.nhwc import NhwcLayout
from cubepy_layouts.conv.out import OutLayout
from cubepy_layouts.conv.problem import ConvolutionProblem
from cubepy_layouts.conv.tma_gemm import (
    DEFAULT_CONFIG,
    TILE,
    TmaGemmConfig,
    TmaGemmLaunch,
    check_tma,
    im2col_map,
    padded_channels,
)
from cubepy_layouts.conv.tma_im2col import TmaIm2colLayout
from cubepy_layouts.conv.tma_weight import TmaWeightLayout
from cubepy_layouts.virtual import VirtualLayout


def fprop_tma_launch(x, w, out, problem: ConvolutionProblem, config: TmaGemmConfig = DEFAULT_CONFIG) -> TmaGemmLaunch:
    """The TMA fprop for handles ``x`` (NHWC), ``w`` (C_out, KH, KW, C_in) and ``out`` (f32, N, OH, OW, C_out)."""
    elem = check_tma(problem, x)
    if np.dtype(w.dtype) != np.dtype(x.dtype):
        raise cp.LaunchError(f"x and w differ in dtype: {x.dtype} and {w.dtype}")
    channels = padded_channels(problem)
    taps = problem.kernel[0] * problem.kernel[1]
    k_total = taps * channels
    w_3d = cp.TensorArg.from_raw_parts(
        w, (taps * problem.in_channels, problem.in_channels, 1), (problem.out_channels, taps, problem.in_channels)
    )
    lhs = VirtualLayout.Launch(
        TmaIm2colLayout.Launch(problem.pixels, k_total, problem.out_h, problem.out_w, channels, problem.params)
    )
    rhs = VirtualLayout.Launch(TmaWeightLayout.from_problem(problem, channels))
    result = Chain.Launch(NhwcLayout.for_tensor(problem.out_shape), OutLayout.from_problem(problem))
    args = (
        im2col_map(x, problem),
        cp.TensorMapArg.tiled(w_3d, (TILE, 1, TILE)),
        cp.TensorArg(out),
        lhs,
        rhs,
        result,
        "row",
        "col",
        config.stages,
    )
    count = cp.CubeCount(-(-problem.out_channels // TILE), -(-problem.pixels // TILE))
    return TmaGemmLaunch("fprop", elem, args, count, config)
