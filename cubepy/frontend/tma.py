"""``TensorMap[T]``: a TMA descriptor parameter (role ``"tensor_map"``, IR kind ``TENSOR_MAP``).

TMA loads are methods of ``cp.Barrier`` (``cubepy.frontend.barrier``); this module holds the stores
(``tma_store_1d..5d``, coordinates outermost first), the bulk-group commit and waits, and the operand
conversions both share: a shared memory or ``SliceExpand`` becomes (memory, item offset, item length)
and coordinates become ``i32`` in the driver's order.  Host-side encoding lives in
``cubepy.runtime.tensormap``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from cubepy import ir
from cubepy.errors import LaunchError
from cubepy.frontend import operations, source
from cubepy.frontend.elem import ScalarType, scalar_type, to_elem
from cubepy.frontend.state import current_scope
from cubepy.ir import Type, Variable, VarKind
from cubepy.ir import ops as irops

if TYPE_CHECKING:
    from cubepy.frontend.state import KernelBuilder


@attrs.frozen
class TensorMapKey:
    """A stand-in compilation argument for inspecting a kernel without a real tensor map."""

    dtype_name: str
    rank: int | None = None
    mode: str = "tiled"


class TensorMapType:
    """``TensorMap[T]`` as a parameter annotation; implements the launch protocol."""

    role = "tensor_map"

    def __init__(self, elem: Any) -> None:
        self.elem: ScalarType = elem if isinstance(elem, ScalarType) else scalar_type(to_elem(elem))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorMapType) and other.elem == self.elem

    def __hash__(self) -> int:
        return hash(("TensorMap", self.elem))

    def __repr__(self) -> str:
        return f"TensorMap[{self.elem!r}]"

    def compilation_arg(self, arg: Any) -> Any:
        """Validate a ``TensorMapArg``; its compilation argument (element type, rank, mode)."""
        compilation_arg = getattr(arg, "compilation_arg", None)
        if compilation_arg is None or not callable(compilation_arg):
            raise LaunchError(f"expected cp.TensorMapArg for {self!r}, got {type(arg).__name__}")
        key = compilation_arg()
        if getattr(key, "dtype_name", self.elem.name) != self.elem.name:
            raise LaunchError(f"expected a tensor map of {self.elem!r} for {self!r}, got one of {key.dtype_name}")
        return key

    def register(self, arg: Any, bindings: Any) -> None:
        """Bind the descriptor for one launch."""
        bindings.add_tensor_map(arg)

    def expand(self, comp_arg: Any, builder: KernelBuilder) -> TensorMapExpand:
        """Declare the tensor-map parameter."""
        return TensorMapExpand(builder.register("tensor_map", Type(self.elem.ir)), comp_arg)

    expand_output = expand

    def default_compilation_arg(self) -> TensorMapKey:
        """A compilation argument for inspection without a launch."""
        return TensorMapKey(self.elem.name)

    def is_compilation_arg(self, value: object) -> bool:
        """Whether ``value`` is a compilation argument rather than a runtime ``TensorMapArg``."""
        return hasattr(value, "dtype_name") and not callable(getattr(value, "compilation_arg", None))


class TensorMap:
    """``TensorMap[T]``: a tensor-map (TMA descriptor) kernel parameter."""

    def __class_getitem__(cls, item: Any) -> TensorMapType:
        return TensorMapType(item)


class TensorMapExpand:
    """A tensor map inside a kernel: the descriptor variable and its compile-time description."""

    __slots__ = ("var", "compilation_arg")

    def __init__(self, var: Variable, compilation_arg: Any) -> None:
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


# -- operands shared by TMA loads and stores ------------------------------------------------------------
def shared_operand(smem: Any, tmap: TensorMapExpand, what: str) -> tuple[Variable, Variable, Variable]:
    """(shared memory, item offset, item length) of a shared memory or a slice of one."""
    from cubepy.frontend.containers import MemoryExpand, SliceExpand

    if isinstance(smem, SliceExpand):
        memory, offset, length = smem.base, smem.offset, smem.length
    elif isinstance(smem, MemoryExpand):
        memory, offset, length = smem, 0, smem.var.length
    else:
        source.fail(f"{what}: expected shared memory or a slice of it, got {type(smem).__name__}")
    if memory.var.kind is not VarKind.SHARED:
        source.fail(f"{what}: TMA copies go through shared memory, got {memory.describe()}")
    if memory.var.elem != tmap.var.elem:
        source.fail(f"{what}: shared memory of {memory.var.elem!r} with a tensor map of {tmap.var.elem!r}")
    return (
        memory.var,
        operations.to_index(offset, f"{what} slice offset"),
        operations.to_index(length, f"{what} slice length"),
    )


def signed_coordinates(values: Iterable[Any], what: str) -> tuple[Variable, ...]:
    """Coordinates as i32 variables (integers of other types are cast, as CubeCL's ``as i32``)."""
    out = []
    for k, value in enumerate(values):
        if operations.is_number(value):
            if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
                source.fail(f"{what} {k}: {value!r} is not an i32")
            out.append(operations.literal(value, ir.I32).var)
            continue
        element = operations.as_element(value, what)
        if not element.elem.is_int or element.type.line != 1:
            source.fail(f"{what} {k}: expected a scalar integer, got {element.type!r}")
        out.append(operations.cast(element, ir.I32).var)
    return tuple(out)


# -- TMA stores and bulk groups -------------------------------------------------------------------------
def _store(rank: int, smem: Any, tensor_map: Any, coords: Iterable[Any]) -> None:
    what = f"tma_store_{rank}d"
    if not isinstance(tensor_map, TensorMapExpand):
        source.fail(f"{what}: the second argument must be a TensorMap parameter, got {type(tensor_map).__name__}")
    if tensor_map.rank is not None and tensor_map.rank != rank:
        source.fail(f"{what} on a tensor map of rank {tensor_map.rank}")
    mode = getattr(tensor_map.compilation_arg, "mode", "tiled")
    if tensor_map.rank is not None and mode != "tiled":
        source.fail(f"{what} needs a tiled tensor map, got a {mode} one")
    memory, offset, length = shared_operand(smem, tensor_map, what)
    driver = signed_coordinates(tuple(coords)[::-1], f"{what} coordinate")
    current_scope().append(irops.TmaStore(tensor_map.var, memory, offset, length, driver, rank))


def tma_store_1d(smem: Any, tensor_map: Any, x: Any) -> None:
    """Store ``smem`` to the 1-D box at ``x`` through TMA (in the open bulk group)."""
    _store(1, smem, tensor_map, (x,))


def tma_store_2d(smem: Any, tensor_map: Any, y: Any, x: Any) -> None:
    """Store ``smem`` to the 2-D box at ``(y, x)`` through TMA (in the open bulk group)."""
    _store(2, smem, tensor_map, (y, x))


def tma_store_3d(smem: Any, tensor_map: Any, z: Any, y: Any, x: Any) -> None:
    """Store ``smem`` to the 3-D box at ``(z, y, x)`` through TMA (in the open bulk group)."""
    _store(3, smem, tensor_map, (z, y, x))


def tma_store_4d(smem: Any, tensor_map: Any, w: Any, z: Any, y: Any, x: Any) -> None:
    """Store ``smem`` to the 4-D box at ``(w, z, y, x)`` through TMA (in the open bulk group)."""
    _store(4, smem, tensor_map, (w, z, y, x))


def tma_store_5d(smem: Any, tensor_map: Any, v: Any, w: Any, z: Any, y: Any, x: Any) -> None:
    """Store ``smem`` to the 5-D box at ``(v, w, z, y, x)`` through TMA (in the open bulk group)."""
    _store(5, smem, tensor_map, (v, w, z, y, x))


def tma_group_commit() -> None:
    """Close this unit's open bulk group of TMA stores."""
    current_scope().append(irops.TmaGroupCommit())


def _pending(n: Any, what: str) -> int:
    value = operations.comptime_value(n) if operations.is_comptime(n) else None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 63:
        source.fail(f"{what}: the number of groups left pending must be a comptime int in [0, 63], got {n!r}")
    return value


def tma_group_wait(n: Any) -> None:
    """Wait until at most ``n`` (comptime) committed bulk groups of this unit are still in flight."""
    current_scope().append(irops.TmaGroupWait(_pending(n, "tma_group_wait")))


def tma_group_wait_read(n: Any) -> None:
    """Wait until at most ``n`` (comptime) committed bulk groups still read their shared memory."""
    current_scope().append(irops.TmaGroupWaitRead(_pending(n, "tma_group_wait_read")))
