"""DLPack both ways, without copies: reading another library's tensor, and exporting a handle's memory.

Reading (:func:`from_dlpack`) is plain ctypes over ``dlpack.h``: the legacy ``DLManagedTensor`` capsule
(``"dltensor"``) and the versioned ``DLManagedTensorVersioned`` one (``"dltensor_versioned"``, DLPack 1.x, with
its read-only flag), every integer, float, bool, bfloat16 and the float8 types cubepy stores (``e4m3`` is
DLPack's ``float8_e4m3fn``, ``e5m2`` its ``float8_e5m2``).  The capsule is consumed and the exporter's deleter
runs when the last view of the memory dies.

Exporting (:func:`export`) hands numpy's own exporter a view of the host storage and, for the types numpy has
no DLPack code for (bfloat16, float8), relabels the dtype in the capsule it made: same memory, same lifetime
rules, so ``torch.from_dlpack(handle)`` and ``np.from_dlpack(handle)`` see the kernel's writes.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from cubepy.errors import LaunchError
from cubepy.runtime.strides import contiguous_strides

DLPACK_CPU = 1
DLPACK_CUDA = 2
DLPACK_CUDA_HOST = 3
DLPACK_CUDA_MANAGED = 13
HOST_DEVICE_TYPES = (DLPACK_CPU, DLPACK_CUDA_HOST)
CUDA_DEVICE_TYPES = (DLPACK_CUDA, DLPACK_CUDA_MANAGED)
DEVICE_NAMES = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    10: "rocm",
    13: "cuda_managed",
}

_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6
_DL_E4M3FN, _DL_E5M2 = 10, 12
# The types numpy's own DLPack code cannot name: (DLPack code, bits) of each, by numpy dtype.
_RELABELED: dict[np.dtype, tuple[int, int]] = {
    np.dtype(ml_dtypes.bfloat16): (_DL_BFLOAT, 16),
    np.dtype(ml_dtypes.float8_e4m3fn): (_DL_E4M3FN, 8),
    np.dtype(ml_dtypes.float8_e5m2): (_DL_E5M2, 8),
}
_BY_CODE = {code: dtype for dtype, code in _RELABELED.items()}


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


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32),
    ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", _DLTensor),
]

_LEGACY, _VERSIONED = b"dltensor", b"dltensor_versioned"

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass
class ExternalView:
    """A borrowed array: address of element 0, dtype, shape and strides (elements), device, and its keeper."""

    ptr: int
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device_type: int
    device_id: int
    owner: Any
    stream: int | None = None  # CUDA array interface v3: the stream the exporter's work is queued on
    read_only: bool = False

    @property
    def span(self) -> int:
        """Elements from element 0 to the last one the view reaches (strides are non-negative)."""
        if any(d == 0 for d in self.shape):
            return 0
        return 1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))

    @property
    def device_name(self) -> str:
        """``cpu``, ``cuda:1``, ...: the device as a user would name it."""
        name = DEVICE_NAMES.get(self.device_type, f"DLPack device type {self.device_type}")
        return name if self.device_type in HOST_DEVICE_TYPES else f"{name}:{self.device_id}"


def _capsule(obj: Any, stream: int | None) -> Any:
    """``obj.__dlpack__`` asked for a versioned capsule first (DLPack >= 1.0), else the legacy one."""
    if isinstance(obj, np.ndarray) and obj.dtype in _RELABELED:  # numpy cannot name these: export them as we do
        return export(obj, max_version=(1, 1))
    keywords: dict[str, Any] = {} if stream is None else {"stream": stream}
    try:
        return obj.__dlpack__(max_version=(1, 1), **keywords)
    except TypeError:  # an exporter from before DLPack 1.0 takes no max_version
        return obj.__dlpack__(**keywords)


def from_dlpack(obj: Any, stream: int | None = None, what: str = "from_dlpack") -> ExternalView:
    """An ExternalView of a DLPack exporter; the capsule is consumed and its deleter runs when the view dies."""
    if not hasattr(obj, "__dlpack__"):
        raise LaunchError(f"{what}: {type(obj).__name__} has no __dlpack__ (not a DLPack exporter)")
    try:
        capsule = _capsule(obj, stream)
    except BufferError as error:
        raise LaunchError(f"{what}: the {type(obj).__name__} cannot be exported through DLPack: {error}") from error
    if _is_valid(capsule, _VERSIONED):
        address = _get_pointer(capsule, _VERSIONED)
        versioned = _DLManagedTensorVersioned.from_address(address)
        if versioned.major != 1:
            raise LaunchError(f"{what}: DLPack version {versioned.major}.{versioned.minor} is not supported (1.x is)")
        tensor, read_only, name = versioned.dl_tensor, bool(versioned.flags & _READ_ONLY), b"used_dltensor_versioned"
    elif _is_valid(capsule, _LEGACY):
        address = _get_pointer(capsule, _LEGACY)
        tensor, read_only, name = _DLManagedTensor.from_address(address).dl_tensor, False, b"used_dltensor"
    else:
        raise LaunchError(f"{what}: __dlpack__ returned a capsule that is not an unused DLPack tensor")
    # Read everything before taking ownership: a refusal below leaves the capsule to its own destructor.
    dtype = _dtype(tensor.dtype, what)
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(ndim)) if tensor.strides else contiguous_strides(shape)
    ptr = int(tensor.data or 0) + int(tensor.byte_offset)
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    # The consumer owns the tensor now: rename the capsule so its destructor does not free it too.
    _set_name(capsule, name)
    keeper = _Keeper(obj, address, versioned=name == b"used_dltensor_versioned")
    return ExternalView(ptr, dtype, shape, strides, device[0], device[1], keeper, read_only=read_only)


class _Keeper:
    """Holds the exporter and calls the managed tensor's deleter once nothing borrows the memory any more."""

    def __init__(self, exporter: Any, address: int, versioned: bool) -> None:
        self.exporter = exporter
        weakref.finalize(self, _delete_managed, address, versioned)


def _delete_managed(address: int, versioned: bool) -> None:
    managed = (_DLManagedTensorVersioned if versioned else _DLManagedTensor).from_address(address)
    if managed.deleter:
        managed.deleter(address)


def _dtype(dl: _DLDataType, what: str) -> np.dtype:
    if dl.lanes != 1:
        raise LaunchError(f"{what}: DLPack vector types (lanes={dl.lanes}) are not supported")
    code, bits = int(dl.code), int(dl.bits)
    found = _BY_CODE.get((code, bits))
    if found is not None:
        return found
    if code == _DL_BOOL and bits == 8:
        return np.dtype(np.bool_)
    kind = {_DL_INT: "i", _DL_UINT: "u", _DL_FLOAT: "f"}.get(code)
    if kind is None or bits not in (8, 16, 32, 64) or (kind == "f" and bits == 8):
        raise LaunchError(
            f"{what}: DLPack dtype code {code} with {bits} bits has no cubepy element type (cubepy stores ints and "
            "uints of 8-64 bits, f16, bf16, f32, f64, bool and the float8 types e4m3fn and e5m2)"
        )
    return np.dtype(f"{kind}{bits // 8}")


def host_array(view: ExternalView) -> np.ndarray:
    """A writable 1-D numpy array over a host ExternalView's memory (``span`` elements) whose base keeps the
    exporter alive (a buffer object of its own, so that nothing mistakes it for unowned memory)."""
    return np.asarray(_Borrowed(view)).view(view.dtype)


class _Borrowed:
    """Numpy's base of a borrowed array: the memory's address and size, and the exporter's keeper."""

    def __init__(self, view: ExternalView) -> None:
        self.keeper = view.owner
        self.__array_interface__ = {
            "data": (view.ptr, False),
            "shape": (view.span,),
            "typestr": f"|u{view.dtype.itemsize}" if view.dtype.itemsize == 1 else f"<u{view.dtype.itemsize}",
            "version": 3,
        }


def export(
    array: np.ndarray, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
) -> Any:
    """``__dlpack__`` of a host numpy view whose dtype may be one numpy cannot export (bf16, float8)."""
    if copy:
        raise BufferError("a cubepy handle exports its own memory; copy=True is not supported")
    if dl_device is not None and tuple(dl_device)[0] not in HOST_DEVICE_TYPES:
        raise BufferError(f"a host handle cannot be exported to {DEVICE_NAMES.get(tuple(dl_device)[0], dl_device)}")
    label = _RELABELED.get(array.dtype)
    target = array if label is None else array.view(np.dtype(f"u{array.dtype.itemsize}"))
    capsule = target.__dlpack__() if max_version is None else target.__dlpack__(max_version=max_version)
    if label is not None:
        if _is_valid(capsule, _VERSIONED):
            tensor = _DLManagedTensorVersioned.from_address(_get_pointer(capsule, _VERSIONED)).dl_tensor
        else:
            tensor = _DLManagedTensor.from_address(_get_pointer(capsule, _LEGACY)).dl_tensor
        tensor.dtype.code, tensor.dtype.bits = label
    return capsule


# -- exporting memory numpy does not own (device allocations) -----------------------------------------------------
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]
# The destructor gets the capsule as a raw address: separate prototypes of the same C functions (setting argtypes on
# ``ctypes.pythonapi``'s cached ones would change them for the py_object callers above).
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
# What each exported tensor keeps alive (its struct, shape and stride arrays, the owner), by struct address; the
# deleter drops the entry, so the memory's owner lives exactly as long as some consumer holds the tensor.
_EXPORTED: dict[int, tuple[Any, ...]] = {}


def _dl_dtype(dtype: np.dtype) -> tuple[int, int]:
    relabeled = _RELABELED.get(dtype)
    if relabeled is not None:
        return relabeled
    if dtype == np.bool_:
        return _DL_BOOL, 8
    code = {"i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT}.get(dtype.kind)
    if code is None:
        raise BufferError(f"dtype {dtype} has no DLPack code")
    return code, dtype.itemsize * 8


@_DELETER  # type: ignore[untyped-decorator]  # a ctypes callback object: its call takes and gives Any
def _release(address: int) -> None:
    _EXPORTED.pop(address, None)


@_DESTRUCTOR  # type: ignore[untyped-decorator]  # a ctypes callback object, as above
def _destroy_unconsumed(capsule: int) -> None:
    # A capsule nobody consumed still owns its tensor (a consumer renames it to "used_..." first).
    for name in (_VERSIONED, _LEGACY):
        if _raw_is_valid(capsule, name):
            _release(_raw_get_pointer(capsule, name))


def export_memory(
    ptr: int,
    dtype: np.dtype,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    device: tuple[int, int],
    owner: Any,
    max_version: Any = None,
) -> Any:
    """A DLPack capsule over memory at ``ptr`` (any device) that keeps ``owner`` alive until the consumer is done.

    Versioned (DLPack 1.1) when the consumer's ``max_version`` allows it, else the legacy ``DLManagedTensor``.
    """
    ndim = len(shape)
    shape_array, strides_array = (ctypes.c_int64 * max(ndim, 1))(*shape), (ctypes.c_int64 * max(ndim, 1))(*strides)
    code, bits = _dl_dtype(np.dtype(dtype))
    tensor = _DLTensor(
        ctypes.c_void_p(ptr or None),
        _DLDevice(*device),
        ndim,
        _DLDataType(code, bits, 1),
        ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64)),
        ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64)),
        0,
    )
    managed: _DLManagedTensor | _DLManagedTensorVersioned
    if max_version is not None and tuple(max_version)[0] >= 1:
        managed = _DLManagedTensorVersioned(1, 1, None, _release, 0, tensor)
        name = _VERSIONED
    else:
        managed = _DLManagedTensor(tensor, None, _release)
        name = _LEGACY
    address = ctypes.addressof(managed)
    _EXPORTED[address] = (managed, shape_array, strides_array, owner)
    return _new_capsule(address, name, _destroy_unconsumed)
