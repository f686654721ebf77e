"""The CUDA driver as cuda-bindings exposes it: finding it, probing it, and turning its errors into CubeErrors.

Every driver call in cuda-bindings returns a tuple whose first item is a ``CUresult``; ``check`` unpacks
that tuple and raises a ``CubeError`` naming the call, the error (``cuGetErrorName``) and, for the
errors people actually meet, what it usually means.  Nothing here imports cuda-bindings at module
import time: cubepy must import on machines without it.
"""

from __future__ import annotations

import ctypes
import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from cubepy.errors import CubeError

NOT_INSTALLED = "cuda-bindings is not installed (pip install 'cubepy[cuda]')"
NO_DRIVER = "no CUDA driver (libcuda.so not found)"
NO_DEVICE = "no CUDA device"

_LIBCUDA_NAMES = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")

# What an error usually means for a cubepy user, keyed by the driver's error name.
_EXPLANATIONS = {
    "CUDA_ERROR_ILLEGAL_ADDRESS": "a kernel read or wrote memory outside every allocation; run it on the "
    "interp runtime with sanitize=True to find the access",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "a kernel accessed memory at an address not aligned to the access size "
    "(a line or TMA access on a misaligned offset?)",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "a kernel executed an illegal instruction (a TMA or mbarrier op on a "
    "misaligned shared address, or a trap)",
    "CUDA_ERROR_ASSERT": "a device-side assertion or trap fired",
    "CUDA_ERROR_LAUNCH_FAILED": "the kernel failed while running",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "the kernel ran past the watchdog (a deadlocked barrier wait?)",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "the kernel needs more registers or shared memory than a cube of "
    "this cube_dim can have; use a smaller cube_dim",
    "CUDA_ERROR_INVALID_PTX": "the driver's PTX compiler rejected the PTX (see the JIT log)",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the PTX is newer than this driver understands; install a ptxas no "
    "newer than the driver (so a cubin is loaded) or update the driver",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the cubin was built for another GPU architecture",
    "CUDA_ERROR_JIT_COMPILER_NOT_FOUND": "the driver has no PTX JIT compiler; install ptxas so cubepy "
    "loads a cubin instead",
    "CUDA_ERROR_OUT_OF_MEMORY": "the device has no memory left for this allocation",
    "CUDA_ERROR_INVALID_VALUE": "the driver refused one of the arguments",
    "CUDA_ERROR_NOT_FOUND": "the named symbol is not in the module",
}
# Errors after which the context is unusable: every later call fails the same way.
STICKY_ERRORS = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_LAUNCH_FAILED",
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    }
)


def import_driver() -> ModuleType:
    """``cuda.bindings.driver`` (raises ImportError when cuda-bindings is not installed)."""
    return importlib.import_module("cuda.bindings.driver")


def load_libcuda(names: tuple[str, ...] = _LIBCUDA_NAMES) -> None:
    """Load the driver library once, so a missing driver is reported before cuda-bindings trips on it."""
    errors = []
    for name in names:
        try:
            ctypes.CDLL(name)
            return
        except OSError as exc:
            errors.append(str(exc))
    raise OSError("; ".join(errors))


def probe(
    importer: Callable[[], ModuleType] = import_driver, load_library: Callable[[], None] = load_libcuda
) -> str | None:
    """Why the cuda runtime cannot run here (cuda-bindings, driver library, cuInit, devices), or None."""
    try:
        driver = importer()
    except ImportError:
        return NOT_INSTALLED
    try:
        load_library()
    except OSError:
        return NO_DRIVER
    try:
        result = driver.cuInit(0)
    except Exception as exc:  # cuda-bindings raises its own loader errors when libcuda is unusable
        return f"cuInit failed: {type(exc).__name__}: {exc}"
    if int(result[0]) != 0:
        name = error_name(driver, result[0])
        return NO_DEVICE if name == "CUDA_ERROR_NO_DEVICE" else f"cuInit failed: {name}"
    count = driver.cuDeviceGetCount()
    if int(count[0]) != 0:
        return f"cuDeviceGetCount failed: {error_name(driver, count[0])}"
    if int(count[1]) < 1:
        return NO_DEVICE
    return None


def error_name(driver: Any, error: Any) -> str:
    """The driver's name for a ``CUresult`` (``CUDA_ERROR_ILLEGAL_ADDRESS``), never raising."""
    try:
        status, name = driver.cuGetErrorName(error)
        if int(status) == 0 and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # the name is only decoration: fall back to the enum's own
        pass
    return getattr(error, "name", None) or f"CUresult {int(error)}"


def explain(name: str) -> str:
    """What an error name usually means for a cubepy user ('' when there is nothing to add)."""
    text = _EXPLANATIONS.get(name, "")
    if name in STICKY_ERRORS:
        text += ("; " if text else "") + "the CUDA context is now unusable: restart the process"
    return text


def check(driver: Any, result: tuple[Any, ...], call: str, detail: str = "", error: type[CubeError] = CubeError) -> Any:
    """Unpack a cuda-bindings result tuple: nothing, the one value, or the values; raise on an error.

    The exception names ``call``, the error and its usual meaning, then ``detail`` (the arguments
    that matter, a JIT log).
    """
    status = result[0]
    if int(status) != 0:
        raise driver_error(driver, status, call, detail, error)
    values = result[1:]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def driver_error(
    driver: Any, status: Any, call: str, detail: str = "", error: type[CubeError] = CubeError
) -> CubeError:
    """The exception for a failed driver call."""
    name = error_name(driver, status)
    message = f"{call} failed: {name}"
    meaning = explain(name)
    if meaning:
        message += f" ({meaning})"
    if detail:
        message += f"\n{detail}"
    return error(message)
