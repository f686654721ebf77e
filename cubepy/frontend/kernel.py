"""The ``Kernel`` object of ``@cube(launch=True)``: parameters, identity, expansion and launch entry points.

The contract with the runtime (which the frontend never imports):

- ``kernel.name``, ``kernel.params`` (ordered ``ParamSpec``: ``.name``, ``.index``, ``.annotation``,
  ``.is_comptime``), ``kernel.identity`` (qualified name + sha256 of every reachable source and of the
  comptime closure values);
- ``kernel.compilation_args(args, cubes) -> tuple`` (hashable; validates; ``LaunchError`` names the parameter;
  ``cubes`` the launch's number of cubes, which values of ``args`` may equal);
- optionally ``kernel.launch_signature(args)`` and ``kernel.warm_check(comp_args)`` (what a warm launch
  remembers under and re-checks);
- ``kernel.register(args, bindings)`` (runtime parts in parameter order: ``add_buffer``,
  ``add_scalar``, ``add_tensor_map``);
- ``kernel.define(comp_args, cube_dim, checked, contract=None, fastmath=None) -> KernelDefinition`` (expanded
  and verified); ``kernel.contract`` and ``kernel.fastmath`` are the decorator's choices (None: the setting's);
- ``kernel.launch(client, cube_count, cube_dim, *args)`` / ``kernel.launch_unchecked(...)`` call
  ``client.launch(kernel, cube_count, cube_dim, args, checked=...)``;
- ``kernel.compile(cube_dim, *args, target="sm_90a", unchecked=False, contract=None, fastmath=None,
  cube_count=None)`` calls
  ``hooks.COMPILE``.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from cubepy import ir
from cubepy.errors import CubeError, ExpandError, LaunchError, SanitizerError, TensorMapError
from cubepy.frontend import generics, hooks, source
from cubepy.frontend.argument_facts import (
    cube_count_holds,
    cube_count_marks,
    mark_cube_count,
    mark_equal_lengths,
    mark_overlaps,
    products_hold,
)
from cubepy.frontend.buffer_launch import BufferCompilationArg, BufferType, NoLaunchSignature
from cubepy.frontend.elem import ScalarType
from cubepy.frontend.function import CubeFunction
from cubepy.frontend.launch import ScalarLaunch, bind_type_params, expand_param, is_comptime_launch, launch_arg_of
from cubepy.frontend.state import ExpansionState, KernelBuilder, activate

if TYPE_CHECKING:
    from types import CellType, FunctionType

    from cubepy.runtime.bindings import Bindings

MAX_TYPE_RERUNS = 4
# A kernel past this many IR instructions gets a line on stderr before it is built: measured here (2 cores),
# 20,000 instructions (10,000 unrolled statements) expanded in 2 s, then took 45 s in LLVM's O3 for the cpu
# runtime (growing faster than the kernel), 7 s for PTX and 4.5 s per launch on the interp; 4,000 took 3.5 s.
LARGE_KERNEL_INSTRUCTIONS = 5_000


class ParamSpec:
    """One kernel parameter: name, position, annotation and its launch-protocol object."""

    __slots__ = ("name", "index", "annotation", "launch", "is_comptime")

    def __init__(self, name: str, index: int, annotation: Any, launch: Any) -> None:
        self.name = name
        self.index = index
        self.annotation = annotation
        self.launch = launch
        self.is_comptime = is_comptime_launch(launch)

    def __repr__(self) -> str:
        return f"ParamSpec({self.name!r}: {self.annotation!r})"


def _cube_dim(cube_dim: Any) -> tuple[int, int, int]:
    if hasattr(cube_dim, "as_tuple"):
        cube_dim = cube_dim.as_tuple()
    dims = (cube_dim,) if isinstance(cube_dim, int) else tuple(cube_dim)
    problem = ir.launch_shape_problem("cube_dim", dims, ir.MAX_CUBE_DIM, 1)
    if problem is not None:
        raise LaunchError(problem)
    x, y, z = (*(int(d) for d in dims), 1, 1, 1)[:3]
    return (x, y, z)


def resolve_contract(choice: bool | None) -> bool:
    """``choice`` when given, else the ``CUBEPY_CONTRACT`` setting (on by default, as nvcc's ``--fmad=true``)."""
    if choice is not None:
        return bool(choice)
    from cubepy import config  # a leaf module: settings only

    return bool(config.get("CUBEPY_CONTRACT"))


def resolve_fastmath(choice: bool | None) -> bool:
    """``choice`` when given, else the ``CUBEPY_FASTMATH`` setting (off by default, unlike nvcc's -use_fast_math)."""
    if choice is not None:
        return bool(choice)
    from cubepy import config  # a leaf module: settings only

    return bool(config.get("CUBEPY_FASTMATH"))


def _expansion_progress(name: str) -> Callable[[int], None]:
    """What a long expansion calls every ``state.PROGRESS_EVERY`` instructions: a line on stderr."""
    start = time.perf_counter()

    def report(count: int) -> None:
        where = source.current_loc()
        at = f" (at {where.file}:{where.line})" if where is not None else ""
        took = time.perf_counter() - start
        print(f"[cubepy] expanding kernel {name}: {count} IR instructions so far in {took:.1f} s{at}", file=sys.stderr)

    return report


def expand_kernel_body(
    kernel: CubeFunction, params: list[ParamSpec], comp_args: tuple[Any, ...], cube_dim: Any, checked: bool, name: str
) -> ir.KernelDefinition:
    """Expand ``kernel`` with ``comp_args``, re-running while weakly typed locals refine their types."""
    node = kernel.definition_node()
    default_loc = ir.SourceLoc(kernel.fn.__code__.co_filename, node.lineno, node.col_offset, kernel.fn.__qualname__)
    hints: dict[int, ir.ElemType] = {}
    for _ in range(MAX_TYPE_RERUNS + 1):
        state = ExpansionState(checked, default_loc, hints)
        state.progress = _expansion_progress(name)
        builder = KernelBuilder(state)
        with activate(state):
            values = []
            for index, (param, comp_arg) in enumerate(zip(params, comp_args)):
                builder.argument = index
                values.append(expand_param(param.launch, comp_arg, builder, param.name))
            builder.argument = None
            twin = kernel.expand_function()
            with state.control_entry("kernel", name):
                result = twin(*values)
        if result is not None:
            source.fail("a kernel cannot return a value; write results into an output parameter", default_loc)
        if not state.needs_rerun():
            break
        hints = state.merged_hints()
    return builder.finish(name, _cube_dim(cube_dim), kernel.fn.__code__.co_filename)


class Kernel(CubeFunction):
    """A launchable kernel (``@cube(launch=True)`` and/or ``launch_unchecked=True``)."""

    def __init__(
        self,
        fn: Any,
        launch: bool = True,
        launch_unchecked: bool = False,
        contract: bool | None = None,
        fastmath: bool | None = None,
    ) -> None:
        super().__init__(fn)
        self.allow_checked = launch
        self.allow_unchecked = launch_unchecked
        self.contract = contract  # the decorator's choice; None: CUBEPY_CONTRACT's
        self.fastmath = fastmath  # the decorator's choice; None: CUBEPY_FASTMATH's
        self._params: list[ParamSpec] | None = None
        self._identity: str | None = None
        # The warm launch's plan: every parameter's compilation_arg, and (index, register) of the runtime ones.
        self._comp_fns: tuple[Callable[[Any], Any], ...] | None = None
        self._register_fns: tuple[tuple[int, Callable[[Any, Bindings], None]], ...] = ()
        # Every parameter's launch_signature (None: a parameter has none, the kernel's launches take the full
        # path) and the indices of its buffer parameters (whose handles the client checks by identity).
        self._signature_fns: tuple[Callable[[Any], Any], ...] | None = None
        self.buffer_params: tuple[int, ...] = ()
        self._scalar_params: tuple[tuple[int, ScalarLaunch], ...] = ()

    # -- parameters and identity ----------------------------------------------------------------
    @property
    def params(self) -> list[ParamSpec]:
        """The parameters in declaration order."""
        if self._params is None:
            self._params = self._read_params()
        return self._params

    def _read_params(self) -> list[ParamSpec]:
        fn = self.fn
        closure = {
            name: cell.cell_contents
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ())
            if _has_contents(cell)
        }
        params = []
        for index, parameter in enumerate(inspect.signature(fn).parameters.values()):
            where = f"kernel {self.name!r}, parameter {parameter.name!r}"
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise CubeError(f"{where}: kernels take no *args or **kwargs")
            annotation = parameter.annotation
            if annotation is parameter.empty:
                raise CubeError(f"{where}: kernel parameters need an annotation (f32, Array[f32], Comptime[int], ...)")
            if isinstance(annotation, str):
                annotation = eval(annotation, fn.__globals__, closure)  # noqa: S307 - the user's own annotation
            if generics.type_var_of(annotation) is not None:  # bound per launch (see cubepy/frontend/generics.py)
                params.append(ParamSpec(parameter.name, index, annotation, annotation))
                continue
            params.append(ParamSpec(parameter.name, index, annotation, launch_arg_of(annotation, where)))
        return params

    # -- generic kernels ---------------------------------------------------------------------------
    @property
    def is_generic(self) -> bool:
        """Whether a parameter's annotation names a ``cp.TypeVar`` (each launch binds it)."""
        return any(generics.type_var_of(p.annotation) is not None for p in self.params)

    def bind_types(self, args: Sequence[Any]) -> Kernel:
        """The kernel bound to the element types ``args`` give its type parameters (itself when not generic)."""
        if not self.is_generic:
            return self
        if len(args) != len(self.params):
            raise LaunchError(f"kernel {self.name!r} takes {len(self.params)} arguments, got {len(args)}")
        binding = bind_type_params(self.name, self.params, args)
        key = generics.binding_text(binding)
        bound_kernels: dict[str, BoundKernel] = self.__dict__.setdefault("_bound_kernels", {})
        found = bound_kernels.get(key)
        if found is None:
            found = bound_kernels[key] = BoundKernel(self, binding)
        return found

    @property
    def identity(self) -> str:
        """Qualified name + sha256 of the sources reachable from this kernel and its comptime closure values."""
        if self._identity is None:
            from cubepy.frontend.identity import function_identity

            self._identity = function_identity(self)
        return self._identity

    # -- launch protocol --------------------------------------------------------------------------
    def _launch_plan(self) -> tuple[Callable[[Any], Any], ...]:
        params = self.params
        if self.is_generic:
            raise CubeError(
                f"kernel {self.name!r} is generic: launch it with kernel.launch(...) (which binds its type "
                "parameters), or bind them first with kernel.bind_types(args)"
            )
        self._register_fns = tuple((p.index, p.launch.register) for p in params if not p.is_comptime)
        signature_fns = [getattr(p.launch, "launch_signature", None) for p in params]
        self._signature_fns = None if None in signature_fns else tuple(cast(list[Callable[[Any], Any]], signature_fns))
        self.buffer_params = tuple(p.index for p in params if isinstance(p.launch, BufferType))
        self._scalar_params = tuple((p.index, p.launch) for p in params if isinstance(p.launch, ScalarLaunch))
        self._comp_fns = tuple(p.launch.compilation_arg for p in params)
        return self._comp_fns

    def launch_signature(self, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """A summary of ``args`` from which ``compilation_args`` and ``register``'s buffers follow, given the
        identity of the handles of ``buffer_params`` (None: an argument has none, or no launch planned yet).

        ``ComputeClient.launch`` remembers what a launch decided under it: a warm launch with the same buffers,
        line sizes and shapes, the same comptime values and integers of the same divisibility skips the
        validation, the marking of equal lengths and overlaps, and the cache key."""
        fns = self._signature_fns
        if fns is None or len(args) != len(fns):
            return None
        try:
            return tuple([fn(arg) for fn, arg in zip(fns, args)])
        except (NoLaunchSignature, AttributeError):
            return None

    @staticmethod
    def warm_check(comp_args: tuple[Any, ...]) -> Callable[[tuple[Any, ...], int], bool] | None:
        """What a warm launch re-checks, given its arguments and number of cubes, of the facts in ``comp_args``
        that a launch signature does not determine: each buffer's ``len_as_product``, which a u32 scalar's value
        makes or breaks, and the values found equal to the cube count (None when there are none)."""
        facts = tuple(
            (index, comp.len_as_product)
            for index, comp in enumerate(comp_args)
            if isinstance(comp, BufferCompilationArg) and comp.len_as_product is not None
        )
        marks = cube_count_marks(comp_args)
        if not facts and not marks:
            return None
        return functools.partial(_warm_facts_hold, facts, marks)

    def compilation_args(self, args: tuple[Any, ...], cubes: int | None = None) -> tuple[Any, ...]:
        """The hashable compilation arguments of a launch of ``cubes`` cubes (None: not known); ``LaunchError``
        naming a bad parameter."""
        fns = self._comp_fns
        if fns is None:
            fns = self._launch_plan()
        if len(args) != len(fns):
            params = self.params
            names = ", ".join(p.name for p in params)
            raise LaunchError(f"kernel {self.name!r} takes {len(params)} arguments ({names}), got {len(args)}")
        try:
            comp_args = tuple([fn(arg) for fn, arg in zip(fns, args)])
        except LaunchError:
            comp_args = tuple([_one_comp_arg(self, param, arg) for param, arg in zip(self.params, args)])
        comp_args = mark_equal_lengths(mark_overlaps(comp_args, args), args)
        return comp_args if cubes is None else mark_cube_count(comp_args, args, cubes)

    def scalar_conversions(self) -> tuple[tuple[int, Callable[[Any], Any]], ...]:
        """(argument index, numpy scalar type) of each scalar parameter, in the order ``register`` binds them:
        what a warm launch converts its scalars with (``launch_signature`` checked their types and ranges)."""
        return tuple((index, launch.numpy_type()) for index, launch in self._scalar_params)

    def register(self, args: tuple[Any, ...], bindings: Bindings) -> None:
        """Bind the runtime parts of ``args`` in parameter order."""
        if self._comp_fns is None:
            self._launch_plan()
        for index, register in self._register_fns:
            register(args[index], bindings)

    def contracts(self, contract: bool | None = None) -> bool:
        """Whether ``a * b + c`` is fused: ``contract`` if given, else the decorator's, else ``CUBEPY_CONTRACT``."""
        return resolve_contract(self.contract if contract is None else contract)

    def uses_fastmath(self, fastmath: bool | None = None) -> bool:
        """Whether f32 math may be approximate: ``fastmath`` if given, else the decorator's, else ``CUBEPY_FASTMATH``."""
        return resolve_fastmath(self.fastmath if fastmath is None else fastmath)

    def define(
        self,
        comp_args: tuple[Any, ...],
        cube_dim: Any,
        checked: bool,
        contract: bool | None = None,
        fastmath: bool | None = None,
    ) -> ir.KernelDefinition:
        """Expand the kernel for ``comp_args`` and ``cube_dim``; the verified IR definition.

        The definition records whether the ``contract`` pass fuses (``contracts(contract)``) and whether f32
        math may be approximate (``uses_fastmath(fastmath)``).
        """
        params = self.params
        if len(comp_args) != len(params):
            raise LaunchError(f"kernel {self.name!r} takes {len(params)} compilation arguments, got {len(comp_args)}")
        try:
            start = time.perf_counter()
            definition = expand_kernel_body(self, params, tuple(comp_args), cube_dim, checked, self.name)
            self.notice_build(definition, f"expanded in {time.perf_counter() - start:.1f} s")
            ir.verify(definition)
            definition = attrs.evolve(
                definition, contract=self.contracts(contract), fastmath=self.uses_fastmath(fastmath)
            )
        except CubeError as exc:
            raise exc.with_traceback(source.user_traceback(exc.__traceback__)) from None
        except Exception as exc:  # a bug in the user's comptime Python: keep it, say where it happened
            # Keep cubepy's own frames when none is the user's: then the bug is cubepy's, not theirs.
            tb = source.user_traceback(exc.__traceback__) or exc.__traceback__
            where = ""
            last = tb
            while last is not None and last.tb_next is not None:
                last = last.tb_next
            if last is not None:
                where = f" at {last.tb_frame.f_code.co_filename}:{last.tb_lineno}"
            if hasattr(exc, "add_note"):
                exc.add_note(f"(raised{where} while expanding kernel {self.qualname})")
            raise exc.with_traceback(tb) from None
        return definition

    def launch(self, client: Any, cube_count: Any, cube_dim: Any, *args: Any) -> Any:
        """Run the kernel with bounds-checked global indexing."""
        if not self.allow_checked:
            raise CubeError(
                f"kernel {self.name!r} was decorated with launch_unchecked=True only; call "
                "launch_unchecked, or add launch=True"
            )
        kernel = self.bind_types(args) if self._comp_fns is None else self
        try:
            return client.launch(kernel, cube_count, cube_dim, args, checked=True)
        except _USER_ERRORS as exc:
            raise exc.with_traceback(source.user_traceback(exc.__traceback__)) from exc.__cause__

    @property
    def launch_unchecked(self) -> Callable[..., Any]:
        """Run the kernel with raw global indexing (only with ``@cube(launch_unchecked=True)``)."""
        if not self.allow_unchecked:
            raise AttributeError(
                f"kernel {self.name!r} has no launch_unchecked: decorate it with @cube(launch_unchecked=True)"
            )
        return self._launch_unchecked

    def _launch_unchecked(self, client: Any, cube_count: Any, cube_dim: Any, *args: Any) -> Any:
        kernel = self.bind_types(args) if self._comp_fns is None else self
        try:
            return client.launch(kernel, cube_count, cube_dim, args, checked=False)
        except _USER_ERRORS as exc:
            raise exc.with_traceback(source.user_traceback(exc.__traceback__)) from exc.__cause__

    def compile(
        self,
        cube_dim: Any,
        *args: Any,
        target: str = "sm_90a",
        unchecked: bool = False,
        contract: bool | None = None,
        fastmath: bool | None = None,
        cube_count: Any = None,
    ) -> Any:
        """Compile without running; ``args`` are runtime arguments or ``CompilationArg``s.

        For a generic kernel, element types (``cp.Array[cp.f32]``, ``cp.f32``) bind its type parameters.
        ``contract``: fuse one-use ``a * b + c`` into ``fma`` (None: the decorator's or ``CUBEPY_CONTRACT``'s choice).
        ``fastmath``: approximate f32 math (None: the decorator's or ``CUBEPY_FASTMATH``'s choice).
        ``cube_count``: the ``cp.CubeCount`` (or number of cubes) a launch would use, so the kernel is compiled
        with what a launch finds equal to it, as ``launch`` does (None: compiled for any cube count).
        """
        if self.is_generic:
            bound = self.bind_types(args)
            args = tuple(
                p.launch.default_compilation_arg() if isinstance(a, (BufferType, ScalarType)) else a
                for p, a in zip(bound.params, args)
            )
            return bound.compile(
                cube_dim,
                *args,
                target=target,
                unchecked=unchecked,
                contract=contract,
                fastmath=fastmath,
                cube_count=cube_count,
            )
        params = self.params
        if len(args) != len(params):
            raise LaunchError(f"kernel {self.name!r} takes {len(params)} arguments, got {len(args)}")
        collected = []
        for param, arg in zip(params, args):
            is_comp_arg = getattr(param.launch, "is_compilation_arg", None)
            if is_comp_arg is not None and is_comp_arg(arg):
                collected.append(arg)
            else:
                collected.append(_one_comp_arg(self, param, arg))
        comp_args = mark_equal_lengths(mark_overlaps(tuple(collected), args), args)
        if cube_count is not None:
            comp_args = mark_cube_count(comp_args, args, _cubes(cube_count))
        contract = self.contracts(contract)
        fastmath = self.uses_fastmath(fastmath)

        def build() -> Any:
            definition = self.define(comp_args, cube_dim, checked=not unchecked, contract=contract, fastmath=fastmath)
            if hooks.COMPILE is None:
                raise CubeError("compiler not available: cubepy.frontend.hooks.COMPILE is not set")
            self.notice_build(definition, f"LLVM's O3 and PTX emission for {target} start now")
            return hooks.COMPILE(definition, target)

        # The runtime's on-disk cache (cubepy.runtime.cache) installs CACHED_COMPILE: a hit skips expansion too.
        cached = hooks.CACHED_COMPILE
        if cached is None or hooks.COMPILE is None:
            return build()
        dims = _cube_dim(cube_dim)
        return cached(self, comp_args, dims, not unchecked, target, build, contract=contract, fastmath=fastmath)

    def notice_build(self, definition: ir.KernelDefinition, step: str) -> None:
        """Say on stderr that ``step`` happens to a kernel past ``LARGE_KERNEL_INSTRUCTIONS`` (else nothing)."""
        count = sum(1 for _ in ir.walk(definition.body))
        if count > LARGE_KERNEL_INSTRUCTIONS:
            print(
                f"[cubepy] kernel {self.name}: {count} IR instructions (more than {LARGE_KERNEL_INSTRUCTIONS}), "
                f"{step}; building a kernel this large can take minutes (LLVM's O3 grows faster than the kernel) "
                f"and the interp runs it slowly; see docs/semantics/limits.md",
                file=sys.stderr,
                flush=True,
            )

    def __repr__(self) -> str:
        return f"<kernel {self.fn.__qualname__}>"


# Errors of the user's kernel or arguments: their tracebacks keep the user's frames only (an interp or
# compiler bug, any other exception, keeps cubepy's frames).
_USER_ERRORS = (SanitizerError, LaunchError, TensorMapError, ExpandError)


def _one_comp_arg(kernel: Kernel, param: ParamSpec, arg: Any) -> Any:
    try:
        return param.launch.compilation_arg(arg)
    except LaunchError as exc:
        raise LaunchError(
            f"kernel {kernel.name!r}, parameter {param.name!r} (argument index {param.index}): {exc}"
        ) from None


def _has_contents(cell: CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - probing an empty cell
    except ValueError:
        return False
    return True


class BoundKernel(Kernel):
    """A generic kernel with its type parameters bound: an ordinary kernel whose identity names the binding."""

    def __init__(self, generic: Kernel, binding: dict[generics.TypeVar, ScalarType]) -> None:
        super().__init__(generic.fn, generic.allow_checked, generic.allow_unchecked, generic.contract, generic.fastmath)
        self.generic = generic
        self.binding = binding
        self.binding_text = generics.binding_text(binding)
        with generics.bound(binding):
            self._params = [
                ParamSpec(p.name, p.index, p.annotation, p.launch)
                if generics.type_var_of(p.annotation) is None
                else self._bound_param(p)
                for p in generic.params
            ]

    def _bound_param(self, param: ParamSpec) -> ParamSpec:
        annotation = param.annotation
        concrete = annotation.bound_type() if isinstance(annotation, generics.TypeVar) else annotation.substitute()
        where = f"kernel {self.name!r}, parameter {param.name!r}"
        return ParamSpec(param.name, param.index, concrete, launch_arg_of(concrete, where))

    @property
    def is_generic(self) -> bool:
        """A bound kernel is concrete."""
        return False

    @property
    def identity(self) -> str:
        """The generic kernel's identity and the binding (each element type is its own cache entry)."""
        return f"{self.generic.identity}[{self.binding_text}]"

    def expand_function(self) -> FunctionType:
        """The generic kernel's expansion twin (one per function)."""
        return self.generic.expand_function()

    def define(
        self,
        comp_args: tuple[Any, ...],
        cube_dim: Any,
        checked: bool,
        contract: bool | None = None,
        fastmath: bool | None = None,
    ) -> ir.KernelDefinition:
        """Expand with the type parameters standing for their bound element types."""
        with generics.bound(self.binding):
            return super().define(comp_args, cube_dim, checked, contract, fastmath)

    def __repr__(self) -> str:
        return f"<kernel {self.fn.__qualname__}[{self.binding_text}]>"


def _warm_facts_hold(
    facts: tuple[Any, ...], marks: tuple[tuple[int, str, int], ...], args: tuple[Any, ...], cubes: int
) -> bool:
    """``Kernel.warm_check``'s test: the products and the cube count the kernel was compiled for still hold."""
    return products_hold(facts, args) and cube_count_holds(marks, args, cubes)


def _cubes(cube_count: Any) -> int:
    """The number of cubes of a ``CubeCount``, an ``(x, y, z)`` tuple or an int."""
    if isinstance(cube_count, int):
        return cube_count
    if isinstance(cube_count, tuple):
        return math.prod(int(extent) for extent in cube_count)
    return int(cube_count.x) * int(cube_count.y) * int(cube_count.z)
