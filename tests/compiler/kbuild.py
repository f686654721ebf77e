"""A small hand builder for kernels in compiler tests (there is no frontend in these tests).

Every instruction gets a source location in ``USER_FILE``; its line is the builder's ``line``
counter, which advances by one per instruction unless given explicitly.
"""

from __future__ import annotations

import contextlib
import itertools

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


def lit(value, elem: ElemType, line: int = 1) -> Variable:
    """A literal."""
    return constant(value, Type(elem, line))


class KernelBuilder:
    """Build a KernelDefinition instruction by instruction, with nested scopes as context managers."""

    def __init__(self, name: str = "k", cube_dim=(32, 1, 1), checked: bool = False, first_line: int = 10,
                 locations: bool = True) -> None:
        self.name = name
        self.locations = locations
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
    def _param(self, kind: VarKind, ty: Type, role: str, name: str | None) -> Variable:
        var = Variable(kind, next(self._slots[kind]), ty, name=name)
        self.params.append(Param(var, name or f"p{len(self.params)}", role))
        return var

    def array(self, ty: Type, name: str | None = None) -> Variable:
        return self._param(VarKind.GLOBAL, ty, "array", name)

    def tensor(self, ty: Type, name: str | None = None) -> Variable:
        return self._param(VarKind.GLOBAL, ty, "tensor", name)

    def scalar(self, ty: Type, name: str | None = None) -> Variable:
        return self._param(VarKind.SCALAR, ty, "scalar", name)

    def tensor_map(self, name: str | None = None) -> Variable:
        return self._param(VarKind.TENSOR_MAP, Type(U32), "tensor_map", name)

    def shared(self, ty: Type, length: int, alignment: int | None = None) -> Variable:
        var = Variable(VarKind.SHARED, next(self._slots[VarKind.SHARED]), ty, length=length, alignment=alignment)
        self.shared_memories.append(var)
        return var

    def local(self, ty: Type, length: int) -> Variable:
        var = Variable(VarKind.LOCAL_ARRAY, next(self._slots[VarKind.LOCAL_ARRAY]), ty, length=length)
        self.local_arrays.append(var)
        return var

    # -- instructions ------------------------------------------------------------------------------------
    def const(self, ty: Type) -> Variable:
        return Variable(VarKind.CONST, next(self._ids), ty)

    def mut(self, ty: Type) -> Variable:
        return Variable(VarKind.MUT, next(self._ids), ty)

    def emit(self, operation, out: Variable | Type | None = None, line: int | None = None) -> Variable | None:
        """Append ``out = operation``; a Type for ``out`` makes a fresh immutable local."""
        if isinstance(out, Type):
            out = self.const(out)
        if line is None:
            line = self.line
            self.line += 1
        loc = SourceLoc(USER_FILE, line, 4) if self.locations else None
        self._scopes[-1].append(Instruction(out, operation, loc))
        return out

    def builtin(self, name: str) -> Variable:
        return builtin(name)

    def binary(self, name: str, a: Variable, b: Variable) -> Variable:
        return self.emit(ops.Binary(name, a, b), a.type)

    def unary(self, name: str, a: Variable, out: Type | None = None) -> Variable:
        return self.emit(ops.Unary(name, a), out or a.type)

    def compare(self, name: str, a: Variable, b: Variable) -> Variable:
        return self.emit(ops.Compare(name, a, b), a.type.with_elem(BOOL))

    def cast(self, a: Variable, ty: Type) -> Variable:
        return self.emit(ops.Cast(a), ty)

    def index(self, memory: Variable, i: Variable, checked: bool = False) -> Variable:
        return self.emit(ops.Index(memory, i, checked), memory.type)

    def store(self, memory: Variable, i: Variable, value: Variable, checked: bool = False) -> None:
        self.emit(ops.IndexAssign(memory, i, value, checked))

    def assign(self, out: Variable, value: Variable) -> Variable:
        return self.emit(ops.Assign(value), out)

    # -- structured control flow -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _collect(self):
        self._scopes.append([])
        body: list[Instruction] = []
        try:
            yield body
        finally:
            body.extend(self._scopes.pop())

    @contextlib.contextmanager
    def if_(self, cond: Variable):
        line = self.line
        self.line += 1
        with self._collect() as body:
            yield
        self.emit(branch.If(cond, Scope(tuple(body))), line=line)

    @contextlib.contextmanager
    def range_loop(self, start: Variable, end: Variable, step: Variable | None = None, inclusive: bool = False):
        line = self.line
        self.line += 1
        index = self.const(start.type)
        step = step if step is not None else constant(1, start.type)
        with self._collect() as body:
            yield index
        self.emit(branch.RangeLoop(index, start, end, step, inclusive, Scope(tuple(body))), line=line)

    @contextlib.contextmanager
    def loop(self):
        line = self.line
        self.line += 1
        with self._collect() as body:
            yield
        self.emit(branch.Loop(Scope(tuple(body))), line=line)

    def scope(self):
        """Collect instructions into a list (for IfElse / Switch bodies built by hand)."""
        return self._collect()

    def build(self) -> KernelDefinition:
        assert len(self._scopes) == 1, "unclosed scope"
        return KernelDefinition(
            self.name, tuple(self.params), Scope(tuple(self._scopes[0])), tuple(self.cube_dim),
            shared_memories=tuple(self.shared_memories), local_arrays=tuple(self.local_arrays),
            barriers=tuple(self.barriers), checked=self.checked, source_file=USER_FILE if self.locations else None,
        )


def vector_add(elem: ElemType, line: int = 1, checked: bool = False, name: str = "vector_add",
               cube_dim=(256, 1, 1)) -> KernelDefinition:
    """out[i] = a[i] + b[i] for i = absolute_pos < len(out) (the classic guard)."""
    kb = KernelBuilder(name, cube_dim=cube_dim, checked=checked)
    a, b, out = kb.array(T(elem, line), "a"), kb.array(T(elem, line), "b"), kb.array(T(elem, line), "out")
    pos = builtin("absolute_pos")
    n = kb.emit(ops.Metadata("len", out), T(U32))
    inside = kb.compare("lt", pos, n)
    with kb.if_(inside):
        total = kb.binary("add", kb.index(a, pos), kb.index(b, pos))
        kb.store(out, pos, total)
    return kb.build()
