"""Float64 numpy references of conv2d passes, for the demo and examples (tests keep their own)."""

from __future__ import annotations

import numpy as np

from cubepy_layouts.conv.problem import ConvolutionProblem


def _padded(x: np.ndarray, problem: ConvolutionProblem) -> np.ndarray:
    ph, pw = problem.padding
    out = np.zeros((problem.batch, problem.in_h + 2 * ph, problem.in_w + 2 * pw, problem.in_channels))
    out[:, ph : ph + problem.in_h, pw : pw + problem.in_w] = x
    return out


def _tap(padded: np.ndarray, problem: ConvolutionProblem, kh: int, kw: int) -> np.ndarray:
    """``patch[n, oh, ow, c] = x_padded[n, oh*s_h + kh*d_h, ow*s_w + kw*d_w, c]``."""
    (sh, sw), (dh, dw) = problem.stride, problem.dilation
    top, left = kh * dh, kw * dw
    return padded[:, top : top + sh * (problem.out_h - 1) + 1 : sh, left : left + sw * (problem.out_w - 1) + 1 : sw]


def conv2d_fprop_reference(x: np.ndarray, w: np.ndarray, problem: ConvolutionProblem) -> np.ndarray:
    """``y`` of an NHWC conv2d with weights ``(C_out, KH, KW, C_in)``, in float64."""
    padded, y = _padded(x.astype(np.float64), problem), np.zeros(problem.out_shape)
    for kh in range(problem.kernel[0]):
        for kw in range(problem.kernel[1]):
            y += np.einsum("nhwc,oc->nhwo", _tap(padded, problem, kh, kw), w[:, kh, kw].astype(np.float64))
    return y


def conv2d_wgrad_reference(x: np.ndarray, dy: np.ndarray, problem: ConvolutionProblem) -> np.ndarray:
    """``dw`` of an NHWC conv2d for input ``x`` and out-gradient ``dy``, in float64."""
    padded, dw = _padded(x.astype(np.float64), problem), np.zeros(problem.w_shape)
    for kh in range(problem.kernel[0]):
        for kw in range(problem.kernel[1]):
            dw[:, kh, kw] = np.einsum("nhwc,nhwo->oc", _tap(padded, problem, kh, kw), dy.astype(np.float64))
    return dw
