"""The cuda runtime: the same kernels on an NVIDIA GPU through the driver API (``cuda-bindings``).

``unavailable_reason()`` says why it cannot run here (never raises); ``make_client()`` builds the
``ComputeClient`` that ``cp.client("cuda")`` returns.  Modules:

| module | what it does |
|---|---|
| ``driver`` | importing cuda-bindings, the availability probe, CUresult -> ``CubeError`` |
| ``device`` | primary context, stream, device limits, allocations, copies, event timing |
| ``tensormaps`` | ``TensorMapArg`` -> ``cuTensorMapEncodeTiled/Im2col`` (argument conversion is pure) |
| ``interop`` | ``__cuda_array_interface__`` and DLPack views, without copies |
| ``backend`` | ``CudaBackend``: compile + load, launch checks, bind + launch (metadata by value) |
| ``client`` | ``CudaClient``: device handles, read/sync, ``from_external``, ``time_ms`` |

Nothing imports cuda-bindings until a client is made, so this package imports everywhere.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from cubepy.runtime.cuda.driver import NO_DEVICE, NO_DRIVER, NOT_INSTALLED, probe

if TYPE_CHECKING:
    from cubepy.runtime.cuda.client import CudaClient

__all__ = ["NOT_INSTALLED", "NO_DEVICE", "NO_DRIVER", "make_client", "unavailable_reason"]


@functools.cache
def _cached_probe() -> str | None:
    return probe()


def unavailable_reason() -> str | None:
    """Why the cuda runtime cannot run here (no cuda-bindings, driver, or device), or None when it can."""
    try:
        return _cached_probe()
    except Exception as exc:  # the probe must never take a caller down; a broken install is a reason too
        return f"probing the CUDA driver failed: {type(exc).__name__}: {exc}"


def make_client(sanitize: bool = False) -> CudaClient:
    """A ``ComputeClient`` on device 0 (``cp.client("cuda")``); ``sanitize=True`` raises: CPU only."""
    from cubepy.runtime.cuda.client import make_cuda_client
    from cubepy.runtime.cuda.device import get_device

    if sanitize:  # before touching the device: the answer does not depend on it
        return make_cuda_client(None, sanitize=True)
    return make_cuda_client(get_device(0))
