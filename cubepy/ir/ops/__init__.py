"""IR operations, one module per family; every class carries its ``OpRecord`` (see ``record.py``)."""

from cubepy.ir.ops import arith, async_copy, branch, cluster, cmma, debug, memory, mma, plane, sync, tma, wgmma
from cubepy.ir.ops.arith import *  # noqa: F403  (Unary/Binary/Compare members Exp ... Ge; Fma, Cast ...)
from cubepy.ir.ops.async_copy import *  # noqa: F403  (cp.async: AsyncCopy, AsyncCommitGroup, AsyncWaitGroup)
from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.branch import BRANCH_OPS, Break, Continue, If, IfElse, Loop, RangeLoop, Return, Switch
from cubepy.ir.ops.cluster import *  # noqa: F403  (clusters: SyncCluster, ClusterLoad/Store, BarrierArriveCluster)
from cubepy.ir.ops.cmma import *  # noqa: F403  (tensor-core fragments: CmmaFill ... CmmaCast)
from cubepy.ir.ops.debug import DebugPrint
from cubepy.ir.ops.memory import *  # noqa: F403  (index, lanes, metadata Len ... Rank, atomics AtomicAdd ...)
from cubepy.ir.ops.mma import *  # noqa: F403  (register-fragment tensor cores: MmaSync, Ldmatrix, Stmatrix)
from cubepy.ir.ops.plane import *  # noqa: F403  (plane collectives: PlaneSum ... PlaneShuffleDown)
from cubepy.ir.ops.record import GIVEN, Check, Checker, OpRecord, OpTable, all_operations, declare, lookup
from cubepy.ir.ops.sync import *  # noqa: F403  (barriers, predicate barriers, fences)
from cubepy.ir.ops.tma import *  # noqa: F403  (barriers and TMA copies: BarrierInit ... TmaGroupWaitRead)
from cubepy.ir.ops.wgmma import *  # noqa: F403  (warpgroup MMA: WgmmaDescriptor ... WgmmaWaitGroup)

__all__ = [
    "BRANCH_OPS",
    "GIVEN",
    "Break",
    "Check",
    "Checker",
    "Continue",
    "DebugPrint",
    "If",
    "IfElse",
    "Loop",
    "OpRecord",
    "OpTable",
    "Operation",
    "RangeLoop",
    "Return",
    "Switch",
    "all_operations",
    "arith",
    "async_copy",
    "branch",
    "cluster",
    "cmma",
    "debug",
    "declare",
    "lookup",
    "memory",
    "mma",
    "plane",
    "sync",
    "tma",
    "wgmma",
]
__all__ += arith.__all__
__all__ += async_copy.__all__
__all__ += cluster.__all__
__all__ += cmma.__all__
__all__ += memory.__all__
__all__ += mma.__all__
__all__ += plane.__all__
__all__ += sync.__all__
__all__ += tma.__all__
__all__ += wgmma.__all__
