"""``mma.sync``, ``ldmatrix`` and ``stmatrix`` (``cubepy.ir.ops.mma``) in the lockstep interp, per unit.

Each unit's LOCAL_ARRAY fragment holds its own registers.  ``mma_sync`` gathers the plane's matrices
from the 32 units' registers by the PTX ISA's fragment tables (``MmaShape.fragment``), computes
``d = a @ b + c`` and scatters ``d`` back by the same tables, so a program that puts an element in the
wrong register gets the result hardware would give it.

Numerics: f16/bf16 products are exact in f32; the sum is taken in float64 and rounded once to f32
(hardware's summation order and internal precision are unspecified; both give ``d`` within
``(k + 1) * 2**-23 * (|a| @ |b| + |c|)`` of the exact value).  tf32 inputs are f32 values whose 13 low
mantissa bits the tensor cores ignore; the interp clears them too.  s8 -> s32 is exact, wrapping
modulo 2**32 like the instruction without ``.satfinite``.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, ops
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.interp.cmma import _planes
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.sanitizer import SELF_REPORTING
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.ir.ops.mma import FragmentMap
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.memory import MemoryRef

OP_FAMILIES = ("mma",)  # the IR op families handled here
ROWS = 8  # an ldmatrix matrix is 8 x 8 items
TF32_DROPPED_BITS = np.uint32(0xFFFFE000)


@cache
def fragment_coordinates(table: FragmentMap) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)``, each ``(32, length)``: where element ``i`` of lane ``l`` sits in the matrix."""
    rows = np.array([[table.row(lane, i) for i in range(table.length)] for lane in range(PLANE_WIDTH)])
    cols = np.array([[table.col(lane, i) for i in range(table.length)] for lane in range(PLANE_WIDTH)])
    return rows, cols


def gather(fragments: np.ndarray, table: FragmentMap, shape: tuple[int, int]) -> np.ndarray:
    """The plane matrices ``(planes, *shape)`` that per-unit ``fragments`` ``(lanes, length)`` hold."""
    rows, cols = fragment_coordinates(table)
    per_plane = fragments.reshape(-1, PLANE_WIDTH, table.length)
    matrices = np.zeros((per_plane.shape[0], *shape), dtype=per_plane.dtype)
    matrices[:, rows, cols] = per_plane
    return matrices


def scatter(matrices: np.ndarray, table: FragmentMap) -> np.ndarray:
    """Per-unit fragments ``(lanes, length)`` holding the plane ``matrices``."""
    rows, cols = fragment_coordinates(table)
    return matrices[:, rows, cols].reshape(-1, table.length)


def _tf32(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32) & TF32_DROPPED_BITS
    return cast(np.ndarray, bits.view(np.float32))


def mma_result(shape: ops.MmaShape, a_items: np.ndarray, b_items: np.ndarray, c_items: np.ndarray) -> np.ndarray:
    """Per-unit ``d`` fragments ``(lanes, 4)`` of ``d = a @ b + c`` for whole planes of per-unit fragments."""
    if a_items.dtype == np.float32:  # tf32
        a_items, b_items = _tf32(a_items), _tf32(b_items)
    exact = np.int64 if shape.accumulator.is_int else np.float64
    a = gather(a_items.astype(exact), shape.a, (shape.m, shape.k))
    b = gather(b_items.astype(exact), shape.b, (shape.k, shape.n))
    c = gather(c_items.astype(exact), shape.c, (shape.m, shape.n))
    d = np.matmul(a, b) + c
    result = d.astype(np.int64).astype(np.uint32).view(np.int32) if shape.accumulator.is_int else d.astype(np.float32)
    return scatter(result, shape.c)


@implements(ops.MmaSync)
def mma_sync(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """d := a @ b + c on every active plane, fragments read and written per unit."""
    op = cast(ops.MmaSync, inst.operation)
    active = _planes(ctx, inst, mask)
    shape = ops.mma_shape(op.shape)
    a, b, c = (ctx.memory(v).items for v in (op.a, op.b, op.c))
    d_ref = ctx.memory(op.d)
    units = np.repeat(active, PLANE_WIDTH)
    d_ref.items[units] = mma_result(shape, a, b, c).astype(d_ref.items.dtype)[units]


def _row_offsets(
    ctx: Chunk, inst: Instruction, op: ops.Ldmatrix | ops.Stmatrix, ref: MemoryRef, active: np.ndarray
) -> np.ndarray:
    """Each active plane's row offsets ``(planes, count, 8)`` (lane ``8j + r`` gives row ``r`` of matrix ``j``)."""
    offsets = np.broadcast_to(np.asarray(ctx.read(op.offset), dtype=np.int64), (ctx.lanes,))
    per_plane = offsets.reshape(-1, PLANE_WIDTH)[:, : ROWS * op.count].reshape(-1, op.count, ROWS)
    used = np.zeros((len(active), PLANE_WIDTH), dtype=bool)
    used[:, : ROWS * op.count] = active[:, None]
    lanes_used = used.reshape(-1)
    bad_range = lanes_used & ((offsets < 0) | (offsets + ROWS > ref.length))
    if bad_range.any():
        lane = int(np.argmax(bad_range))
        ctx.fail(
            inst,
            f"{inst.op} row {offsets[lane]}..{offsets[lane] + ROWS - 1} of {ref.label} (length {ref.length})",
            lane,
            kind=SanitizerKind.OUT_OF_BOUNDS,
        )
    start = ref.shared_offset or 0
    misaligned = lanes_used & ((start + offsets * 2) % 16 != 0)
    if misaligned.any():
        lane = int(np.argmax(misaligned))
        ctx.fail(
            inst,
            f"{inst.op} row address {offsets[lane]} of {ref.label} is not 16-byte aligned (each row is 8 "
            "16-bit items starting at a multiple of 16 bytes)",
            lane,
            kind=SanitizerKind.OUT_OF_BOUNDS,
        )
    return per_plane


def _owners(ref: MemoryRef) -> np.ndarray:
    """Each plane's lanes' rows of the shared ``ref`` (the cube each lane belongs to), ``(planes, 32)``."""
    assert ref.owner is not None, "ldmatrix/stmatrix memory is shared memory, one row per cube"
    return ref.owner.reshape(-1, PLANE_WIDTH)


def lane_elements(count: int, trans: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(matrix, row, col)`` ``(32, 2 count)``: which item of which matrix each lane's element is."""
    lane = np.arange(PLANE_WIDTH)[:, None]
    element = np.arange(2 * count)[None, :]
    matrix = np.broadcast_to(element // 2, (PLANE_WIDTH, 2 * count))
    outer = np.broadcast_to(lane // 4, matrix.shape)  # the ISA: row l / 4
    inner = 2 * (lane % 4) + element % 2  # columns 2 (l % 4) and 2 (l % 4) + 1
    return (matrix, inner, outer) if trans else (matrix, outer, inner)


def _sanitize_rows(
    ctx: Chunk,
    inst: Instruction,
    ref: MemoryRef,
    rows: np.ndarray,
    active: np.ndarray,
    kind: str,
    matrices: np.ndarray | None = None,
) -> None:
    """Hand the sanitizer each row's 8 items, as accessed by the unit that gave the row's address."""
    assert ctx.sanitizer is not None
    count = rows.shape[1]
    planes = np.flatnonzero(active)
    lanes = (planes[:, None] * PLANE_WIDTH + np.arange(ROWS * count)[None, :]).ravel()
    starts = rows[planes].reshape(-1)
    for column in range(ROWS):
        value = None if matrices is None else matrices[planes][:, :, :, column].reshape(-1)
        ctx.sanitizer.mark_access(ctx, inst, ref, lanes, starts + column, kind, value)


SELF_REPORTING.update({ops.Ldmatrix, ops.Stmatrix})  # race- and initialization-checked row by row


@implements(ops.Ldmatrix)
def ldmatrix(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Every unit's fragment := its elements of the plane's ``count`` 8x8 matrices."""
    op = cast(ops.Ldmatrix, inst.operation)
    active = _planes(ctx, inst, mask)
    ref = ctx.memory(op.memory)
    rows = _row_offsets(ctx, inst, op, ref, active)
    matrix, row, col = lane_elements(op.count, op.trans)
    index = rows[:, matrix, row] + col  # (planes, 32, 2 count)
    cube = _owners(ref)[:, :1, None]
    values = ref.items[cube, np.where(active[:, None, None], index, 0)]
    if ctx.sanitizer is not None:
        _sanitize_rows(ctx, inst, ref, rows, active, "read")
    fragment = ctx.memory(op.fragment).items
    units = np.repeat(active, PLANE_WIDTH)
    fragment[units] = values.reshape(-1, 2 * op.count)[units]


@implements(ops.Stmatrix)
def stmatrix(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The plane's ``count`` 8x8 matrices := the units' fragment elements."""
    op = cast(ops.Stmatrix, inst.operation)
    active = _planes(ctx, inst, mask)
    ref = ctx.memory(op.memory)
    rows = _row_offsets(ctx, inst, op, ref, active)
    matrix, row, col = lane_elements(op.count, op.trans)
    values = ctx.memory(op.fragment).items.reshape(-1, PLANE_WIDTH, 2 * op.count)
    if ctx.sanitizer is not None:
        matrices = np.zeros((len(active), op.count, ROWS, ROWS), dtype=values.dtype)
        matrices[:, matrix, row, col] = values  # what each row's 8 items become
        _sanitize_rows(ctx, inst, ref, rows, active, "write", matrices)
    cubes = _owners(ref)[:, 0]
    for plane in np.flatnonzero(active):
        ref.items[cubes[plane], rows[plane][matrix, row] + col] = values[plane]
