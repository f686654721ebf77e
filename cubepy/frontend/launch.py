"""The launch protocol for scalars and comptime values, and how annotations map to launch arguments.

A *launch argument* (CubeCL's ``LaunchArg``) splits a parameter in two:
``compilation_arg(runtime_arg)`` validates the argument and returns its hashable compile-relevant
part; ``register(runtime_arg, bindings)`` binds its runtime part for one launch; ``expand(comp_arg,
builder)`` declares the parameter while a kernel is expanded and returns what the body receives.
Buffers (``buffer_launch``), tensor maps (``tma``), scalars and comptime values implement it here;
``@derive(CubeType, CubeLaunch)`` classes implement it by recursing over their fields.  A generic kernel's
arguments also bind its type parameters (``bind_type_params``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import numpy as np

from cubepy import ir
from cubepy.errors import CubeError, LaunchError
from cubepy.frontend import elem as elems
from cubepy.frontend import generics
from cubepy.frontend.buffer_launch import DIVISIBILITY, BufferCompilationArg, BufferType, NoLaunchSignature
from cubepy.frontend.elem import ComptimeType, ScalarType
from cubepy.frontend.state import require_state
from cubepy.frontend.tma import TensorMapType
from cubepy.frontend.values import ExpandElement
from cubepy.ir import Type

if TYPE_CHECKING:
    from cubepy.frontend.kernel import ParamSpec
    from cubepy.frontend.state import KernelBuilder
    from cubepy.runtime.bindings import Bindings


@attrs.frozen(cache_hash=True)  # hashed on every warm launch (the cache key)
class ScalarCompilationArg:
    """The compile-relevant part of a scalar argument: its element type and, for an integer, whether its value
    is a multiple of ``DIVISIBILITY`` (``multiple_of``; the value itself is runtime).

    As Triton specializes integer arguments on divisibility by 16, the cache holds one kernel per pattern, and
    the kernel knows the low bits of its dimensions: a ``min(cols - col, 8)`` under ``col < cols`` with both
    multiples of 8 is 8 (``cubepy.ir.ranges``), so a 16-byte ``cp.async`` copies all or nothing."""

    elem: str
    multiple_of: int = 1
    # a u32 the launch found equal to its number of cubes (``argument_facts.mark_cube_count``)
    cube_count: bool = False


class ScalarLaunch:
    """A scalar parameter (``x: f32``): plain Python numbers, numpy scalars or ``ScalarArg``."""

    role = "scalar"
    is_comptime = False

    def __init__(self, scalar: ScalarType) -> None:
        self.scalar = scalar
        self._comp_arg = ScalarCompilationArg(scalar.name)
        # integers only: the warm launch tests one attribute, not the element type
        self._divisible_arg = ScalarCompilationArg(scalar.name, DIVISIBILITY) if scalar.ir.is_int else None
        self._low: int | float
        self._high: int | float
        self._low, self._high = (scalar.min_value(), scalar.max_value()) if scalar.ir.is_int else (0, -1)
        self._numpy_type: type | None = None  # what ``register`` binds
        # the Python types a non-integer parameter takes as they are (``launch_signature``)
        self._plain_kinds: tuple[type, ...] = (
            (float, int) if scalar.ir.is_float else (bool,) if scalar.ir.is_bool else ()
        )

    def __repr__(self) -> str:
        return repr(self.scalar)

    def _value(self, arg: Any) -> Any:
        elem = self.scalar.ir
        kind = type(arg)
        # Fast paths for warm launches: a Python float for a float parameter, an in-range int.
        if kind is float and elem.is_float:
            return arg
        if kind is int and elem.is_int and self._low <= arg <= self._high:
            return arg
        if hasattr(arg, "value") and hasattr(arg, "elem") and not isinstance(arg, np.generic):
            try:
                given = elems.to_elem(arg.elem)
            except TypeError:
                given = None
            if given != elem:
                raise LaunchError(f"expected a {elem.name} scalar, got ScalarArg of {arg.elem!r}")
            arg = arg.value
        if isinstance(arg, np.ndarray) and arg.shape == ():
            arg = arg[()]
        if not isinstance(arg, elems.PY_NUMBER):
            raise LaunchError(
                f"expected a {elem.name} scalar (a Python number or cp.ScalarArg), got {type(arg).__name__}"
            )
        if elem.is_bool:
            if not isinstance(arg, (bool, np.bool_)):
                raise LaunchError(f"expected a bool, got {arg!r}")
        elif elem.is_int:
            if isinstance(arg, (float, np.floating, bool, np.bool_)):
                raise LaunchError(f"expected an integer for {elem.name}, got {arg!r}")
            if not elems.fits(int(arg), elem):
                raise LaunchError(f"{arg!r} is out of range for {elem.name} ({self._low}..{self._high})")
        elif isinstance(arg, (bool, np.bool_)):
            raise LaunchError(f"expected a number for {elem.name}, got {arg!r}")
        return arg

    def compilation_arg(self, arg: Any) -> ScalarCompilationArg:
        """Validate a scalar argument; its compilation argument is the element type (and divisibility)."""
        value = self._value(arg)
        divisible = self._divisible_arg
        if divisible is not None and int(value) % DIVISIBILITY == 0:
            return divisible
        return self._comp_arg

    def register(self, arg: Any, bindings: Bindings) -> None:
        """Bind the scalar as a numpy scalar of the parameter's dtype."""
        bindings.add_scalar(self.numpy_type()(self._value(arg)))

    def numpy_type(self) -> type:
        """The numpy scalar type the parameter is bound as (found on first use: a bf16 one loads ml_dtypes)."""
        numpy_type = self._numpy_type
        if numpy_type is None:
            numpy_type = self._numpy_type = self.scalar.numpy.type
        return numpy_type

    def launch_signature(self, arg: Any) -> bool:
        """What the compilation argument follows from (an integer's divisibility; nothing for a float), for the
        Python numbers ``_value`` takes without conversion; ``NoLaunchSignature`` for any other argument."""
        kind = type(arg)
        if kind is int and self._divisible_arg is not None and self._low <= arg <= self._high:
            return bool(arg % DIVISIBILITY == 0)
        if kind in self._plain_kinds:
            return False
        raise NoLaunchSignature

    def expand(self, comp_arg: object, builder: KernelBuilder) -> ExpandElement:
        """Declare the scalar parameter."""
        multiple_of = comp_arg.multiple_of if isinstance(comp_arg, ScalarCompilationArg) else 1
        counts = isinstance(comp_arg, ScalarCompilationArg) and comp_arg.cube_count
        var = builder.register(
            "scalar", Type(self.scalar.ir), multiple_of=multiple_of, cube_count_dims=(0,) if counts else ()
        )
        return ExpandElement(var, builder.state)

    expand_output = expand

    def default_compilation_arg(self) -> ScalarCompilationArg:
        """The compilation argument used without a value (no divisibility known)."""
        return self._comp_arg

    def is_compilation_arg(self, value: object) -> bool:
        """Whether ``value`` is already the compilation argument."""
        return isinstance(value, ScalarCompilationArg)


class ComptimeLaunch:
    """A comptime parameter (``n: Comptime[int]``): any hashable value, which is its own compilation argument."""

    role = None
    is_comptime = True

    def __init__(self, annotation: object = None) -> None:
        self.annotation = annotation

    def __repr__(self) -> str:
        return repr(self.annotation) if self.annotation is not None else "Comptime"

    def compilation_arg(self, value: Any) -> Any:
        """The value itself (it must be hashable: it is part of the cache key)."""
        try:
            hash(value)
        except TypeError as exc:
            raise LaunchError(
                f"a comptime value must be hashable (it is part of the cache key), got {type(value).__name__}"
            ) from exc
        return value

    def register(self, value: object, bindings: Bindings) -> None:
        """Comptime values bind nothing."""

    def launch_signature(self, value: Any) -> Any:
        """The value itself (its compilation argument)."""
        return value

    def expand(self, comp_arg: Any, builder: KernelBuilder) -> Any:
        """The body receives the plain value."""
        return comp_arg

    expand_output = expand

    def default_compilation_arg(self) -> NoReturn:
        """Comptime values have no default."""
        raise CubeError("a comptime parameter needs a value")

    def is_compilation_arg(self, value: object) -> bool:
        """A comptime value is its own compilation argument."""
        return True


def launch_arg_of(annotation: Any, where: str) -> Any:
    """The launch-protocol object of a parameter annotation (``CubeError`` when it has none)."""
    if isinstance(annotation, ScalarType):
        return ScalarLaunch(annotation)
    if isinstance(annotation, ir.ElemType):
        return ScalarLaunch(elems.scalar_type(annotation))
    if isinstance(annotation, (BufferType, TensorMapType)):
        return annotation
    if annotation is elems.Comptime or isinstance(annotation, ComptimeType):
        return ComptimeLaunch(annotation)
    if all(callable(getattr(annotation, name, None)) for name in ("compilation_arg", "register", "expand")):
        return annotation
    raise CubeError(
        f"{where}: unsupported annotation {annotation!r}; expected an element type (f32), "
        "Array[T], Tensor[T], TensorMap[T], Comptime[X] or a @derive(CubeType, CubeLaunch) class"
    )


def is_comptime_launch(launch: object) -> bool:
    """Whether a launch argument is comptime (binds nothing, passes its value)."""
    return getattr(launch, "is_comptime", False) is True


def expand_param(launch: Any, comp_arg: Any, builder: KernelBuilder, name: str) -> Any:
    """Expand one parameter under its name (nested names for derived types' fields)."""
    require_state()
    with builder.naming(name):
        return launch.expand(comp_arg, builder)


# -- generic kernels: the element types a launch's arguments give its type parameters ---------------
def elem_of_arg(annotation: object, arg: Any, param: str) -> ir.ElemType | None:
    """The element type ``arg`` gives the type parameter of ``annotation`` (None when it says nothing)."""
    if isinstance(annotation, generics.GenericBuffer):
        if isinstance(arg, BufferType):
            return arg.elem.ir
        if isinstance(arg, BufferCompilationArg):
            return ir.ELEM_BY_NAME[arg.elem]
        handle = getattr(arg, "handle", None)
        if handle is None:
            raise LaunchError(
                f"parameter {param!r} ({annotation!r}) expects cp.ArrayArg/cp.TensorArg(handle) or "
                f"an element type such as cp.Array[cp.f32], got {type(arg).__name__}"
            )
        found = elems.elem_of_dtype(handle.dtype)
        if found is None:
            raise LaunchError(f"parameter {param!r} ({annotation!r}): dtype {handle.dtype} is not an element type")
        return found
    if isinstance(arg, (ScalarType, ir.ElemType)):
        return elems.to_elem(arg)
    scalar_elem = getattr(arg, "elem", None)
    if scalar_elem is not None and hasattr(arg, "value"):
        return elems.to_elem(scalar_elem)
    dtype = getattr(arg, "dtype", None)
    if dtype is not None:
        return elems.elem_of_dtype(dtype)
    return None  # a plain Python number: another parameter must bind the type


def bind_type_params(
    kernel_name: str, params: Sequence[ParamSpec], args: Sequence[Any]
) -> dict[generics.TypeVar, ScalarType]:
    """The {TypeVar: ScalarType} binding a generic kernel's arguments give; LaunchError on a conflict or a gap."""
    found: dict[generics.TypeVar, tuple[ir.ElemType, str]] = {}
    for param, arg in zip(params, args):
        var = generics.type_var_of(param.annotation)
        if var is None:
            continue
        elem = elem_of_arg(param.annotation, arg, param.name)
        if elem is None:
            continue
        if elem not in var.allowed:
            raise LaunchError(
                f"kernel {kernel_name!r}: parameter {param.name!r} binds {var.name} to {elem.name}, "
                f"but {var!r} allows {', '.join(e.name for e in var.allowed)}"
            )
        previous = found.get(var)
        if previous is not None and previous[0] is not elem:
            raise LaunchError(
                f"kernel {kernel_name!r}: type parameter {var.name} is {previous[0].name} from "
                f"parameter {previous[1]!r} but {elem.name} from parameter {param.name!r}"
            )
        found[var] = (elem, param.name)
    for param in params:
        var = generics.type_var_of(param.annotation)
        if var is not None and var not in found:
            raise LaunchError(
                f"kernel {kernel_name!r}: cannot tell the type of {var.name} (parameter "
                f"{param.name!r}); pass an array of it, a cp.ScalarArg(value, type), or a numpy scalar"
            )
    return {var: elems.scalar_type(elem) for var, (elem, _) in found.items()}
