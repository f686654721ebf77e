"""``TensorMap[T]``: a TMA descriptor parameter (role ``"tensor_map"``, IR kind ``TENSOR_MAP``).

This module is the seam for the device-side TMA and barrier API (``cp.Barrier``, ``tma_load_*``,
``tma_store_*``): those take a ``TensorMapExpand`` (its ``var`` is the descriptor parameter and its
``compilation_arg`` gives rank and mode) and a shared-memory ``SliceExpand``, and emit the TMA op
family registered with the verifier.  Host-side encoding lives in ``cubepy.runtime.tensormap``.
"""

from __future__ import annotations

import attrs

from cubepy.errors import LaunchError
from cubepy.frontend.elem import ScalarType, scalar_type, to_elem
from cubepy.ir import Type


@attrs.frozen
class TensorMapKey:
    """A stand-in compilation argument for inspecting a kernel without a real tensor map."""

    dtype_name: str
    rank: int | None = None
    mode: str = "tiled"


class TensorMapType:
    """``TensorMap[T]`` as a parameter annotation; implements the launch protocol."""

    role = "tensor_map"

    def __init__(self, elem) -> None:
        self.elem: ScalarType = elem if isinstance(elem, ScalarType) else scalar_type(to_elem(elem))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorMapType) and other.elem == self.elem

    def __hash__(self) -> int:
        return hash(("TensorMap", self.elem))

    def __repr__(self) -> str:
        return f"TensorMap[{self.elem!r}]"

    def compilation_arg(self, arg):
        """Validate a ``TensorMapArg``; its compilation argument (element type, rank, mode)."""
        compilation_arg = getattr(arg, "compilation_arg", None)
        if compilation_arg is None or not callable(compilation_arg):
            raise LaunchError(f"expected cp.TensorMapArg for {self!r}, got {type(arg).__name__}")
        key = compilation_arg()
        if getattr(key, "dtype_name", self.elem.name) != self.elem.name:
            raise LaunchError(f"expected a tensor map of {self.elem!r} for {self!r}, got one of {key.dtype_name}")
        return key

    def register(self, arg, bindings) -> None:
        """Bind the descriptor for one launch."""
        bindings.add_tensor_map(arg)

    def expand(self, comp_arg, builder) -> TensorMapExpand:
        """Declare the tensor-map parameter."""
        return TensorMapExpand(builder.register("tensor_map", Type(self.elem.ir)), comp_arg)

    expand_output = expand

    def default_compilation_arg(self) -> TensorMapKey:
        """A compilation argument for inspection without a launch."""
        return TensorMapKey(self.elem.name)

    def is_compilation_arg(self, value) -> bool:
        """Whether ``value`` is a compilation argument rather than a runtime ``TensorMapArg``."""
        return hasattr(value, "dtype_name") and not callable(getattr(value, "compilation_arg", None))


class TensorMap:
    """``TensorMap[T]``: a tensor-map (TMA descriptor) kernel parameter."""

    def __class_getitem__(cls, item) -> TensorMapType:
        return TensorMapType(item)


class TensorMapExpand:
    """A tensor map inside a kernel: the descriptor variable and its compile-time description."""

    __slots__ = ("var", "compilation_arg")

    def __init__(self, var, compilation_arg) -> None:
        self.var = var
        self.compilation_arg = compilation_arg

    @property
    def elem(self) -> ScalarType:
        """The element type of the mapped tensor."""
        return scalar_type(self.var.type.elem)

    @property
    def rank(self) -> int | None:
        """The tensor rank (comptime), when the compilation argument gives it."""
        return getattr(self.compilation_arg, "rank", None)

    def __repr__(self) -> str:
        return f"<tensor map {self.var!r}>"
