"""The cpu runtime: kernels compiled for the host by the same LLVM lowering as PTX (``cp.client("cpu")``).

| module | what it does |
|---|---|
| ``loader`` | object code -> an MCJIT engine and the ctypes entry ``cubepy_run_cubes`` |
| ``emulation`` | ``cubepy_host_op``: TMA copies and mbarriers of compiled code, run by the interp's emulation |
| ``backend`` | ``CpuBackend``: compile (``cubepy.compiler.emit_host``), launch checks, pack parameters, run cubes on threads |

The execution model (units as coroutines, planes of 32, barriers) is described in
``cubepy.compiler.targets.host``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cubepy.compiler.emit_host import host_unavailable_reason

if TYPE_CHECKING:
    from cubepy.runtime.client import ComputeClient

__all__ = ["host_unavailable_reason", "make_client"]


def make_client(*, sanitize: bool = False) -> ComputeClient:
    """The ``ComputeClient`` of the cpu runtime."""
    from cubepy.runtime.client import ComputeClient
    from cubepy.runtime.cpu.backend import CpuBackend

    return ComputeClient("cpu", CpuBackend(report_out_of_bounds=sanitize), sanitize=sanitize)
