"""Borrowing other libraries' device arrays: ``__cuda_array_interface__`` and DLPack, without copies.

``external_view(obj)`` reads either protocol into an ``ExternalView`` (address, dtype, shape, strides in
elements, what must stay alive).  The DLPack side is ``cubepy.runtime.dlpack``, shared with the host
runtimes' ``from_dlpack``; it also reads CPU exporters such as numpy, which is how it is tested on machines
without a GPU.  The client then refuses non-CUDA devices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubepy.errors import LaunchError
from cubepy.runtime.dlpack import (
    CUDA_DEVICE_TYPES,
    DLPACK_CPU,
    DLPACK_CUDA,
    DLPACK_CUDA_MANAGED,
    ExternalView,
    from_dlpack,
)
from cubepy.runtime.handle import contiguous_strides

__all__ = [
    "CUDA_DEVICE_TYPES",
    "DLPACK_CPU",
    "DLPACK_CUDA",
    "DLPACK_CUDA_MANAGED",
    "ExternalView",
    "external_view",
    "from_cuda_array_interface",
    "from_dlpack",
]


def external_view(obj: Any) -> ExternalView:
    """Read ``obj``'s ``__cuda_array_interface__`` (preferred) or ``__dlpack__`` into an ExternalView."""
    try:
        interface = obj.__cuda_array_interface__
    except (AttributeError, TypeError):  # TypeError: PyTorch has no typestr for bf16 and raises; DLPack has one
        interface = None
    if interface is not None:
        return from_cuda_array_interface(obj, interface)
    if hasattr(obj, "__dlpack__"):
        return from_dlpack(obj, what="from_external")
    raise LaunchError(f"from_external: {type(obj).__name__} has neither __cuda_array_interface__ nor __dlpack__")


def from_cuda_array_interface(obj: Any, cai: dict[str, Any] | None = None) -> ExternalView:
    """An ExternalView of an object exporting ``__cuda_array_interface__`` (versions 0 to 3)."""
    cai = obj.__cuda_array_interface__ if cai is None else cai
    dtype = np.dtype(cai["typestr"])
    shape = tuple(int(d) for d in cai["shape"])
    ptr = int(cai["data"][0] or 0)
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides = contiguous_strides(shape)
    else:
        strides = _element_strides(tuple(int(s) for s in byte_strides), dtype.itemsize)
    if cai.get("mask") is not None:
        raise LaunchError("from_external: masked arrays (a __cuda_array_interface__ 'mask') are not supported")
    read_only = bool(cai["data"][1])  # the interface's (pointer, read-only) pair
    return ExternalView(ptr, dtype, shape, strides, DLPACK_CUDA, -1, obj, cai.get("stream"), read_only=read_only)


def _element_strides(byte_strides: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    if any(s % itemsize for s in byte_strides):
        raise LaunchError(f"from_external: byte strides {byte_strides} are not multiples of the item size {itemsize}")
    return tuple(s // itemsize for s in byte_strides)
