"""Cooperative matrices (``cubepy.ir.ops.cmma``) in the lockstep interp: one 16x16 matrix per plane.

A fragment's LOCAL_ARRAY rows are the plane's 32 units; this emulation keeps element ``(r, c)`` of the
plane's matrix in unit ``(16r + c) // 8``, slot ``(16r + c) % 8`` (the back end's register layout
differs, which programs cannot observe: they touch fragments only through these operations).  Every
unit of a plane must execute each operation, and offsets and strides are taken from the plane's first
unit, as ``wmma`` requires them to be uniform.  ``execute`` multiplies the inputs exactly (f16/bf16
products fit f32) and accumulates in f32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, Variable, ops
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import Mask, numpy_dtype

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.memory import MemoryRef

OP_FAMILIES = ("cmma",)  # the IR op families handled here
SIDE = 16
SLOTS = SIDE * SIDE // PLANE_WIDTH  # matrix elements each unit keeps in this emulation


def whole_groups(ctx: Chunk, inst: Instruction, mask: Mask, size: int, group: str, kind: SanitizerKind) -> np.ndarray:
    """The groups of ``size`` consecutive units (planes, warpgroups) that run ``inst``, a bool per group.

    Cooperative ops need whole groups: a cube that is not made of them, or a group only partly here, fails
    with ``kind``.
    """
    what = inst.operation.name.split("_")[0]
    if ctx.topology.units % size:
        ctx.fail(
            inst,
            f"{what} needs whole {group}s: the cube has {ctx.topology.units} units, not a multiple of {size}",
            0,
            kind=kind,
        )
    bits = mask.bits.reshape(-1, size)
    active = bits.any(axis=1)
    partial = active & ~bits.all(axis=1)
    if partial.any():
        index = int(np.argmax(partial))
        lane = index * size + int(np.argmin(bits[index]))
        ctx.fail(inst, f"{what} is cooperative: every unit of the {group} must execute it", lane, kind=kind)
    return cast(np.ndarray, active)


def _planes(ctx: Chunk, inst: Instruction, mask: Mask) -> np.ndarray:
    """The planes that execute ``inst`` (a bool per plane); a partial plane is a ``PARTIAL_PLANE`` bug."""
    return whole_groups(ctx, inst, mask, PLANE_WIDTH, "plane", SanitizerKind.PARTIAL_PLANE)


def plane_matrices(slots: np.ndarray) -> np.ndarray:
    """The ``(planes, 16, 16)`` matrices held by consecutive units' fragment slots (one row per unit)."""
    return slots[:, :SLOTS].reshape(-1, SIDE, SIDE)


def tile_index(start: np.ndarray, step: np.ndarray, layout: str) -> np.ndarray:
    """Item index ``(planes, 16, 16)`` of element ``(r, c)`` of each plane's matrix at ``start``, ``step`` apart."""
    rows, cols = np.meshgrid(np.arange(SIDE), np.arange(SIDE), indexing="ij")
    major, minor = (rows, cols) if layout == "row" else (cols, rows)
    return cast(np.ndarray, start[:, None, None] + major[None] * step[:, None, None] + minor[None])


def out_of_bounds_text(label: str, start: int, step: int, length: int) -> str:
    """The report of a cmma tile reaching outside its memory (one text for every runtime)."""
    return f"out-of-bounds cmma access of {label}: offset {start}, stride {step} (length {length})"


def matrix_product(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a @ b + c`` in f32 (f16/bf16 products are exact in f32), the one ``execute`` of every runtime."""
    return cast(np.ndarray, np.matmul(a.astype(np.float32), b.astype(np.float32)) + c.astype(np.float32))


def _read_fragment(ctx: Chunk, var: Variable) -> np.ndarray:
    return plane_matrices(ctx.memory(var).items)


def _write_fragment(ctx: Chunk, var: Variable, matrices: np.ndarray, active: np.ndarray) -> None:
    items = ctx.memory(var).items
    current = items[:, :SLOTS].reshape(-1, SIDE, SIDE)
    current[active] = matrices[active].astype(items.dtype)
    items[:, :SLOTS] = current.reshape(-1, SLOTS)


def _per_plane(ctx: Chunk, var: Variable) -> np.ndarray:
    """The value of ``var`` on the first unit of every plane (int64)."""
    value = np.broadcast_to(np.asarray(ctx.read(var)), (ctx.lanes,))
    return value[::PLANE_WIDTH].astype(np.int64)


def _addresses(
    ctx: Chunk, inst: Instruction, offset: Variable, stride: Variable, layout: str, ref: MemoryRef, active: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Item indices ``(planes, 16, 16)`` of each matrix element, and each plane's row of ``ref`` (shared)."""
    start, step = _per_plane(ctx, offset), _per_plane(ctx, stride)
    index = tile_index(start, step, layout)
    bad = active & ((index < 0) | (index >= ref.length)).any(axis=(1, 2))
    if bad.any():
        plane = int(np.argmax(bad))
        ctx.fail(
            inst,
            out_of_bounds_text(ref.label, int(start[plane]), int(step[plane]), ref.length),
            plane * PLANE_WIDTH,
            kind=SanitizerKind.OUT_OF_BOUNDS,
        )
    owner = None if ref.owner is None else ref.owner[::PLANE_WIDTH]
    return np.where(active[:, None, None], index, 0), owner


@implements(ops.CmmaFill)
def cmma_fill(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Every element of the fragment := value (the plane's first unit's)."""
    op = cast(ops.CmmaFill, inst.operation)
    active = _planes(ctx, inst, mask)
    value = np.broadcast_to(np.asarray(ctx.read(op.value)), (ctx.lanes,))[::PLANE_WIDTH]
    matrices = np.broadcast_to(value[:, None, None], (len(value), SIDE, SIDE))
    _write_fragment(ctx, op.fragment, matrices, active)


def _check_async_races(
    ctx: Chunk,
    inst: Instruction,
    ref: MemoryRef,
    index: np.ndarray,
    owner: np.ndarray | None,
    active: np.ndarray,
    kind: str,
) -> None:
    """Under the sanitizer, a plane's tile access of shared bytes a TMA load fills must follow its barrier wait.

    cmma ops are otherwise *foreign* to the race checker (``interp.sanitizer``); the TMA rules
    (``interp.async_races``: uncovered access, stage reuse) see their reads and writes here.
    """
    races = ctx.state.async_races if ctx.sanitizer is not None and owner is not None else None
    if races is None:
        return
    assert owner is not None  # races is None without an owner
    item_bytes = ref.items.dtype.itemsize * ref.line
    for plane in np.flatnonzero(active).tolist():
        first = ref.shared_offset + index[plane].reshape(-1).astype(np.int64) * item_bytes
        byte = first[:, None] + np.arange(item_bytes)
        rows = np.full(byte.shape, owner[plane], dtype=np.int64)
        lanes = np.full(byte.shape[0], plane * PLANE_WIDTH, dtype=np.int64)  # the plane's first unit speaks for it
        races.accessed(ctx, inst, kind, lanes, rows, byte)


@implements(ops.CmmaLoad)
def cmma_load(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """The fragment := the 16x16 matrix at ``memory[offset..]``."""
    op = cast(ops.CmmaLoad, inst.operation)
    active = _planes(ctx, inst, mask)
    ref = ctx.memory(op.memory)
    index, owner = _addresses(ctx, inst, op.offset, op.stride, op.layout, ref, active)
    values = ref.items[index] if owner is None else ref.items[owner[:, None, None], index]
    _check_async_races(ctx, inst, ref, index, owner, active, "read")
    _write_fragment(ctx, op.fragment, values, active)


@implements(ops.CmmaExecute)
def cmma_execute(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """d := a @ b + c, in f32."""
    op = cast(ops.CmmaExecute, inst.operation)
    active = _planes(ctx, inst, mask)
    a, b, c = (_read_fragment(ctx, var) for var in (op.a, op.b, op.c))
    _write_fragment(ctx, op.d, matrix_product(a, b, c), active)


@implements(ops.CmmaStore)
def cmma_store(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """``memory[offset..]`` := the accumulator's 16x16 matrix."""
    op = cast(ops.CmmaStore, inst.operation)
    active = _planes(ctx, inst, mask)
    ref = ctx.memory(op.memory)
    index, owner = _addresses(ctx, inst, op.offset, op.stride, op.layout, ref, active)
    values = _read_fragment(ctx, op.fragment).astype(numpy_dtype(op.memory.elem))
    _check_async_races(ctx, inst, ref, index, owner, active, "write")
    for plane in np.flatnonzero(active):
        if owner is None:
            ref.items[index[plane]] = values[plane]
        else:
            ref.items[owner[plane], index[plane]] = values[plane]


@implements(ops.CmmaCast)
def cmma_cast(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """output := input, converted element by element."""
    op = cast(ops.CmmaCast, inst.operation)
    active = _planes(ctx, inst, mask)
    _write_fragment(ctx, op.output, _read_fragment(ctx, op.input), active)
