"""Plane collectives between two stretches of the host's loop fission: each plane's 32 units at once.

A whole-plane reduction, scan, move, vote or election runs once per plane over its 32 units' values, with the
butterfly or Hillis-Steele combines of the shuffled form in the same order (``lower_plane.full_plane_lanes``),
so each unit gets the bits it gets there.  A value kept in the unit frame has the plane's 32 items side by side,
so an operand or a result kept there moves as one vector load or store of the plane's row, and a reduction,
scan or literal move of such a row is computed on the vector directly (``lower_plane.plane_row_result``);
LLVM does not merge 32 scalar moves into those itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import as_u32
from cubepy.compiler.lower_plane import (
    EXCHANGES,
    exchange_lanes,
    lane_vector,
    plane_reduction_lanes,
    plane_row_result,
    vector_lanes,
)
from cubepy.ir import VarKind, ops
from cubepy.ir.variable import PLANE_WIDTH

if TYPE_CHECKING:
    from cubepy.compiler.targets.host_fission import CubeLoops
    from cubepy.ir import Instruction, Variable

I32 = lt.I32


def lower_plane_collective(loops: CubeLoops, inst: Instruction) -> None:
    """``inst`` between two stretches: for each plane, its 32 units' operands from their frames, the shuffled
    form's results, each unit's result to its frame."""
    lw = loops.lw
    op = inst.operation
    assert isinstance(op, ops.PlaneOp)
    operand, offset = op.value, op.arg

    def plane(index: ir.Value) -> None:
        b = lw.builder
        first = b.mul(index, ir.Constant(I32, PLANE_WIDTH))
        operand_row = _plane_row(loops, operand, first)
        result_row = _plane_row(loops, inst.out, first)
        loaded = row = None
        if operand_row is not None:
            assert operand is not None
            row_type = _row_type(loops, operand)
            loaded = b.load(operand_row, typ=row_type, align=_row_align(loops, row_type))
            row = plane_row_result(lw, inst, loaded)
        if row is not None and result_row is not None:
            b.store(row, result_row, align=_row_align(loops, row.type))
            return
        values = [] if loaded is None else vector_lanes(b, loaded)
        args, units = [], []
        for lane in range(PLANE_WIDTH):
            unit = b.add(first, ir.Constant(I32, lane))
            loops.unit = unit
            loops.target.enter_unit(lw, unit)  # the value may be a unit's builtin
            if operand is not None and loaded is None:
                values.append(lw.value(operand))
            if offset is not None and row is None:
                args.append(as_u32(lw, lw.value(offset), offset))
            units.append(unit)
        if row is not None:
            results = vector_lanes(b, row)
        elif isinstance(op, ops.PlaneElect):  # the whole plane is there: its lowest lane is elected
            results = [ir.Constant(lt.I1, lane == 0) for lane in range(PLANE_WIDTH)]
        elif isinstance(op, EXCHANGES):
            results = exchange_lanes(lw, inst, values, args if offset is not None else None)
        else:
            results = plane_reduction_lanes(lw, op, values)
        if result_row is not None:
            vector = lane_vector(b, results)
            b.store(vector, result_row, align=_row_align(loops, vector.type))
            return
        for unit, result in zip(units, results):
            loops.unit = unit  # where ``define`` stores the unit's result
            lw.define(inst.out, result)

    if lw.debug is not None:
        lw.builder.debug_metadata = lw.debug.location(inst.loc)
    loops.counted(loops.units // PLANE_WIDTH, "plane", plane, vector=False)


def _row_type(loops: CubeLoops, var: Variable) -> ir.VectorType:
    return ir.VectorType(loops.types[(var.kind, var.id)], PLANE_WIDTH)


def _row_align(loops: CubeLoops, row: ir.VectorType) -> int:
    """A plane's row starts a multiple of ``32 * item`` bytes into one of the frame's aligned arrays."""
    item_bytes: int = row.element.get_abi_size(loops.target_data)
    return min(loops.ARRAY_ALIGN, PLANE_WIDTH * item_bytes)


def _plane_row(loops: CubeLoops, var: Variable | None, first: ir.Value) -> ir.Value | None:
    """Where the plane starting at unit ``first`` keeps ``var`` as 32 consecutive items, or None when it is not
    a frame-kept scalar of whole bytes (an ``i1`` is a byte in memory but a bit in a vector)."""
    if var is None or var.kind not in (VarKind.CONST, VarKind.MUT) or not loops.holds(var):
        return None
    if var.kind is VarKind.CONST and loops.recomputes(var):
        return None
    if var.kind is VarKind.MUT and var.id in loops.lw.slot_overrides:  # held in a register here
        return None
    item = loops.types[(var.kind, var.id)]
    if not isinstance(item, (ir.IntType, ir.HalfType, ir.FloatType, ir.DoubleType)):
        return None
    if isinstance(item, ir.IntType) and item.width % 8:
        return None
    loops.unit = first
    return loops.pointer(var)
