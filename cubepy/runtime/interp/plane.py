"""Plane (warp) collectives: the handler of ``PlaneOp``.

A plane is 32 consecutive units of one cube (``unit_pos // 32``); a cube whose size is not a multiple
of 32 ends with a partial plane.  Collectives see only the plane's active units: reductions, scans
and votes ignore the others, ``elect`` picks the lowest active unit.  Moves follow CUDA's
``__shfl_*_sync`` with width 32: ``shuffle``/``broadcast`` read lane ``src % 32``, ``shuffle_xor``
reads ``lane ^ d`` (its own value when that is >= 32), ``shuffle_up`` reads ``lane - d`` (its own
value when ``lane < d``), ``shuffle_down`` reads ``lane + d`` (its own value when that is >= 32).
Reading an inactive or missing unit is undefined in CUDA: here it gives that unit's current value
(0 for a missing one), and the sanitizer reports it.  f16/bf16 reductions accumulate in f32 and
round once; integer ones wrap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, ops
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import Mask, full_lanes, numpy_dtype

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk


OP_FAMILIES = ("plane",)  # the IR op families handled here


class PlaneLayout:
    """The lanes of a chunk arranged as (planes, 32), padded where a cube ends in a partial plane."""

    def __init__(self, cubes: int, units: int) -> None:
        per_cube = -(-units // PLANE_WIDTH)
        self.planes = cubes * per_cube
        self.lanes = cubes * units
        if units % PLANE_WIDTH == 0:
            self.gather_index = self.exists = self.scatter_index = None
            return
        slot = np.arange(per_cube * PLANE_WIDTH)
        cube_base = np.arange(cubes)[:, None] * units
        self.gather_index = (cube_base + np.minimum(slot, units - 1)).reshape(self.planes, PLANE_WIDTH)
        exists = np.broadcast_to(slot < units, (cubes, per_cube * PLANE_WIDTH))
        self.exists = exists.reshape(self.planes, PLANE_WIDTH)
        unit = np.arange(units)
        self.scatter_index = (np.arange(cubes)[:, None] * (per_cube * PLANE_WIDTH) + unit).reshape(-1)

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Lane values ``(lanes, ...)`` as ``(planes, 32, ...)``; missing units hold 0."""
        if self.gather_index is None:
            return values.reshape((self.planes, PLANE_WIDTH) + values.shape[1:])
        padded = values[self.gather_index]
        assert self.exists is not None  # set together with gather_index
        exists = self.exists if values.ndim == 1 else self.exists[..., None]
        return np.where(exists, padded, padded.dtype.type(0))

    def scatter(self, padded: np.ndarray) -> np.ndarray:
        """``(planes, 32, ...)`` back to lane order ``(lanes, ...)``."""
        flat = padded.reshape((self.planes * PLANE_WIDTH,) + padded.shape[2:])
        return flat if self.scatter_index is None else flat[self.scatter_index]

    def active(self, bits: np.ndarray) -> np.ndarray:
        """The per-lane ``bits`` as ``(planes, 32)``, false for missing units."""
        return self.gather(bits)


def _identity(name: str, dtype: np.dtype) -> Any:  # a numpy scalar of ``dtype``
    if name in ("sum", "inclusive_sum", "exclusive_sum"):
        return dtype.type(0)
    if name in ("prod", "inclusive_prod", "exclusive_prod"):
        return dtype.type(1)
    if dtype.kind == "f":
        return dtype.type(np.inf if name == "min" else -np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.max if name == "min" else info.min)


_REDUCE = {
    "sum": np.add,
    "prod": np.multiply,
    "inclusive_sum": np.add,
    "exclusive_sum": np.add,
    "inclusive_prod": np.multiply,
    "exclusive_prod": np.multiply,
}


def _float_in_gpu_order(name: str, masked: np.ndarray, active: np.ndarray) -> np.ndarray:
    """A float sum/prod reduction or scan associated exactly as the PTX lowering does, so results are bit-equal.

    A whole active plane: butterfly reduction (partners ``lane ^ 16, 8, 4, 2, 1``) or a Hillis-Steele scan
    (offsets 1, 2, 4, 8, 16); a partial one: left to right over the active lanes, from the identity.
    """
    ufunc = _REDUCE[name]
    lanes = masked.shape[1]
    sequential = ufunc.accumulate(masked, axis=1)
    if name in ("sum", "prod"):
        sequential = np.broadcast_to(sequential[:, -1:], masked.shape)
    full = (
        active.reshape(active.shape[0], active.shape[1], -1).all(axis=(1, 2))
        if lanes == 32
        else np.zeros(masked.shape[0], dtype=bool)
    )
    if not full.any():
        result = sequential
    else:
        acc = masked.copy()
        index = np.arange(32)
        if name in ("sum", "prod"):
            for offset in (16, 8, 4, 2, 1):
                acc = ufunc(acc, acc[:, index ^ offset])
        else:
            for offset in (1, 2, 4, 8, 16):
                below = np.concatenate([acc[:, :offset], acc[:, : 32 - offset]], axis=1)
                stepped = ufunc(acc, below)
                acc = np.concatenate([acc[:, :offset], stepped[:, offset:]], axis=1)
        shape = (-1,) + (1,) * (masked.ndim - 1)
        result = np.where(full.reshape(shape), acc, sequential)
    if name.startswith("exclusive"):
        shifted = np.empty_like(result)
        shifted[:, 0] = _identity(name, masked.dtype)
        shifted[:, 1:] = result[:, :-1]
        return shifted
    return result


def _reduce(name: str, values: np.ndarray, active: np.ndarray) -> np.ndarray:
    """A reduction or scan over axis 1 of ``values`` counting only ``active`` units."""
    dtype = values.dtype
    half = dtype.itemsize == 2 and (dtype.kind == "f" or dtype.name == "bfloat16")
    compute = np.dtype(np.float32) if half else dtype
    values = values.astype(compute, copy=False)
    masked = np.where(active, values, _identity(name, compute))
    if name in ("min", "max"):
        ufunc = (
            (np.fmin if name == "min" else np.fmax)
            if compute.kind == "f"
            else (np.minimum if name == "min" else np.maximum)
        )
        result = np.broadcast_to(ufunc.reduce(masked, axis=1)[:, None], values.shape)
    elif compute.kind == "f":
        result = _float_in_gpu_order(name, masked, active)
    elif name in ("sum", "prod"):
        result = np.broadcast_to(_REDUCE[name].reduce(masked, axis=1, dtype=compute)[:, None], values.shape)
    else:
        result = _REDUCE[name].accumulate(masked, axis=1, dtype=compute)
        if name.startswith("exclusive"):
            shifted = np.empty_like(result)
            shifted[:, 0] = _identity(name, compute)
            shifted[:, 1:] = result[:, :-1]
            result = shifted
    return result.astype(dtype, copy=False)


def _match(name: str, values: np.ndarray, active: np.ndarray) -> np.ndarray:
    """match.any/all.sync per (plane, lane): masks of active lanes holding the same bits (floats by their bits)."""
    bits = values.view(np.dtype(f"u{values.dtype.itemsize}"))
    weights = np.left_shift(np.uint64(1), np.arange(PLANE_WIDTH, dtype=np.uint64))
    same = (bits[:, :, None] == bits[:, None, :]) & active[:, None, :]  # [plane, lane, other lane]
    masks = (same.astype(np.uint64) * weights).sum(axis=2).astype(np.uint32)
    if name == "match_any":
        return cast(np.ndarray, masks)
    everyone = (active.astype(np.uint64) * weights).sum(axis=1).astype(np.uint32)
    all_same = (masks == everyone[:, None]) | ~active
    per_plane = np.where(all_same.all(axis=1), everyone, np.uint32(0)).astype(np.uint32)
    return np.broadcast_to(per_plane[:, None], masks.shape)


def _source_lane(name: str, arg: np.ndarray) -> np.ndarray:
    """The lane each unit reads for a move, per (plane, lane)."""
    lane = np.arange(PLANE_WIDTH, dtype=np.int64)
    arg = arg.astype(np.int64)
    if name in ("broadcast", "shuffle"):
        return arg % PLANE_WIDTH
    if name == "shuffle_xor":
        source = lane ^ arg
    elif name == "shuffle_up":
        source = lane - arg
    else:  # shuffle_down
        source = lane + arg
    return np.where((source < 0) | (source >= PLANE_WIDTH), lane, source)


@implements(*ops.PLANE_OPS)
def plane_op(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """A plane collective over the active units of every plane."""
    op = cast(ops.PlaneOp, inst.operation)
    assert inst.out is not None  # the record gives it a result
    layout = ctx.plane_layout()
    active = layout.active(mask.bits)
    name = op.name.removeprefix("plane_")
    out_ty = inst.out.type
    if name == "elect":
        first = np.argmax(active, axis=1)
        result = (np.arange(PLANE_WIDTH) == first[:, None]) & active
        ctx.write(inst.out, layout.scatter(result), mask)
        return
    assert op.value is not None  # the verifier requires it of every op but elect
    values = layout.gather(np.asarray(full_lanes(ctx.read(op.value), op.value.type, ctx.lanes)))
    line_active = active if values.ndim == 2 else active[..., None]
    if name in ("all", "any"):
        hit = np.all(values | ~line_active, axis=1) if name == "all" else np.any(values & line_active, axis=1)
        result = np.broadcast_to(hit[:, None], values.shape)
    elif name == "ballot":
        weights = np.left_shift(np.uint64(1), np.arange(PLANE_WIDTH, dtype=np.uint64))
        bits = ((values & active).astype(np.uint64) * weights).sum(axis=1).astype(np.uint32)
        result = np.broadcast_to(bits[:, None], active.shape)
        if out_ty.line > 1:
            padded = np.zeros(active.shape + (out_ty.line,), dtype=np.uint32)
            padded[..., 0] = result
            result = padded
    elif name in ("match_any", "match_all"):
        result = _match(name, values, active)
    elif name in _REDUCE or name in ("min", "max"):
        result = _reduce(name, values, line_active)
    else:
        assert op.arg is not None  # the verifier requires it of moves
        arg = layout.gather(np.asarray(full_lanes(ctx.read(op.arg), op.arg.type, ctx.lanes)))
        source = _source_lane(name, arg)
        if ctx.launch.sanitize:
            _check_sources(ctx, inst, layout, active, source)
        index = source if values.ndim == 2 else source[..., None]
        result = np.take_along_axis(values, np.broadcast_to(index, values.shape), axis=1)
    ctx.write(inst.out, layout.scatter(np.ascontiguousarray(result)).astype(numpy_dtype(out_ty.elem), copy=False), mask)


def _check_sources(ctx: Chunk, inst: Instruction, layout: PlaneLayout, active: np.ndarray, source: np.ndarray) -> None:
    """Report an active unit reading an inactive or missing unit of its plane."""
    own = source == np.arange(PLANE_WIDTH)
    source_active = np.take_along_axis(active, source, axis=1)
    bad = active & ~own & ~source_active
    if bad.any():
        plane, lane = np.unravel_index(int(np.argmax(bad)), bad.shape)
        flat = np.zeros(bad.shape, dtype=np.int64)
        flat[plane, lane] = 1
        unit = int(np.argmax(layout.scatter(flat)))
        ctx.fail(
            inst,
            f"{inst.operation.name} reads lane {int(source[plane, lane])} of its plane, "
            "which is inactive (undefined in CUDA)",
            unit,
            kind=SanitizerKind.INACTIVE_PLANE_LANE,
        )
