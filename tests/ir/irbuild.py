"""A tiny hand builder for IR in tests (no frontend)."""

from __future__ import annotations

import itertools

from cubepy import ir
from cubepy.ir import Instruction, KernelDefinition, Param, Scope, SourceLoc, Type, Variable, VarKind

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
    return Instruction(out, operation, loc)


def kernel(body, params=(), cube_dim=(32, 1, 1), **kw) -> KernelDefinition:
    return KernelDefinition("k", tuple(params), Scope(tuple(body)), cube_dim, **kw)


def buffer(slot: int, ty: Type, name: str | None = None) -> Param:
    return Param(Variable(VarKind.GLOBAL, slot, ty), name or f"b{slot}", "array")


F32 = Type(ir.F32)
U32 = Type(ir.U32)
BOOL = Type(ir.BOOL)
