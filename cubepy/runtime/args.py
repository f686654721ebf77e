"""Launch arguments: the runtime halves of kernel parameters, and the launch shape."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from cubepy.errors import LaunchError
from cubepy.ir.kernel import MAX_CUBE_COUNT, MAX_CUBE_DIM, MAX_UNITS_PER_CUBE, launch_shape_problem
from cubepy.ir.ops.cluster import MAX_CLUSTER_CUBES
from cubepy.runtime.handle import Handle


@attrs.frozen
class _Extent3:
    """An (x, y, z) launch extent whose axes are ints of at least ``MINIMUM`` and at most ``MAXIMUM``."""

    MINIMUM = 0
    MAXIMUM = MAX_CUBE_COUNT
    x: int
    y: int = 1
    z: int = 1

    EXAMPLE = "(4, 2, 1)"

    def __attrs_post_init__(self) -> None:
        x, y, z = self.x, self.y, self.z
        low, (high_x, high_y, high_z) = self.MINIMUM, self.MAXIMUM
        if (  # the common case, tested without building a message: plain ints in range
            type(x) is int
            and type(y) is int
            and type(z) is int
            and low <= x <= high_x
            and low <= y <= high_y
            and low <= z <= high_z
            and (self.MAXIMUM is not MAX_CUBE_DIM or x * y * z <= MAX_UNITS_PER_CUBE)
        ):
            return
        name = type(self).__name__
        if isinstance(self.x, (tuple, list)):  # CubeCount((4, 2, 1)): the axes are separate arguments here
            axes = ", ".join(map(repr, self.x))
            raise LaunchError(
                f"{name}({self.x!r}): a {type(self.x).__name__} was passed as x; {name} takes the axes as "
                f"separate ints: {name}({axes}) ({name}(*axes) unpacks one); kernel.launch also takes the tuple "
                f"itself as cube_count or cube_dim"
            )
        problem = launch_shape_problem(name, self.as_tuple(), self.MAXIMUM, self.MINIMUM)
        if problem is not None:
            wrong = [v for v in self.as_tuple() if isinstance(v, bool) or not isinstance(v, int)]
            if wrong:
                problem += f" (got a {type(wrong[0]).__name__}), as in {name}{self.EXAMPLE}"
            raise LaunchError(problem)

    def as_tuple(self) -> tuple[int, int, int]:
        """(x, y, z)."""
        return (self.x, self.y, self.z)

    @property
    def total(self) -> int:
        """x * y * z."""
        return self.x * self.y * self.z


@attrs.frozen
class ClusterDim(_Extent3):
    """How many cubes one cluster groups along x, y, z (sm_90): at most 8 cubes in all, the portable size."""

    MINIMUM = 1
    MAXIMUM = (MAX_CLUSTER_CUBES,) * 3
    EXAMPLE = "(2, 1, 1)"

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.total > MAX_CLUSTER_CUBES:
            raise LaunchError(
                f"ClusterDim{self.as_tuple()} has {self.total} cubes; a cluster holds at most {MAX_CLUSTER_CUBES}"
            )


@attrs.frozen
class CubeCount(_Extent3):
    """How many cubes (thread blocks) to launch along x, y, z: x at most 2**31 - 1, y and z at most 65535.

    ``cluster``: group the cubes into clusters of this shape (each axis of the count a multiple of it); the
    cubes of a cluster run together and share their shared memory (``cubepy.ir.ops.cluster``).
    """

    cluster: ClusterDim | None = None

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.cluster is None:
            return
        if not isinstance(self.cluster, ClusterDim):
            raise LaunchError(f"CubeCount.cluster: expected a cp.ClusterDim, got {type(self.cluster).__name__}")
        for axis, count, size in zip("xyz", self.as_tuple(), self.cluster.as_tuple()):
            if count % size:
                raise LaunchError(
                    f"CubeCount{self.as_tuple()}: {axis} = {count} is not a multiple of the cluster's {axis} = {size} "
                    f"(ClusterDim{self.cluster.as_tuple()})"
                )

    def cluster_shape(self) -> tuple[int, int, int]:
        """The cluster shape, (1, 1, 1) without clusters."""
        return (1, 1, 1) if self.cluster is None else self.cluster.as_tuple()


@attrs.frozen
class CubeDim(_Extent3):
    """How many units (threads) one cube has along x, y, z: x, y at most 1024, z at most 64, 1024 in all."""

    MINIMUM = 1
    MAXIMUM = MAX_CUBE_DIM
    EXAMPLE = "(32, 4, 1)"


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
    def from_raw_parts(
        cls, handle: Handle, strides: Iterable[int], shape: Iterable[int], line_size: int = 1
    ) -> TensorArg:
        """A tensor view of ``handle`` with explicit strides and shape (elements, outermost first)."""
        arg = cls(handle, line_size)
        strides, shape = tuple(int(s) for s in strides), tuple(int(s) for s in shape)
        if len(strides) != len(shape):
            raise LaunchError(f"TensorArg.from_raw_parts: {len(strides)} strides for a rank-{len(shape)} shape")
        for what, values in (("stride", strides), ("extent", shape)):
            negative = [(axis, value) for axis, value in enumerate(values) if value < 0]
            if negative:
                axis, value = negative[0]
                raise LaunchError(
                    f"TensorArg.from_raw_parts: {what} {value} of axis {axis} is negative; strides "
                    f"and shapes are unsigned in kernels (view a reversed axis by indexing "
                    f"`n - 1 - i` in the kernel instead)"
                )
        arg.strides, arg.shape = strides, shape
        return arg

    def __repr__(self) -> str:
        return f"TensorArg({self.handle!r}, shape={self.shape}, strides={self.strides}, line_size={self.line_size})"


class ScalarArg:
    """A scalar parameter value with its element type (a cubepy type such as ``cp.f32``)."""

    __slots__ = ("value", "elem")

    def __init__(self, value: object, elem: Any) -> None:  # a cubepy element type (cp.f32), or its name
        self.value = value
        self.elem = elem

    def __repr__(self) -> str:
        return f"ScalarArg({self.value!r}, {self.elem!r})"
