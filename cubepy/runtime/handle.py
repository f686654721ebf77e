"""Buffers owned by a compute client."""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np

from cubepy.runtime.strides import contiguous_strides as contiguous_strides  # re-exported: its users import it here

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from cubepy.runtime.client import ComputeClient

# Runtimes whose handles hold host memory (a numpy array) that compiled code or numpy writes in place.
HOST_RUNTIMES = frozenset({"interp", "cpu"})
_CDATA: type = ctypes.c_int.__mro__[-2]  # ctypes' common base class, which the module does not export


# id(storage) -> (weak reference to it, the address of its first byte): ``.ctypes.data`` costs about a
# microsecond and every launch asks (alignment facts, the cpu runtime's parameter block).  A freed storage's id
# may be reused; its entry is not (the weak reference is checked).  All forgotten when full.
ADDRESSES_KEPT = 256
_addresses: dict[int, tuple[weakref.ref[Any], int | None]] = {}


def storage_address(storage: Any) -> int | None:
    """The address of ``storage``'s first byte: a numpy array's data, a device allocation's ``ptr`` (None when
    the storage says neither); kept per storage."""
    found = _addresses.get(id(storage))
    if found is not None and found[0]() is storage:
        return found[1]
    address = storage.ctypes.data if isinstance(storage, np.ndarray) else getattr(storage, "ptr", None)
    address = address if isinstance(address, int) else None
    try:
        reference = weakref.ref(storage)
    except TypeError:  # no weak references: read again next time
        return address
    if len(_addresses) >= ADDRESSES_KEPT:
        _addresses.clear()
    _addresses[id(storage)] = (reference, address)
    return address


class Handle:
    """A buffer owned by one client: element dtype, logical shape, strides (in elements) and storage.

    On the interp and cpu runtimes ``storage`` is a 1-D numpy array of ``dtype`` holding the whole allocation, and
    ``offset`` (elements) is where element (0, ..., 0) lives in it.  Other runtimes keep their own
    ``storage`` (a device pointer) and the same metadata.
    """

    __slots__ = ("client", "storage", "dtype", "shape", "strides", "offset", "view_size", "__weakref__")

    def __init__(
        self,
        client: ComputeClient,
        storage: Any,  # a numpy array on host runtimes, the runtime's own allocation elsewhere
        dtype: DTypeLike,
        shape: Iterable[int],
        strides: Iterable[int] | None = None,
        offset: int = 0,
    ) -> None:
        self.client = client
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides) if strides is not None else contiguous_strides(self.shape)
        self.offset = int(offset)
        self.view_size: int | None = None  # a view (``handle[a:b]``) ends here, not at the allocation's end
        self.storage = check_storage(self, storage)

    @property
    def size(self) -> int:
        """Number of elements in the buffer's storage (from ``offset`` on; a view's own elements only)."""
        if self.view_size is not None:
            return self.view_size
        return int(self.storage.size) - self.offset if hasattr(self.storage, "size") else _span(self)

    def __getitem__(self, index: object) -> Handle:
        """``handle[a:b]``: a view of rows ``a..b`` (first axis, step 1) sharing this handle's storage.

        The view is a launch argument like any handle: a kernel writing through it changes only that
        range of the parent (checked launches bound it by the view's own length), with no copy.
        """
        from cubepy.errors import LaunchError

        if not isinstance(index, slice) or index.step not in (None, 1):
            raise LaunchError(
                f"a handle view takes one slice with step 1 over the first axis (handle[a:b]), got {index!r}"
            )
        if not self.shape or self.strides != contiguous_strides(self.shape):
            raise LaunchError(
                f"only a row-major contiguous handle can be viewed, got shape {self.shape} and strides {self.strides}"
            )
        start, stop, _ = index.indices(self.shape[0])
        stop = max(start, stop)
        row = self.strides[0]
        view = Handle(
            self.client,
            self.storage,
            self.dtype,
            (stop - start,) + self.shape[1:],
            self.strides,
            self.offset + start * row,
        )
        view.view_size = (stop - start) * row
        return view

    def first_address(self) -> int | None:
        """The address of element (0, ..., 0) (None when the storage does not say: ``storage_address``)."""
        base = storage_address(self.storage)
        return None if base is None else base + self.offset * self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of storage from ``offset`` to the end of the allocation."""
        return self.size * self.dtype.itemsize

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        """Export the buffer without a copy (DLPack): ``torch.from_dlpack(handle)``, ``np.from_dlpack(handle)``.

        A device handle finishes the client's queued work first, so the consumer's stream sees the kernel's writes.
        """
        from cubepy.runtime import dlpack  # on first export: it loads ml_dtypes (``import cubepy`` stays light)

        if isinstance(self.storage, np.ndarray):
            return dlpack.export(self._host_view(), stream, max_version, dl_device, copy)
        if copy:
            raise BufferError("a cubepy handle exports its own memory; copy=True is not supported")
        device = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError(f"{self!r} lives on DLPack device {device}, not {tuple(dl_device)}")
        self.client.sync()
        ptr = self.storage.ptr + self.offset * self.dtype.itemsize
        return dlpack.export_memory(ptr, self.dtype, self.shape, self.strides, device, self, max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)`` for a host handle (interp and cpu runtimes; DLPack's kDLCPU), ``(2, ordinal)`` for a cuda one."""
        if isinstance(self.storage, np.ndarray):
            return (1, 0)
        device = getattr(self.client, "device", None)
        if device is None or not hasattr(self.storage, "ptr"):
            raise BufferError(f"{self!r}: its storage is neither host memory nor a device allocation")
        return (2, int(device.info.ordinal))

    def _host_view(self) -> np.ndarray:
        """The buffer's elements as a numpy view of its storage (shape and strides), no copy."""
        flat = self.storage[self.offset :]
        if self.strides == contiguous_strides(self.shape):
            count = int(np.prod(self.shape)) if self.shape else 1
            return cast(np.ndarray, flat[:count].reshape(self.shape))
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(flat, self.shape, tuple(s * item for s in self.strides))

    def __repr__(self) -> str:
        return f"Handle(dtype={self.dtype}, shape={self.shape}, strides={self.strides})"


def check_storage(handle: Handle, storage: Any) -> Any:
    """``storage`` if a kernel may write it through ``handle`` (a C-contiguous array flattened to 1-D), else a
    ``LaunchError`` naming what is wrong."""
    shape, strides, offset = handle.shape, handle.strides, handle.offset
    if offset < 0 or (shape and min(shape) < 0) or (strides and min(strides) < 0):
        what = "offset" if offset < 0 else "shape" if shape and min(shape) < 0 else "strides"
        _refuse(handle, f"negative {what}; a handle's extents, strides and offset are non-negative")
    if len(strides) != len(shape):
        _refuse(handle, f"{len(strides)} strides for a rank-{len(shape)} shape")
    if type(storage) is not np.ndarray and not isinstance(storage, np.ndarray):
        backend = getattr(getattr(handle.client, "backend", None), "name", None)
        if backend in HOST_RUNTIMES:
            _refuse(
                handle,
                f"the storage of a {backend} handle must be a numpy array, got {type(storage).__name__} "
                f"(use client.create(array) to copy any array-like)",
            )
        return storage  # a device runtime's own allocation
    flags = storage.flags
    if not (flags.c_contiguous and flags.writeable and flags.owndata):  # else: a view, look closer
        problem = storage_problem(storage)
        if problem is not None:
            _refuse(
                handle,
                f"its numpy storage {problem}; a kernel may only write memory it can address safely "
                f"(use client.create(array) for a copy)",
            )
    if storage.dtype != handle.dtype:
        _refuse(handle, f"its numpy storage holds {storage.dtype}, not {handle.dtype}")
    flat = storage if storage.ndim == 1 else storage.reshape(-1)  # C-contiguous: a view, never a copy
    end = offset + (_span(handle) if all(shape) else 0)
    if end > flat.size:
        _refuse(
            handle,
            f"reaches element {end - 1} of a storage of {flat.size} elements "
            f"(offset + (extent - 1) * stride per axis must stay inside the storage)",
        )
    return flat


def _refuse(handle: Handle, problem: str) -> NoReturn:
    from cubepy.errors import LaunchError

    raise LaunchError(
        f"Handle(dtype={handle.dtype}, shape={handle.shape}, strides={handle.strides}, offset={handle.offset}): "
        f"{problem}"
    )


def storage_problem(array: np.ndarray) -> str | None:
    """Why a kernel may not write ``array`` in place (None: it may), in words naming the array property."""
    if not array.flags.c_contiguous:
        if any(stride < 0 for stride in array.strides):
            return f"has negative strides {array.strides} (a reversed view such as a[::-1])"
        return f"is not C-contiguous (strides {array.strides} bytes, a strided view such as a[::2])"
    if not array.flags.writeable:
        kind = type(_owner(array)).__name__
        return f"is not writeable (read-only{', backed by ' + kind if kind != 'ndarray' else ''})"
    owner = _owner(array)
    if owner is None:
        return "does not own its memory and keeps no reference to the object that does (it may be freed)"
    cdata: Any = owner  # ctypes' bookkeeping attributes, which typeshed does not declare
    if isinstance(owner, _CDATA) and not cdata._b_needsfree_ and cdata._b_base_ is None and not cdata._objects:
        return "does not own its memory and is not kept alive (a ctypes object made by from_address)"
    return None


def _owner(array: np.ndarray) -> object:
    """The object at the end of ``array``'s base chain (an array that owns its data, a buffer object, ...);
    None when nothing there owns or keeps the memory."""
    current: object = array
    while True:
        if isinstance(current, np.ndarray):
            if current.flags.owndata:
                return current
            if current.base is None:
                return None
            current = current.base
        elif isinstance(current, memoryview):
            current = current.obj
        else:
            return current


def _span(handle: Handle) -> int:
    if not handle.shape:
        return 1
    return 1 + sum((d - 1) * s for d, s in zip(handle.shape, handle.strides) if d > 0)
