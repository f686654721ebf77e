"""What the interp's op families keep per chunk: ``ChunkState``, one typed attribute per piece of state.

A chunk (``executor.Chunk``) holds one ``ChunkState`` as ``ctx.state``.  Each attribute belongs to one op
family module, which makes it on first use (None or empty until then), so a kernel that never runs the
family pays nothing for it.  The hooks let one family check the accesses another family's handlers make
(a started wgmma's operands against shared writes and local reads) without either importing the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from cubepy.ir import Instruction, Variable
    from cubepy.runtime.interp.async_copy import AsyncCopyRaces, CopyGroups
    from cubepy.runtime.interp.async_races import AsyncRaces
    from cubepy.runtime.interp.cluster import ClusterBarrier, PeerExits
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.mbarrier import BarrierState
    from cubepy.runtime.interp.sync import CubeBarrier
    from cubepy.runtime.interp.values import Mask
    from cubepy.runtime.interp.warp_specialize import NamedBarrierTable
    from cubepy.runtime.interp.wgmma import WarpgroupArrivals
    from cubepy.runtime.interp.wgmma_async import WgmmaState

    # ``check_local_read(ctx, inst, array, index, mask)``: before ``mask``'s lanes read ``array[index]``.
    LocalReadHook = Callable[[Chunk, Instruction, Variable, np.ndarray | np.generic, Mask], None]
    # ``check_shared_write(ctx, inst, lanes, rows, byte)``: before ``lanes`` write shared ``(rows, byte)``.
    SharedWriteHook = Callable[[Chunk, Instruction, np.ndarray, np.ndarray, np.ndarray], None]


class ChunkState:
    """The per-chunk state of the interp's op families, each made by its family on first use."""

    def __init__(self) -> None:
        # sync: barrier 0 of every cube (arrivals, releases, reductions)
        self.cube_barrier: CubeBarrier | None = None
        # tma_exec (and warp_specialize, cluster): the state of each mbarrier, by barrier variable id
        self.mbarriers: dict[int, BarrierState] = {}
        # async_races, sanitizer only: which unit may touch the shared bytes of TMA loads
        self.async_races: AsyncRaces | None = None
        # async_copy: each lane's open and committed cp.async groups
        self.copy_groups: CopyGroups | None = None
        # async_copy, sanitizer only: shared bytes of cp.async copies their unit has not waited for
        self.async_copy_races: AsyncCopyRaces | None = None
        # warp_specialize: the 16 named barriers of every cube
        self.named_barriers: NamedBarrierTable | None = None
        # warp_specialize: (try_wait instruction id, cube) -> (barrier row, lanes let go) while all are stuck
        self.try_wait_idle: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        # wgmma: units of each warpgroup that reached a wgmma instruction, once groups run apart
        self.wgmma_arrivals: WarpgroupArrivals | None = None
        # wgmma_async: committed groups and started, not yet retired wgmmas
        self.wgmma: WgmmaState | None = None
        # cluster: the cluster barrier of every cluster of the chunk
        self.cluster_barrier: ClusterBarrier | None = None
        # cluster, sanitizer only: peer accesses not yet ordered before their target cube's exit
        self.peer_exits: PeerExits | None = None
        # -- hooks: None unless a family sets them (the memory handlers test one attribute per access)
        # wgmma_async, sanitizer only: memory.index calls it for every local-array read
        self.check_local_read: LocalReadHook | None = None
        # wgmma_async, sanitizer only: the shared sanitizer and TMA loads call it for every shared write
        self.check_shared_write: SharedWriteHook | None = None
        # wgmma_async, sanitizer only: sync calls it with the released cubes (bool per chunk cube)
        self.on_cube_release: Callable[[np.ndarray], None] | None = None
        # cluster, sanitizer only: whole-run checks the executor calls when the chunk ends
        self.end_checks: list[Callable[[Chunk], None]] = []
