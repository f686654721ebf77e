"""The device check's attention phase: ``cubepy_layouts.attention.flash_attention`` on the GPU.

First both kernels (``wgmma`` for sm_90a, ``mma_sync`` for sm_80) at small ragged shapes, f16 and bf16,
causal and not, against the float64 numpy oracle under the bound the CPU tests use (``u (|o| + max|v|) + 1e-5``
with ``u`` the element type's unit roundoff; ``lse`` within 1e-4).  Then the Hopper kernel at training sizes
against ``torch.nn.functional.scaled_dot_product_attention`` (its flash backend) for the result and the time,
with cubepy's TFLOP/s beside torch's.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any

from cubepy.devcheck_timing import speed_fields, torch_time_ms

# (batch, heads, seq_q, seq_k, head_dim), dtype, causal: sequences ragged against every block size, the stage
# ring wraps, both head dims; the four (dtype, causal) pairs are spread over them, since every case compiles
# its own kernel (2-5 s each) and the whole phase shares the check's budget
ORACLE_CASES = [
    ((1, 2, 197, 301, 64), "float16", False),
    ((1, 2, 197, 301, 64), "bfloat16", True),
    ((2, 1, 130, 130, 128), "float16", True),
    ((2, 1, 130, 130, 128), "bfloat16", False),
]
ORACLE_KERNELS = ("wgmma", "mma_sync")
# (batch, heads, seq, head_dim) timed against torch, causal and not
TIMED_SHAPES = [(4, 16, 4096, 64), (4, 16, 4096, 128)]


def _case(name: str, **fields: Any) -> dict[str, Any]:
    return {"suite": "attention", "name": name, **fields}


def attention_phase() -> list[dict[str, Any]]:
    """Both attention kernels against the float64 oracle; the Hopper kernel against torch's SDPA."""
    try:
        attention = importlib.import_module("cubepy_layouts.attention")
    except ImportError as exc:
        return [_case("flash_attention", status="skip", detail=f"cubepy_layouts.attention: {exc}")]
    import ml_dtypes
    import numpy as np

    from cubepy.runtime.client import client as get_client

    gpu = get_client("cuda")
    dtypes = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
    cases = [
        _against_oracle(np, attention, gpu, kernel, shape, dtypes[name], causal)
        for kernel in ORACLE_KERNELS
        for shape, name, causal in ORACLE_CASES
    ]
    try:
        import torch
    except ImportError:
        return [*cases, _case("flash_attention vs torch SDPA", status="skip", detail="torch not installed")]
    if not torch.cuda.is_available():
        return [*cases, _case("flash_attention vs torch SDPA", status="skip", detail="torch has no CUDA device")]
    for shape in TIMED_SHAPES:
        for causal in (False, True):
            cases.append(_against_torch(np, torch, attention, gpu, shape, causal))
    return cases


def _against_oracle(
    np: Any, attention: Any, gpu: Any, kernel: str, shape: tuple[int, ...], dtype: Any, causal: bool
) -> dict[str, Any]:
    batch, heads, seq_q, seq_k, dim = shape
    case = _case(f"flash_attention {kernel} {shape} {dtype.name}{' causal' if causal else ''}: cuda vs oracle")
    try:
        rng = np.random.default_rng(0)
        q = rng.standard_normal((batch, heads, seq_q, dim)).astype(dtype)
        k = rng.standard_normal((batch, heads, seq_k, dim)).astype(dtype)
        v = rng.standard_normal((batch, heads, seq_k, dim)).astype(dtype)
        o, lse = attention.flash_attention(
            gpu,
            gpu.create(q),
            gpu.create(k),
            gpu.create(v),
            causal,
            None,
            True,
            attention.AttentionConfig(kernel=kernel),
        )
        o_ref, lse_ref = attention.attention_reference(q, k, v, causal)
        roundoff = 2.0**-11 if dtype == np.dtype(np.float16) else 2.0**-8
        bound = roundoff * (np.abs(o_ref) + np.abs(v.astype(np.float64)).max()) + 1e-5
        o_excess = float(np.max(np.abs(gpu.read(o).astype(np.float64) - o_ref) - bound))
        lse_error = float(np.max(np.abs(gpu.read(lse).astype(np.float64) - lse_ref)))
        passed = o_excess <= 0 and lse_error <= 1e-4  # also false for NaN
        case.update(status="pass" if passed else "fail", o_excess_over_bound=o_excess, lse_max_error=lse_error)
    except Exception as exc:
        case.update(status="fail", detail=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-800:]}")
    return case


def _against_torch(
    np: Any, torch: Any, attention: Any, gpu: Any, shape: tuple[int, int, int, int], causal: bool
) -> dict[str, Any]:
    batch, heads, seq, dim = shape
    case = _case(f"flash_attention wgmma {shape} f16{' causal' if causal else ''} vs torch SDPA")
    try:
        tq, tk, tv = (torch.randn((batch, heads, seq, dim), device="cuda", dtype=torch.float16) for _ in range(3))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        ref = sdpa(tq, tk, tv, is_causal=causal).float().cpu().numpy()
        torch_ms = torch_time_ms(torch, lambda: sdpa(tq, tk, tv, is_causal=causal))
        q, k, v = (gpu.create(t.cpu().numpy()) for t in (tq, tk, tv))
        o = gpu.empty((batch, heads, seq, dim), np.float16)
        launch = attention.flash_attention_launch(q, k, v, o, causal=causal)

        def work() -> None:
            launch.launch(gpu)

        work()
        got = gpu.read(o).astype(np.float32)
        error = float(np.max(np.abs(got - ref)))
        best = min(gpu.time_ms(work, repeat=10))
        flops = 4.0 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
        case.update(
            max_abs_error=error,
            **speed_fields(best, torch_ms, flops),
            torch_ms=round(torch_ms, 4),
            ratio_to_torch=round(torch_ms / best, 3),
            status="pass" if error < 1e-2 else "fail",
        )
        if not error < 1e-2:
            case["detail"] = f"max |o - torch| {error:.3g} (limit 1e-2: both round f16 outputs of values below 1)"
    except Exception as exc:
        case.update(status="fail", detail=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-800:]}")
    return case
