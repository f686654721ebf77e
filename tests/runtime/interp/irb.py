"""Item types, literals and a launcher for the interp tests; the builder is ``tests.irbuild``'s."""

from __future__ import annotations

import numpy as np

from cubepy import ir
from cubepy.ir import KernelDefinition, SourceLoc, Type, Variable
from cubepy.runtime import interp
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.handle import Handle
from tests.irbuild import KernelBuilder

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


class Builder(KernelBuilder):
    """The one test builder (``tests.irbuild``) with every instruction at ``LOC``."""

    def __init__(self) -> None:
        super().__init__(loc=LOC)


def launch(
    kernel: KernelDefinition,
    cube_count,
    buffers=(),
    scalars=(),
    *,
    sanitize: bool = False,
    line_sizes: dict[int, int] | None = None,
) -> list[np.ndarray]:
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
