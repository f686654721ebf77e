"""The expansion's state: scope builders, the kernel builder and the control stack.

``ExpansionState`` is kernel-wide (id allocator, declared memories, checked mode, control stack,
weak-type hints); ``ScopeBuilder`` is one insertion point (CubeCL's ``Scope``: a list of
instructions plus the shared state; ``child()`` makes a branch body); ``KernelBuilder`` registers
kernel parameters in declaration order, buffers, scalars and tensor maps each counting slots from 0.
Expand values always emit into the *current* scope of the active state, so an operation written
inside a branch body lands in that body.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import overload

import attrs

from cubepy import ir
from cubepy.errors import CubeError
from cubepy.frontend import source
from cubepy.ir import Instruction, SourceLoc, Type, Variable, VarKind

PROGRESS_EVERY = 50_000  # expansion runs about 10,000 instructions a second: a line every ~5 s

_local = threading.local()


def _stack() -> list[ExpansionState]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def active_state() -> ExpansionState | None:
    """The expansion running on this thread, or None outside kernels."""
    stack = _stack()
    return stack[-1] if stack else None


def require_state(what: str = "this operation") -> ExpansionState:
    """The active expansion; ``CubeError`` when called from plain Python."""
    state = active_state()
    if state is None:
        raise CubeError(
            f"{what} only works inside a cube function or kernel being expanded; "
            "launch a kernel (or use cubepy.testing.expand) instead of calling it from Python"
        )
    return state


def current_scope() -> ScopeBuilder:
    """The insertion point of the active expansion."""
    return require_state().current


@contextlib.contextmanager
def activate(state: ExpansionState) -> Iterator[ExpansionState]:
    """Make ``state`` the active expansion for the duration of the block."""
    stack = _stack()
    stack.append(state)
    try:
        yield state
    finally:
        stack.pop()


class ControlEntry:
    """One level of the expansion's control stack.

    Kinds: ``"kernel"`` and ``"function"`` (a cube function body), ``"arm"`` (a runtime branch body),
    ``"loop"`` (a runtime loop body) and ``"unrolled"`` (one iteration of a comptime loop).
    ``break``/``continue``/``return`` look at the stack to decide between Python and IR control flow.
    """

    __slots__ = ("kind", "name", "loc")

    def __init__(self, kind: str, name: str | None = None, loc: SourceLoc | None = None) -> None:
        self.kind = kind
        self.name = name
        self.loc = loc


class Promotion:
    """How a comptime value became a mutable runtime local, so a later comptime-only use can say where."""

    __slots__ = ("name", "value", "construct", "construct_loc", "assigned_loc")

    def __init__(self, name: str, value: object, construct: str, construct_loc: ir.SourceLoc | None) -> None:
        self.name = name
        self.value = value  # the comptime value it held before the construct
        self.construct = construct  # "if" or "loop"
        self.construct_loc = construct_loc
        self.assigned_loc: ir.SourceLoc | None = None  # its first assignment inside the construct


class ExpansionState:
    """Everything one expansion shares across its scopes."""

    def __init__(
        self,
        checked: bool = False,
        default_loc: SourceLoc | None = None,
        weak_hints: dict[int, ir.ElemType] | None = None,
    ) -> None:
        self.checked = checked
        self.default_loc = default_loc
        self._local_ids = itertools.count()
        self._memory_ids = {
            VarKind.SHARED: itertools.count(),
            VarKind.LOCAL_ARRAY: itertools.count(),
            VarKind.BARRIER: itertools.count(),
        }
        self.shared_memories: list[Variable] = []
        self.local_arrays: list[Variable] = []
        self.barriers: list[Variable] = []
        # Constant tables by (element type, bytes): a table named twice is declared once.
        self.const_tables: dict[tuple[ir.ElemType, bytes], ir.ConstTable] = {}
        self.control: list[ControlEntry] = []
        # Where each local was defined, to report a value used outside its branch at the user's line.
        self.defined_in: dict[tuple[VarKind, int], ScopeBuilder] = {}
        # Weak types: Python numbers that became mutable locals take a default type that later uses
        # may refine; a refinement re-runs the expansion with the hints of the previous run.
        self.weak_hints_in: dict[int, ir.ElemType] = dict(weak_hints or {})
        self.weak_hints_out: dict[int, ir.ElemType] = {}
        self._weak_ordinal = itertools.count()
        # Mutable locals that started as comptime numbers (by MUT id), for errors at comptime-only uses.
        self.promotions: dict[int, Promotion] = {}
        # Per buffer parameter (GLOBAL id): the power of two the launch found its ``len()`` to be a multiple of.
        self.len_multiple_of: dict[int, int] = {}
        self.root = ScopeBuilder(self, None)
        self.current = self.root
        self.appended = 0  # instructions appended so far, and who hears of every PROGRESS_EVERY-th
        self.progress: Callable[[int], None] | None = None

    # -- ids and locations ----------------------------------------------------------------
    def new_local(self, ty: Type, mutable: bool = False, name: str | None = None) -> Variable:
        """A fresh immutable (CONST) or mutable (MUT) local of type ``ty``."""
        kind = VarKind.MUT if mutable else VarKind.CONST
        return Variable(kind, next(self._local_ids), ty, name=name)

    def location(self) -> SourceLoc | None:
        """The user source line running now."""
        return source.current_loc(self.default_loc)

    # -- weak types ------------------------------------------------------------------------
    def weak_type(self, default: ir.ElemType) -> tuple[int, ir.ElemType]:
        """A new weak-type ordinal and its type: the previous run's hint, else ``default``."""
        ordinal = next(self._weak_ordinal)
        return ordinal, self.weak_hints_in.get(ordinal, default)

    def hint_weak(self, ordinal: int, elem: ir.ElemType) -> None:
        """Record that weak local ``ordinal`` should have been ``elem`` (merged with other hints)."""
        previous = self.weak_hints_out.get(ordinal)
        self.weak_hints_out[ordinal] = elem if previous is None else ir.promote(previous, elem)

    def needs_rerun(self) -> bool:
        """Whether a weak local got a better type than the one this run used."""
        return any(self.weak_hints_in.get(k) != v for k, v in self.weak_hints_out.items())

    def merged_hints(self) -> dict[int, ir.ElemType]:
        """Hints for the next run."""
        merged = dict(self.weak_hints_in)
        merged.update(self.weak_hints_out)
        return merged

    # -- declared memories -----------------------------------------------------------------
    def declare_memory(
        self, kind: VarKind, ty: Type, length: int, alignment: int | None = None, aliases: tuple[int, int] | None = None
    ) -> Variable:
        """Declare a shared memory (``aliases``: a view of another's bytes), local array or barrier of the kernel."""
        var = Variable(kind, next(self._memory_ids[kind]), ty, length=length, alignment=alignment, aliases=aliases)
        {VarKind.SHARED: self.shared_memories, VarKind.LOCAL_ARRAY: self.local_arrays, VarKind.BARRIER: self.barriers}[
            kind
        ].append(var)
        return var

    def declare_const_table(self, elem: ir.ElemType, values: tuple[bool | int | float, ...], key: bytes) -> Variable:
        """The constant table holding ``values`` (``key``: their bytes), declared on first use."""
        table = self.const_tables.get((elem, key))
        if table is None:
            table = self.const_tables[(elem, key)] = ir.const_table(len(self.const_tables), elem, values)
        return table.var

    # -- control stack ---------------------------------------------------------------------
    @contextlib.contextmanager
    def control_entry(self, kind: str, name: str | None = None) -> Iterator[ControlEntry]:
        """Push a control-stack entry for the block."""
        entry = ControlEntry(kind, name, self.location())
        self.control.append(entry)
        try:
            yield entry
        finally:
            popped = self.control.pop()
            assert popped is entry

    @contextlib.contextmanager
    def in_scope(self, scope: ScopeBuilder) -> Iterator[ScopeBuilder]:
        """Make ``scope`` the insertion point for the block."""
        previous = self.current
        self.current = scope
        try:
            yield scope
        finally:
            self.current = previous


class ScopeBuilder:
    """One insertion point: a growing list of instructions (CubeCL's ``Scope``)."""

    def __init__(self, state: ExpansionState, parent: ScopeBuilder | None) -> None:
        self.state = state
        self.parent = parent
        self.instructions: list[Instruction] = []

    def child(self) -> ScopeBuilder:
        """A new scope for a branch or loop body nested in this one."""
        return ScopeBuilder(self.state, self)

    def encloses(self, other: ScopeBuilder) -> bool:
        """Whether ``other`` is this scope or nested in it."""
        scope: ScopeBuilder | None = other
        while scope is not None:
            if scope is self:
                return True
            scope = scope.parent
        return False

    def check_visible(self, var: Variable) -> None:
        """Raise a located ExpandError when ``var`` was defined in a branch this scope is not part of."""
        owner = self.state.defined_in.get((var.kind, var.id))
        if owner is not None and not owner.encloses(self):
            source.fail(
                f"a value computed inside a runtime branch or loop body ({var!r}) is used outside it; "
                "assign the variable before the branch so it becomes a mutable local"
            )

    def append(self, operation: ir.ops.Operation, out: Variable | None = None, loc: SourceLoc | None = None) -> None:
        """Append ``out = operation`` at the current user line."""
        for var in operation.operands():
            if var.kind in (VarKind.CONST, VarKind.MUT):
                self.check_visible(var)
        if out is not None:
            if (out.kind, out.id) in self.state.defined_in:
                self.check_visible(out)
            else:
                self.state.defined_in[(out.kind, out.id)] = self
        self.instructions.append(Instruction(out, operation, loc or self.state.location()))
        self.state.appended += 1
        if self.state.appended % PROGRESS_EVERY == 0 and self.state.progress is not None:
            self.state.progress(self.state.appended)  # a huge expansion says how far it got (frontend/kernel.py)

    @overload
    def emit(self, operation: ir.ops.Operation, out_type: Type) -> Variable: ...

    @overload
    def emit(self, operation: ir.ops.Operation, out_type: None = None) -> None: ...

    def emit(self, operation: ir.ops.Operation, out_type: Type | None = None) -> Variable | None:
        """Append ``operation``; when ``out_type`` is given its result is a fresh immutable local."""
        out = self.state.new_local(out_type) if out_type is not None else None
        self.append(operation, out)
        return out

    def create_local_mut(self, ty: Type, init: Variable) -> Variable:
        """A new mutable local initialised with ``init`` (which must have type ``ty``)."""
        var = self.state.new_local(ty, mutable=True)
        self.append(ir.ops.Assign(init), var)
        return var

    def freeze(self) -> ir.Scope:
        """The instructions as an immutable IR scope."""
        return ir.Scope(tuple(self.instructions))


_ROLE_KIND = {
    "array": VarKind.GLOBAL,
    "tensor": VarKind.GLOBAL,
    "scalar": VarKind.SCALAR,
    "tensor_map": VarKind.TENSOR_MAP,
}


class KernelBuilder:
    """Registers a kernel's parameters in declaration order and finishes the ``KernelDefinition``."""

    def __init__(self, state: ExpansionState) -> None:
        self.state = state
        self.params: list[ir.Param] = []
        self._slots = {
            VarKind.GLOBAL: itertools.count(),
            VarKind.SCALAR: itertools.count(),
            VarKind.TENSOR_MAP: itertools.count(),
        }
        self._names: list[str] = []
        # the kernel argument being expanded (``expand_kernel_body``) and the buffer slot each argument got
        self.argument: int | None = None
        self.argument_slots: dict[int, int] = {}
        self.scalar_slots: dict[int, int] = {}  # the scalar slot of each argument that registered one scalar
        # buffer slot -> the launch's ``len_as_product`` in argument indices, resolved in ``finish`` (a factor
        # may be an argument after the array)
        self._products: dict[int, tuple[tuple[tuple[int, str, int], ...], tuple[tuple[int, str, int], ...]]] = {}
        self._cube_count: list[ir.ProductFactor] = []  # ``KernelDefinition.cube_count_as``

    @property
    def checked(self) -> bool:
        """Whether global indexing is bounds-checked (``launch``) or raw (``launch_unchecked``)."""
        return self.state.checked

    @property
    def scope(self) -> ScopeBuilder:
        """The kernel body's root scope."""
        return self.state.root

    @contextlib.contextmanager
    def naming(self, name: str) -> Iterator[None]:
        """Name parameters registered in the block ``name`` (nested: ``outer.inner``)."""
        self._names.append(name)
        try:
            yield
        finally:
            self._names.pop()

    def _param_name(self) -> str:
        return ".".join(self._names) if self._names else f"arg{len(self.params)}"

    def register(
        self,
        role: str,
        ty: Type,
        len_is_buffer_len: bool = False,
        exclusive: bool = False,
        rank: int | None = None,
        same_len_as: int | None = None,
        multiple_of: int = 1,
        shape_multiple_of: tuple[int, ...] = (),
        stride_multiple_of: tuple[int, ...] = (),
        len_as_shape: tuple[int, int] | None = None,
        unit_strides: tuple[bool, ...] = (),
        contiguous: bool = False,
        same_shape_as: int | None = None,
        address_multiple_of: int = 1,
        len_as_product: tuple[tuple[tuple[int, str, int], ...], tuple[tuple[int, str, int], ...]] | None = None,
        cube_count_dims: tuple[int, ...] = (),
    ) -> Variable:
        """Register a parameter of ``role`` ("array", "tensor", "scalar", "tensor_map") at its next slot.

        ``same_len_as``: the kernel argument index of an earlier buffer with the same ``len()``;
        ``multiple_of``: a power of two the launch found an integer scalar's value (a buffer's ``len()``) to be a
        multiple of; ``shape_multiple_of``/``stride_multiple_of``: the same for each of a tensor's dimensions;
        ``unit_strides``: per dimension, whether the launch found the tensor's stride to be 1; ``contiguous``:
        a rank-2 tensor whose strides the launch found to be ``(shape(1), 1)``; ``same_shape_as``: the kernel
        argument index of an earlier tensor of the same shape; ``address_multiple_of``: a power of two the launch
        found a buffer's first element's address (in bytes) to be a multiple of; ``len_as_product``: the two
        factors the launch found the buffer's ``len`` the product of (``ir.Param.len_as_product``), each the
        ``(argument index, kind, dim)`` of every argument equal to it (``ir.ProductFactor``'s kinds);
        ``cube_count_dims``: the dimensions (of a tensor; ``(0,)`` for an array's len or a scalar) the launch
        found equal to its number of cubes (``KernelDefinition.cube_count_as``).
        """
        kind = _ROLE_KIND[role]
        var = Variable(kind, next(self._slots[kind]), ty, name=self._param_name())
        same_len = self.argument_slots.get(same_len_as) if same_len_as is not None else None
        same_shape = self.argument_slots.get(same_shape_as) if same_shape_as is not None else None
        extent = None
        if len_as_shape is not None and (tensor_slot := self.argument_slots.get(len_as_shape[0])) is not None:
            extent = (tensor_slot, len_as_shape[1])
        if kind is VarKind.GLOBAL and self.argument is not None:
            self.argument_slots.setdefault(self.argument, var.id)
        if kind is VarKind.SCALAR and self.argument is not None:
            self.scalar_slots[self.argument] = -1 if self.argument in self.scalar_slots else var.id
        if len_as_product is not None:
            self._products[var.id] = len_as_product
        for dim in cube_count_dims:  # the launch found this value equal to its number of cubes
            kind_name = "scalar" if kind is VarKind.SCALAR else "shape" if role == "tensor" else "len"
            self._cube_count.append(ir.ProductFactor(kind_name, var.id, dim if role == "tensor" else 0))
        if kind is VarKind.GLOBAL and multiple_of > 1:
            self.state.len_multiple_of[var.id] = multiple_of
        self.params.append(
            ir.Param(
                var,
                self._param_name(),
                role,
                len_is_buffer_len,
                exclusive,
                rank,
                same_len,
                multiple_of,
                shape_multiple_of,
                stride_multiple_of,
                extent,
                unit_strides,
                contiguous,
                same_shape,
                address_multiple_of,
            )
        )
        return var

    def finish(self, name: str, cube_dim: tuple[int, int, int], source_file: str | None) -> ir.KernelDefinition:
        """The kernel definition built so far."""
        state = self.state
        return ir.KernelDefinition(
            name=name,
            params=tuple(self._with_products(p) for p in self.params),
            body=state.root.freeze(),
            cube_dim=(cube_dim[0], cube_dim[1], cube_dim[2]),
            shared_memories=tuple(state.shared_memories),
            local_arrays=tuple(state.local_arrays),
            barriers=tuple(state.barriers),
            const_tables=tuple(state.const_tables.values()),
            checked=state.checked,
            source_file=source_file,
            cube_count_as=tuple(self._cube_count),
        )

    def _with_products(self, param: ir.Param) -> ir.Param:
        """``param`` with its ``len_as_product`` in kernel slots, when both factors are parameters of this kernel
        (a scalar argument that registered one u32 scalar; a buffer argument)."""
        found = self._products.get(param.var.id) if param.var.kind is VarKind.GLOBAL else None
        if found is None:
            return param
        factors = []
        for alike in found:
            resolved = []
            for argument, kind, dim in alike:
                slot = self.scalar_slots.get(argument) if kind == "scalar" else self.argument_slots.get(argument)
                if slot is not None and slot >= 0:
                    resolved.append(ir.ProductFactor(kind, slot, dim))
            if not resolved:
                return param
            factors.append(tuple(resolved))
        return attrs.evolve(param, len_as_product=(factors[0], factors[1]))
