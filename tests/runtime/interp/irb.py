"""A small IR builder and launcher for the interp tests (there is no frontend to lean on here)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator

import numpy as np

from cubepy import ir
from cubepy.ir import Instruction, KernelDefinition, Param, Scope, SourceLoc, Type, Variable, VarKind, ops
from cubepy.ir.ops import branch
from cubepy.runtime import interp
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.handle import Handle

F16, BF16, F32, F64 = Type(ir.F16), Type(ir.BF16), Type(ir.F32), Type(ir.F64)
I8, I32, I64, U8, U32, U64 = Type(ir.I8), Type(ir.I32), Type(ir.I64), Type(ir.U8), Type(ir.U32), Type(ir.U64)
BOOL = Type(ir.BOOL)
LOC = SourceLoc("user_kernel.py", 42, 8)


def line(ty: Type, size: int) -> Type:
    """A line type of ``size`` lanes of ``ty``'s element."""
    return Type(ty.elem, size)


def c(value, ty: Type = U32) -> Variable:
    """A literal."""
    return ir.constant(value, ty)


def bi(name: str) -> Variable:
    """A builtin."""
    return ir.builtin(name)


class Builder:
    """Emits instructions into nested scopes; variables get fresh ids per kind."""

    def __init__(self) -> None:
        self.ids = itertools.count()
        self.blocks: list[list[Instruction]] = [[]]
        self.params: list[Param] = []
        self.shared: list[Variable] = []
        self.local: list[Variable] = []

    # -- declarations ----------------------------------------------------------------------
    def buffer(self, ty: Type, name: str | None = None) -> Variable:
        slot = sum(p.role == "array" for p in self.params)
        var = Variable(VarKind.GLOBAL, slot, ty)
        self.params.append(Param(var, name or f"buf{slot}", "array"))
        return var

    def scalar(self, ty: Type, name: str | None = None) -> Variable:
        slot = sum(p.role == "scalar" for p in self.params)
        var = Variable(VarKind.SCALAR, slot, ty)
        self.params.append(Param(var, name or f"s{slot}", "scalar"))
        return var

    def shared_memory(self, ty: Type, length: int, alignment: int | None = None) -> Variable:
        var = Variable(VarKind.SHARED, len(self.shared), ty, length=length, alignment=alignment)
        self.shared.append(var)
        return var

    def local_array(self, ty: Type, length: int) -> Variable:
        var = Variable(VarKind.LOCAL_ARRAY, len(self.local), ty, length=length)
        self.local.append(var)
        return var

    def const(self, ty: Type) -> Variable:
        return Variable(VarKind.CONST, next(self.ids), ty)

    def mut(self, ty: Type, init: Variable | None = None) -> Variable:
        var = Variable(VarKind.MUT, next(self.ids), ty)
        if init is not None:
            self.emit(var, ops.Assign(init))
        return var

    # -- instructions ----------------------------------------------------------------------
    def emit(self, out: Variable | None, operation) -> Variable | None:
        self.blocks[-1].append(Instruction(out, operation, LOC))
        return out

    def binary(self, name: str, lhs: Variable, rhs: Variable) -> Variable:
        return self.emit(self.const(lhs.type), ops.Binary(name, lhs, rhs))

    def unary(self, name: str, x: Variable, out_ty: Type | None = None) -> Variable:
        return self.emit(self.const(out_ty or x.type), ops.Unary(name, x))

    def compare(self, name: str, lhs: Variable, rhs: Variable) -> Variable:
        return self.emit(self.const(lhs.type.with_elem(ir.BOOL)), ops.Compare(name, lhs, rhs))

    def cast(self, x: Variable, ty: Type) -> Variable:
        return self.emit(self.const(ty), ops.Cast(x))

    def assign(self, target: Variable, value: Variable) -> None:
        self.emit(target, ops.Assign(value))

    def load(self, memory: Variable, index: Variable, checked: bool = False) -> Variable:
        return self.emit(self.const(memory.type), ops.Index(memory, index, checked))

    def store(self, memory: Variable, index: Variable, value: Variable, checked: bool = False) -> None:
        self.emit(None, ops.IndexAssign(memory, index, value, checked))

    def meta(self, name: str, memory: Variable, dim: Variable | None = None) -> Variable:
        return self.emit(self.const(U32), ops.Metadata(name, memory, dim))

    def plane(self, name: str, value: Variable | None, arg: Variable | None = None,
              out_ty: Type | None = None) -> Variable:
        return self.emit(self.const(out_ty or value.type), ops.PlaneOp(name, value, arg))

    def atomic(self, name: str, memory: Variable, index: Variable, value: Variable | None = None) -> Variable:
        out = None if name == "store" else self.const(memory.type)
        return self.emit(out, ops.AtomicOp(name, memory, index, value))

    # -- control flow ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _block(self) -> Iterator[list[Instruction]]:
        self.blocks.append([])
        block = self.blocks[-1]
        yield block
        self.blocks.pop()

    def _scope(self, fn: Callable[[], object] | None) -> Scope:
        with self._block() as block:
            if fn is not None:
                fn()
        return Scope(tuple(block))

    @contextlib.contextmanager
    def if_(self, cond: Variable) -> Iterator[None]:
        with self._block() as block:
            yield
        self.emit(None, branch.If(cond, Scope(tuple(block))))

    def if_else(self, cond: Variable, then_fn: Callable[[], object], else_fn: Callable[[], object]) -> None:
        self.emit(None, branch.IfElse(cond, self._scope(then_fn), self._scope(else_fn)))

    def switch(self, value: Variable, cases: dict[int, Callable[[], object]],
               default: Callable[[], object] | None = None) -> None:
        arms = tuple((k, self._scope(fn)) for k, fn in cases.items())
        self.emit(None, branch.Switch(value, arms, self._scope(default)))

    @contextlib.contextmanager
    def loop(self) -> Iterator[None]:
        with self._block() as block:
            yield
        self.emit(None, branch.Loop(Scope(tuple(block))))

    @contextlib.contextmanager
    def range_loop(self, start: Variable, end: Variable, step: Variable | None = None,
                   inclusive: bool = False) -> Iterator[Variable]:
        index = self.const(start.type)
        step = step if step is not None else c(1, start.type)
        with self._block() as block:
            yield index
        self.emit(None, branch.RangeLoop(index, start, end, step, inclusive, Scope(tuple(block))))

    def break_(self) -> None:
        self.emit(None, branch.Break())

    def continue_(self) -> None:
        self.emit(None, branch.Continue())

    def return_(self) -> None:
        self.emit(None, branch.Return())

    def sync_cube(self) -> None:
        self.emit(None, ops.SyncCube())

    def sync_plane(self) -> None:
        self.emit(None, ops.SyncPlane())

    # -- kernel ----------------------------------------------------------------------------
    def kernel(self, cube_dim=(32, 1, 1), name: str = "k") -> KernelDefinition:
        assert len(self.blocks) == 1, "unclosed block"
        kernel = KernelDefinition(name, tuple(self.params), Scope(tuple(self.blocks[0])), tuple(cube_dim),
                                  shared_memories=tuple(self.shared), local_arrays=tuple(self.local))
        ir.verify(kernel)
        return kernel


def launch(kernel: KernelDefinition, cube_count, buffers=(), scalars=(), *, sanitize: bool = False,
           line_sizes: dict[int, int] | None = None) -> list[np.ndarray]:
    """Run ``kernel`` on copies of ``buffers`` and return them after the run (same shapes)."""
    bindings = Bindings()
    handles = []
    for slot, array in enumerate(buffers):
        array = np.asarray(array)
        handle = Handle(None, array.copy().ravel(), array.dtype, array.shape)
        line_size = (line_sizes or {}).get(slot, 1)
        bindings.buffers.append(BufferBinding(handle, line_size, (array.size,), (1,)))
        handles.append(handle)
    for value in scalars:
        bindings.scalars.append(value)
    if isinstance(cube_count, int):
        cube_count = (cube_count, 1, 1)
    interp.run(kernel, cube_count, bindings, sanitize=sanitize)
    return [h.storage.reshape(np.asarray(a).shape) for h, a in zip(handles, buffers)]
