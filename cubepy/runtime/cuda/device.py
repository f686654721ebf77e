"""One CUDA device as cubepy uses it: its primary context, one stream, its limits, memory and copies.

Everything the cuda runtime asks of the driver that is not about kernels lives here.  The primary
context is the one PyTorch and CuPy use too, so pointers cross between them without copies.  The
stream is a *blocking* stream: it orders itself with the legacy default stream, so work PyTorch queued
there finishes before cubepy's next operation starts, and the other way round.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cubepy.errors import CubeError
from cubepy.runtime.cuda.driver import check, import_driver

# Fill of ``empty`` buffers, as on the interp and cpu runtimes: reads of never-written data stand out.
EMPTY_FILL_BYTE = 0xCD


@dataclass(eq=False)
class DeviceBuffer:
    """A device allocation (or a borrowed external one): its address, bytes and element count.

    ``size`` counts elements of the handle's dtype, as the host runtimes' numpy storage does, so
    ``Handle.size`` and ``buffer_len`` mean the same on both runtimes.  ``owner`` keeps a borrowed
    allocation's exporter alive; an owned one is freed when the buffer is garbage collected.
    """

    ptr: int
    nbytes: int
    size: int
    owner: Any = None
    _finalizer: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        kind = "borrowed" if self.owner is not None else "owned"
        return f"DeviceBuffer(ptr={self.ptr:#x}, nbytes={self.nbytes}, {kind})"


@dataclass(frozen=True)
class DeviceInfo:
    """What the device check reports and the launch checks read."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    driver_version: int
    total_memory: int
    multiprocessors: int
    max_threads_per_block: int
    max_grid: tuple[int, int, int]
    max_shared_per_block: int  # without opting in (48 KiB)
    max_shared_per_block_optin: int  # with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (227 KiB on sm_90)

    @property
    def target(self) -> str:
        """The compiler target for this device: ``sm_90a`` on Hopper (TMA, wgmma), else ``sm_XY``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")

    @property
    def driver_version_text(self) -> str:
        """The driver's CUDA version as ``13.0`` (from ``cuDriverGetVersion``'s 13000)."""
        return f"{self.driver_version // 1000}.{self.driver_version % 1000 // 10}"


class CudaDevice:
    """The device, its primary context and cubepy's stream; all memory traffic goes through here."""

    def __init__(self, ordinal: int = 0, driver: Any = None) -> None:
        self.driver = driver if driver is not None else import_driver()
        self._thread = threading.local()
        check(self.driver, self.driver.cuInit(0), "cuInit")
        self.handle = check(self.driver, self.driver.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
        self.context = check(self.driver, self.driver.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self.make_current()
        # Flags 0: a blocking stream, ordered with the legacy default stream (see the module docstring).
        self.stream = check(self.driver, self.driver.cuStreamCreate(0), "cuStreamCreate")
        self.info = self._read_info(ordinal)

    # -- context --------------------------------------------------------------------------
    def make_current(self) -> None:
        """Make the primary context current on the calling thread (each thread has its own current context)."""
        if getattr(self._thread, "current", False):
            return
        check(self.driver, self.driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self._thread.current = True

    def attribute(self, name: str) -> int:
        """One ``CU_DEVICE_ATTRIBUTE_<name>`` of the device."""
        attr = getattr(self.driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(
            check(self.driver, self.driver.cuDeviceGetAttribute(attr, self.handle), f"cuDeviceGetAttribute({name})")
        )

    def _read_info(self, ordinal: int) -> DeviceInfo:
        raw_name = check(self.driver, self.driver.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        name = raw_name.split(b"\0")[0].decode(errors="replace") if isinstance(raw_name, bytes) else str(raw_name)
        return DeviceInfo(
            ordinal=ordinal,
            name=name,
            compute_capability=(self.attribute("COMPUTE_CAPABILITY_MAJOR"), self.attribute("COMPUTE_CAPABILITY_MINOR")),
            driver_version=int(check(self.driver, self.driver.cuDriverGetVersion(), "cuDriverGetVersion")),
            total_memory=int(check(self.driver, self.driver.cuDeviceTotalMem(self.handle), "cuDeviceTotalMem")),
            multiprocessors=self.attribute("MULTIPROCESSOR_COUNT"),
            max_threads_per_block=self.attribute("MAX_THREADS_PER_BLOCK"),
            max_grid=(
                self.attribute("MAX_GRID_DIM_X"),
                self.attribute("MAX_GRID_DIM_Y"),
                self.attribute("MAX_GRID_DIM_Z"),
            ),
            max_shared_per_block=self.attribute("MAX_SHARED_MEMORY_PER_BLOCK"),
            max_shared_per_block_optin=self.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        )

    # -- memory ---------------------------------------------------------------------------
    def allocate(self, nbytes: int, itemsize: int) -> DeviceBuffer:
        """A new allocation of ``nbytes`` (at least one byte: the driver refuses empty ones), 256-byte aligned."""
        self.make_current()
        ptr = int(
            check(self.driver, self.driver.cuMemAlloc(max(int(nbytes), 1)), "cuMemAlloc", f"asked for {nbytes} bytes")
        )
        buffer = DeviceBuffer(ptr, int(nbytes), int(nbytes) // max(itemsize, 1))
        buffer._finalizer = weakref.finalize(buffer, _free, self.driver, ptr)
        # At interpreter exit the driver tears the context down itself; freeing then can only fail.
        buffer._finalizer.atexit = False
        return buffer

    def borrow(self, ptr: int, nbytes: int, itemsize: int, owner: Any) -> DeviceBuffer:
        """Wrap someone else's device memory; ``owner`` is kept alive and nothing is freed."""
        return DeviceBuffer(int(ptr), int(nbytes), int(nbytes) // max(itemsize, 1), owner=owner)

    def upload(self, dst: int, host: np.ndarray) -> None:
        """Copy a C-contiguous host array to device address ``dst`` (queued on the stream)."""
        self.make_current()
        host = np.ascontiguousarray(host)
        if host.nbytes == 0:
            return
        # From pageable memory the driver stages the source before returning, so ``host`` may die after.
        check(
            self.driver,
            self.driver.cuMemcpyHtoDAsync(dst, int(host.ctypes.data), host.nbytes, self.stream),
            "cuMemcpyHtoDAsync",
            f"{host.nbytes} bytes to {dst:#x}",
        )

    def download(self, src: int, host: np.ndarray) -> None:
        """Copy into a C-contiguous host array from device address ``src``; waits for the stream first."""
        self.make_current()
        if host.nbytes == 0:
            self.synchronize()
            return
        check(
            self.driver,
            self.driver.cuMemcpyDtoHAsync(int(host.ctypes.data), src, host.nbytes, self.stream),
            "cuMemcpyDtoHAsync",
            f"{host.nbytes} bytes from {src:#x}",
        )
        self.synchronize()

    def fill(self, dst: int, byte: int, nbytes: int) -> None:
        """Set ``nbytes`` bytes at ``dst`` to ``byte`` (queued on the stream)."""
        self.make_current()
        if nbytes:
            check(self.driver, self.driver.cuMemsetD8Async(dst, byte, nbytes, self.stream), "cuMemsetD8Async")

    def synchronize(self) -> None:
        """Wait for everything queued on cubepy's stream; kernel faults surface here."""
        self.make_current()
        check(
            self.driver,
            self.driver.cuStreamSynchronize(self.stream),
            "cuStreamSynchronize",
            "an earlier launch or copy on cubepy's stream failed",
        )

    def synchronize_context(self) -> None:
        """Wait for every stream of the context (other libraries' work on shared memory included)."""
        self.make_current()
        check(self.driver, self.driver.cuCtxSynchronize(), "cuCtxSynchronize")

    # -- timing ---------------------------------------------------------------------------
    def time_ms(self, work: Callable[[], object], *, repeat: int = 10, warmup: int = 1) -> list[float]:
        """Milliseconds of each of ``repeat`` runs of ``work`` on the stream, timed with CUDA events."""
        self.make_current()
        flags = self.driver.CUevent_flags.CU_EVENT_DEFAULT
        start = check(self.driver, self.driver.cuEventCreate(flags), "cuEventCreate")
        end = check(self.driver, self.driver.cuEventCreate(flags), "cuEventCreate")
        try:
            for _ in range(warmup):
                work()
            times = []
            for _ in range(repeat):
                check(self.driver, self.driver.cuEventRecord(start, self.stream), "cuEventRecord")
                work()
                check(self.driver, self.driver.cuEventRecord(end, self.stream), "cuEventRecord")
                check(self.driver, self.driver.cuEventSynchronize(end), "cuEventSynchronize")
                times.append(
                    float(check(self.driver, self.driver.cuEventElapsedTime(start, end), "cuEventElapsedTime"))
                )
            return times
        finally:
            self.driver.cuEventDestroy(start)
            self.driver.cuEventDestroy(end)


def _free(driver: Any, ptr: int) -> None:
    # A finalizer must not raise; a failed free after a sticky error is expected and harmless.
    try:
        driver.cuMemFree(ptr)
    except Exception:
        pass


_devices: dict[int, CudaDevice] = {}
_devices_lock = threading.Lock()


def get_device(ordinal: int = 0) -> CudaDevice:
    """The process-wide ``CudaDevice`` for ``ordinal`` (created on first use)."""
    with _devices_lock:
        device = _devices.get(ordinal)
        if device is None:
            try:
                device = CudaDevice(ordinal)
            except ImportError as exc:
                raise CubeError(f"the cuda runtime needs cuda-bindings: {exc}") from exc
            _devices[ordinal] = device
        return device
