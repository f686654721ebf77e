"""The weight-gradient of a conv2d through TMA and tensor cores, checked against numpy.

``conv2d_wgrad`` computes ``dw[o, kh, kw, c] = sum_{n, oh, ow} dy[n, oh, ow, o] * x[n, oh*s + kh*d - p,
ow*s + kw*d - p, c]`` as a GEMM (M = C_out, N = KH*KW*C_in, K = N*OH*OW).  On the TMA path the
out-gradient is read as one consolidated ``(N*OH*OW, C_out)`` matrix (``TmaOutGradLayout``) so its rows
line up with the pixels TMA im2col walks across rows and images (``TmaIm2colLayout``); cmma multiplies.
Run it with ``python examples/conv_wgrad_tma.py`` (add ``CUBEPY_RUNTIME=cuda`` on a GPU).
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy_layouts.conv import ConvolutionProblem, conv2d_wgrad, wgrad_tma_launch
from cubepy_layouts.conv.reference import conv2d_wgrad_reference


def run(client, x_shape=(3, 9, 11, 16), w_shape=(16, 3, 3, 16), stride=(2, 1), padding=(1, 2), dilation=(1, 2)) -> dict:
    """dw through TMA (f16 inputs, f32 result) and through the plain path; max errors against numpy."""
    problem = ConvolutionProblem.conv2d(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation)
    rng = np.random.default_rng(5)
    x = rng.standard_normal(problem.x_shape).astype(np.float16)
    dy = rng.standard_normal(problem.out_shape).astype(np.float16)
    expected = conv2d_wgrad_reference(x, dy, problem)
    hx, hdy = client.create(x), client.create(dy)
    errors = {}
    for path, tma in (("tma", True), ("plain", False)):
        dw = client.read(conv2d_wgrad(client, hx, hdy, problem, tma=tma))
        # f16 inputs are exact in f32, so only the f32 summation order differs from the float64 reference.
        errors[f"conv2d_wgrad ({path}) max error / scale"] = float(
            np.max(np.abs(dw - expected)) / np.max(np.abs(expected))
        )
    return errors


def main() -> None:
    """Run on the default runtime and print the TMA kernel's resources."""
    client = cp.client()
    for what, err in run(client).items():
        print(f"{what}: {err:.2e}")
    problem = ConvolutionProblem.conv2d((3, 9, 11, 16), (16, 3, 3, 16), stride=(2, 1), padding=(1, 2), dilation=(1, 2))
    x, dy = client.zeros(problem.x_shape, np.float16), client.zeros(problem.out_shape, np.float16)
    compiled = wgrad_tma_launch(x, dy, client.zeros(problem.w_shape, np.float32), problem).compile()
    print(f"TMA kernel for sm_90a: {compiled.resources}")


if __name__ == "__main__":
    main()
