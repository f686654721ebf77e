"""Memories and their operations: handlers of ``cubepy.ir.ops.memory`` (atomics are in ``atomic``).

Every memory is an array of *items* (lines of ``L`` elements):
- a GLOBAL buffer is a view of its handle's storage, ``(buffer_len[, L])``, shared by every chunk;
- SHARED memory lives in a per-cube byte arena ``(cubes, bytes)`` (each shared memory at an offset
  aligned as declared, so TMA copies can address it by byte); a shared memory is a typed view
  ``(cubes, length[, L])`` of the arena, and a lane addresses its own cube's row;
- a LOCAL_ARRAY is ``(lanes, length[, L])``, one row per lane;
- a CONST_TABLE is its declared values ``(length,)``, read-only, one row shared by the whole grid.

An unchecked access out of bounds on an active lane raises ``SanitizerError``; a checked read out of
bounds gives 0 and a checked write is dropped, unless the sanitizer is on: then it is reported too (an
``out-of-bounds`` ``SanitizerError``), since checked mode hides the bug rather than fixing it.  When several lanes store to one item in one
instruction, the highest lane wins (numpy's fancy assignment applies values in lane order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import ConstTable, Instruction, Variable, VarKind, ops
from cubepy.ir.variable import SHARED_MIN_ALIGN, describe_memory
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import U32, Mask, full_lanes, is_uniform, numpy_dtype

if TYPE_CHECKING:
    from cubepy.runtime.bindings import BufferBinding
    from cubepy.runtime.interp.executor import Chunk

OP_FAMILIES = ("memory",)  # the IR op families handled here

Value = np.ndarray | np.generic
Valid = np.ndarray | bool  # per lane in bounds, or True when every lane is (``locate``)
SHARED_ARENA_ALIGN = 1024  # a row per cube, so 128-byte swizzle phases start at 0 in every cube
DEFAULT_SHARED_ALIGN = SHARED_MIN_ALIGN


class MemoryRef:
    """One memory as a chunk sees it: ``items``, items per owner, and which row each lane owns."""

    __slots__ = ("items", "length", "owner", "label", "line", "shared_offset", "flat", "lane_base")

    def __init__(
        self,
        items: np.ndarray,
        length: int,
        owner: np.ndarray | None,
        label: str,
        line: int,
        shared_offset: int | None = None,
        flat: np.ndarray | None = None,
    ) -> None:
        self.items = items  # (length[, L]) for global memory, (owners, length[, L]) otherwise
        self.length = length  # valid indices are 0 .. length - 1
        self.owner = owner  # per-lane row of ``items`` (None: one row shared by the whole grid)
        self.label = label  # for error messages: "global buffer 0 (x)", "shared memory 3"
        self.line = line
        self.shared_offset = shared_offset  # byte offset in the cube's arena, for shared memory only
        # For per-owner scalar memories: a 1-D view of the storage and each lane's first item in it, so
        # a load is one `take` on a flat index instead of a (slower) two-array fancy index.
        self.flat = flat
        self.lane_base = None
        if flat is not None and owner is not None:
            row = items.strides[0] // items.itemsize
            start = (items.__array_interface__["data"][0] - flat.__array_interface__["data"][0]) // items.itemsize
            self.lane_base = owner.astype(np.int64) * row + start


def global_ref(var: Variable, binding: BufferBinding, name: str) -> MemoryRef:
    """The item view of a bound buffer: ``storage[offset + i*L : offset + i*L + L]`` is item i."""
    handle = binding.handle
    line = binding.line_size
    length = binding.buffer_len
    flat = handle.storage[handle.offset : handle.offset + length * line]
    items = flat if line == 1 else flat.reshape(length, line)
    return MemoryRef(items, length, None, describe_memory(var, name), line)


def shared_layout(shared: tuple[Variable, ...]) -> tuple[dict[int, int], int]:
    """Byte offset of each shared memory (by id) in a cube's arena, and the arena's size."""
    offsets: dict[int, int] = {}
    end = 0
    for var in shared:
        if var.aliases is not None:  # a view of an earlier memory's bytes: no space of its own
            offsets[var.id] = offsets[var.aliases[0]] + var.aliases[1]
            continue
        align = var.alignment or DEFAULT_SHARED_ALIGN
        end = -(-end // align) * align
        offsets[var.id] = end
        end += cast(int, var.length) * var.type.size  # a shared memory always has a length
    return offsets, -(-end // SHARED_ARENA_ALIGN) * SHARED_ARENA_ALIGN


def shared_ref(var: Variable, arena: np.ndarray, offset: int, owner: np.ndarray) -> MemoryRef:
    """A typed view of one shared memory in the per-cube byte ``arena`` (cubes, bytes)."""
    assert var.length is not None
    line = var.type.line
    nbytes = var.length * var.type.size
    dtype = numpy_dtype(var.elem)
    typed = arena[:, offset : offset + nbytes].view(dtype)
    items = typed if line == 1 else typed.reshape(arena.shape[0], var.length, line)
    aligned = arena.flags.c_contiguous and arena.shape[1] % dtype.itemsize == 0 and offset % dtype.itemsize == 0
    flat = arena.reshape(-1).view(dtype) if line == 1 and aligned else None
    return MemoryRef(items, var.length, owner, describe_memory(var), line, offset, flat)


def local_ref(var: Variable, lanes: int) -> MemoryRef:
    """A fresh per-lane local array."""
    assert var.length is not None
    line = var.type.line
    shape = (lanes, var.length) + ((line,) if line > 1 else ())
    items = np.zeros(shape, dtype=numpy_dtype(var.elem))
    flat = items.reshape(-1) if line == 1 else None
    return MemoryRef(items, var.length, np.arange(lanes), describe_memory(var), line, flat=flat)


def const_table_items(table: ConstTable) -> np.ndarray:
    """A constant table's values as a read-only numpy array of its element type."""
    items = np.asarray(table.values, dtype=numpy_dtype(table.var.elem))
    items.flags.writeable = False
    return items


def const_table_ref(var: Variable, items: np.ndarray) -> MemoryRef:
    """A constant table as every lane reads it (one row for the whole grid)."""
    return MemoryRef(items, var.length or 0, None, describe_memory(var), 1)


def locate(
    ctx: Chunk,
    inst: Instruction,
    ref: MemoryRef,
    index: Value,
    mask: Mask,
    checked: bool,
    access: str,
    speculative: bool = False,
) -> tuple[Value, Valid]:
    """A safe item index per lane (0 where invalid or inactive) and whether each lane was in bounds.

    The second result is True when every lane is in bounds.  Out-of-bounds accesses on an active lane
    raise ``SanitizerError`` when unchecked, or checked under the sanitizer (unless ``speculative``: a read
    the frontend hoisted out of a short-circuit, out of bounds only where Python would not have run it).
    """
    idx = np.asarray(index)
    never_negative = idx.dtype.kind == "u" and idx.dtype.itemsize < 8  # u8..u32: no lane below 0 to look for
    if idx.dtype != np.int64:
        idx = idx.astype(np.int64)  # u64 indices >= 2**63 turn negative: out of bounds either way
    length = ref.length
    report = not checked or (ctx.launch.sanitize and not speculative)
    if idx.ndim == 0:
        in_bounds = 0 <= int(idx) < length
        if not in_bounds and report:
            _out_of_bounds(ctx, inst, ref, access, int(idx), int(np.argmax(mask.bits)), checked)
        return (idx if in_bounds else np.int64(0)), in_bounds
    if not mask.full:
        idx = np.where(mask.bits, idx, 0)
    if length and (never_negative or idx.min() >= 0) and idx.max() < length:
        return idx, True
    valid = (idx >= 0) & (idx < length)
    if report:
        bad = ~valid & mask.bits
        if bad.any():
            lane = int(np.argmax(bad))
            _out_of_bounds(ctx, inst, ref, access, int(idx[lane]), lane, checked)
    return np.where(valid, idx, 0), valid


def out_of_bounds_text(access: str, label: str, index: int, length: int, checked: bool) -> str:
    """The out-of-bounds report every runtime gives: what, where, and what checked mode did instead."""
    hidden = ""
    if checked:
        hidden = (
            " in checked mode (without the sanitizer the read gives 0)"
            if access == "read"
            else " in checked mode (without the sanitizer the write is dropped)"
        )
    return f"out-of-bounds {access} of {label} at index {index} (length {length}){hidden}"


def _out_of_bounds(
    ctx: Chunk, inst: Instruction, ref: MemoryRef, access: str, index: int, lane: int, checked: bool
) -> None:
    ctx.fail(
        inst, out_of_bounds_text(access, ref.label, index, ref.length, checked), lane, kind=SanitizerKind.OUT_OF_BOUNDS
    )


def sanitize_shared(
    ctx: Chunk,
    inst: Instruction,
    ref: MemoryRef,
    idx: Value,
    valid: Valid,
    mask: Mask,
    kind: str,
    value: Value | None = None,
) -> None:
    """Hand the active in-bounds lanes of a shared-memory access to the chunk's sanitizer."""
    active = mask.bits if valid is True else mask.bits & valid
    lanes = np.flatnonzero(active)
    lane_idx = np.broadcast_to(idx, (ctx.lanes,))[lanes]
    if value is not None:
        shape = (ctx.lanes,) + ((ref.line,) if ref.line > 1 else ())
        value = np.broadcast_to(np.asarray(value, dtype=ref.items.dtype), shape)[lanes]
    ctx.sanitizer.mark_access(ctx, inst, ref, lanes, lane_idx, kind, value)  # type: ignore[union-attr]


def load(ref: MemoryRef, idx: Value, valid: Valid, ctx: Chunk) -> Value:
    """The items at ``idx`` per lane (0 where not ``valid``), for a ``locate`` result."""
    if ref.length == 0 or valid is False:
        shape = () if np.ndim(idx) == 0 and ref.owner is None else (ctx.lanes,)
        return np.zeros(shape + ((ref.line,) if ref.line > 1 else ()), dtype=ref.items.dtype)
    if ref.owner is None:
        values = ref.items[idx]
        if np.ndim(idx) == 0 and ref.line > 1:
            values = values.copy()  # a row view would alias the buffer
    elif ref.lane_base is not None:
        assert ref.flat is not None  # set with lane_base
        values = ref.flat.take(ref.lane_base + idx)
    else:
        values = ref.items[ref.owner, idx]
    if valid is not True:
        values = np.where(valid if ref.line == 1 else valid[:, None], values, values.dtype.type(0))
    return values


def store(ref: MemoryRef, idx: Value, valid: Valid, value: Value, value_uniform: bool, mask: Mask, ctx: Chunk) -> None:
    """Write ``value`` at ``idx`` on active in-bounds lanes; the highest lane wins a shared item."""
    if ref.length == 0 or valid is False:
        return
    active = mask.bits if valid is True else mask.bits & valid
    if ref.owner is None and np.ndim(idx) == 0:
        if value_uniform:
            ref.items[idx] = value
        else:  # every active lane writes one item: the last one wins
            ref.items[idx] = cast(np.ndarray, value)[len(active) - 1 - int(np.argmax(active[::-1]))]
        return
    if valid is True and mask.full:
        if ref.lane_base is not None:
            assert ref.flat is not None  # set with lane_base
            ref.flat[ref.lane_base + idx] = value
            return
        target = (idx,) if ref.owner is None else (ref.owner, idx)
        ref.items[target] = value
        return
    lanes = np.flatnonzero(active)
    idx = np.broadcast_to(idx, (ctx.lanes,))[lanes]
    value = value if value_uniform else cast(np.ndarray, value)[lanes]
    if ref.lane_base is not None:
        assert ref.flat is not None  # set with lane_base
        ref.flat[ref.lane_base[lanes] + idx] = value
        return
    target = (idx,) if ref.owner is None else (ref.owner[lanes], idx)
    ref.items[target] = value


@implements(ops.Index)
def index(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = memory[index]; checked reads give 0 out of bounds."""
    op = cast(ops.Index, inst.operation)
    ref = ctx.memory(op.memory)
    idx, valid = locate(ctx, inst, ref, ctx.read(op.index), mask, op.checked, "read", op.speculative)
    check_local_read = ctx.state.check_local_read  # set by op families with async registers
    if check_local_read is not None and op.memory.kind is VarKind.LOCAL_ARRAY:
        check_local_read(ctx, inst, op.memory, idx, mask)
    if ctx.sanitizer is not None and ref.shared_offset is not None:
        sanitize_shared(ctx, inst, ref, idx, valid, mask, "read")
    if ctx.coverage is not None and op.memory.kind is VarKind.GLOBAL:
        ctx.coverage.record(ctx, op.memory, idx, valid, mask, "read")
    assert inst.out is not None
    ctx.write(inst.out, load(ref, idx, valid, ctx), mask)


@implements(ops.IndexAssign)
def index_assign(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """memory[index] = value on active lanes; checked writes out of bounds are dropped."""
    op = cast(ops.IndexAssign, inst.operation)
    ref = ctx.memory(op.memory)
    idx, valid = locate(ctx, inst, ref, ctx.read(op.index), mask, op.checked, "write")
    value = ctx.read(op.value)
    if ctx.sanitizer is not None and ref.shared_offset is not None:
        sanitize_shared(ctx, inst, ref, idx, valid, mask, "write", value)
    if ctx.coverage is not None and ref.owner is None:
        ctx.coverage.record(ctx, op.memory, idx, valid, mask, "write")
    store(ref, idx, valid, value, is_uniform(value, op.value.type), mask, ctx)


def _lane_index(ctx: Chunk, inst: Instruction, lane: Value, line: int, mask: Mask) -> Value:
    """The lane-of-line index per unit, checked against the line size on active units."""
    lane = np.asarray(lane).astype(np.int64)
    bad = (lane < 0) | (lane >= line)
    if np.ndim(lane) == 0:
        if bad:
            ctx.fail(
                inst,
                f"line lane {int(lane)} out of range for a line of {line}",
                int(np.argmax(mask.bits)),
                kind=SanitizerKind.OUT_OF_BOUNDS,
            )
        return lane
    bad = bad & mask.bits
    if bad.any():
        unit = int(np.argmax(bad))
        ctx.fail(
            inst,
            f"line lane {int(lane[unit])} out of range for a line of {line}",
            unit,
            kind=SanitizerKind.OUT_OF_BOUNDS,
        )
    return np.clip(lane, 0, line - 1)


@implements(ops.ExtractLane)
def extract_lane(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = line[lane]."""
    op = cast(ops.ExtractLane, inst.operation)
    line_value = ctx.read(op.line)
    lane = _lane_index(ctx, inst, ctx.read(op.lane), op.line.type.line, mask)
    if op.line.type.line == 1:
        result = line_value
    elif np.ndim(lane) == 0:
        result = cast(np.ndarray, line_value)[..., int(lane)]
    else:
        result = full_lanes(line_value, op.line.type, ctx.lanes)[np.arange(ctx.lanes), lane]
    assert inst.out is not None
    ctx.write(inst.out, result, mask)


@implements(ops.InsertLane)
def insert_lane(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """target[lane] = value on active units (target is a mutable line local)."""
    op = cast(ops.InsertLane, inst.operation)
    target = op.target
    ty = target.type
    lane = _lane_index(ctx, inst, ctx.read(op.lane), ty.line, mask)
    value = ctx.read(op.value)
    if ty.line == 1:
        ctx.write(target, value, mask)
        return
    old = ctx.read(target)
    if mask.full and np.ndim(lane) == 0 and is_uniform(old, ty) and np.ndim(value) == 0:
        new = np.array(old)  # everything uniform stays uniform
        new[int(lane)] = value
        ctx.values.set(target, new)
        return
    new = np.array(full_lanes(old, ty, ctx.lanes))
    rows = np.flatnonzero(mask.bits)
    lanes = np.broadcast_to(lane, (ctx.lanes,))[rows]
    values = np.broadcast_to(value, (ctx.lanes,))[rows]
    new[rows, lanes] = values
    ctx.values.set(target, new)


@implements(*ops.METADATA_OPS)
def metadata(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = len, buffer_len, rank, shape(dim) or stride(dim) of a buffer parameter, as u32."""
    op = cast(ops.Metadata, inst.operation)
    if op.memory.kind is not VarKind.GLOBAL:
        raise TypeError(f"metadata of {op.memory!r}: only buffer parameters carry metadata")
    binding = ctx.launch.bindings.buffers[op.memory.id]
    if op.name in ("len", "buffer_len", "rank"):
        value = {"len": binding.len, "buffer_len": binding.buffer_len, "rank": len(binding.shape)}[op.name]
        assert inst.out is not None
        ctx.write(inst.out, np.uint32(value), mask)
        return
    table = np.asarray(binding.shape if op.name == "shape" else binding.strides, dtype=np.int64)
    assert op.dim is not None  # shape(dim) and stride(dim) name a dimension
    dim = np.asarray(ctx.read(op.dim)).astype(np.int64)
    bad = (dim < 0) | (dim >= len(table))
    if np.ndim(dim) and not mask.full:
        bad = bad & mask.bits
    if np.any(bad):
        unit = int(np.argmax(bad)) if np.ndim(bad) else int(np.argmax(mask.bits))
        shown = int(dim[unit]) if np.ndim(dim) else int(dim)
        ctx.fail(
            inst,
            f"{op.name}({shown}) of a rank-{len(table)} buffer {op.memory.id}",
            unit,
            kind=SanitizerKind.OUT_OF_BOUNDS,
        )
    assert inst.out is not None
    ctx.write(inst.out, table[np.clip(dim, 0, max(len(table) - 1, 0))].astype(U32), mask)
