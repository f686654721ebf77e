"""Asynchronous barriers (mbarrier) and TMA bulk tensor copies, with their verifier rules.

Barriers are kernel-level variables of kind BARRIER (declared in ``KernelDefinition.barriers``); a
barrier token is a ``u64``.  A BARRIER variable of ``length`` n > 1 is an array of n barriers: ``barrier_init``
initialises every element, every other operation names one element by its ``index`` operand (a u32, which may
differ from unit to unit), which an array requires and a single barrier takes as 0 or leaves out.  A shared-memory operand of a copy is a pair (SHARED variable, element
offset into it), plus the slice's length
in elements (the box must fit it); coordinates are ``i32`` in the driver's order (dimension 0 innermost), im2col
offsets are ``u16`` W first.  Group waits take a compile-time count (the PTX instruction's immediate).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation, fixed
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.types import BOOL, I32, U16, U32, U64, Type
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

__all__ = [
    "TMA_RULES",
    "BarrierArrive",
    "BarrierArriveExpectTx",
    "BarrierExpectTx",
    "BarrierInit",
    "BarrierTryWaitParity",
    "BarrierWait",
    "BarrierWaitParity",
    "TmaGroupCommit",
    "TmaGroupWait",
    "TmaGroupWaitRead",
    "TmaLoad",
    "TmaLoadIm2col",
    "TmaStore",
]

TOKEN_TYPE = Type(U64)
COORD_TYPE = Type(I32)
OFFSET_TYPE = Type(U16)
COUNT_TYPE = Type(U32)
TILED_RANKS = range(1, 6)
IM2COL_RANKS = range(3, 6)
# Rules this family adds to the verifier (each has a negative test in tests/ir/test_tma_ops.py).
TMA_RULES = (
    "not-barrier",
    "barrier-index",
    "not-tensor-map",
    "not-shared",
    "tma-rank",
    "tma-operand-type",
    "bad-immediate",
)


@attrs.frozen(repr=False)
class BarrierInit(Operation):
    """The units where ``is_elected`` holds initialise ``barrier`` for ``arrival_count`` arrivals; then the cube syncs."""

    barrier: Variable
    arrival_count: Variable
    is_elected: Variable


@attrs.frozen(repr=False)
class BarrierArrive(Operation):
    """out (token) = arrive once on ``barrier``."""

    barrier: Variable
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class BarrierArriveExpectTx(Operation):
    """out (token) = raise the expected transaction bytes by ``tx_bytes``, then arrive ``arrivals`` times."""

    barrier: Variable
    arrivals: Variable
    tx_bytes: Variable
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class BarrierExpectTx(Operation):
    """Raise the expected transaction bytes of the current phase by ``tx_bytes`` (no arrival)."""

    barrier: Variable
    tx_bytes: Variable
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class BarrierWait(Operation):
    """Block until the phase that ``token`` was taken in has completed."""

    barrier: Variable
    token: Variable
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class BarrierWaitParity(Operation):
    """Block until the phase of parity ``phase`` (0 or 1) has completed."""

    barrier: Variable
    phase: Variable
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class BarrierTryWaitParity(Operation):
    """out (bool) = whether the phase of parity ``phase`` (0 or 1) has completed; never blocks for long."""

    barrier: Variable
    phase: Variable
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class TmaLoad(Operation):
    """Tile-mode copy of the box at ``coords`` (innermost first) into ``smem[offset:offset+length]``, completing on ``barrier``.

    ``multicast`` (u32, cluster launches): a mask of cube ranks; the box lands at the same offset in the
    shared memory of every cube of the cluster whose bit is set, and completes on each one's ``barrier``.
    """

    barrier: Variable
    tensor_map: Variable
    smem: Variable
    offset: Variable
    length: Variable
    coords: tuple[Variable, ...]
    rank: int = 0
    multicast: Variable | None = None
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class TmaLoadIm2col(Operation):
    """Im2col-mode copy at ``coords`` {c, w[, h[, d]], n} with filter ``offsets`` (W first) into ``smem[offset..]``."""

    barrier: Variable
    tensor_map: Variable
    smem: Variable
    offset: Variable
    length: Variable
    coords: tuple[Variable, ...]
    offsets: tuple[Variable, ...]
    rank: int = 0
    index: Variable | None = None  # the element of a barrier array (u32); None for a single barrier


@attrs.frozen(repr=False)
class TmaStore(Operation):
    """Tile-mode copy of ``smem[offset..]`` to the box at ``coords`` (innermost first); joins the open bulk group."""

    tensor_map: Variable
    smem: Variable
    offset: Variable
    length: Variable
    coords: tuple[Variable, ...]
    rank: int = 0


@attrs.frozen(repr=False)
class TmaGroupCommit(Operation):
    """Close the open bulk group of this unit's TMA stores."""


@attrs.frozen(repr=False)
class TmaGroupWait(Operation):
    """Wait until at most ``pending`` committed bulk groups of this unit are still writing global memory."""

    pending: int = -1


@attrs.frozen(repr=False)
class TmaGroupWaitRead(Operation):
    """Wait until at most ``pending`` committed bulk groups still read their shared-memory source."""

    pending: int = -1


# -- verifier rules ----------------------------------------------------------------------------------------
def _barrier(c: Checker, inst: Instruction, var: Variable, index: Variable | None, *, whole: bool = False) -> None:
    if var.kind is not VarKind.BARRIER:
        c.fail("not-barrier", inst, f"{var!r} is a {var.kind.value}, expected a barrier")
    if c.kernel is not None and var not in c.kernel.barriers:
        c.fail("not-barrier", inst, f"{var!r} is not declared in the kernel's barriers")
    if not whole:  # barrier_init covers every element of an array
        check_barrier_index(c, inst, var, index)


def check_barrier_index(c: Checker, inst: Instruction, var: Variable, index: Variable | None) -> None:
    """Rule ``barrier-index``: an array's element is named by a u32 index, a constant one within the array."""
    count = var.length or 1
    if index is None:
        if count > 1:
            c.fail("barrier-index", inst, f"{var!r} is an array of {count} barriers; name the element by an index")
        return
    if index.type != COUNT_TYPE:
        c.fail("barrier-index", inst, f"barrier index {index!r} has type {index.type!r}, expected {COUNT_TYPE!r}")
    if index.is_constant and isinstance(index.value, int) and not 0 <= index.value < count:
        c.fail("barrier-index", inst, f"barrier index {index.value} is outside {var!r}, an array of {count}")


def _typed(c: Checker, inst: Instruction, what: str, var: Variable, expected: Type) -> None:
    if var.type != expected:
        c.fail("tma-operand-type", inst, f"{what} {var!r} has type {var.type!r}, expected {expected!r}")


def _no_out(c: Checker, inst: Instruction) -> None:
    if inst.out is not None:
        c.fail("bad-out", inst, f"{inst.op} has no result, got {inst.out!r}")


def _token_out(c: Checker, inst: Instruction) -> None:
    _typed(c, inst, "token result", c.need_out(inst), TOKEN_TYPE)


def _copy_operands(c: Checker, inst: Instruction, op: TmaLoad | TmaLoadIm2col | TmaStore, ranks: range) -> None:
    if op.tensor_map.kind is not VarKind.TENSOR_MAP:
        c.fail("not-tensor-map", inst, f"{op.tensor_map!r} is a {op.tensor_map.kind.value}, expected a tensor map")
    if op.smem.kind is not VarKind.SHARED:
        c.fail("not-shared", inst, f"{op.smem!r} is a {op.smem.kind.value}, expected shared memory")
    if op.smem.elem != op.tensor_map.elem:
        c.fail(
            "tma-operand-type", inst, f"shared memory of {op.smem.elem!r} with a tensor map of {op.tensor_map.elem!r}"
        )
    c.int_scalar(inst, "shared offset", op.offset)
    c.int_scalar(inst, "shared slice length", op.length)
    if op.rank not in ranks or len(op.coords) != op.rank:
        c.fail(
            "tma-rank",
            inst,
            f"rank {op.rank} with {len(op.coords)} coordinates; expected a rank in "
            f"[{ranks.start}, {ranks.stop - 1}] and one coordinate per dimension",
        )
    for k, coord in enumerate(op.coords):
        _typed(c, inst, f"coordinate {k}", coord, COORD_TYPE)


def _check_init(c: Checker, inst: Instruction, op: BarrierInit) -> None:
    _no_out(c, inst)
    _barrier(c, inst, op.barrier, None, whole=True)
    _typed(c, inst, "arrival count", op.arrival_count, COUNT_TYPE)
    _typed(c, inst, "is_elected", op.is_elected, Type(BOOL))


def _check_arrive(c: Checker, inst: Instruction, op: BarrierArrive) -> None:
    _barrier(c, inst, op.barrier, op.index)
    _token_out(c, inst)


def _check_arrive_expect_tx(c: Checker, inst: Instruction, op: BarrierArriveExpectTx) -> None:
    _barrier(c, inst, op.barrier, op.index)
    _typed(c, inst, "arrival count", op.arrivals, COUNT_TYPE)
    _typed(c, inst, "transaction bytes", op.tx_bytes, COUNT_TYPE)
    _token_out(c, inst)


def _check_expect_tx(c: Checker, inst: Instruction, op: BarrierExpectTx) -> None:
    _no_out(c, inst)
    _barrier(c, inst, op.barrier, op.index)
    _typed(c, inst, "transaction bytes", op.tx_bytes, COUNT_TYPE)


def _check_wait(c: Checker, inst: Instruction, op: BarrierWait) -> None:
    _no_out(c, inst)
    _barrier(c, inst, op.barrier, op.index)
    _typed(c, inst, "token", op.token, TOKEN_TYPE)


def _check_wait_parity(c: Checker, inst: Instruction, op: BarrierWaitParity) -> None:
    _no_out(c, inst)
    _barrier(c, inst, op.barrier, op.index)
    _typed(c, inst, "phase parity", op.phase, COUNT_TYPE)


def _check_try_wait_parity(c: Checker, inst: Instruction, op: BarrierTryWaitParity) -> None:
    _barrier(c, inst, op.barrier, op.index)
    _typed(c, inst, "phase parity", op.phase, COUNT_TYPE)
    _typed(c, inst, "result", c.need_out(inst), Type(BOOL))


def _check_load(c: Checker, inst: Instruction, op: TmaLoad) -> None:
    _no_out(c, inst)
    _barrier(c, inst, op.barrier, op.index)
    _copy_operands(c, inst, op, TILED_RANKS)
    if op.multicast is not None:
        _typed(c, inst, "multicast mask", op.multicast, COUNT_TYPE)


def _check_load_im2col(c: Checker, inst: Instruction, op: TmaLoadIm2col) -> None:
    _no_out(c, inst)
    _barrier(c, inst, op.barrier, op.index)
    _copy_operands(c, inst, op, IM2COL_RANKS)
    if len(op.offsets) != op.rank - 2:
        c.fail("tma-rank", inst, f"a rank-{op.rank} im2col copy takes {op.rank - 2} offsets, got {len(op.offsets)}")
    for k, offset in enumerate(op.offsets):
        _typed(c, inst, f"im2col offset {k}", offset, OFFSET_TYPE)


def _check_store(c: Checker, inst: Instruction, op: TmaStore) -> None:
    _no_out(c, inst)
    _copy_operands(c, inst, op, TILED_RANKS)


def _check_group(c: Checker, inst: Instruction, op: Operation) -> None:
    _no_out(c, inst)
    pending = getattr(op, "pending", 0)
    if isinstance(pending, bool) or not isinstance(pending, int) or not 0 <= pending <= 63:
        c.fail("bad-immediate", inst, f"{op.name} needs a compile-time group count in [0, 63], got {pending!r}")


_TOKEN = fixed(TOKEN_TYPE)
for _cls, _record in (
    (BarrierInit, OpRecord("barrier_init", "tma", checks=(_check_init,))),
    (BarrierArrive, OpRecord("barrier_arrive", "tma", result=_TOKEN, checks=(_check_arrive,))),
    (
        BarrierArriveExpectTx,
        OpRecord("barrier_arrive_expect_tx", "tma", result=_TOKEN, checks=(_check_arrive_expect_tx,)),
    ),
    (BarrierExpectTx, OpRecord("barrier_expect_tx", "tma", checks=(_check_expect_tx,))),
    (BarrierWait, OpRecord("barrier_wait", "tma", checks=(_check_wait,))),
    (BarrierWaitParity, OpRecord("barrier_wait_parity", "tma", checks=(_check_wait_parity,))),
    (
        BarrierTryWaitParity,
        OpRecord("barrier_try_wait_parity", "tma", result=fixed(Type(BOOL)), checks=(_check_try_wait_parity,)),
    ),
    (TmaLoad, OpRecord("tma_load", "tma", reads=("tensor_map",), writes=("smem",), checks=(_check_load,))),
    (
        TmaLoadIm2col,
        OpRecord("tma_load_im2col", "tma", reads=("tensor_map",), writes=("smem",), checks=(_check_load_im2col,)),
    ),
    (TmaStore, OpRecord("tma_store", "tma", reads=("smem",), writes=("tensor_map",), checks=(_check_store,))),
    (TmaGroupCommit, OpRecord("tma_group_commit", "tma", checks=(_check_group,))),
    (TmaGroupWait, OpRecord("tma_group_wait", "tma", checks=(_check_group,))),
    (TmaGroupWaitRead, OpRecord("tma_group_wait_read", "tma", checks=(_check_group,))),
):
    declare(_record)(_cls)
