"""Buffers owned by a compute client."""

from __future__ import annotations

import numpy as np


class Handle:
    """A buffer owned by one client: element dtype, logical shape, strides (in elements) and storage.

    On the CPU runtime ``storage`` is a 1-D numpy array of ``dtype`` holding the whole allocation, and
    ``offset`` (elements) is where element (0, ..., 0) lives in it.  Other runtimes keep their own
    ``storage`` (a device pointer) and the same metadata.
    """

    __slots__ = ("client", "storage", "dtype", "shape", "strides", "offset", "view_size", "__weakref__")

    def __init__(self, client, storage, dtype, shape, strides=None, offset: int = 0) -> None:
        self.client = client
        self.storage = storage
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides) if strides is not None else contiguous_strides(self.shape)
        self.offset = int(offset)
        self.view_size: int | None = None  # a view (``handle[a:b]``) ends here, not at the allocation's end

    @property
    def size(self) -> int:
        """Number of elements in the buffer's storage (from ``offset`` on; a view's own elements only)."""
        if self.view_size is not None:
            return self.view_size
        return int(self.storage.size) - self.offset if hasattr(self.storage, "size") else _span(self)

    def __getitem__(self, index) -> Handle:
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

    @property
    def nbytes(self) -> int:
        """Bytes of storage from ``offset`` to the end of the allocation."""
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"Handle(dtype={self.dtype}, shape={self.shape}, strides={self.strides})"


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a dense array of ``shape``."""
    strides = []
    acc = 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= max(int(dim), 1)
    return tuple(reversed(strides))


def _span(handle: Handle) -> int:
    if not handle.shape:
        return 1
    return 1 + sum((d - 1) * s for d, s in zip(handle.shape, handle.strides) if d > 0)
