"""Float64 numpy references for conv2d (NHWC, weights (C_out, KH, KW, C_in)), independent of the layouts."""

from __future__ import annotations

import numpy as np


def _taps(x: np.ndarray, problem):
    """Yield ``(kh, kw, patch)`` with ``patch[n, oh, ow, c] = x_padded[n, oh*s + kh*d, ow*s + kw*d, c]``."""
    n, h, w, c = x.shape
    (ph, pw), (sh, sw), (dh, dw) = problem.padding, problem.stride, problem.dilation
    padded = np.zeros((n, h + 2 * ph, w + 2 * pw, c))
    padded[:, ph : ph + h, pw : pw + w] = x
    for kh in range(problem.kernel[0]):
        for kw in range(problem.kernel[1]):
            top, left = kh * dh, kw * dw
            yield (
                kh,
                kw,
                padded[
                    :, top : top + sh * (problem.out_h - 1) + 1 : sh, left : left + sw * (problem.out_w - 1) + 1 : sw
                ],
            )


def conv2d_fprop_ref(x: np.ndarray, w: np.ndarray, problem) -> np.ndarray:
    """``y[n, oh, ow, o] = sum x[n, oh*s + kh*d - p, ow*s + kw*d - p, c] * w[o, kh, kw, c]``."""
    y = np.zeros(problem.out_shape)
    for kh, kw, patch in _taps(x.astype(np.float64), problem):
        y += np.einsum("nhwc,oc->nhwo", patch, w[:, kh, kw].astype(np.float64))
    return y


def conv2d_wgrad_ref(x: np.ndarray, dy: np.ndarray, problem) -> np.ndarray:
    """``dw[o, kh, kw, c] = sum_{n, oh, ow} dy[n, oh, ow, o] * x[n, oh*s + kh*d - p, ow*s + kw*d - p, c]``."""
    dw = np.zeros(problem.w_shape)
    for kh, kw, patch in _taps(x.astype(np.float64), problem):
        dw[:, kh, kw] = np.einsum("nhwc,nhwo->oc", patch, dy.astype(np.float64))
    return dw


def conv2d_direct(x: np.ndarray, w: np.ndarray, problem) -> np.ndarray:
    """The same as ``conv2d_fprop_ref`` by plain loops (a check of the check, for tiny shapes)."""
    y = np.zeros(problem.out_shape)
    n_, h_, w_, _ = x.shape
    for n in range(n_):
        for oh in range(problem.out_h):
            for ow in range(problem.out_w):
                for kh in range(problem.kernel[0]):
                    for kw in range(problem.kernel[1]):
                        h = oh * problem.stride[0] + kh * problem.dilation[0] - problem.padding[0]
                        wi = ow * problem.stride[1] + kw * problem.dilation[1] - problem.padding[1]
                        if 0 <= h < h_ and 0 <= wi < w_:
                            y[n, oh, ow] += w[:, kh, kw].astype(np.float64) @ x[n, h, wi].astype(np.float64)
    return y
