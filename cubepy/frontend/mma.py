"""Tensor cores with per-unit register fragments: ``mma_sync``, ``ldmatrix``, ``stmatrix`` and the ISA's index maps.

A fragment is a ``LocalArray`` holding exactly what one unit holds in registers for PTX's
``mma.sync.aligned.<shape>.row.col``: element ``i`` is the ISA's ``a_i`` (``b_i``, ``c_i``, ``d_i``).  Which
matrix element that is follows from the unit's lane and ``i``: ``mma_fragment_index`` computes it, so a
kernel loads and stores fragments from any memory by index.  Every unit of the plane must make each call.

| shape | inputs (a, b) | accumulators (c, d) | a / b / c items per unit |
|---|---|---|---|
| ``"m16n8k16"`` | f16 or bf16 | f32 | 8 / 4 / 4 |
| ``"m16n8k8"`` | tf32, held in f32 | f32 | 4 / 2 / 4 |
| ``"m16n8k32"`` | i8 (s8) | i32 (s32) | 16 / 8 / 4 |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from cubepy import ir
from cubepy.frontend import operations, source
from cubepy.frontend.builtins import BUILTIN_VARS
from cubepy.frontend.containers import MemoryExpand, SliceExpand
from cubepy.frontend.elem import to_elem
from cubepy.frontend.state import current_scope, require_state
from cubepy.ir import Type, VarKind
from cubepy.ir import ops as irops

if TYPE_CHECKING:
    from cubepy.frontend.values import ExpandElement

__all__ = ["ldmatrix", "mma_fragment", "mma_fragment_index", "mma_sync", "stmatrix"]

OPERANDS = ("a", "b", "c", "d")


def _shape(shape: Any) -> irops.MmaShape:
    name = operations.comptime_value(shape) if operations.is_comptime(shape) else shape
    if name not in irops.MMA_SHAPES:
        source.fail(f"mma shape {name!r} is not supported; use one of {', '.join(irops.MMA_SHAPES)}")
    return irops.MMA_SHAPES[name]


def _operand(operand: Any) -> str:
    name = operations.comptime_value(operand) if operations.is_comptime(operand) else operand
    if name not in OPERANDS:
        source.fail(f"mma operand {name!r}; expected one of {', '.join(OPERANDS)}")
    return cast(str, name)


def mma_fragment(shape: str, operand: str, elem: Any) -> MemoryExpand:
    """A new ``LocalArray`` sized for this unit's ``operand`` fragment (``"a"``, ``"b"``, ``"c"``, ``"d"``)."""
    table = _shape(shape)
    which = _operand(operand)
    item = to_elem(elem)
    allowed = table.inputs if which in ("a", "b") else (table.accumulator,)
    if item not in allowed:
        source.fail(f"an {table.name} {which} fragment of {item.name}; expected {' or '.join(e.name for e in allowed)}")
    var = require_state().declare_memory(VarKind.LOCAL_ARRAY, Type(item), table.fragment(which).length, None)
    return MemoryExpand(var)


def mma_fragment_index(shape: str, operand: str, i: Any) -> tuple[Any, Any]:
    """``(row, col)`` (u32) of element ``i`` of this unit's ``operand`` fragment, by the PTX ISA's table.

    ``i`` may be a comptime int (folds to a constant offset) or a runtime integer.
    """
    table = _shape(shape).fragment(_operand(operand))
    lane = operations.as_element(BUILTIN_VARS["UNIT_POS_PLANE"])
    group, thread = lane >> 2, lane & 3
    if operations.is_comptime(i):
        index = operations.comptime_value(i)
        if not isinstance(index, int) or not 0 <= index < table.length:
            source.fail(f"mma fragment element {index!r} of a {table.length}-element fragment")

        def offset(bits: tuple[int, ...]) -> Any:
            return sum(w for b, w in enumerate(bits) if (index >> b) & 1)

    else:
        index_var = operations.element(operations.to_index(i, "mma fragment element"))

        def offset(bits: tuple[int, ...]) -> Any:
            total = 0
            for b, w in enumerate(bits):
                if w:
                    total = ((index_var >> b) & 1) * w + total
            return total

    def coordinate(by_group: int, by_thread: int, bits: tuple[int, ...]) -> ExpandElement:
        total = offset(bits)
        if by_thread:
            total = thread * by_thread + total
        if by_group:
            total = group * by_group + total
        return operations.element(operations.to_index(total))

    return (
        coordinate(table.row_group, table.row_thread, table.row_bits),
        coordinate(table.col_group, table.col_thread, table.col_bits),
    )


def _local(value: Any, what: str) -> ir.Variable:
    if not isinstance(value, MemoryExpand) or value.var.kind is not VarKind.LOCAL_ARRAY:
        source.fail(f"{what}: expected a cp.LocalArray fragment, got {type(value).__name__}")
    return value.var


def _check_fragment(var: ir.Variable, what: str, elems: tuple[ir.ElemType, ...], length: int) -> None:
    if var.elem not in elems or var.type.line != 1:
        source.fail(f"{what}: a fragment of {var.type!r}; expected {' or '.join(e.name for e in elems)}")
    if var.length != length:
        source.fail(f"{what}: the fragment holds {length} items per unit, this LocalArray {var.length}")


def mma_sync(shape: str, a: Any, b: Any, c: Any, out: MemoryExpand | None = None) -> MemoryExpand:
    """``d = a @ b + c`` on the plane's tensor cores (``mma.sync.aligned.<shape>.row.col``); returns ``d``.

    ``out`` receives ``d`` (it may be ``c`` itself: accumulate in place); a new fragment when omitted.
    """
    table = _shape(shape)
    a_var, b_var, c_var = _local(a, "mma_sync a"), _local(b, "mma_sync b"), _local(c, "mma_sync c")
    _check_fragment(a_var, f"mma_sync {table.name} a", table.inputs, table.a.length)
    _check_fragment(b_var, f"mma_sync {table.name} b", (a_var.elem,), table.b.length)
    _check_fragment(c_var, f"mma_sync {table.name} c", (table.accumulator,), table.c.length)
    if out is None:
        out = mma_fragment(table.name, "d", c_var.elem)
    d_var = _local(out, "mma_sync out")
    _check_fragment(d_var, f"mma_sync {table.name} out", (table.accumulator,), table.c.length)
    current_scope().append(irops.MmaSync(a_var, b_var, c_var, d_var, table.name))
    return out


def _shared_rows(memory: Any, offset: Any, what: str) -> tuple[ir.Variable, ir.Variable]:
    base = 0
    if isinstance(memory, SliceExpand):
        memory, base = memory.base, memory.offset
    if not isinstance(memory, MemoryExpand) or memory.var.kind is not VarKind.SHARED:
        source.fail(f"{what}: expected shared memory (or a slice of it), got {type(memory).__name__}")
    if memory.var.elem not in irops.LDMATRIX_ELEMS or memory.var.type.line != 1:
        source.fail(f"{what}: shared memory of {memory.var.type!r}; the matrices hold 16-bit items (f16, bf16, ...)")
    row = operations.element(operations.to_index(offset, f"{what} row offset"))
    if not (operations.is_comptime(base) and operations.comptime_value(base) == 0):
        row = row + operations.element(operations.to_index(base, f"{what} slice start"))
    return memory.var, operations.to_index(row)


def _flag(value: Any, what: str) -> bool:
    flag = operations.comptime_value(value) if operations.is_comptime(value) else value
    if not isinstance(flag, bool):
        source.fail(f"{what}: trans must be a comptime bool, got {flag!r}")
    return flag


def _count(count: Any, what: str) -> int:
    value = operations.comptime_value(count) if operations.is_comptime(count) else count
    if value not in irops.LDMATRIX_COUNTS:
        source.fail(f"{what}: count {value!r}; expected 1, 2 or 4 matrices (a comptime int)")
    return cast(int, value)


def ldmatrix(
    memory: Any, row_offset: Any, count: int = 4, trans: bool = False, out: MemoryExpand | None = None
) -> MemoryExpand:
    """This unit's part of ``count`` 8x8 matrices of 16-bit items in shared memory (``ldmatrix``).

    Unit ``8j + r`` of the plane gives in ``row_offset`` the item index of row ``r`` of matrix ``j`` (8
    contiguous items, 16-byte aligned).  Unit ``l`` receives, as elements ``2j`` and ``2j + 1``, row
    ``l // 4``, columns ``2 (l % 4)`` and ``2 (l % 4) + 1`` of matrix ``j`` (``trans``: of its transpose).
    """
    n = _count(count, "ldmatrix")
    var, row = _shared_rows(memory, row_offset, "ldmatrix")
    if out is None:
        out = MemoryExpand(require_state().declare_memory(VarKind.LOCAL_ARRAY, Type(var.elem), 2 * n, None))
    fragment = _local(out, "ldmatrix out")
    _check_fragment(fragment, "ldmatrix out", (var.elem,), 2 * n)
    current_scope().append(irops.Ldmatrix(fragment, var, row, n, _flag(trans, "ldmatrix")))
    return out


def stmatrix(memory: Any, row_offset: Any, fragment: Any, count: int = 4, trans: bool = False) -> None:
    """Store ``count`` 8x8 matrices held as ``ldmatrix`` gives them (``stmatrix``, sm_90)."""
    n = _count(count, "stmatrix")
    var, row = _shared_rows(memory, row_offset, "stmatrix")
    frag = _local(fragment, "stmatrix fragment")
    _check_fragment(frag, "stmatrix fragment", (var.elem,), 2 * n)
    current_scope().append(irops.Stmatrix(var, row, frag, n, _flag(trans, "stmatrix")))
