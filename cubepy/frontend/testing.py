"""Inspect what a cube function, method or kernel expands to, without launching (see docs/reference/cubepy.md).

``expand(fn, *arg_specs, **comptime)`` declares one parameter per runtime spec (element types give
scalars, ``Array[f32]`` a buffer, tuples nest, cube types expand their fields), passes plain Python
values and ``comptime`` keywords through, expands ``fn`` and returns an ``Expansion`` with the IR.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import attrs

from cubepy import ir
from cubepy.errors import CubeError
from cubepy.frontend import generics, mutability, source
from cubepy.frontend.buffer_launch import BufferType
from cubepy.frontend.elem import LineType, ScalarType
from cubepy.frontend.function import CubeFunction
from cubepy.frontend.kernel import MAX_TYPE_RERUNS, Kernel, expand_kernel_body, resolve_contract, resolve_fastmath
from cubepy.frontend.state import ExpansionState, KernelBuilder, activate
from cubepy.frontend.tma import TensorMapType
from cubepy.frontend.values import ExpandElement
from cubepy.ir import Type
from cubepy.ir import contract as ir_contract

if TYPE_CHECKING:
    from cubepy.ir import Instruction


@attrs.frozen
class Expansion:
    """The result of expanding a cube function: its IR and what it returned."""

    definition: ir.KernelDefinition
    result: object = None

    @property
    def scope(self) -> ir.Scope:
        """The expanded body."""
        return self.definition.body

    @property
    def ir(self) -> str:
        """The body in the IR text form."""
        return ir.format_scope(self.definition.body)

    @property
    def text(self) -> str:
        """The whole definition (parameters, memories and body) in the IR text form."""
        return ir.format_kernel(self.definition)

    @property
    def instructions(self) -> list[Instruction]:
        """Every instruction, nested bodies included, in program order."""
        return list(ir.walk(self.definition.body))

    @property
    def ops(self) -> list[str]:
        """The operation name of every instruction, in program order."""
        return [inst.op for inst in ir.walk(self.definition.body)]

    @property
    def outputs(self) -> tuple[Any, ...]:
        """What the function returned, flattened: IR variables for runtime values, plain values as they are."""
        return tuple(_flatten(self.result))

    def __str__(self) -> str:
        return self.ir


def _flatten(value: Any) -> Iterator[Any]:
    if value is None:
        return
    if isinstance(value, ExpandElement):
        yield value.var
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _flatten(item)
    elif mutability.is_composite(value):
        for name, _ in mutability.composite_fields(value):
            yield from _flatten(getattr(value, name))
    elif hasattr(value, "var"):
        yield value.var
    else:
        yield value


def spec_value(spec: Any, builder: KernelBuilder, name: str) -> Any:
    """The expand value a spec stands for (declaring parameters as needed); plain values pass through."""
    with builder.naming(name):
        if isinstance(spec, ScalarType):
            return ExpandElement(builder.register("scalar", Type(spec.ir)), builder.state)
        if isinstance(spec, ir.ElemType):
            return ExpandElement(builder.register("scalar", Type(spec)), builder.state)
        if isinstance(spec, LineType):
            return ExpandElement(builder.register("scalar", Type(spec.elem.ir, spec.size or 1)), builder.state)
        if isinstance(spec, (BufferType, TensorMapType)):
            return spec.expand(cast(Any, spec.default_compilation_arg()), builder)
        if isinstance(spec, tuple):
            return tuple(spec_value(s, builder, f"{i}") for i, s in enumerate(spec))
        if isinstance(spec, type) and callable(getattr(spec, "default_compilation_arg", None)):
            return cast(Any, spec).expand(cast(Any, spec).default_compilation_arg(), builder)
        launch_type = getattr(type(spec), "__launch_type__", None)
        if launch_type is not None:
            return launch_type.expand(spec, builder)
    return spec


def _contracted(
    definition: ir.KernelDefinition,
    contract: bool | None,
    keep: Iterable[ir.Variable] = (),
    fastmath: bool | None = None,
) -> ir.KernelDefinition:
    """``definition`` marked and, when contraction is on, with one-use ``a * b + c`` fused as the passes do."""
    if resolve_fastmath(fastmath):
        definition = attrs.evolve(definition, fastmath=True)
    if not resolve_contract(contract):
        return definition
    return ir_contract.contract(attrs.evolve(definition, contract=True), keep=keep)


def _run(
    function: CubeFunction,
    call: Callable[[ExpansionState, KernelBuilder], Any],
    name: str,
    checked: bool,
    contract: bool | None = None,
    fastmath: bool | None = None,
) -> Expansion:
    node = function.definition_node()
    default_loc = ir.SourceLoc(function.fn.__code__.co_filename, node.lineno, node.col_offset, function.fn.__qualname__)
    hints: dict[int, ir.ElemType] = {}
    for _ in range(MAX_TYPE_RERUNS + 1):
        state = ExpansionState(checked, default_loc, hints)
        builder = KernelBuilder(state)
        with activate(state):
            result = call(state, builder)
        if not state.needs_rerun():
            break
        hints = state.merged_hints()
    definition = builder.finish(name, (1, 1, 1), function.fn.__code__.co_filename)
    ir.verify(definition)
    # a variable the function returns is read by its caller: never fuse it away
    keep = [v for v in _flatten(result) if isinstance(v, ir.Variable)]
    return Expansion(_contracted(definition, contract, keep, fastmath), result)


def expand(
    fn: Any,
    *arg_specs: Any,
    checked: bool = False,
    cube_dim: Any = (1, 1, 1),
    contract: bool | None = None,
    fastmath: bool | None = None,
    **comptime: Any,
) -> Expansion:
    """Expand a cube function (or kernel) for ``arg_specs``; keywords are comptime arguments.

    ``contract``: fuse one-use ``a * b + c`` into ``fma`` as compiling does (None: the kernel's choice, else
    ``CUBEPY_CONTRACT``, on by default).  ``fastmath``: mark the definition as compiled with approximate f32
    math (None: the kernel's choice, else ``CUBEPY_FASTMATH``, off by default); the IR itself is the same.
    """
    try:
        if isinstance(fn, Kernel):
            return _expand_kernel(
                fn,
                arg_specs,
                comptime,
                checked,
                cube_dim,
                fn.contract if contract is None else contract,
                fn.fastmath if fastmath is None else fastmath,
            )
        if not isinstance(fn, CubeFunction):
            raise CubeError(f"cubepy.testing.expand expects a @cube function, got {type(fn).__name__}")

        def call(state: ExpansionState, builder: KernelBuilder) -> Any:
            values = [spec_value(s, builder, f"arg{i}") for i, s in enumerate(arg_specs)]
            return fn.invoke(state, tuple(values), comptime)

        return _run(fn, call, fn.name, checked, contract, fastmath)
    except CubeError as exc:
        raise exc.with_traceback(source.user_traceback(exc.__traceback__)) from None


def _expand_kernel(
    kernel: Kernel,
    arg_specs: tuple[Any, ...],
    comptime: dict[str, Any],
    checked: bool,
    cube_dim: Any,
    contract: bool | None,
    fastmath: bool | None = None,
) -> Expansion:
    if kernel.is_generic:  # element types in the specs bind the type parameters
        specs = list(arg_specs)
        aligned = [comptime[p.name] if p.name in comptime else (specs.pop(0) if specs else None) for p in kernel.params]
        kernel = kernel.bind_types(tuple(aligned))
        with generics.bound(kernel.binding):
            return _expand_concrete_kernel(kernel, arg_specs, comptime, checked, cube_dim, contract, fastmath)
    return _expand_concrete_kernel(kernel, arg_specs, comptime, checked, cube_dim, contract, fastmath)


def _expand_concrete_kernel(
    kernel: Kernel,
    arg_specs: tuple[Any, ...],
    comptime: dict[str, Any],
    checked: bool,
    cube_dim: Any,
    contract: bool | None,
    fastmath: bool | None = None,
) -> Expansion:
    params = kernel.params
    specs = list(arg_specs)
    comp_args = []
    for param in params:
        if param.name in comptime:
            comp_args.append(comptime[param.name])
        elif specs:
            spec = specs.pop(0)
            is_comp = getattr(param.launch, "is_compilation_arg", None)
            if param.is_comptime or (is_comp is not None and is_comp(spec)):
                comp_args.append(spec)
            elif spec is param.annotation or isinstance(spec, (ScalarType, BufferType, TensorMapType, type)):
                comp_args.append(param.launch.default_compilation_arg())
            else:
                comp_args.append(param.launch.compilation_arg(spec))
        else:
            comp_args.append(param.launch.default_compilation_arg())
    definition = expand_kernel_body(kernel, params, tuple(comp_args), cube_dim, checked, kernel.name)
    ir.verify(definition)
    return Expansion(_contracted(definition, contract, fastmath=fastmath), None)


def expand_method(
    cls: type, name: str, this_spec: Any, *arg_specs: Any, checked: bool = False, **comptime: Any
) -> Expansion:
    """Expand the cube method ``cls.name`` (through its ``__expand_<name>`` twin) for ``this_spec``."""
    try:
        twin = getattr(cls, f"__expand_{name}", None)
        function = vars(cls).get(name)
        if function is None:
            for klass in cls.__mro__:
                if isinstance(vars(klass).get(name), CubeFunction):
                    function = vars(klass)[name]
                    break
        if twin is None or not isinstance(function, CubeFunction):
            raise CubeError(f"{cls.__qualname__} has no cube method {name!r} (no __expand_{name})")

        def call(state: ExpansionState, builder: KernelBuilder) -> Any:
            this = spec_value(this_spec, builder, "self")
            values = [spec_value(s, builder, f"arg{i}") for i, s in enumerate(arg_specs)]
            return twin(state.current, this, *values, **comptime)

        return _run(function, call, f"{cls.__name__}.{name}", checked)
    except CubeError as exc:
        raise exc.with_traceback(source.user_traceback(exc.__traceback__)) from None
