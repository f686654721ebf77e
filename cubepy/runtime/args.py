"""Launch arguments: the runtime halves of kernel parameters, and the launch shape."""

from __future__ import annotations

import attrs

from cubepy.errors import LaunchError
from cubepy.runtime.handle import Handle

MAX_UNITS_PER_CUBE = 1024


@attrs.frozen
class _Extent3:
    """An (x, y, z) launch extent whose axes are ints of at least ``MINIMUM``."""

    MINIMUM = 0
    x: int
    y: int = 1
    z: int = 1

    def __attrs_post_init__(self) -> None:
        for axis in ("x", "y", "z"):
            value = getattr(self, axis)
            if not isinstance(value, int) or value < self.MINIMUM:
                expected = "a non-negative int" if self.MINIMUM == 0 else "a positive int"
                raise LaunchError(f"{type(self).__name__}.{axis} = {value!r}: expected {expected}")

    def as_tuple(self) -> tuple[int, int, int]:
        """(x, y, z)."""
        return (self.x, self.y, self.z)

    @property
    def total(self) -> int:
        """x * y * z."""
        return self.x * self.y * self.z


@attrs.frozen
class CubeCount(_Extent3):
    """How many cubes (thread blocks) to launch along x, y, z."""


@attrs.frozen
class CubeDim(_Extent3):
    """How many units (threads) one cube has along x, y, z; at most 1024 in all."""

    MINIMUM = 1

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.total > MAX_UNITS_PER_CUBE:
            raise LaunchError(
                f"CubeDim({self.x}, {self.y}, {self.z}) has {self.total} units; "
                f"a cube holds at most {MAX_UNITS_PER_CUBE}"
            )


def _check_handle(handle: object, what: str) -> Handle:
    if not isinstance(handle, Handle):
        raise LaunchError(f"{what} expects a Handle from client.create/empty/zeros, got {type(handle).__name__}")
    return handle


def _check_line_size(line_size: int, what: str) -> int:
    if line_size not in (1, 2, 3, 4, 8, 16):
        raise LaunchError(f"{what}: line_size = {line_size!r}, expected one of 1, 2, 3, 4, 8, 16")
    return line_size


class ArrayArg:
    """A buffer passed as ``Array[T]`` (or ``Array[Line[T]]`` with ``line_size`` > 1)."""

    __slots__ = ("handle", "line_size", "shape", "strides")

    def __init__(self, handle: Handle, line_size: int = 1) -> None:
        self.handle = _check_handle(handle, "ArrayArg")
        self.line_size = _check_line_size(line_size, "ArrayArg")
        self.shape = (handle.size,)
        self.strides = (1,)

    def __repr__(self) -> str:
        return f"ArrayArg({self.handle!r}, line_size={self.line_size})"


class TensorArg:
    """A buffer passed as ``Tensor[T]``, with shape and strides (in elements) as runtime metadata."""

    __slots__ = ("handle", "line_size", "shape", "strides")

    def __init__(self, handle: Handle, line_size: int = 1) -> None:
        self.handle = _check_handle(handle, "TensorArg")
        self.line_size = _check_line_size(line_size, "TensorArg")
        self.shape = handle.shape
        self.strides = handle.strides

    @classmethod
    def from_raw_parts(cls, handle: Handle, strides, shape, line_size: int = 1) -> TensorArg:
        """A tensor view of ``handle`` with explicit strides and shape (elements, outermost first)."""
        arg = cls(handle, line_size)
        strides, shape = tuple(int(s) for s in strides), tuple(int(s) for s in shape)
        if len(strides) != len(shape):
            raise LaunchError(f"TensorArg.from_raw_parts: {len(strides)} strides for a rank-{len(shape)} shape")
        arg.strides, arg.shape = strides, shape
        return arg

    def __repr__(self) -> str:
        return f"TensorArg({self.handle!r}, shape={self.shape}, strides={self.strides}, line_size={self.line_size})"


class ScalarArg:
    """A scalar parameter value with its element type (a cubepy type such as ``cp.f32``)."""

    __slots__ = ("value", "elem")

    def __init__(self, value, elem) -> None:
        self.value = value
        self.elem = elem

    def __repr__(self) -> str:
        return f"ScalarArg({self.value!r}, {self.elem!r})"
