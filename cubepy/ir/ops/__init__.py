"""IR operations, one module per family."""

from cubepy.ir.ops.arith import (
    BINARY_OPS,
    COMPARE_OPS,
    UNARY_OPS,
    Assign,
    Binary,
    Bitcast,
    Cast,
    Clamp,
    Compare,
    Fma,
    Select,
    Unary,
)
from cubepy.ir.ops.base import NamedOperation, Operation
from cubepy.ir.ops.memory import (
    ATOMIC_OPS,
    METADATA_KINDS,
    AtomicCompareExchange,
    AtomicOp,
    ExtractLane,
    Index,
    IndexAssign,
    InsertLane,
    Metadata,
)
from cubepy.ir.ops.sync import PLANE_OPS, PlaneOp, SyncCube, SyncPlane, SyncProxyShared
from cubepy.ir.ops.tma import *  # noqa: F403  (barriers and TMA copies: BarrierInit ... TmaGroupWaitRead)

# isort: split
# cmma registers verifier rules on import, which needs the families above loaded first.
from cubepy.ir.ops.cmma import *  # noqa: F403  (tensor-core fragments: CmmaFill ... CmmaCast)
from cubepy.ir.ops.debug import DebugPrint

__all__ = [
    "ATOMIC_OPS", "BINARY_OPS", "COMPARE_OPS", "METADATA_KINDS", "PLANE_OPS", "UNARY_OPS",
    "Assign", "AtomicCompareExchange", "AtomicOp", "Binary", "Bitcast", "Cast", "Clamp", "Compare", "DebugPrint",
    "ExtractLane", "Fma", "Index", "IndexAssign", "InsertLane", "Metadata", "NamedOperation",
    "Operation", "PlaneOp", "Select", "SyncCube", "SyncPlane", "SyncProxyShared", "Unary",
]
