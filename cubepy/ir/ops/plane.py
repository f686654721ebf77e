"""Plane (warp) collectives: reductions and scans, votes, and moves between units of a plane."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation, fixed, same_as
from cubepy.ir.ops.record import GIVEN, Check, Checker, OpRecord, ResultRule, derive
from cubepy.ir.types import BOOL, U32, Type
from cubepy.ir.variable import Variable

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction


@attrs.frozen(repr=False)
class PlaneOp(Operation):
    """A plane (warp) collective; ``arg`` is the lane/offset of moves, unused otherwise.

    ``uniform``: the whole plane always reaches it together (set by the ``plane_uniform`` pass,
    ``cubepy.ir.uniformity``), so back ends may use the full-plane form without the active-mask test.
    """

    value: Variable | None = None
    arg: Variable | None = None
    uniform: bool = False


def _needs_value(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, PlaneOp)
    if op.value is None:
        c.fail("type-mismatch", inst, f"{op.name} needs a value")


def _bool_value(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, PlaneOp) and op.value is not None
    if not op.value.elem.is_bool:
        c.fail("elem-kind", inst, f"{op.name} needs bool, got {op.value.type!r}")


def _ballot(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, PlaneOp) and op.value is not None
    if op.value.type != Type(BOOL) or c.need_out(inst).type.elem != U32:
        c.fail("type-mismatch", inst, "plane_ballot takes a bool and gives u32 (line 1 or 4)")


def _needs_lane(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, PlaneOp)
    if op.arg is None:
        c.fail("bad-index", inst, f"{op.name} needs a lane or offset")
    c.int_scalar(inst, "lane", op.arg)


def _match_value(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, PlaneOp) and op.value is not None
    if op.value.type.is_line or op.value.elem.is_bool or op.value.elem.bits not in (32, 64):
        c.fail("type-mismatch", inst, f"{op.name} compares a scalar of 32 or 64 bits, got {op.value.type!r}")


def _plane(
    kind: str, doc: str, *, result: ResultRule | object = None, checks: tuple[Check, ...] = (_needs_value,)
) -> type[PlaneOp]:
    rule = result if result is not None else same_as("value")
    record = OpRecord(f"plane_{kind}", "plane", result=rule, checks=checks, doc=doc)  # type: ignore[arg-type]
    cls = derive(PlaneOp, "Plane" + "".join(p.capitalize() for p in kind.split("_")), record, __name__)
    assert issubclass(cls, PlaneOp)
    return cls


PlaneSum = _plane("sum", "The sum over the plane's active units.")
PlaneProd = _plane("prod", "The product over the plane's active units.")
PlaneMin = _plane("min", "The minimum over the plane's active units.")
PlaneMax = _plane("max", "The maximum over the plane's active units.")
PlaneInclusiveSum = _plane("inclusive_sum", "The sum over this and the lower active units.")
PlaneExclusiveSum = _plane("exclusive_sum", "The sum over the lower active units.")
PlaneInclusiveProd = _plane("inclusive_prod", "The product over this and the lower active units.")
PlaneExclusiveProd = _plane("exclusive_prod", "The product over the lower active units.")
PlaneAll = _plane("all", "Whether the value holds on every active unit.", checks=(_needs_value, _bool_value))
PlaneAny = _plane("any", "Whether the value holds on any active unit.", checks=(_needs_value, _bool_value))
PlaneBroadcast = _plane("broadcast", "The value of unit arg.", checks=(_needs_value, _needs_lane))
PlaneShuffle = _plane("shuffle", "The value of unit arg (any unit per unit).", checks=(_needs_value, _needs_lane))
PlaneShuffleXor = _plane("shuffle_xor", "The value of unit (own ^ arg).", checks=(_needs_value, _needs_lane))
PlaneShuffleUp = _plane("shuffle_up", "The value of unit (own - arg).", checks=(_needs_value, _needs_lane))
PlaneShuffleDown = _plane("shuffle_down", "The value of unit (own + arg).", checks=(_needs_value, _needs_lane))
PlaneBallot = _plane(
    "ballot",
    "A bit mask of the active units where the value holds (u32, or 4 x u32).",
    result=GIVEN,
    checks=(_needs_value, _ballot),
)
PlaneElect = _plane("elect", "True on exactly one active unit of the plane.", result=fixed(Type(BOOL)), checks=())
PlaneMatchAny = _plane(
    "match_any",
    "The mask of the plane's active units whose value has the same bits as this unit's (u32; match.any.sync).",
    result=fixed(Type(U32)),
    checks=(_needs_value, _match_value),
)
PlaneMatchAll = _plane(
    "match_all",
    "The mask of the plane's active units when they all hold the same bits, else 0 (u32; match.all.sync).",
    result=fixed(Type(U32)),
    checks=(_needs_value, _match_value),
)

PLANE_OPS: tuple[type[PlaneOp], ...] = (
    PlaneSum,
    PlaneProd,
    PlaneMin,
    PlaneMax,
    PlaneInclusiveSum,
    PlaneExclusiveSum,
    PlaneInclusiveProd,
    PlaneExclusiveProd,
    PlaneAll,
    PlaneAny,
    PlaneBallot,
    PlaneElect,
    PlaneBroadcast,
    PlaneShuffle,
    PlaneShuffleXor,
    PlaneShuffleUp,
    PlaneShuffleDown,
    PlaneMatchAny,
    PlaneMatchAll,
)
PLANE_MOVES: tuple[type[PlaneOp], ...] = (
    PlaneBroadcast,
    PlaneShuffle,
    PlaneShuffleXor,
    PlaneShuffleUp,
    PlaneShuffleDown,
)

__all__ = [
    "PLANE_MOVES",
    "PLANE_OPS",
    "PlaneOp",
    "PlaneSum",
    "PlaneProd",
    "PlaneMin",
    "PlaneMax",
    "PlaneInclusiveSum",
    "PlaneExclusiveSum",
    "PlaneInclusiveProd",
    "PlaneExclusiveProd",
    "PlaneAll",
    "PlaneAny",
    "PlaneBallot",
    "PlaneElect",
    "PlaneBroadcast",
    "PlaneShuffle",
    "PlaneShuffleXor",
    "PlaneShuffleUp",
    "PlaneShuffleDown",
    "PlaneMatchAny",
    "PlaneMatchAll",
]
