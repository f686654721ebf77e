"""The device check's GEMM phase: ``cubepy_layouts.matmul.wgmma_matmul`` on the GPU.

Each case: a small ragged shape against the interp's result of the same kernel, then bf16 shapes
(4096^3 and two ragged ones) against ``torch.matmul`` (cuBLAS) for the result and the time, with
cubepy's TFLOP/s beside cuBLAS's (the issue's target: at least 0.8x).
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any

from cubepy.devcheck_timing import speed_fields, torch_time_ms

INTERP_SHAPE = (130, 72, 200)  # M, N, K: ragged blocks, the stage ring wraps
GEMM_SHAPES = [(4096, 4096, 4096), (4000, 3000, 2056), (1000, 520, 4104)]  # K a multiple of 8 (TMA rows)


def _case(name: str, **fields: Any) -> dict[str, Any]:
    return {"suite": "gemm", "name": name, **fields}


def gemm_phase() -> list[dict[str, Any]]:
    """The wgmma GEMM against the interp and against torch.matmul: correctness and TFLOP/s."""
    try:
        matmul = importlib.import_module("cubepy_layouts.matmul")
        wgmma_matmul = matmul.wgmma_matmul
    except (ImportError, AttributeError) as exc:
        return [_case("wgmma_matmul", status="skip", detail=f"cubepy_layouts.matmul.wgmma_matmul: {exc}")]
    import numpy as np

    from cubepy.runtime.client import client as get_client

    gpu, interp = get_client("cuda"), get_client("interp")
    cases = [_against_interp(np, wgmma_matmul, gpu, interp)]
    try:
        import torch
    except ImportError:
        return [*cases, _case("wgmma_matmul vs torch.matmul", status="skip", detail="torch not installed")]
    if not torch.cuda.is_available():
        return [*cases, _case("wgmma_matmul vs torch.matmul", status="skip", detail="torch has no CUDA device")]
    return cases + [_against_torch(np, torch, matmul.wgmma_gemm_launch, gpu, shape) for shape in GEMM_SHAPES]


def _against_interp(np: Any, wgmma_matmul: Any, gpu: Any, interp: Any) -> dict[str, Any]:
    m, n, k = INTERP_SHAPE
    case = _case(f"wgmma_matmul {m}x{n}x{k} f16: cuda vs interp")
    try:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k)).astype(np.float16)
        b_t = rng.standard_normal((n, k)).astype(np.float16)
        want = interp.read(wgmma_matmul(interp, interp.create(a), interp.create(b_t)))
        got = gpu.read(wgmma_matmul(gpu, gpu.create(a), gpu.create(b_t)))
        # Both sum exact products in f32; the hardware's order of additions is not the interp's.
        bound = 4 * k * 2.0**-23 * (np.abs(a.astype(np.float64)) @ np.abs(b_t.astype(np.float64)).T)
        excess = float(np.max(np.abs(got - want) - bound))
        case.update(status="pass" if excess <= 0 else "fail", max_excess_over_bound=excess)
    except Exception as exc:
        case.update(status="fail", detail=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-800:]}")
    return case


def _against_torch(
    np: Any, torch: Any, wgmma_gemm_launch: Any, gpu: Any, shape: tuple[int, int, int]
) -> dict[str, Any]:
    import cubepy as cp

    m, n, k = shape
    case = _case(f"wgmma_matmul {m}x{n}x{k} bf16 vs torch.matmul")
    try:
        ta = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
        tb = torch.randn((n, k), device="cuda", dtype=torch.bfloat16)
        ref = (ta.float() @ tb.float().T).cpu().numpy()
        torch_ms = torch_time_ms(torch, lambda: torch.matmul(ta, tb.T))
        a = gpu.create(ta.float().cpu().numpy().astype(cp.bf16.numpy))
        b_t = gpu.create(tb.float().cpu().numpy().astype(cp.bf16.numpy))
        out = gpu.zeros((m, n), np.float32)
        launch = wgmma_gemm_launch(a, b_t, out)

        def work() -> None:
            launch.launch(gpu)

        work()
        got = gpu.read(out)
        error = float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
        best = min(gpu.time_ms(work, repeat=10))
        flops = 2.0 * m * n * k
        case.update(
            relative_error=error,
            **speed_fields(best, torch_ms, flops),
            torch_ms=round(torch_ms, 4),
            ratio_to_cublas=round(torch_ms / best, 3),
            status="pass" if error < 1e-2 else "fail",
        )
        if error >= 1e-2:
            case["detail"] = f"relative error {error:.3g} against torch.matmul (limit 1e-2)"
    except Exception as exc:
        case.update(status="fail", detail=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-800:]}")
    return case
