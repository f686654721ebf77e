"""``CudaClient``: the ``ComputeClient`` whose handles live in device memory.

Handles keep the host runtimes' metadata (dtype, shape, strides in elements, offset) and hold a
``DeviceBuffer`` as ``storage``.  Launches are asynchronous on the device's stream; ``read`` and
``sync`` wait for them, so a kernel fault is reported there, by the driver call that noticed it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np

from cubepy.errors import CubeError, LaunchError
from cubepy.runtime.client import ComputeClient, as_numpy_dtype
from cubepy.runtime.cuda.backend import SANITIZER_UNAVAILABLE, CudaBackend
from cubepy.runtime.cuda.device import EMPTY_FILL_BYTE, CudaDevice, DeviceBuffer
from cubepy.runtime.cuda.interop import CUDA_DEVICE_TYPES, external_view
from cubepy.runtime.handle import Handle, contiguous_strides


class CudaClient(ComputeClient):
    """A client of one CUDA device (see docs/reference/cubepy.md), plus interop and event timing."""

    def __init__(self, device: CudaDevice, backend: CudaBackend | None = None) -> None:
        super().__init__("cuda", backend or CudaBackend(device), sanitize=False)
        self.device = device

    # -- buffers ---------------------------------------------------------------------------
    def create(self, array: object) -> Handle:
        """A new device buffer holding a copy of ``array`` (keeps its dtype and shape)."""
        array = np.ascontiguousarray(np.asarray(array))
        handle = self._allocate(array.shape, array.dtype)
        self.device.upload(handle.storage.ptr, array)
        return handle

    def empty(self, shape: int | Iterable[int], dtype: object) -> Handle:
        """A new device buffer with unspecified contents (filled with 0xCD bytes, as on the interp and cpu runtimes)."""
        handle = self._allocate(shape, dtype)
        self.device.fill(handle.storage.ptr, EMPTY_FILL_BYTE, handle.storage.nbytes)
        return handle

    def zeros(self, shape: int | Iterable[int], dtype: object) -> Handle:
        """A new device buffer filled with zeros."""
        handle = self._allocate(shape, dtype)
        self.device.fill(handle.storage.ptr, 0, handle.storage.nbytes)
        return handle

    def _allocate(self, shape: int | Iterable[int], dtype: object) -> Handle:
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        dtype = as_numpy_dtype(dtype)
        count = int(np.prod(shape)) if shape else 1
        storage = self.device.allocate(count * dtype.itemsize, dtype.itemsize)
        return Handle(self, storage, dtype, shape)

    def read(self, handle: Handle) -> np.ndarray:
        """A numpy copy of the buffer in its shape (strided views gathered on the host); waits for launches."""
        self._own(handle, "read")
        if not isinstance(handle.storage, DeviceBuffer):
            raise LaunchError(f"client.read: {handle!r} has no device storage")
        item = handle.dtype.itemsize
        start = handle.storage.ptr + handle.offset * item
        if handle.strides == contiguous_strides(handle.shape):
            out = np.empty(handle.shape, dtype=handle.dtype)
            self.device.download(start, out)
            return out
        if any(s < 0 for s in handle.strides):
            raise LaunchError(f"client.read: negative strides {handle.strides} are not supported")
        span = (
            0
            if any(d == 0 for d in handle.shape)
            else 1 + sum((d - 1) * s for d, s in zip(handle.shape, handle.strides))
        )
        flat = np.empty(span, dtype=handle.dtype)
        self.device.download(start, flat)
        view = np.lib.stride_tricks.as_strided(flat, handle.shape, tuple(s * item for s in handle.strides))
        return cast(np.ndarray, view.copy())

    def sync(self) -> None:
        """Wait for every launch and copy queued by this client; raises if one of them failed."""
        self.device.synchronize()

    # -- interop ---------------------------------------------------------------------------
    def from_external(self, obj: Any) -> Handle:
        """A handle on another library's device array, without copying (``__cuda_array_interface__`` or DLPack).

        The handle borrows the memory and keeps ``obj`` alive.  Work the other library queued on other
        streams is waited for here; after cubepy writes to the array, call ``client.sync()`` before the
        other library reads it.
        """
        view = external_view(obj)
        if view.device_type not in CUDA_DEVICE_TYPES:
            raise LaunchError(
                f"from_external: {type(obj).__name__} lives on DLPack device type "
                f"{view.device_type}, not on a CUDA device"
            )
        if view.device_id not in (-1, self.device.info.ordinal):
            raise LaunchError(
                f"from_external: the array is on CUDA device {view.device_id}, this client "
                f"uses device {self.device.info.ordinal}"
            )
        if any(s < 0 for s in view.strides):
            raise LaunchError(f"from_external: negative strides {view.strides} are not supported")
        if view.read_only:  # kernels may write any handle: as on the host runtimes, read-only memory is refused
            raise LaunchError(
                f"from_external: the {type(obj).__name__} is read-only (its export says so); a handle may be "
                "written by kernels: copy it into client.create/empty memory instead"
            )
        self.device.synchronize_context()
        storage = self.device.borrow(view.ptr, view.span * view.dtype.itemsize, view.dtype.itemsize, view.owner)
        return Handle(self, storage, view.dtype, view.shape, view.strides)

    def from_dlpack(self, obj: Any) -> Handle:
        """A handle on a DLPack exporter's device memory without a copy (what ``cp.from_dlpack`` calls)."""
        return self.from_external(obj)

    # -- timing ----------------------------------------------------------------------------
    def time_ms(self, work: Callable[[], object], *, repeat: int = 10, warmup: int = 1) -> list[float]:
        """Milliseconds each of ``repeat`` calls of ``work`` (launches on this client) took on the device."""
        return self.device.time_ms(work, repeat=repeat, warmup=warmup)

    def __repr__(self) -> str:
        return f"CudaClient({self.device.info.name!r})"


def make_cuda_client(device: CudaDevice | None, *, sanitize: bool = False) -> CudaClient:
    """A client of ``device``; the sanitizer is refused (it exists only on the interp and cpu runtimes)."""
    if sanitize:
        raise CubeError(SANITIZER_UNAVAILABLE)
    if device is None:
        raise CubeError("make_cuda_client needs a device (cubepy.runtime.cuda.device.get_device)")
    return CudaClient(device)
