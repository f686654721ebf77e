"""``cubepy demo``: the TMA weight-gradient of a small conv2d on the default runtime, checked against numpy.

It runs ``dw = conv2d_wgrad(x, dy)`` through TMA (a tiled map over the consolidated out-gradient with
``TmaOutGradLayout``, an im2col map over the input with ``TmaIm2colLayout``) and tensor cores, compares
it with a float64 numpy reference, prints what ran, and writes the kernel's PTX and ptxas resource
report to ``args.out``.
"""

from __future__ import annotations

import os
import time

import numpy as np

import cubepy as cp
from cubepy_layouts.conv import ConvolutionProblem, TmaGemmConfig, conv2d_wgrad, wgrad_launch, wgrad_tma_launch
from cubepy_layouts.conv.reference import conv2d_wgrad_reference

X_SHAPE = (2, 14, 14, 32)  # N, H, W, C_in
W_SHAPE = (32, 3, 3, 32)  # C_out, KH, KW, C_in
STRIDE, PADDING, DILATION = (1, 1), (1, 1), (1, 1)
TOLERANCE = 2e-2  # f16 inputs, f32 accumulation over K = 392 products


def _report(compiled) -> str:
    res = compiled.resources
    if res is None:
        return "ptxas not available: no resource report"
    return (
        f"registers {res.registers}, shared {res.shared_bytes} B, spills {res.spill_store_bytes} B stored / "
        f"{res.spill_load_bytes} B loaded, stack {res.stack_bytes} B, barriers {res.barriers}"
    )


def main(client, args) -> int:
    """Run the demo; 0 when the TMA result matches numpy."""
    problem = ConvolutionProblem.conv2d(X_SHAPE, W_SHAPE, stride=STRIDE, padding=PADDING, dilation=DILATION)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(problem.x_shape).astype(np.float16)
    dy = rng.standard_normal(problem.out_shape).astype(np.float16)
    hx, hdy = client.create(x), client.create(dy)
    config = TmaGemmConfig()
    m, n, k = problem.gemm("wgrad")
    print(f"cubepy demo: conv2d weight-gradient through TMA + tensor cores on runtime '{client.name}'")
    print(
        f"  x {problem.x_shape} f16, dy {problem.out_shape} f16 -> dw {problem.w_shape} f32 "
        f"(stride {problem.stride}, padding {problem.padding}, dilation {problem.dilation})"
    )
    print(f"  GEMM M = C_out = {m}, N = KH*KW*C_in = {n}, K = N*OH*OW = {k}")
    print(
        f"  tiles {config.tile_m}x{config.tile_n}x{config.tile_k} (cmma 16x16x16, one plane per tile), "
        f"{config.stages} stages"
    )

    expected = conv2d_wgrad_reference(x.astype(np.float32), dy.astype(np.float32), problem)
    failures = 0
    for name, tma in (("tma", True), ("plain", False)):
        start = time.perf_counter()
        dw = client.read(conv2d_wgrad(client, hx, hdy, problem, tma=tma))
        cold = time.perf_counter() - start
        start = time.perf_counter()
        client.read(conv2d_wgrad(client, hx, hdy, problem, tma=tma))
        warm = time.perf_counter() - start
        error = float(np.max(np.abs(dw - expected)))
        ok = error < TOLERANCE
        failures += not ok
        print(
            f"  {name:5s} path: {warm * 1e3:8.1f} ms warm ({cold * 1e3:.1f} ms first, incl. expansion), "
            f"max |error| {error:.2e}  {'ok' if ok else 'MISMATCH'}"
        )

    os.makedirs(args.out, exist_ok=True)
    dw = client.zeros(problem.w_shape, np.float32)
    start = time.perf_counter()
    compiled = wgrad_tma_launch(hx, hdy, dw, problem, config).compile()
    compile_s = time.perf_counter() - start
    plain = wgrad_launch(hx, hdy, dw, problem).compile()
    paths = []
    for stem, kernel in (("conv2d_wgrad_tma", compiled), ("conv2d_wgrad_plain", plain)):
        ptx_path = os.path.join(args.out, f"{stem}.ptx")
        with open(ptx_path, "w") as f:
            f.write(kernel.ptx)
        with open(os.path.join(args.out, f"{stem}.resources.txt"), "w") as f:
            f.write(_report(kernel) + "\n")
        paths.append(ptx_path)
    print(f"  TMA kernel: compiled for sm_90a in {compile_s * 1e3:.0f} ms; {_report(compiled)}")
    print(f"  plain kernel: {_report(plain)}")
    print(f"  PTX and resource reports written to {', '.join(paths)} (+ .resources.txt)")
    return 1 if failures else 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runtime", default=None)
    parser.add_argument("--out", default="cubepy_demo")
    options = parser.parse_args()
    raise SystemExit(main(cp.client(options.runtime), options))
