"""Atomics: handlers of ``AtomicOp`` and ``AtomicCompareExchange``.

Within one instruction the active lanes' atomics are serialized in lane order: each lane gets the
value its item held just before its own update, and the item ends with every update applied.  The
lanes are sorted (stably) by address; the k-th lane of an address is applied in round k, vectorized
over every address at once, and the tail of heavily contended addresses (more than
``ROUNDS_BEFORE_SCAN`` lanes) is finished with one ``ufunc.accumulate`` scan per address.
Atomics are always bounds-checked: an out-of-bounds atomic raises ``SanitizerError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.ir import Instruction, ops
from cubepy.ir.numerics import as_unsigned
from cubepy.runtime.interp.memory import MemoryRef, load, locate, sanitize_shared, store
from cubepy.runtime.interp.registry import implements
from cubepy.runtime.interp.values import Mask, is_uniform

if TYPE_CHECKING:
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.memory import Value

OP_FAMILIES = ("memory",)  # the IR op families handled here
ROUNDS_BEFORE_SCAN = 16

_INT_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add,
    "sub": np.subtract,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}
_FLOAT_UFUNCS: dict[str, np.ufunc] = {"add": np.add, "sub": np.subtract, "max": np.fmax, "min": np.fmin}


class _Contention:
    """Active lanes grouped by the item they touch: a stable sort by address and its segments."""

    def __init__(self, ref: MemoryRef, idx: np.ndarray, owner: np.ndarray | None) -> None:
        key = idx if owner is None else owner * ref.length + idx
        self.order = np.argsort(key, kind="stable")
        sorted_key = key[self.order]
        count = len(sorted_key)
        self.starts = (
            np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]]) if count else np.zeros(0, dtype=np.int64)
        )
        self.lengths = np.diff(np.r_[self.starts, count])
        first = self.order[self.starts]
        self.target = (idx[first],) if owner is None else (owner[first], idx[first])


def _serial_apply(
    ref: MemoryRef,
    contention: _Contention,
    values: np.ndarray,
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
    scan: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """Apply ``combine`` lane by lane per item; return each lane's old value in sorted order.

    ``scan(initial, values)`` gives the item's successive values (initial first) for the tail of
    one heavily contended item.
    """
    items = ref.items
    starts, lengths = contention.starts, contention.lengths
    current = np.array(items[contention.target])
    sorted_values = values[contention.order]
    old = np.empty(len(sorted_values), dtype=current.dtype)
    for rank in range(min(int(lengths.max(initial=0)), ROUNDS_BEFORE_SCAN)):
        live = np.flatnonzero(lengths > rank)
        positions = starts[live] + rank
        old[positions] = current[live]
        current[live] = combine(current[live], sorted_values[positions])
    for segment in np.flatnonzero(lengths > ROUNDS_BEFORE_SCAN):
        begin = starts[segment] + ROUNDS_BEFORE_SCAN
        end = starts[segment] + lengths[segment]
        running = scan(current[segment], sorted_values[begin:end])
        old[begin:end] = running[:-1]
        current[segment] = running[-1]
    items[contention.target] = current
    return old


def _ufunc_scan(ufunc: np.ufunc) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def scan(initial: np.ndarray, values: np.ndarray) -> np.ndarray:
        sequence = np.concatenate([np.asarray([initial], dtype=values.dtype), values])
        return ufunc.accumulate(sequence, dtype=values.dtype)

    return scan


def _wrapping_increment(current: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """CUDA's atomicInc: ``old >= limit ? 0 : old + 1``."""
    return np.where(current >= limit, 0, current + 1).astype(current.dtype)


def _wrapping_decrement(current: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """CUDA's atomicDec: ``old == 0 || old > limit ? limit : old - 1``."""
    return np.where((current == 0) | (current > limit), limit, current - 1).astype(current.dtype)


def _sequential_scan(
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The successive values of an item under ``combine`` (for updates that are no numpy ufunc)."""

    def scan(initial: np.ndarray, values: np.ndarray) -> np.ndarray:
        running = np.empty(len(values) + 1, dtype=values.dtype)
        running[0] = initial
        for position, value in enumerate(values):
            running[position + 1] = combine(running[position : position + 1], value)[0]
        return running

    return scan


_WRAPPING = {"inc": _wrapping_increment, "dec": _wrapping_decrement}


def _exchange_scan(initial: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray([initial], dtype=values.dtype), values])


def _active_lanes(
    ctx: Chunk, inst: Instruction, ref: MemoryRef, index: Value, mask: Mask, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, Value]:
    """The active lanes in order, their item indices and owner rows."""
    if ref.line > 1:
        raise TypeError(f"{what} on a line memory ({ref.label}): atomics act on scalar items")
    idx, _ = locate(ctx, inst, ref, index, mask, False, what)
    lanes = np.flatnonzero(mask.bits)
    lane_idx = np.broadcast_to(idx, (ctx.lanes,))[lanes]
    if ctx.sanitizer is not None and ref.shared_offset is not None:
        ctx.sanitizer.mark_access(ctx, inst, ref, lanes, lane_idx, "atomic")
    owner = None if ref.owner is None else ref.owner[lanes]
    return lanes, lane_idx, owner, idx


def _write_old(
    ctx: Chunk, inst: Instruction, mask: Mask, lanes: np.ndarray, contention: _Contention, old_sorted: np.ndarray
) -> None:
    result = np.zeros(ctx.lanes, dtype=old_sorted.dtype)
    result[lanes[contention.order]] = old_sorted
    assert inst.out is not None
    ctx.write(inst.out, result, mask)


@implements(*ops.ATOMIC_OPS)
def atomic_op(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = old memory[index]; memory[index] = old op value, serialized in lane order."""
    op = cast(ops.AtomicOp, inst.operation)
    ref = ctx.memory(op.memory)
    kind = op.name.removeprefix("atomic_")
    what = f"atomic {kind}"
    if kind == "load":
        idx, valid = locate(ctx, inst, ref, ctx.read(op.index), mask, False, what)
        if ctx.sanitizer is not None and ref.shared_offset is not None:
            sanitize_shared(ctx, inst, ref, idx, valid, mask, "atomic")
        assert inst.out is not None
        ctx.write(inst.out, load(ref, idx, valid, ctx), mask)
        return
    if kind == "store":
        idx, valid = locate(ctx, inst, ref, ctx.read(op.index), mask, False, what)
        assert op.value is not None  # every atomic but a load has a value
        value = ctx.read(op.value)
        if ctx.sanitizer is not None and ref.shared_offset is not None:
            sanitize_shared(ctx, inst, ref, idx, valid, mask, "atomic")
        store(ref, idx, valid, value, is_uniform(value, op.value.type), mask, ctx)
        return
    lanes, lane_idx, owner, _ = _active_lanes(ctx, inst, ref, ctx.read(op.index), mask, what)
    assert op.value is not None
    values = np.broadcast_to(ctx.read(op.value), (ctx.lanes,))[lanes]
    contention = _Contention(ref, lane_idx, owner)
    if kind == "exchange":
        old = _serial_apply(ref, contention, values, lambda _cur, new: new, _exchange_scan)
    elif kind in _WRAPPING:
        combine = _WRAPPING[kind]
        old = _serial_apply(ref, contention, values, combine, _sequential_scan(combine))
    else:
        ufuncs = _FLOAT_UFUNCS if op.memory.elem.is_float else _INT_UFUNCS
        if kind not in ufuncs:
            raise TypeError(f"atomic {kind} is not defined for {op.memory.elem!r}")
        ufunc = ufuncs[kind]
        old = _serial_apply(ref, contention, values, ufunc, _ufunc_scan(ufunc))
    _write_old(ctx, inst, mask, lanes, contention, old)


def _cas_scan(initial: np.ndarray, compare: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Running item values of a compare-and-swap sequence: jump from one success to the next."""
    running = np.empty(len(compare) + 1, dtype=compare.dtype)
    current, position = initial, 0
    while position < len(compare):
        hits = np.flatnonzero(compare[position:] == current)
        stop = len(compare) if not len(hits) else position + int(hits[0])
        running[position : stop + 1] = current
        if not len(hits):
            break
        current = new[stop]
        position = stop + 1
    running[-1] = current
    return running


@implements(ops.AtomicCompareExchange)
def atomic_compare_exchange(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = old memory[index]; if old == cmp (bitwise): memory[index] = new; in lane order."""
    op = cast(ops.AtomicCompareExchange, inst.operation)
    ref = ctx.memory(op.memory)
    lanes, lane_idx, owner, _ = _active_lanes(ctx, inst, ref, ctx.read(op.index), mask, "atomic compare_exchange")
    dtype = ref.items.dtype
    compare = as_unsigned(np.broadcast_to(ctx.read(op.cmp), (ctx.lanes,))[lanes])
    new = as_unsigned(np.broadcast_to(ctx.read(op.new), (ctx.lanes,))[lanes])
    contention = _Contention(ref, lane_idx, owner)
    bits_ref = MemoryRef(ref.items.view(compare.dtype), ref.length, ref.owner, ref.label, 1)
    sorted_compare = compare[contention.order]
    sorted_new = new[contention.order]

    # The "values" handed to _serial_apply are each lane's position in sorted order, so that
    # combine and scan can look up that lane's compare and new values.
    def combine(current: np.ndarray, position: np.ndarray) -> np.ndarray:
        return np.where(current == sorted_compare[position], sorted_new[position], current)

    def scan(initial: np.ndarray, position: np.ndarray) -> np.ndarray:
        return _cas_scan(initial, sorted_compare[position], sorted_new[position])

    sorted_position = np.empty_like(contention.order)
    sorted_position[contention.order] = np.arange(len(lanes))
    old_bits = _serial_apply(bits_ref, contention, sorted_position, combine, scan)
    _write_old(ctx, inst, mask, lanes, contention, old_bits.view(dtype))
