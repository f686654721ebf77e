"""The device check's timing of torch: the reference kernels the GPU phases measure cubepy against.

The wgrad phase (``cubepy.devcheck_wgrad``) and the GEMM phase (``cubepy.devcheck_gemm``) both time a torch
call beside cubepy's kernel; ``torch_time_ms`` (the best of several runs, each timed with CUDA events after
a warm-up run) and ``speed_fields`` (the figures a timed case reports) live here, below the phases (the
attention phase, ``cubepy.devcheck_attention``, uses them too), so that no phase imports another or
``cubepy.devcheck``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def torch_time_ms(torch: Any, work: Callable[[], object], repeat: int = 10) -> float:
    """The best of ``repeat`` CUDA-event timings of ``work`` in milliseconds, after one warm-up call."""
    work()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(repeat):
        start.record()
        work()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def speed_fields(cubepy_ms: float, torch_ms: float, flops: float) -> dict[str, float]:
    """A timed case's figures: cubepy's milliseconds (4 places) and both TFLOP/s rates (2 places)."""
    return {
        "cubepy_ms": round(cubepy_ms, 4),
        "cubepy_tflops": round(flops / cubepy_ms / 1e9, 2),
        "torch_tflops": round(flops / torch_ms / 1e9, 2),
    }
