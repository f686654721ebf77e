"""Convolution layouts (cubek-convolution's) and the NHWC conv2d kernels built on them."""

from cubepy_layouts.conv.im2col import Im2colLayout
from cubepy_layouts.conv.kernels import (
    CONV_TILINGS,
    GemmTiling,
    conv2d_fprop,
    conv2d_wgrad,
    fprop_launch,
    tuned_conv2d_fprop,
    tuned_conv2d_wgrad,
    wgrad_launch,
)
from cubepy_layouts.conv.nhwc import NhwcCoords, NhwcLayout
from cubepy_layouts.conv.out import OutLayout
from cubepy_layouts.conv.problem import ConvolutionProblem, ConvParams
from cubepy_layouts.conv.tma_fprop import fprop_tma_launch
from cubepy_layouts.conv.tma_gemm import TmaGemmConfig, tma_unsupported
from cubepy_layouts.conv.tma_im2col import TmaIm2colLayout
from cubepy_layouts.conv.tma_out_grad import TmaOutGradLayout
from cubepy_layouts.conv.tma_weight import TmaWeightLayout
from cubepy_layouts.conv.tma_wgrad import wgrad_tma_launch
from cubepy_layouts.conv.tma_ws import TmaWsConfig, TmaWsLaunch, fprop_tma_ws_launch, wgrad_tma_ws_launch
from cubepy_layouts.conv.weight import WeightLayout

__all__ = [
    "ConvolutionProblem",
    "ConvParams",
    "NhwcCoords",
    "NhwcLayout",
    "Im2colLayout",
    "WeightLayout",
    "OutLayout",
    "TmaIm2colLayout",
    "TmaOutGradLayout",
    "conv2d_fprop",
    "conv2d_wgrad",
    "fprop_launch",
    "wgrad_launch",
    "wgrad_tma_launch",
    "fprop_tma_launch",
    "tma_unsupported",
    "GemmTiling",
    "CONV_TILINGS",
    "tuned_conv2d_fprop",
    "tuned_conv2d_wgrad",
    "TmaGemmConfig",
    "TmaWeightLayout",
    "TmaWsConfig",
    "TmaWsLaunch",
    "fprop_tma_ws_launch",
    "wgrad_tma_ws_launch",
]
