"""The TMA weight-gradient: ``dw (M = C_out, N = taps * padded C_in) = dy^T (M, K = N*OH*OW) @ im2col(x)``.

- lhs: a tiled box ``[16 pixels, 16 out channels]`` of ``dy`` seen as one consolidated ``(N*OH*OW, C_out)``
  matrix, through ``Transpose(TmaOutGradLayout)``: the smem tile is ``A`` column-major;
- rhs: an im2col box of 16 consecutive output pixels (crossing rows and images as the hardware walks
  them) by 16 channels of one filter tap, through ``TmaIm2colLayout``: the smem tile is ``B`` row-major.

Both walks cover the same pixel range, so row ``j`` of both tiles is reduction index ``k0 + j``; past the
end both are zero-filled.  The result is written through ``Transpose(WeightLayout)`` over ``NhwcLayout``
with a channel check (channels are padded per tap).
"""

import numpy as np

import cubepy as cp
from cubepy_layouts.chain import Chain
from cubepy_layouts.conv.nhwc import NhwcLayout
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
from cubepy_layouts.conv.tma_out_grad import TmaOutGradLayout
from cubepy_layouts.conv.weight import WeightLayout
from cubepy_layouts.transpose import Transpose
from cubepy_layouts.virtual import VirtualLayout


def wgrad_tma_launch(x, dy, dw, problem: ConvolutionProblem, config: TmaGemmConfig = DEFAULT_CONFIG) -> TmaGemmLaunch:
    """The TMA wgrad for handles ``x`` (NHWC), ``dy`` (N, OH, OW, C_out) and ``dw`` (f32, C_out, KH, KW, C_in)."""
    elem = check_tma(problem, x)
    if np.dtype(dy.dtype) != np.dtype(x.dtype):
        raise cp.LaunchError(f"x and dy differ in dtype: {x.dtype} and {dy.dtype}")
    channels = padded_channels(problem)
    n_total = problem.kernel[0] * problem.kernel[1] * channels
    pixels = problem.pixels
    # dy as one (N*OH*OW, C_out) matrix: the row stride is the stride of its innermost spatial dim.
    dy_2d = cp.TensorArg.from_raw_parts(dy, (problem.out_channels, 1), (pixels, problem.out_channels))
    lhs = VirtualLayout.Launch(Transpose.Launch(TmaOutGradLayout.from_problem(problem)))
    rhs = VirtualLayout.Launch(
        TmaIm2colLayout.Launch(
            pixels,
            n_total,
            problem.out_h,
            problem.out_w,
            channels,
            problem.params,
            n_total % (TILE * config.stages) != 0,
        )
    )
    out = Chain.Launch(
        NhwcLayout.for_tensor(problem.w_shape, channel=True),
        Transpose.Launch(WeightLayout.Launch(n_total, problem.out_channels, channels, problem.params)),
    )
    args = (
        cp.TensorMapArg.tiled(dy_2d, (TILE, TILE)),
        im2col_map(x, problem),
        cp.TensorArg(dw),
        lhs,
        rhs,
        out,
        "col",
        "row",
        config.stages,
    )
    count = cp.CubeCount(n_total // TILE, -(-problem.out_channels // TILE))
    return TmaGemmLaunch("wgrad", elem, args, count, config)
