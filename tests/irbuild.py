"""The one hand builder for IR in tests (IR, interp and compiler tests have no frontend to lean on).

Instructions are made from the operation records: ``kb.binary("add", a, b)`` builds ``ops.Add`` and types
its result by the record's rule.  Every instruction gets a source location: a fixed one (``loc=``), or
``file`` with the builder's ``line`` counter, which advances by one per instruction unless given.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator

from cubepy import ir
from cubepy.ir import (
    BOOL,
    U32,
    ElemType,
    Instruction,
    KernelDefinition,
    Param,
    Scope,
    SourceLoc,
    Type,
    Variable,
    VarKind,
    builtin,
    constant,
    ops,
)
from cubepy.ir.ops import branch

USER_FILE = "/home/user/project/user_kernels.py"


def T(elem: ElemType, line: int = 1) -> Type:
    """Shorthand for an item type."""
    return Type(elem, line)


def lit(value, elem: ElemType | Type, line: int = 1) -> Variable:
    """A literal of an element type (and line size) or of an item type."""
    return constant(value, elem if isinstance(elem, Type) else Type(elem, line))


class KernelBuilder:
    """Build a KernelDefinition instruction by instruction, with nested scopes as context managers."""

    def __init__(
        self,
        name: str = "k",
        cube_dim=(32, 1, 1),
        checked: bool = False,
        first_line: int = 10,
        locations: bool = True,
        loc: SourceLoc | None = None,
        file: str = USER_FILE,
    ) -> None:
        self.name = name
        self.locations = locations
        self.fixed_loc = loc
        self.file = file
        self.cube_dim = cube_dim
        self.checked = checked
        self.params: list[Param] = []
        self.shared_memories: list[Variable] = []
        self.local_arrays: list[Variable] = []
        self.barriers: list[Variable] = []
        self._ids = itertools.count()
        self._slots = {kind: itertools.count() for kind in VarKind}
        self._scopes: list[list[Instruction]] = [[]]
        self.line = first_line

    # -- parameters and memories ---------------------------------------------------------------------
    def _param(
        self, kind: VarKind, ty: Type, role: str, name: str | None, default: str, rank: int | None = None
    ) -> Variable:
        var = Variable(kind, next(self._slots[kind]), ty, name=name)
        self.params.append(Param(var, name or default.format(slot=var.id, index=len(self.params)), role, rank=rank))
        return var

    def array(self, ty: Type, name: str | None = None) -> Variable:
        return self._param(VarKind.GLOBAL, ty, "array", name, "p{index}")

    def buffer(self, ty: Type, name: str | None = None) -> Variable:
        return self._param(VarKind.GLOBAL, ty, "array", name, "buf{slot}")

    def tensor(self, ty: Type, name: str | None = None, rank: int | None = 2) -> Variable:
        """A tensor parameter compiled for ``rank`` dimensions (None: left to a launch)."""
        return self._param(VarKind.GLOBAL, ty, "tensor", name, "p{index}", rank)

    def scalar(self, ty: Type, name: str | None = None) -> Variable:
        return self._param(VarKind.SCALAR, ty, "scalar", name, "s{slot}")

    def tensor_map(self, name: str | None = None) -> Variable:
        return self._param(VarKind.TENSOR_MAP, Type(U32), "tensor_map", name, "p{index}")

    def shared(self, ty: Type, length: int, alignment: int | None = None) -> Variable:
        var = Variable(VarKind.SHARED, next(self._slots[VarKind.SHARED]), ty, length=length, alignment=alignment)
        self.shared_memories.append(var)
        return var

    shared_memory = shared

    def local(self, ty: Type, length: int) -> Variable:
        var = Variable(VarKind.LOCAL_ARRAY, next(self._slots[VarKind.LOCAL_ARRAY]), ty, length=length)
        self.local_arrays.append(var)
        return var

    local_array = local

    # -- instructions ------------------------------------------------------------------------------------
    def const(self, ty: Type) -> Variable:
        return Variable(VarKind.CONST, next(self._ids), ty)

    def mut(self, ty: Type, init: Variable | None = None) -> Variable:
        var = Variable(VarKind.MUT, next(self._ids), ty)
        if init is not None:
            self.emit(ops.Assign(init), var)
        return var

    def _loc(self, line: int | None) -> SourceLoc | None:
        if self.fixed_loc is not None:
            return self.fixed_loc
        if line is None:
            line = self.line
            self.line += 1
        return SourceLoc(self.file, line, 4) if self.locations else None

    def emit(self, operation, out: Variable | Type | None = None, line: int | None = None) -> Variable | None:
        """Append ``out = operation``; a Type for ``out`` makes a fresh immutable local."""
        if isinstance(out, Type):
            out = self.const(out)
        self._scopes[-1].append(Instruction(out, operation, self._loc(line)))
        return out

    def op(self, name: str, *operands, out: Type | None = None) -> Variable | None:
        """The operation named ``name`` on ``operands``; the result is typed by its record unless given."""
        operation = ops.lookup(name)(*operands)
        if out is None and operation.RECORD.has_result:
            out = operation.result_type()
        return self.emit(operation, out)

    def builtin(self, name: str) -> Variable:
        return builtin(name)

    def binary(self, name: str, a: Variable, b: Variable) -> Variable:
        return self.op(name, a, b)

    def unary(self, name: str, a: Variable, out: Type | None = None) -> Variable:
        return self.op(name, a, out=out)

    def compare(self, name: str, a: Variable, b: Variable) -> Variable:
        return self.op(name, a, b)

    def cast(self, a: Variable, ty: Type) -> Variable:
        return self.emit(ops.Cast(a), ty)

    def index(self, memory: Variable, i: Variable, checked: bool = False) -> Variable:
        return self.emit(ops.Index(memory, i, checked), memory.type)

    load = index

    def store(self, memory: Variable, i: Variable, value: Variable, checked: bool = False) -> None:
        self.emit(ops.IndexAssign(memory, i, value, checked))

    def assign(self, out: Variable, value: Variable) -> Variable:
        return self.emit(ops.Assign(value), out)

    def meta(self, name: str, memory: Variable, dim: Variable | None = None) -> Variable:
        return self.op(name, memory, dim)

    def plane(
        self, name: str, value: Variable | None, arg: Variable | None = None, out_ty: Type | None = None
    ) -> Variable:
        return self.emit(ops.lookup(f"plane_{name}")(value, arg), out_ty or (value.type if value else Type(BOOL)))

    def atomic(self, name: str, memory: Variable, index: Variable, value: Variable | None = None) -> Variable:
        return self.emit(ops.lookup(f"atomic_{name}")(memory, index, value), None if name == "store" else memory.type)

    def sync_cube(self) -> None:
        self.emit(ops.SyncCube())

    def sync_plane(self) -> None:
        self.emit(ops.SyncPlane())

    # -- structured control flow -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _collect(self) -> Iterator[list[Instruction]]:
        self._scopes.append([])
        body: list[Instruction] = []
        try:
            yield body
        finally:
            body.extend(self._scopes.pop())

    def _head_line(self) -> int:
        line = self.line
        if self.fixed_loc is None:
            self.line += 1
        return line

    def _scope_of(self, fn: Callable[[], object] | None) -> Scope:
        with self._collect() as body:
            if fn is not None:
                fn()
        return Scope(tuple(body))

    @contextlib.contextmanager
    def if_(self, cond: Variable):
        line = self._head_line()
        with self._collect() as body:
            yield
        self.emit(branch.If(cond, Scope(tuple(body))), line=line)

    def if_else(self, cond: Variable, then_fn: Callable[[], object], else_fn: Callable[[], object]) -> None:
        line = self._head_line()
        self.emit(branch.IfElse(cond, self._scope_of(then_fn), self._scope_of(else_fn)), line=line)

    def switch(
        self, value: Variable, cases: dict[int, Callable[[], object]], default: Callable[[], object] | None = None
    ) -> None:
        line = self._head_line()
        arms = tuple((k, self._scope_of(fn)) for k, fn in cases.items())
        self.emit(branch.Switch(value, arms, self._scope_of(default)), line=line)

    @contextlib.contextmanager
    def range_loop(self, start: Variable, end: Variable, step: Variable | None = None, inclusive: bool = False):
        line = self._head_line()
        index = self.const(start.type)
        step = step if step is not None else constant(1, start.type)
        with self._collect() as body:
            yield index
        self.emit(branch.RangeLoop(index, start, end, step, inclusive, Scope(tuple(body))), line=line)

    @contextlib.contextmanager
    def loop(self):
        line = self._head_line()
        with self._collect() as body:
            yield
        self.emit(branch.Loop(Scope(tuple(body))), line=line)

    def break_(self) -> None:
        self.emit(branch.Break())

    def continue_(self) -> None:
        self.emit(branch.Continue())

    def return_(self) -> None:
        self.emit(branch.Return())

    def scope(self):
        """Collect instructions into a list (for IfElse / Switch bodies built by hand)."""
        return self._collect()

    def build(self) -> KernelDefinition:
        assert len(self._scopes) == 1, "unclosed scope"
        return KernelDefinition(
            self.name,
            tuple(self.params),
            Scope(tuple(self._scopes[0])),
            tuple(self.cube_dim),
            shared_memories=tuple(self.shared_memories),
            local_arrays=tuple(self.local_arrays),
            barriers=tuple(self.barriers),
            checked=self.checked,
            source_file=self.file if self.locations and self.fixed_loc is None else None,
        )

    def kernel(self, cube_dim=None, name: str | None = None) -> KernelDefinition:
        """The verified kernel (optionally with another cube_dim or name)."""
        if cube_dim is not None:
            self.cube_dim = tuple(cube_dim)
        if name is not None:
            self.name = name
        kernel = self.build()
        ir.verify(kernel)
        return kernel


# -- single instructions, for IR tests ------------------------------------------------------------------------
LOC = SourceLoc("kernel.py", 7, 4)


class Ids:
    """Fresh variables for hand-written IR."""

    def __init__(self) -> None:
        self.counter = itertools.count()

    def const(self, ty: Type) -> Variable:
        return Variable(VarKind.CONST, next(self.counter), ty)

    def mut(self, ty: Type) -> Variable:
        return Variable(VarKind.MUT, next(self.counter), ty)


def inst(out, operation, loc=LOC) -> Instruction:
    """One instruction at ``loc``."""
    return Instruction(out, operation, loc)


def kernel(body, params=(), cube_dim=(32, 1, 1), **kw) -> KernelDefinition:
    """A kernel of the given instructions."""
    return KernelDefinition("k", tuple(params), Scope(tuple(body)), cube_dim, **kw)


def param_buffer(slot: int, ty: Type, name: str | None = None) -> Param:
    """An array parameter in ``slot``."""
    return Param(Variable(VarKind.GLOBAL, slot, ty), name or f"b{slot}", "array")


def vector_add(
    elem: ElemType, line: int = 1, checked: bool = False, name: str = "vector_add", cube_dim=(256, 1, 1)
) -> KernelDefinition:
    """out[i] = a[i] + b[i] for i = absolute_pos < len(out) (the classic guard)."""
    kb = KernelBuilder(name, cube_dim=cube_dim, checked=checked)
    a, b, out = kb.array(T(elem, line), "a"), kb.array(T(elem, line), "b"), kb.array(T(elem, line), "out")
    pos = builtin("absolute_pos")
    n = kb.meta("len", out)
    inside = kb.compare("lt", pos, n)
    with kb.if_(inside):
        total = kb.binary("add", kb.index(a, pos), kb.index(b, pos))
        kb.store(out, pos, total)
    return kb.build()
