"""Borrowing other libraries' device arrays: ``__cuda_array_interface__`` and DLPack, without copies.

``external_view(obj)`` reads either protocol into an ``ExternalView`` (address, dtype, shape, strides in
elements, what must stay alive).  The DLPack side is plain ctypes over the ``DLManagedTensor`` struct
(dlpack.h, v0.8 layout), so it also reads CPU exporters such as numpy: that is how it is tested on
machines without a GPU.  The client then refuses non-CUDA devices.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from cubepy.errors import LaunchError

DLPACK_CPU = 1
DLPACK_CUDA = 2
DLPACK_CUDA_MANAGED = 13
CUDA_DEVICE_TYPES = (DLPACK_CUDA, DLPACK_CUDA_MANAGED)

# DLDataTypeCode -> numpy kind, and the bfloat16 code
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass
class ExternalView:
    """A borrowed array: device address of element 0, dtype, shape and strides (elements), and its keeper."""

    ptr: int
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device_type: int
    device_id: int
    owner: Any
    stream: int | None = None  # CUDA array interface v3: the stream the exporter's work is queued on

    @property
    def span(self) -> int:
        """Elements from element 0 to the last one the view reaches (strides are non-negative)."""
        if any(d == 0 for d in self.shape):
            return 0
        return 1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))


def external_view(obj: Any) -> ExternalView:
    """Read ``obj``'s ``__cuda_array_interface__`` (preferred) or ``__dlpack__`` into an ExternalView."""
    try:
        interface = obj.__cuda_array_interface__
    except (AttributeError, TypeError):  # TypeError: PyTorch has no typestr for bf16 and raises; DLPack has one
        interface = None
    if interface is not None:
        return from_cuda_array_interface(obj, interface)
    if hasattr(obj, "__dlpack__"):
        return from_dlpack(obj)
    raise LaunchError(f"from_external: {type(obj).__name__} has neither __cuda_array_interface__ nor __dlpack__")


def from_cuda_array_interface(obj: Any, cai: dict[str, Any] | None = None) -> ExternalView:
    """An ExternalView of an object exporting ``__cuda_array_interface__`` (versions 0 to 3)."""
    cai = obj.__cuda_array_interface__ if cai is None else cai
    dtype = np.dtype(cai["typestr"])
    shape = tuple(int(d) for d in cai["shape"])
    ptr = int(cai["data"][0] or 0)
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides = _contiguous(shape)
    else:
        strides = _element_strides(tuple(int(s) for s in byte_strides), dtype.itemsize)
    if cai.get("mask") is not None:
        raise LaunchError("from_external: masked arrays (a __cuda_array_interface__ 'mask') are not supported")
    return ExternalView(ptr, dtype, shape, strides, DLPACK_CUDA, -1, obj, cai.get("stream"))


def from_dlpack(obj: Any, stream: int | None = None) -> ExternalView:
    """An ExternalView of a DLPack exporter; the capsule is consumed and its deleter runs when the view dies."""
    capsule = obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise LaunchError("from_external: __dlpack__ returned a capsule that is not an unused 'dltensor'")
    address = _capsule_get_pointer(capsule, b"dltensor")
    managed = _DLManagedTensor.from_address(address)
    tensor = managed.dl_tensor
    dtype = _dlpack_dtype(tensor.dtype)
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(ndim)) if tensor.strides else _contiguous(shape)
    ptr = int(tensor.data or 0) + int(tensor.byte_offset)
    # The consumer owns the tensor now: rename the capsule so its destructor does not free it too.
    _capsule_set_name(capsule, b"used_dltensor")
    keeper = _DLPackKeeper(obj, address)
    return ExternalView(
        ptr, dtype, shape, strides, int(tensor.device.device_type), int(tensor.device.device_id), keeper
    )


class _DLPackKeeper:
    """Holds the exporter and calls the managed tensor's deleter once nothing borrows it any more."""

    def __init__(self, exporter: Any, address: int) -> None:
        self.exporter = exporter
        weakref.finalize(self, _delete_managed, address)


def _delete_managed(address: int) -> None:
    managed = _DLManagedTensor.from_address(address)
    if managed.deleter:
        managed.deleter(ctypes.pointer(managed))


def _dlpack_dtype(dl: _DLDataType) -> np.dtype:
    if dl.lanes != 1:
        raise LaunchError(f"from_external: DLPack vector types (lanes={dl.lanes}) are not supported")
    code, bits = int(dl.code), int(dl.bits)
    if code == _DL_BFLOAT and bits == 16:
        return np.dtype(ml_dtypes.bfloat16)
    if code == _DL_BOOL and bits == 8:
        return np.dtype(np.bool_)
    kind = {_DL_INT: "i", _DL_UINT: "u", _DL_FLOAT: "f"}.get(code)
    if kind is None or bits % 8:
        raise LaunchError(f"from_external: unsupported DLPack dtype (code {code}, {bits} bits)")
    return np.dtype(f"{kind}{bits // 8}")


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= max(dim, 1)
    return tuple(reversed(strides))


def _element_strides(byte_strides: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    if any(s % itemsize for s in byte_strides):
        raise LaunchError(f"from_external: byte strides {byte_strides} are not multiples of the item size {itemsize}")
    return tuple(s // itemsize for s in byte_strides)
