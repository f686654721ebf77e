"""A host-memory stand-in for ``cuda.bindings.driver``, so the cuda runtime's logic runs without a GPU.

It follows cuda-bindings' calling convention (every call returns ``(CUresult, *values)``), keeps
"device" allocations in host memory (addresses are real host addresses, so copies are memmoves),
records every call, and can fail any call with a chosen error.  ``InterpLauncher`` makes
``cuLaunchKernel`` decode the ``kernelParams`` array (pointers, scalars, metadata words) *from memory*,
exactly as the GPU would read them, rebuild the bindings and run the kernel on the interp runtime: a wrong byte in
the packing shows up as a wrong result.
"""

from __future__ import annotations

import ctypes
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from cubepy.compiler import abi
from cubepy.ir import KernelDefinition
from cubepy.runtime import interp
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.handle import Handle

ERROR_CODES = {
    "CUDA_SUCCESS": 0,
    "CUDA_ERROR_INVALID_VALUE": 1,
    "CUDA_ERROR_OUT_OF_MEMORY": 2,
    "CUDA_ERROR_NO_DEVICE": 100,
    "CUDA_ERROR_INVALID_IMAGE": 200,
    "CUDA_ERROR_NO_BINARY_FOR_GPU": 209,
    "CUDA_ERROR_INVALID_PTX": 218,
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": 222,
    "CUDA_ERROR_NOT_FOUND": 500,
    "CUDA_ERROR_ILLEGAL_ADDRESS": 700,
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": 701,
}
ERROR_NAMES = {code: name for name, code in ERROR_CODES.items()}

H200_ATTRIBUTES = {
    "COMPUTE_CAPABILITY_MAJOR": 9,
    "COMPUTE_CAPABILITY_MINOR": 0,
    "MULTIPROCESSOR_COUNT": 132,
    "MAX_THREADS_PER_BLOCK": 1024,
    "MAX_GRID_DIM_X": 2**31 - 1,
    "MAX_GRID_DIM_Y": 65535,
    "MAX_GRID_DIM_Z": 65535,
    "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024,
}


@dataclass(frozen=True)
class Member:
    """An enum member of the fake: its name or value, whichever it was made from."""

    key: Any


class Enum:
    """Any attribute is a member (``CUjit_option.CU_JIT_ERROR_LOG_BUFFER``); calling makes one from a value."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, key: str) -> Member:
        return Member(key)

    def __call__(self, value: int) -> Member:
        return Member(int(value))


class Sized(int):
    """``cuuint64_t`` / ``cuuint32_t``: an int that remembers its width, to check the conversions."""

    bits = 0


class U64(Sized):
    bits = 64


class U32(Sized):
    bits = 32


class FakeTensorMap:
    """A 128-byte descriptor whose bytes encode a call number, so tests can find them in the params."""

    def __init__(self, number: int) -> None:
        self.buffer = (ctypes.c_uint8 * 128)(*([number % 256] * 128))

    def getPtr(self) -> int:  # noqa: N802  (cuda-bindings' spelling)
        return ctypes.addressof(self.buffer)


@dataclass
class LaunchRecord:
    """One ``cuLaunchKernel``: its function, launch shape and the parameter bytes read through the pointers."""

    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    param_bytes: list[bytes] = field(default_factory=list)
    pointers: list[int] = field(default_factory=list)


class FakeDriver:
    """The subset of ``cuda.bindings.driver`` cubepy uses, on host memory."""

    def __init__(self, attributes: dict[str, int] | None = None, function_attributes: dict[str, int] | None = None):
        self.attributes = dict(H200_ATTRIBUTES, **(attributes or {}))
        self.function_attributes = {
            "SHARED_SIZE_BYTES": 0,
            "MAX_THREADS_PER_BLOCK": 1024,
            "NUM_REGS": 32,
            **(function_attributes or {}),
        }
        self.calls: list[tuple[str, tuple]] = []
        self.failures: dict[str, str] = {}  # call name -> error name to return once
        self.allocations: dict[int, np.ndarray] = {}
        self.freed: list[int] = []
        self.modules: dict[int, bytes] = {}
        self.functions: dict[int, tuple[int, str]] = {}
        self.launches: list[LaunchRecord] = []
        self.launcher = None  # called with (driver, record, kernelParams address) when set
        self.jit_log = b""
        self._ids = itertools.count(1)
        for name in (
            "CUdevice_attribute",
            "CUfunction_attribute",
            "CUjit_option",
            "CUevent_flags",
            "CUtensorMapDataType",
            "CUtensorMapInterleave",
            "CUtensorMapSwizzle",
            "CUtensorMapL2promotion",
            "CUtensorMapFloatOOBfill",
        ):
            setattr(self, name, Enum(name))
        self.cuuint64_t, self.cuuint32_t = U64, U32

    # -- plumbing -----------------------------------------------------------------------------
    def _result(self, call: str, args: tuple, *values) -> tuple:
        self.calls.append((call, args))
        failure = self.failures.pop(call, None)
        if failure is not None:
            return (ERROR_CODES[failure],) + tuple(None for _ in values)
        return (0, *values)

    def called(self, call: str) -> list[tuple]:
        """The argument tuples of every call of ``call``, in order."""
        return [args for name, args in self.calls if name == call]

    def allocation_of(self, address: int) -> tuple[int, np.ndarray]:
        """The (base address, bytes) of the live allocation containing ``address``."""
        for base, memory in self.allocations.items():
            if base <= address < base + max(memory.nbytes, 1):
                return base, memory
        raise AssertionError(f"address {address:#x} is in no live allocation")

    # -- init, device, context ------------------------------------------------------------------
    def cuInit(self, flags):  # noqa: N802
        return self._result("cuInit", (flags,))

    def cuDeviceGetCount(self):  # noqa: N802
        return self._result("cuDeviceGetCount", (), 1)

    def cuDeviceGet(self, ordinal):  # noqa: N802
        return self._result("cuDeviceGet", (ordinal,), 1000 + ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):  # noqa: N802
        return self._result("cuDevicePrimaryCtxRetain", (dev,), 2000)

    def cuCtxSetCurrent(self, ctx):  # noqa: N802
        return self._result("cuCtxSetCurrent", (ctx,))

    def cuStreamCreate(self, flags):  # noqa: N802
        return self._result("cuStreamCreate", (flags,), 3000)

    def cuDeviceGetName(self, length, dev):  # noqa: N802
        return self._result("cuDeviceGetName", (length, dev), b"Fake H200".ljust(length, b"\0"))

    def cuDeviceGetAttribute(self, attr, dev):  # noqa: N802
        name = attr.key.removeprefix("CU_DEVICE_ATTRIBUTE_")
        return self._result("cuDeviceGetAttribute", (attr, dev), self.attributes[name])

    def cuDriverGetVersion(self):  # noqa: N802
        return self._result("cuDriverGetVersion", (), 13000)

    def cuDeviceTotalMem(self, dev):  # noqa: N802
        return self._result("cuDeviceTotalMem", (dev,), 141 * 2**30)

    def cuGetErrorName(self, error):  # noqa: N802
        return (0, ERROR_NAMES.get(int(error), "CUDA_ERROR_UNKNOWN").encode())

    # -- memory ---------------------------------------------------------------------------------
    def cuMemAlloc(self, nbytes):  # noqa: N802
        raw = np.zeros(nbytes + 256, np.uint8)
        start = (-raw.ctypes.data) % 256  # the driver's allocations are 256-byte aligned
        memory = raw[start : start + nbytes]
        self.allocations[int(memory.ctypes.data)] = memory
        return self._result("cuMemAlloc", (nbytes,), int(memory.ctypes.data))

    def cuMemFree(self, ptr):  # noqa: N802
        self.allocations.pop(int(ptr), None)
        self.freed.append(int(ptr))
        return self._result("cuMemFree", (ptr,))

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):  # noqa: N802
        self.allocation_of(dst)
        ctypes.memmove(dst, src, nbytes)
        return self._result("cuMemcpyHtoDAsync", (dst, src, nbytes, stream))

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):  # noqa: N802
        self.allocation_of(src)
        ctypes.memmove(dst, src, nbytes)
        return self._result("cuMemcpyDtoHAsync", (dst, src, nbytes, stream))

    def cuMemsetD8Async(self, dst, value, nbytes, stream):  # noqa: N802
        ctypes.memset(dst, value, nbytes)
        return self._result("cuMemsetD8Async", (dst, value, nbytes, stream))

    def cuStreamSynchronize(self, stream):  # noqa: N802
        return self._result("cuStreamSynchronize", (stream,))

    def cuCtxSynchronize(self):  # noqa: N802
        return self._result("cuCtxSynchronize", ())

    # -- events ---------------------------------------------------------------------------------
    def cuEventCreate(self, flags):  # noqa: N802
        return self._result("cuEventCreate", (flags,), next(self._ids))

    def cuEventRecord(self, event, stream):  # noqa: N802
        return self._result("cuEventRecord", (event, stream))

    def cuEventSynchronize(self, event):  # noqa: N802
        return self._result("cuEventSynchronize", (event,))

    def cuEventElapsedTime(self, start, end):  # noqa: N802
        return self._result("cuEventElapsedTime", (start, end), 0.5)

    def cuEventDestroy(self, event):  # noqa: N802
        return self._result("cuEventDestroy", (event,))

    # -- modules --------------------------------------------------------------------------------
    def cuModuleLoadData(self, image):  # noqa: N802
        module = next(self._ids)
        self.modules[module] = bytes(image)
        return self._result("cuModuleLoadData", (image,), module)

    def cuModuleLoadDataEx(self, image, count, options, values):  # noqa: N802
        module = next(self._ids)
        self.modules[module] = bytes(image)
        result = self._result("cuModuleLoadDataEx", (image, count, options, values), module)
        if result[0] != 0:
            log = values[0]
            log[: len(self.jit_log)] = self.jit_log
        return result

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        function = next(self._ids)
        self.functions[function] = (module, name.decode())
        return self._result("cuModuleGetFunction", (module, name), function)

    def cuFuncGetAttribute(self, attr, function):  # noqa: N802
        name = attr.key.removeprefix("CU_FUNC_ATTRIBUTE_")
        return self._result("cuFuncGetAttribute", (attr, function), self.function_attributes[name])

    def cuFuncSetAttribute(self, function, attr, value):  # noqa: N802
        return self._result("cuFuncSetAttribute", (function, attr, value))

    # -- tensor maps ----------------------------------------------------------------------------
    def cuTensorMapEncodeTiled(self, *args):  # noqa: N802
        return self._result("cuTensorMapEncodeTiled", args, FakeTensorMap(len(self.calls) + 1))

    def cuTensorMapEncodeIm2col(self, *args):  # noqa: N802
        return self._result("cuTensorMapEncodeIm2col", args, FakeTensorMap(len(self.calls) + 1))

    # -- launch ---------------------------------------------------------------------------------
    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # noqa: N802
        record = LaunchRecord(function, (gx, gy, gz), (bx, by, bz), shared)
        result = self._result("cuLaunchKernel", (function, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
        if result[0] == 0 and self.launcher is not None:
            self.launcher(self, record, params)
        self.launches.append(record)
        return result


def read_pointer_array(address: int, count: int) -> list[int]:
    """The ``count`` addresses of a ``void*[]`` at ``address``."""
    return [int(p) for p in (ctypes.c_uint64 * count).from_address(address)]


class InterpLauncher:
    """Runs each launch on the interp runtime from the bytes the GPU would read (the parameter block)."""

    def __init__(self, definitions: dict[str, KernelDefinition]) -> None:
        self.definitions = definitions  # PTX entry name -> definition

    def __call__(self, driver: FakeDriver, record: LaunchRecord, params_address: int) -> None:
        module, name = driver.functions[record.function]
        definition = self.definitions[name]
        layout = abi.param_layout(definition)
        record.pointers = read_pointer_array(params_address, len(layout.slots))
        bindings = Bindings()
        addresses: list[int] = []
        words: dict[tuple[int, str, int], int] = {}
        for slot, pointer in zip(layout.slots, record.pointers):
            raw = ctypes.string_at(pointer, slot.size)
            record.param_bytes.append(raw)
            if slot.role in ("array", "tensor"):
                addresses.append(int.from_bytes(raw, "little"))
            elif slot.role == "scalar":
                assert slot.type is not None
                ty = slot.type
                lanes = np.frombuffer(raw[: ty.elem.size * ty.line], dtype=ty.elem.numpy)
                if ty.elem.is_bool:
                    lanes = lanes.astype(bool)
                bindings.add_scalar(lanes[0] if ty.line == 1 else lanes.copy())
            elif slot.word is not None:
                words[(slot.word.buffer, slot.word.field, slot.word.dim)] = int.from_bytes(raw, "little")
        for param, address in zip(definition.buffers, addresses):
            bindings.buffers.append(_binding_from_words(driver, param, address, words))
        interp.run(definition, record.grid, bindings)


def _binding_from_words(driver: FakeDriver, param, address: int, words: dict) -> BufferBinding:
    """The buffer binding the kernel sees: its memory from the address, its metadata from the words."""
    slot, ty = param.var.id, param.var.type
    dtype = ty.elem.numpy
    base, memory = driver.allocation_of(address)
    start = address - base
    assert start % dtype.itemsize == 0, f"buffer {slot} starts mid-element"
    storage = memory[start:].view(dtype)
    buffer_len, length = words[(slot, "buffer_len", 0)], words[(slot, "len", 0)]
    # A whole allocation's buffer_len reaches its end; a view's (handle[a:b]) ends before it.
    assert buffer_len <= storage.size // ty.line, f"buffer {slot}: the parameters say buffer_len {buffer_len}"
    storage = storage[: buffer_len * ty.line]
    if (slot, "shape", 0) in words:
        rank = sum(1 for buffer, field, _ in words if (buffer, field) == (slot, "shape"))
        shape = tuple(words[(slot, "shape", d)] for d in range(rank))
        strides = tuple(words[(slot, "stride", d)] for d in range(rank))
    else:
        shape, strides = (length * ty.line,), (1,)
    handle = Handle(None, storage, dtype, shape, strides)
    return BufferBinding(handle, ty.line, shape, strides)


def fake_compiler(definitions: dict[str, KernelDefinition], *, cubin: bool = True, dynamic_shared: int = 0):
    """A ``compile_definition`` stand-in: registers the definition under its name, returns a CompiledKernel-like."""

    def compile_definition(definition: KernelDefinition, target: str, *, assemble: bool = True):
        definitions[definition.name] = definition
        return SimpleNamespace(
            name=definition.name,
            definition=definition,
            target=target,
            ptx=f"// fake PTX of {definition.name}\n",
            cubin=f"fake cubin of {definition.name}".encode() if cubin else None,
            dynamic_shared_bytes=dynamic_shared,
        )

    return compile_definition
