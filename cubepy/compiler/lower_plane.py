"""Lowering of plane (warp) collectives.

Plane collectives honor the active mask (``activemask``), as CUDA's ``__reduce_*_sync`` do.  A
collective the ``plane_uniform`` pass marked ``uniform`` (the whole plane reaches it together) skips the
test: mask ``0xffffffff`` and only the full-plane form below, as nvcc's ``__shfl_xor_sync(0xffffffff, ...)``.
Otherwise:

* when all 32 lanes are active, reductions are butterfly shuffles (``shfl.sync.bfly``) and scans
  Hillis-Steele shuffles (``shfl.sync.up``);
* otherwise every active lane walks the set bits of the mask and combines the values it reads with
  ``shfl.sync.idx`` (the same trip count on every active lane, so the shuffles stay converged).

f16/bf16 reductions and scans accumulate in f32 and round once at the end.

Values of any type are shuffled as 32-bit words (64-bit values as two).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.builtins import sreg
from cubepy.compiler.lower import KernelLowering, as_u32, lowers
from cubepy.compiler.lower_arith import binary, map_lanes
from cubepy.ir import BF16, F16, F32, ElemType, Instruction, Type, VarKind, ops
from cubepy.ir.variable import PLANE_WIDTH

FULL_MASK = ir.Constant(lt.I32, -1)


def active_mask(lw: KernelLowering) -> ir.Value:
    """The lanes of this plane executing now (``activemask.b32``)."""
    return lw.target.active_mask(lw)


def _shuffle_word(lw: KernelLowering, mode: str, word: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
    return lw.target.shuffle_word(lw, mode, word, arg, mask)


def _shuffle_scalar(lw: KernelLowering, mode: str, value: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
    b = lw.builder
    llty = value.type
    bits = (
        llty.width if isinstance(llty, ir.IntType) else {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(llty)]
    )
    int_t = ir.IntType(bits)
    as_int = value if isinstance(llty, ir.IntType) else b.bitcast(value, int_t)
    if bits <= 32:
        word = b.zext(as_int, lt.I32) if bits < 32 else as_int
        moved = _shuffle_word(lw, mode, word, arg, mask)
        result = b.trunc(moved, int_t) if bits < 32 else moved
    else:
        low = _shuffle_word(lw, mode, b.trunc(as_int, lt.I32), arg, mask)
        high = _shuffle_word(lw, mode, b.trunc(b.lshr(as_int, ir.Constant(lt.I64, 32)), lt.I32), arg, mask)
        result = b.or_(b.zext(low, lt.I64), b.shl(b.zext(high, lt.I64), ir.Constant(lt.I64, 32)))
    return result if isinstance(llty, ir.IntType) else b.bitcast(result, llty)


def shuffle(lw: KernelLowering, mode: str, value: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
    """``shfl.sync.<mode>`` of a value of any register type (lines lane by lane)."""
    return map_lanes(lw, lambda v: _shuffle_scalar(lw, mode, v, arg, mask), [value], value.type)


# -- reductions and scans -------------------------------------------------------------------------------
_REDUCE_BINARY = {"sum": "add", "prod": "mul", "min": "min", "max": "max"}


def _combine(lw: KernelLowering, kind: str, a: ir.Value, c: ir.Value, elem: ElemType) -> ir.Value:
    if elem.is_bool:  # sum/max of bools is "any", prod/min is "all"
        return lw.builder.or_(a, c) if kind in ("sum", "max") else lw.builder.and_(a, c)
    return binary(lw, _REDUCE_BINARY[kind], a, c, Type(elem))


def _identity(kind: str, elem: ElemType, llty: ir.Type) -> ir.Constant:
    if elem.is_bool:
        return lt.splat(llty, int(kind in ("prod", "min")))
    if kind == "sum":
        return lt.splat(llty, 0.0 if elem.is_float else 0)
    if kind == "prod":
        return lt.splat(llty, 1.0 if elem.is_float else 1)
    if elem.is_float:
        return lt.splat(llty, math.inf if kind == "min" else -math.inf)
    if elem.kind == "uint":
        return lt.splat(llty, -1 if kind == "min" else 0)
    top = (1 << (elem.bits - 1)) - 1
    return lt.splat(llty, top if kind == "min" else -top - 1)


def _full_plane(lw: KernelLowering, kind: str, scan: str | None, value: ir.Value, elem: ElemType) -> ir.Value:
    """The butterfly reduction or Hillis-Steele scan over all 32 lanes (mask ``0xffffffff``)."""
    b = lw.builder
    lane = lw.builtins.get("unit_pos_plane") or _laneid(lw)
    acc = value
    if scan is None:
        for offset in (16, 8, 4, 2, 1):
            acc = _combine(lw, kind, acc, shuffle(lw, "bfly", acc, ir.Constant(lt.I32, offset), FULL_MASK), elem)
    else:
        for offset in (1, 2, 4, 8, 16):
            below = shuffle(lw, "up", acc, ir.Constant(lt.I32, offset), FULL_MASK)
            has_source = b.icmp_unsigned(">=", lane, ir.Constant(lt.I32, offset))
            acc = b.select(has_source, _combine(lw, kind, acc, below, elem), acc)
        if scan == "exclusive":
            shifted = shuffle(lw, "up", acc, ir.Constant(lt.I32, 1), FULL_MASK)
            identity = _identity(kind, elem, value.type)
            acc = b.select(b.icmp_unsigned("==", lane, ir.Constant(lt.I32, 0)), identity, shifted)
    return acc


def full_plane_lanes(
    lw: KernelLowering, kind: str, scan: str | None, values: list[ir.Value], elem: ElemType
) -> list[ir.Value]:
    """``_full_plane`` for all 32 lanes of a plane at once, given each lane's value: the same combines in the
    same order, so each lane's result is bit-equal to its shuffled one (for a target that lowers a plane's
    lanes side by side: the host's loop fission).  Scalar lanes are combined as one 32-lane vector, a
    ``shufflevector`` standing for each shuffle: the same operations lane by lane, in vector registers."""
    if not isinstance(values[0].type, ir.VectorType):
        return _full_plane_vector(lw, kind, scan, values, elem)
    acc = list(values)
    if scan is None:
        for offset in (16, 8, 4, 2, 1):
            acc = [_combine(lw, kind, acc[lane], acc[lane ^ offset], elem) for lane in range(PLANE_WIDTH)]
        return acc
    for offset in (1, 2, 4, 8, 16):
        acc = [
            _combine(lw, kind, acc[lane], acc[lane - offset], elem) if lane >= offset else acc[lane]
            for lane in range(PLANE_WIDTH)
        ]
    if scan == "exclusive":
        acc = [_identity(kind, elem, values[0].type), *acc[:-1]]
    return acc


def _full_plane_vector(
    lw: KernelLowering, kind: str, scan: str | None, values: list[ir.Value], elem: ElemType
) -> list[ir.Value]:
    """``full_plane_lanes`` of scalar lanes, through ``_row_reduction`` of the lanes as one vector."""
    return vector_lanes(lw.builder, _row_reduction(lw, kind, scan, lane_vector(lw.builder, values), elem))


def _row_reduction(lw: KernelLowering, kind: str, scan: str | None, row: ir.Value, elem: ElemType) -> ir.Value:
    """Lane ``i`` of the 32-lane vector ``row`` is lane ``i``'s value; each step combines it with the lane its
    shuffle would read (``acc[i] op acc[i ^ offset]``; a scan's ``acc[i] op acc[i - offset]`` where
    ``i >= offset``), in the scalar form's operand order."""
    b = lw.builder
    lanes = range(PLANE_WIDTH)
    acc = row
    if scan is None:
        for offset in (16, 8, 4, 2, 1):
            partner = b.shuffle_vector(acc, acc, _lane_indices([lane ^ offset for lane in lanes]))
            acc = _combine(lw, kind, acc, partner, elem)
        return acc
    for offset in (1, 2, 4, 8, 16):
        earlier = b.shuffle_vector(acc, acc, _lane_indices([max(lane - offset, 0) for lane in lanes]))
        combined = _combine(lw, kind, acc, earlier, elem)
        reaches = ir.Constant(ir.VectorType(lt.I1, PLANE_WIDTH), [lane >= offset for lane in lanes])
        acc = b.select(reaches, combined, acc)
    if scan == "exclusive":  # lane 0 gets the identity, lane i the inclusive result of lane i - 1
        item = cast(ir.VectorType, row.type).element
        first = b.insert_element(acc, _identity(kind, elem, item), ir.Constant(lt.I32, PLANE_WIDTH - 1))
        acc = b.shuffle_vector(first, first, _lane_indices([(lane - 1) % PLANE_WIDTH for lane in lanes]))
    return acc


def plane_row_result(lw: KernelLowering, inst: Instruction, row: ir.Value) -> ir.Value | None:
    """The whole-plane operation ``inst`` on a plane's 32 scalar operands held as one vector ``row``, as one
    vector (lane ``i``'s result in element ``i``), where that is a fixed computation: a reduction or scan,
    or a move by one literal source or offset.  None for the rest (``exchange_lanes`` computes those)."""
    op = inst.operation
    assert isinstance(op, ops.PlaneOp)
    b = lw.builder
    kind = op.name.removeprefix("plane_")
    if isinstance(op, LANEWISE):
        assert op.value is not None
        scan, _, reduce_kind = kind.rpartition("_")
        elem = op.value.elem
        if elem not in (F16, BF16):
            return _row_reduction(lw, reduce_kind, scan or None, row, elem)
        wide = b.fpext(row, ir.VectorType(lt.F32_TYPE, PLANE_WIDTH))
        return b.fptrunc(_row_reduction(lw, reduce_kind, scan or None, wide, F32), row.type)
    mode = _MOVE_MODE.get(kind)
    arg = op.arg
    if mode is None or arg is None or arg.kind is not VarKind.CONSTANT or not isinstance(arg.value, int):
        return None
    sources = [_literal_source(mode, lane, arg.value) for lane in range(PLANE_WIDTH)]
    return b.shuffle_vector(row, row, _lane_indices(sources))


def lane_vector(b: ir.IRBuilder, values: list[ir.Value]) -> ir.Value:
    """The 32 lanes' scalar values as one vector, lane ``i`` in element ``i``."""
    vector = ir.Constant(ir.VectorType(values[0].type, PLANE_WIDTH), None)
    for lane, value in enumerate(values):
        vector = b.insert_element(vector, value, ir.Constant(lt.I32, lane))
    return vector


def vector_lanes(b: ir.IRBuilder, vector: ir.Value) -> list[ir.Value]:
    """Element ``i`` of a 32-lane vector as lane ``i``'s scalar value."""
    return [b.extract_element(vector, ir.Constant(lt.I32, lane)) for lane in range(PLANE_WIDTH)]


def _lane_indices(sources: list[int]) -> ir.Constant:
    """A ``shufflevector`` mask: element ``i`` of the result is element ``sources[i]``."""
    return ir.Constant(ir.VectorType(lt.I32, PLANE_WIDTH), sources)


def plane_collective(
    lw: KernelLowering, kind: str, scan: str | None, value: ir.Value, elem: ElemType, *, uniform: bool = False
) -> ir.Value:
    """Reduce (``scan=None``) or scan (``"inclusive"``/``"exclusive"``) ``value`` over the active lanes.

    ``uniform``: the whole plane is known to be here; only the full-plane form, no ``activemask``.
    """
    if uniform:
        return _full_plane(lw, kind, scan, value, elem)
    b = lw.builder
    mask = active_mask(lw)
    identity = _identity(kind, elem, value.type)
    lane = lw.builtins.get("unit_pos_plane") or _laneid(lw)
    full, partial, join = lw.new_block("plane.full"), lw.new_block("plane.partial"), lw.new_block("plane.join")
    b.cbranch(b.icmp_unsigned("==", mask, FULL_MASK), full, partial)

    b.position_at_end(full)
    full_result = _full_plane(lw, kind, scan, value, elem)
    full_end = b.block
    b.branch(join)

    # Partial mask: walk the set bits of the mask; every active lane runs the same iterations.
    b.position_at_end(partial)
    header, body = lw.new_block("plane.walk"), lw.new_block("plane.step")
    b.branch(header)
    b.position_at_end(header)
    remaining = b.phi(lt.I32, name="remaining")
    partial_acc = b.phi(value.type, name="partial")
    remaining.add_incoming(mask, partial)
    partial_acc.add_incoming(identity, partial)
    b.cbranch(b.icmp_unsigned("!=", remaining, ir.Constant(lt.I32, 0)), body, join)
    b.position_at_end(body)
    source = lw.call("llvm.cttz.i32", lt.I32, [remaining, ir.Constant(lt.I1, 1)])
    combined = _combine(lw, kind, partial_acc, shuffle(lw, "idx", value, source, mask), elem)
    if scan is not None:
        include = b.icmp_unsigned("<" if scan == "exclusive" else "<=", source, lane)
        combined = b.select(include, combined, partial_acc)
    partial_acc.add_incoming(combined, b.block)
    remaining.add_incoming(b.and_(remaining, b.sub(remaining, ir.Constant(lt.I32, 1))), b.block)
    b.branch(header)

    b.position_at_end(join)
    result = b.phi(value.type)
    result.add_incoming(full_result, full_end)
    result.add_incoming(partial_acc, header)
    return result


def _laneid(lw: KernelLowering) -> ir.Value:
    return sreg(lw, "laneid")


# -- votes and moves -------------------------------------------------------------------------------------
_MOVE_MODE = {"broadcast": "idx", "shuffle": "idx", "shuffle_xor": "bfly", "shuffle_up": "up", "shuffle_down": "down"}


def _vote(lw: KernelLowering, kind: str, predicate: ir.Value, mask: ir.Value) -> ir.Value:
    return lw.target.vote(lw, kind, predicate, mask)


def _match(lw: KernelLowering, kind: str, value: ir.Value, elem: ElemType, mask: ir.Value) -> ir.Value:
    """match.any.sync / match.all.sync over the lanes of ``mask``; floats compare their bits."""
    if elem.is_float:
        value = lw.builder.bitcast(value, ir.IntType(elem.bits))
    return lw.target.match(lw, kind, value, mask)


def _mask(lw: KernelLowering, op: ops.PlaneOp) -> ir.Value:
    """``0xffffffff`` for a collective the whole plane reaches (``uniform``), else ``activemask``."""
    return FULL_MASK if op.uniform else active_mask(lw)


def lower_plane(lw: KernelLowering, inst: Instruction) -> None:
    """plane_<op>: reductions, scans, votes, elect and moves."""
    op = inst.operation
    assert isinstance(op, ops.PlaneOp)
    b = lw.builder
    kind = op.name.removeprefix("plane_")
    if kind == "elect":
        lw.define(inst.out, lw.target.elect(lw, _mask(lw, op)))
        return
    assert op.value is not None
    value = lw.value(op.value)
    elem = op.value.elem
    if kind in ("all", "any"):
        mask = _mask(lw, op)
        lw.define(inst.out, map_lanes(lw, lambda p: _vote(lw, kind, p, mask), [value], value.type))
    elif kind == "ballot":
        bits = _vote(lw, "ballot", value, _mask(lw, op))
        assert inst.out is not None
        if inst.out.type.is_line:
            vec_t = lt.item_type(inst.out.type)
            bits = b.insert_element(lt.splat(vec_t, 0), bits, ir.Constant(lt.I32, 0))
        lw.define(inst.out, bits)
    elif kind in ("match_any", "match_all"):
        lw.define(inst.out, _match(lw, kind, value, elem, _mask(lw, op)))
    elif kind in _MOVE_MODE:
        assert op.arg is not None  # shuffles carry a lane or offset (verified)
        arg = as_u32(lw, lw.value(op.arg), op.arg)
        lw.define(inst.out, shuffle(lw, _MOVE_MODE[kind], value, arg, _mask(lw, op)))
    else:  # sum, max, ..., inclusive_sum, exclusive_prod, ...
        scan, _, reduce_kind = kind.rpartition("_")

        def collect(values: list[ir.Value], elem: ElemType) -> list[ir.Value]:
            return [plane_collective(lw, reduce_kind, scan or None, values[0], elem, uniform=op.uniform)]

        lw.define(inst.out, _widened(lw, op, [value], collect)[0])


# The collectives ``plane_reduction_lanes`` computes for a whole plane at once.
LANEWISE = (
    ops.PlaneSum,
    ops.PlaneProd,
    ops.PlaneMin,
    ops.PlaneMax,
    ops.PlaneInclusiveSum,
    ops.PlaneExclusiveSum,
    ops.PlaneInclusiveProd,
    ops.PlaneExclusiveProd,
)


def _widened(
    lw: KernelLowering,
    op: ops.PlaneOp,
    values: list[ir.Value],
    compute: Callable[[list[ir.Value], ElemType], list[ir.Value]],
) -> list[ir.Value]:
    """``compute`` on ``values`` of ``op``'s type; f16/bf16 accumulate in f32 and round once, as the interp does."""
    assert op.value is not None
    elem = op.value.elem
    if elem not in (F16, BF16):
        return compute(values, elem)
    b = lw.builder
    narrow_t = values[0].type
    wide_t = ir.VectorType(lt.F32_TYPE, narrow_t.count) if op.value.type.is_line else lt.F32_TYPE
    results = compute([b.fpext(v, wide_t) for v in values], F32)
    return [b.fptrunc(r, narrow_t) for r in results]


def source_lane(b: ir.IRBuilder, mode: str, lane: ir.Value, arg: ir.Value) -> ir.Value:
    """The lane ``shfl.sync.<mode>`` reads for ``lane`` (i32) with source or offset ``arg`` (u32): ``idx`` reads
    ``arg & 31``; ``up``/``down``/``bfly`` read ``lane - arg``/``lane + arg``/``lane ^ arg``, or ``lane``
    itself when that falls outside the plane (the interp's rule, and PTX's with the whole plane one segment)."""
    plane = ir.Constant(lt.I32, PLANE_WIDTH)
    if mode == "idx":
        return b.and_(arg, ir.Constant(lt.I32, PLANE_WIDTH - 1))
    if mode == "up":
        source, valid = b.sub(lane, arg), b.icmp_unsigned(">=", lane, arg)
    elif mode == "down":
        source = b.add(lane, arg)
        valid = b.icmp_unsigned("<", source, plane)
    else:  # bfly
        source = b.xor(lane, arg)
        valid = b.icmp_unsigned("<", source, plane)
    return b.select(valid, source, lane)


def _literal_source(mode: str, lane: int, arg: int) -> int:
    """``source_lane`` for a literal lane and source or offset (``arg`` as the u32 it is)."""
    arg &= 0xFFFFFFFF
    if mode == "idx":
        return arg & (PLANE_WIDTH - 1)
    if mode == "up":
        return lane - arg if lane >= arg else lane
    source = lane + arg if mode == "down" else lane ^ arg
    return source if source < PLANE_WIDTH else lane


def vote_from_ballot(b: ir.IRBuilder, kind: str, ballot: ir.Value, mask: ir.Value) -> ir.Value:
    """``vote.sync.<kind>`` over ``mask`` from the lanes' predicate bits: the ballot (of ``mask``'s lanes), or
    whether every lane of ``mask`` (``all``) or any (``any``) holds."""
    ballot = b.and_(ballot, mask)
    if kind == "ballot":
        return ballot
    if kind == "all":
        return b.icmp_unsigned("==", ballot, mask)
    return b.icmp_unsigned("!=", ballot, ir.Constant(lt.I32, 0))


# The moves and votes ``exchange_lanes`` computes for a whole plane at once (scalar operands).
EXCHANGES = (
    ops.PlaneBroadcast,
    ops.PlaneShuffle,
    ops.PlaneShuffleXor,
    ops.PlaneShuffleUp,
    ops.PlaneShuffleDown,
    ops.PlaneAll,
    ops.PlaneAny,
    ops.PlaneBallot,
)


def exchange_lanes(
    lw: KernelLowering, inst: Instruction, values: list[ir.Value], args: list[ir.Value] | None
) -> list[ir.Value]:
    """The results of the whole-plane move or vote ``inst`` (one of ``EXCHANGES``, scalar operands) for its 32
    lanes' values and (for moves) u32 source lanes or offsets: the shuffled form's results, lane by lane."""
    b = lw.builder
    kind = inst.operation.name.removeprefix("plane_")
    if kind in ("all", "any", "ballot"):
        ballot: ir.Value = ir.Constant(lt.I32, 0)
        for lane, predicate in enumerate(values):
            ballot = b.or_(ballot, b.shl(b.zext(predicate, lt.I32), ir.Constant(lt.I32, lane)))
        result = vote_from_ballot(b, kind, ballot, FULL_MASK)
        if kind == "ballot" and inst.out is not None and inst.out.type.is_line:  # CubeCL's four words: ballot, zeros
            result = b.insert_element(lt.splat(lt.item_type(inst.out.type), 0), result, ir.Constant(lt.I32, 0))
        return [result] * PLANE_WIDTH
    assert args is not None
    literal = all(isinstance(arg, ir.Constant) for arg in args)
    offsets = {arg.constant for arg in args} if literal else set()
    scalar = not isinstance(values[0].type, ir.VectorType)  # a line's lanes cannot be vector elements
    if scalar and len(offsets) == 1 and len(args) == PLANE_WIDTH:
        # One literal source or offset for the whole plane: the moves are a fixed permutation of the lanes,
        # one ``shufflevector`` of a 32-lane vector (``source_lane``'s rule, on literals).
        (arg,) = offsets
        sources = [_literal_source(_MOVE_MODE[kind], lane, int(arg)) for lane in range(PLANE_WIDTH)]
        vector = lane_vector(b, values)
        return vector_lanes(b, b.shuffle_vector(vector, vector, _lane_indices(sources)))
    array_t = ir.ArrayType(values[0].type, PLANE_WIDTH)
    scratch = lw.alloca(array_t, "plane_values")
    zero = ir.Constant(lt.I32, 0)
    for lane, value in enumerate(values):
        b.store(value, b.gep(scratch, [zero, ir.Constant(lt.I32, lane)], inbounds=True, source_etype=array_t))
    results = []
    for lane, arg in enumerate(args):
        source = source_lane(b, _MOVE_MODE[kind], ir.Constant(lt.I32, lane), arg)
        element = b.gep(scratch, [zero, source], inbounds=True, source_etype=array_t)
        results.append(b.load(element, typ=values[0].type))
    return results


def plane_reduction_lanes(lw: KernelLowering, op: ops.PlaneOp, values: list[ir.Value]) -> list[ir.Value]:
    """The results of the whole-plane reduction or scan ``op`` (one of ``LANEWISE``) for its 32 lanes' values."""
    scan, _, reduce_kind = op.name.removeprefix("plane_").rpartition("_")
    return _widened(lw, op, values, lambda vs, e: full_plane_lanes(lw, reduce_kind, scan or None, vs, e))


lowers(*ops.PLANE_OPS)(lower_plane)
