"""``cp.cmma``: cooperative matrices on tensor cores (CubeCL's ``cmma``), 16x16x16 fragments.

A ``Matrix`` is held by the 32 units of a plane together; every unit of the plane must make each call
(in lockstep, with the same memory offset and stride).  Inputs (``a``: m x k, ``b``: k x n) are f16 or
bf16, accumulators f32 (or f16 for ``cast``); ``execute(a, b, c, d)`` computes ``d = a @ b + c`` with
f32 accumulation.  Memory is shared or global memory, or a slice of it; ``stride`` is the distance in
elements between rows (``"row"`` layout) or columns (``"col"``).
"""

from __future__ import annotations

from typing import Any

from cubepy import ir
from cubepy.frontend import operations, source
from cubepy.frontend.containers import MemoryExpand, SliceExpand
from cubepy.frontend.elem import ScalarType, scalar_type, to_elem
from cubepy.frontend.state import current_scope, require_state
from cubepy.ir import Type, VarKind
from cubepy.ir import ops as irops

__all__ = ["Matrix", "MatrixIdent", "MatrixLayout", "cast", "execute", "fill", "load", "load_with_layout", "store"]


class MatrixIdent:
    """Which operand a fragment is."""

    A = "a"
    B = "b"
    ACCUMULATOR = "accumulator"


class MatrixLayout:
    """How memory holds a matrix: ``ROW_MAJOR`` (rows ``stride`` apart), ``COL_MAJOR``, or ``UNDEFINED``."""

    ROW_MAJOR = "row"
    COL_MAJOR = "col"
    UNDEFINED = None


class MatrixExpand:
    """A fragment inside a kernel: its LOCAL_ARRAY variable, operand kind and memory layout."""

    __slots__ = ("var", "ident", "layout", "shape")

    def __init__(self, var: ir.Variable, ident: str, layout: str | None, shape: tuple[int, int, int]) -> None:
        self.var = var
        self.ident = ident
        self.layout = layout
        self.shape = shape

    @property
    def elem(self) -> ScalarType:
        """The element type."""
        return scalar_type(self.var.elem)

    def __repr__(self) -> str:
        return f"Matrix[{self.var.elem.name}]({self.ident}, {self.layout})"


class _MatrixFactory:
    __slots__ = ("elem",)

    def __init__(self, elem: Any) -> None:
        self.elem = to_elem(elem)

    def uninitialized(self, ident: str, m: int, n: int, k: int, layout: str | None = None) -> MatrixExpand:
        """A fragment with undefined contents (``layout`` is required for ``a`` and ``b``)."""
        require_state()
        shape = tuple(operations.comptime_value(v) if operations.is_comptime(v) else v for v in (m, n, k))
        if shape != irops.CMMA_SHAPE:
            source.fail(f"cmma supports {irops.CMMA_SHAPE} fragments, got {shape}")
        if ident not in (MatrixIdent.A, MatrixIdent.B, MatrixIdent.ACCUMULATOR):
            source.fail(f"unknown matrix ident {ident!r}; use cp.cmma.MatrixIdent.A, B or ACCUMULATOR")
        inputs = (ir.F16, ir.BF16)
        allowed = (ir.F32, ir.F16) if ident == MatrixIdent.ACCUMULATOR else inputs
        if self.elem not in allowed:
            source.fail(
                f"a cmma {ident} fragment of {self.elem.name}; expected one of {', '.join(e.name for e in allowed)}"
            )
        if ident != MatrixIdent.ACCUMULATOR and layout not in ("row", "col"):
            source.fail(f"a cmma {ident} fragment needs a layout (MatrixLayout.ROW_MAJOR or COL_MAJOR)")
        length = irops.fragment_length(ident, self.elem)
        var = require_state().declare_memory(VarKind.LOCAL_ARRAY, Type(self.elem), length, None)
        return MatrixExpand(var, ident, layout, shape)

    def from_value(self, ident: str, m: int, n: int, k: int, layout: str | None, value: Any) -> MatrixExpand:
        """A fragment with every element ``value``."""
        matrix = self.uninitialized(ident, m, n, k, layout)
        fill(matrix, value)
        return matrix

    def from_slice(
        self, ident: str, m: int, n: int, k: int, layout: str | None, memory: Any, stride: Any
    ) -> MatrixExpand:
        """A fragment loaded from ``memory`` (rows or columns ``stride`` elements apart)."""
        matrix = self.uninitialized(ident, m, n, k, layout)
        load(matrix, memory, stride)
        return matrix


class Matrix:
    """``Matrix[f16].uninitialized(MatrixIdent.A, 16, 16, 16, MatrixLayout.ROW_MAJOR)``; also ``from_value``,
    ``from_slice``."""

    def __class_getitem__(cls, elem: Any) -> _MatrixFactory:
        return _MatrixFactory(elem)


def _matrix(value: Any, what: str) -> MatrixExpand:
    if not isinstance(value, MatrixExpand):
        source.fail(f"{what}: expected a cp.cmma.Matrix, got {type(value).__name__}")
    return value


def _memory(memory: Any, matrix: MatrixExpand, what: str) -> tuple[ir.Variable, ir.Variable]:
    offset = 0
    if isinstance(memory, SliceExpand):
        memory, offset = memory.base, memory.offset
    if not isinstance(memory, MemoryExpand) or memory.var.kind not in (VarKind.SHARED, VarKind.GLOBAL):
        source.fail(f"{what}: expected shared or global memory (or a slice of it), got {type(memory).__name__}")
    if memory.var.elem != matrix.var.elem or memory.var.type.line != 1:
        source.fail(f"{what}: memory of {memory.var.type!r} with a fragment of {matrix.var.elem.name}")
    return memory.var, operations.to_index(offset, f"{what} offset")


def fill(matrix: Any, value: Any) -> None:
    """Set every element of ``matrix`` to ``value``."""
    matrix = _matrix(matrix, "cmma.fill")
    var = operations.convert(value, Type(matrix.var.elem), "cmma.fill value")
    current_scope().append(irops.CmmaFill(matrix.var, var, matrix.ident))


def load_with_layout(matrix: Any, memory: Any, stride: Any, layout: str) -> None:
    """Load ``matrix`` from ``memory`` held in ``layout``."""
    matrix = _matrix(matrix, "cmma.load")
    if layout not in ("row", "col"):
        source.fail(f"cmma.load: layout {layout!r}; expected MatrixLayout.ROW_MAJOR or COL_MAJOR")
    var, offset = _memory(memory, matrix, "cmma.load")
    op = irops.CmmaLoad(matrix.var, var, offset, operations.to_index(stride, "cmma.load stride"), matrix.ident, layout)
    current_scope().append(op)


def load(matrix: Any, memory: Any, stride: Any) -> None:
    """Load ``matrix`` from ``memory`` in the matrix's own layout (accumulators: use ``load_with_layout``)."""
    matrix = _matrix(matrix, "cmma.load")
    if matrix.layout is None:
        source.fail("cmma.load: this matrix has no layout; use cmma.load_with_layout")
    load_with_layout(matrix, memory, stride, matrix.layout)


def execute(a: Any, b: Any, c: Any, d: Any) -> None:
    """``d = a @ b + c`` (f32 accumulators)."""
    a, b, c, d = (_matrix(m, f"cmma.execute {n}") for m, n in zip((a, b, c, d), "abcd"))
    if (a.ident, b.ident, c.ident, d.ident) != ("a", "b", "accumulator", "accumulator"):
        source.fail(
            f"cmma.execute takes (a, b, accumulator, accumulator), got {a.ident}, {b.ident}, {c.ident}, {d.ident}"
        )
    if a.var.elem != b.var.elem or c.var.elem != ir.F32 or d.var.elem != ir.F32:
        source.fail(f"cmma.execute: a and b must share an input type and c, d be f32; got {a!r}, {b!r}, {c!r}, {d!r}")
    current_scope().append(irops.CmmaExecute(a.var, b.var, c.var, d.var, a.layout, b.layout))


def store(memory: Any, matrix: Any, stride: Any, layout: str) -> None:
    """Store the accumulator ``matrix`` to ``memory`` in ``layout``."""
    matrix = _matrix(matrix, "cmma.store")
    if matrix.ident != MatrixIdent.ACCUMULATOR:
        source.fail(f"cmma.store stores accumulators, got an {matrix.ident} fragment")
    if layout not in ("row", "col"):
        source.fail(f"cmma.store: layout {layout!r}; expected MatrixLayout.ROW_MAJOR or COL_MAJOR")
    var, offset = _memory(memory, matrix, "cmma.store")
    current_scope().append(
        irops.CmmaStore(var, offset, matrix.var, operations.to_index(stride, "cmma.store stride"), layout)
    )


def cast(matrix: Any, elem: Any) -> MatrixExpand:
    """The accumulator ``matrix`` converted to ``elem`` (f32 or f16)."""
    matrix = _matrix(matrix, "cmma.cast")
    if matrix.ident != MatrixIdent.ACCUMULATOR:
        source.fail(f"cmma.cast converts accumulators, got an {matrix.ident} fragment")
    m, n, k = matrix.shape
    output = _MatrixFactory(elem).uninitialized(matrix.ident, m, n, k, matrix.layout)
    current_scope().append(irops.CmmaCast(matrix.var, output.var))
    return output
