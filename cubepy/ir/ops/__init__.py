"""IR operations, one module per family; every class carries its ``OpRecord`` (see ``record.py``)."""

from cubepy.ir.ops import arith, branch, cmma, memory, plane, sync, tma
from cubepy.ir.ops.arith import *  # noqa: F403  (Unary/Binary/Compare members: Exp ... Ge; Fma, Cast ...)
from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.branch import BRANCH_OPS, Break, Continue, If, IfElse, Loop, RangeLoop, Return, Switch
from cubepy.ir.ops.cmma import *  # noqa: F403  (tensor-core fragments: CmmaFill ... CmmaCast)
from cubepy.ir.ops.memory import (
    ATOMIC_OPS,
    METADATA_OPS,
    AtomicAdd,
    AtomicAnd,
    AtomicCompareExchange,
    AtomicExchange,
    AtomicLoad,
    AtomicMax,
    AtomicMin,
    AtomicOp,
    AtomicOr,
    AtomicStore,
    AtomicSub,
    AtomicXor,
    BufferLen,
    ExtractLane,
    Index,
    IndexAssign,
    InsertLane,
    Len,
    Metadata,
    Rank,
    Shape,
    Stride,
)
from cubepy.ir.ops.plane import *  # noqa: F403  (plane collectives: PlaneSum ... PlaneShuffleDown)
from cubepy.ir.ops.record import GIVEN, OpRecord, OpTable, all_operations, declare, lookup
from cubepy.ir.ops.sync import SyncCube, SyncPlane, SyncProxyShared
from cubepy.ir.ops.tma import *  # noqa: F403  (barriers and TMA copies: BarrierInit ... TmaGroupWaitRead)

__all__ = [  # noqa: F405
    "ATOMIC_OPS", "BRANCH_OPS", "GIVEN", "METADATA_OPS", "AtomicAdd", "AtomicAnd", "AtomicCompareExchange",
    "AtomicExchange", "AtomicLoad", "AtomicMax", "AtomicMin", "AtomicOp", "AtomicOr", "AtomicStore", "AtomicSub",
    "AtomicXor", "Break", "BufferLen", "Continue", "ExtractLane", "If", "IfElse", "Index", "IndexAssign",
    "InsertLane", "Len", "Loop", "Metadata", "OpRecord", "OpTable", "Operation", "Rank", "RangeLoop", "Return",
    "Shape", "Stride", "Switch", "SyncCube", "SyncPlane", "SyncProxyShared", "all_operations", "arith", "branch",
    "cmma", "declare", "lookup", "memory", "plane", "sync", "tma",
    *arith.__all__, *cmma.__all__, *plane.__all__, *tma.__all__,
]
