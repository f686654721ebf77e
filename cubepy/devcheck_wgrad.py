"""The device check's weight-gradient phase: ``cubepy_layouts.conv.conv2d_wgrad`` on the GPU.

Each problem in ``WGRAD_PROBLEMS`` (f16 inputs): ``torch.nn.grad.conv2d_weight``'s result and time as the
reference, then cubepy's TMA weight-gradient convolution with and without TMA, checked against it and timed,
with both TFLOP/s in the case.  Skipped when torch, its CUDA device or that kernel is missing.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any

from cubepy.devcheck_timing import speed_fields, torch_time_ms

# Weight-gradient problems: (N, H, W, C_in, C_out, KH, KW, stride, padding), all f16 inputs.
WGRAD_PROBLEMS = [(8, 56, 56, 64, 64, 3, 3, 1, 1), (32, 28, 28, 128, 128, 3, 3, 1, 1)]


def wgrad_phase() -> list[dict[str, Any]]:
    """The TMA weight-gradient convolution against torch: correctness and time for each problem."""
    try:
        import torch
    except ImportError:
        return [{"suite": "wgrad", "name": "conv2d_wgrad vs torch", "status": "skip", "detail": "torch not installed"}]
    if not torch.cuda.is_available():
        return [
            {"suite": "wgrad", "name": "conv2d_wgrad vs torch", "status": "skip", "detail": "torch has no CUDA device"}
        ]
    try:
        conv = importlib.import_module("cubepy_layouts.conv")
        conv.conv2d_wgrad, conv.ConvolutionProblem  # noqa: B018  (both must exist)
    except (ImportError, AttributeError) as exc:
        return [
            {
                "suite": "wgrad",
                "name": "conv2d_wgrad vs torch",
                "status": "skip",
                "detail": f"cubepy_layouts.conv.conv2d_wgrad is not available: {exc}",
            }
        ]
    from cubepy.runtime.client import client as get_client

    client = get_client("cuda")
    cases = []
    for spec in WGRAD_PROBLEMS:
        cases += _wgrad_cases(torch, conv, client, spec)
    return cases


def _wgrad_cases(torch: Any, conv: Any, client: Any, spec: tuple[int, ...]) -> list[dict[str, Any]]:
    """One problem: torch's reference and time, then cubepy with and without TMA."""
    import numpy as np

    n, h, w, c_in, c_out, kh, kw, stride, pad = spec
    problem = conv.ConvolutionProblem.conv2d(
        (n, h, w, c_in), (c_out, kh, kw, c_in), stride=(stride, stride), padding=(pad, pad)
    )
    _, oh, ow, _ = problem.out_shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, h, w, c_in)).astype(np.float16)
    dy = rng.standard_normal((n, oh, ow, c_out)).astype(np.float16)
    flops = 2.0 * n * oh * ow * c_out * c_in * kh * kw
    xt = torch.from_numpy(x).cuda().permute(0, 3, 1, 2)
    dyt = torch.from_numpy(dy).cuda().permute(0, 3, 1, 2)
    weight_shape = (c_out, c_in, kh, kw)
    ref = (
        torch.nn.grad.conv2d_weight(xt.float(), weight_shape, dyt.float(), stride=stride, padding=pad)
        .permute(0, 2, 3, 1)
        .cpu()
        .numpy()
    )
    torch_ms = torch_time_ms(
        torch, lambda: torch.nn.grad.conv2d_weight(xt, weight_shape, dyt, stride=stride, padding=pad)
    )
    hx, hdy = client.create(x), client.create(dy)
    cases = []
    for tma in (True, False):
        case: dict[str, Any] = {
            "suite": "wgrad",
            "tma": tma,
            "torch_f16_ms": round(torch_ms, 4),
            "name": f"conv2d_wgrad tma={tma} x={x.shape} w={weight_shape} s={stride} p={pad}",
        }

        def work(tma: bool = tma) -> Any:
            return conv.conv2d_wgrad(client, hx, hdy, problem, tma=tma)

        try:
            got = client.read(_result_handle(work())).astype(np.float32).reshape(ref.shape)
            error = float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
            best = min(client.time_ms(work, repeat=10))
            case.update(
                relative_error=error,
                **speed_fields(best, torch_ms, flops),
                status="pass" if error < 2e-2 else "fail",
            )
            if error >= 2e-2:
                case["detail"] = f"relative error {error:.3g} against torch.nn.grad.conv2d_weight (limit 2e-2)"
        except Exception as exc:
            case.update(status="fail", detail=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-800:]}")
        cases.append(case)
    return cases


def _result_handle(result: Any) -> Any:
    """The weight-gradient handle, whether the kernel returns it alone or first in a tuple."""
    return result[0] if isinstance(result, (tuple, list)) else result
