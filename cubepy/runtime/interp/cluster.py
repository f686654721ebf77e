"""Clusters in the interp: the cluster barrier, distributed shared memory and remote mbarrier arrivals.

A chunk holds whole clusters (``Launch.cluster_alignment``), so a cube's peers are cubes of the same chunk:
``Topology.peer_cube`` maps (cube, rank) to the peer's row of the shared arena and of every mbarrier's
state.  ``sync_cluster`` is a barrier over every live unit of the cluster's cubes (units that returned do
not count, as for ``sync_cube``); it orders shared accesses across the cluster for the race checker too.
A peer rank outside the cluster is an ``out-of-bounds`` error whether or not the access is checked (the GPU
faults); a peer index out of range behaves as a local access does (checked: 0 / dropped, reported under the
sanitizer).  The race checker tracks each cube's own accesses; accesses to a peer's shared memory are not
race-checked (documented).

A cube's shared memory (and its mbarriers) go away when its units exit, so a peer access must happen before
the peer exits.  A peer access (``peer`` read or write, ``arrive_cluster``) to a cube whose units have all
returned or finished is reported whatever the sanitizer says (a schedule that runs cubes apart meets it).
Under the sanitizer, each peer access stays *pending* on the target cube until something orders it before
the target's exit: a ``sync_cluster`` release that the target's live units took part in, or a completed
mbarrier wait of the target's units (the consumer-release pattern).  An access still pending when the chunk
ends is reported as a ``data race`` with the peer's exit, whatever the schedule (``PeerExits``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import Instruction, ops
from cubepy.ir.variable import describe_memory
from cubepy.runtime.interp import mbarrier, sync, tma_exec
from cubepy.runtime.interp.groups import Wait
from cubepy.runtime.interp.memory import locate
from cubepy.runtime.interp.registry import blocking, implements
from cubepy.runtime.interp.values import Mask

if TYPE_CHECKING:
    from cubepy.ir import Variable
    from cubepy.runtime.interp.executor import Chunk


OP_FAMILIES = ("cluster",)  # the IR op families handled here


class ClusterBarrier:
    """The cluster barrier of every cluster of a chunk: who arrived, releases so far."""

    def __init__(self, ctx: Chunk) -> None:
        _, leader = ctx.topology.cluster_position()
        cluster_of_cube = np.unique(leader, return_inverse=True)[1].astype(np.int64)
        self.clusters = int(cluster_of_cube.max()) + 1
        self.cluster_of_cube = cluster_of_cube
        self.cluster_of_lane = np.repeat(cluster_of_cube, ctx.topology.units)
        self.arrived = np.zeros(ctx.lanes, dtype=bool)
        self.generation = np.zeros(self.clusters, dtype=np.int64)
        self.last_sync: dict[int, Instruction] = {}  # chunk cube -> the last sync_cluster its units reached

    def per_lane(self) -> np.ndarray:
        """Each lane's cluster's release count."""
        return self.generation[self.cluster_of_lane]

    def release(self, ctx: Chunk) -> None:
        """Release every cluster whose live units have all arrived."""
        live = ~(ctx.returned | ctx.finished)
        count = self.clusters
        some = np.bincount(self.cluster_of_lane[self.arrived], minlength=count) > 0
        missing = np.bincount(self.cluster_of_lane[live & ~self.arrived], minlength=count) > 0
        complete = some & ~missing
        if not complete.any():
            return
        self.generation[complete] += 1
        self.arrived[complete[self.cluster_of_lane]] = False
        sync.release_for_sanitizer(ctx, complete[self.cluster_of_cube])
        exits = ctx.state.peer_exits
        if exits is not None:  # the live cubes of a released cluster exit after every earlier peer access
            live_cube = live.reshape(-1, ctx.topology.units).any(axis=1)
            exits.ordered(complete[self.cluster_of_cube] & live_cube)


def _state(ctx: Chunk) -> ClusterBarrier:
    state = ctx.state.cluster_barrier
    if state is None:
        state = ctx.state.cluster_barrier = ClusterBarrier(ctx)
    return state


class ClusterBarrierWait(Wait):
    """Units waiting at the cluster barrier for the release after ``generation``."""

    def __init__(self, inst: Instruction, state: ClusterBarrier, generation: np.ndarray) -> None:
        self.inst = inst
        self.state = state
        self.generation = generation  # per lane: its cluster's release count when it arrived

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The waiting lanes whose cluster was released (releasing it if the units still away have left)."""
        self.state.release(ctx)
        return bits & (self.state.per_lane() > self.generation)

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """How many units of the first waiting cluster have arrived."""
        state = self.state
        cluster = state.cluster_of_lane[int(np.argmax(bits))]
        members = state.cluster_of_lane == cluster
        return (
            f"sync_cluster can never complete: {int((state.arrived & members).sum())} of the cluster's "
            f"{int(members.sum())} units arrived, the others wait elsewhere"
        )


@implements(ops.SyncCluster)
@blocking
def sync_cluster(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Barrier of a cluster: every live unit of its cubes arrives before any goes on."""
    state = _state(ctx)
    bits = mask.bits
    for cube in np.unique(np.flatnonzero(bits) // ctx.topology.units).tolist():
        state.last_sync[cube] = inst
    state.arrived |= bits
    before = state.per_lane().copy()
    state.release(ctx)
    waiting = bits & ~(state.per_lane() > before)
    if waiting.any():
        ctx.block(waiting, ClusterBarrierWait(inst, state, before))


def _peers(ctx: Chunk, inst: Instruction, rank_var: Variable, mask: Mask, what: str) -> np.ndarray:
    """Per lane: the chunk cube of the peer its ``rank`` names (an out-of-bounds error outside the cluster)."""
    ranks = np.broadcast_to(np.asarray(ctx.read(rank_var)), (ctx.lanes,)).astype(np.int64)
    size = int(np.prod(ctx.topology.cluster))
    bad = mask.bits & ((ranks < 0) | (ranks >= size))
    if bad.any():
        lane = int(np.argmax(bad))
        ctx.fail(
            inst,
            f"out-of-bounds peer access: cube rank {int(ranks[lane])} is outside the cluster of {size} cubes "
            f"(ClusterDim{ctx.topology.cluster})",
            lane,
            kind=SanitizerKind.OUT_OF_BOUNDS,
        )
    cubes = ctx.topology.lane_of_cube()
    peers = ctx.topology.peer_cube(cubes, np.where(mask.bits, ranks, 0))
    remote = mask.bits & (peers != cubes)
    if remote.any():
        _check_peer_alive(ctx, inst, remote, peers, ranks, what)
        exits = peer_exits(ctx)
        if exits is not None:
            exits.accessed(ctx, inst, remote, peers, ranks, what)
    return peers


def _check_peer_alive(
    ctx: Chunk, inst: Instruction, remote: np.ndarray, peers: np.ndarray, ranks: np.ndarray, what: str
) -> None:
    """Report a peer access to a cube whose units have all exited (its shared memory is gone)."""
    gone = np.asarray((ctx.returned | ctx.finished).reshape(-1, ctx.topology.units).all(axis=1))
    bad = remote & gone[peers]
    if bad.any():
        lane = int(np.argmax(bad))
        peer = int(peers[lane])
        ctx.fail(
            inst,
            f"data race: {what} of peer cube {ctx.topology.cube_pos_of(peer * ctx.topology.units)} (cluster rank "
            f"{int(ranks[lane])}) after every unit of that cube exited, so its shared memory is gone; "
            f"{_peer_story(ctx, peer)}",
            lane,
            kind=SanitizerKind.DATA_RACE,
        )


def _peer_story(ctx: Chunk, peer: int) -> str:
    """Where the peer's last ``sync_cluster`` is, and the fix."""
    last = _state(ctx).last_sync.get(peer)
    where = (
        f"the peer's last sync_cluster is at {last.loc.file}:{last.loc.line}"
        if last is not None and last.loc is not None
        else "the peer reached no sync_cluster"
    )
    return f"{where}; add cp.sync_cluster() after the last peer access so that no cube exits before it"


class PeerExits:
    """Under the sanitizer: per target cube, the first peer access into it not yet ordered before its exit."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[Instruction, int, int, str]] = {}  # cube -> (inst, lane, rank, what)

    def accessed(
        self, ctx: Chunk, inst: Instruction, remote: np.ndarray, peers: np.ndarray, ranks: np.ndarray, what: str
    ) -> None:
        """Record the peer accesses of the lanes of ``remote`` (the first per target cube is enough)."""
        lanes = np.flatnonzero(remote)
        targets, first = np.unique(peers[lanes], return_index=True)
        for cube, lane in zip(targets.tolist(), lanes[first].tolist()):
            self.pending.setdefault(cube, (inst, lane, int(ranks[lane]), what))

    def ordered(self, cubes: np.ndarray) -> None:
        """The cubes of ``cubes`` (bool per chunk cube) exit after every peer access recorded so far."""
        for cube in np.flatnonzero(cubes).tolist():
            self.pending.pop(cube, None)

    def waited(self, ctx: Chunk, lanes: np.ndarray) -> None:
        """Units of ``lanes`` completed an mbarrier wait: their cubes exit after every peer access so far."""
        if lanes.size:
            cubes = np.zeros(ctx.topology.cubes, dtype=bool)
            cubes[lanes // ctx.topology.units] = True
            self.ordered(cubes)

    def check(self, ctx: Chunk) -> None:
        """At the end of the chunk: report a peer access that nothing ordered before its target's exit."""
        if not self.pending:
            return
        cube, (inst, lane, rank, what) = min(self.pending.items(), key=lambda item: item[1][1])
        ctx.fail(
            inst,
            f"data race: {what} of peer cube {ctx.topology.cube_pos_of(cube * ctx.topology.units)} (cluster rank "
            f"{rank}) is not ordered before that cube exits (its shared memory goes away then): no sync_cluster "
            f"that the peer takes part in, and no mbarrier wait of the peer, comes after it; {_peer_story(ctx, cube)}",
            lane,
            kind=SanitizerKind.DATA_RACE,
        )


def peer_exits(ctx: Chunk) -> PeerExits | None:
    """The chunk's pending peer accesses, made on first use; None when the sanitizer is off.

    ``tma_exec`` finds them as ``ctx.state.peer_exits`` too: a completed mbarrier wait orders them.
    """
    if ctx.sanitizer is None:
        return None
    exits = ctx.state.peer_exits
    if exits is None:
        exits = ctx.state.peer_exits = PeerExits()
        ctx.state.end_checks.append(exits.check)
    return exits


@implements(ops.ClusterLoad)
def cluster_load(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = memory[index] in the peer cube's shared memory."""
    op = cast(ops.ClusterLoad, inst.operation)
    peers = _peers(ctx, inst, op.rank, mask, f"a read of {describe_memory(op.memory)}")
    ref = ctx.memory(op.memory)
    idx, valid = locate(ctx, inst, ref, ctx.read(op.index), mask, op.checked, "read")
    values = ref.items[peers, np.broadcast_to(idx, (ctx.lanes,))]
    if valid is not True:
        values = np.where(np.reshape(valid, (-1,) + (1,) * (values.ndim - 1)), values, 0)
    assert inst.out is not None  # the record gives it a result
    ctx.write(inst.out, values, mask)


@implements(ops.ClusterStore)
def cluster_store(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """memory[index] = value in the peer cube's shared memory (lanes in order: the last write wins)."""
    op = cast(ops.ClusterStore, inst.operation)
    peers = _peers(ctx, inst, op.rank, mask, f"a write of {describe_memory(op.memory)}")
    ref = ctx.memory(op.memory)
    idx, valid = locate(ctx, inst, ref, ctx.read(op.index), mask, op.checked, "write")
    lanes = mask.bits if valid is True else mask.bits & valid
    shape = (ctx.lanes,) + ((ref.line,) if ref.line > 1 else ())
    values = np.broadcast_to(np.asarray(ctx.read(op.value), dtype=ref.items.dtype), shape)
    targets, items = peers[lanes], np.broadcast_to(idx, (ctx.lanes,))[lanes]
    ref.items[targets, items] = values[lanes]
    if ctx.sanitizer is not None:  # the peer's bytes are initialized (peer accesses are not race-checked)
        item_bytes = ref.items.dtype.itemsize * ref.line
        first = (ref.shared_offset or 0) + items.astype(np.int64) * item_bytes
        ctx.sanitizer.written[targets[:, None], first[:, None] + np.arange(item_bytes)] = True


@implements(ops.BarrierArriveCluster)
def barrier_arrive_cluster(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """One arrival per unit on the barrier of the peer cube its rank names."""
    op = cast(ops.BarrierArriveCluster, inst.operation)
    peers = _peers(ctx, inst, op.rank, mask, f"an arrival on {op.barrier!r}")
    lanes = np.flatnonzero(mask.bits)
    state = tma_exec.barrier_state(ctx, op.barrier)
    ones = np.ones(lanes.size, dtype=np.int64)
    targets = tma_exec.barrier_rows(ctx, inst, op.barrier, op.index, lanes, peers[lanes])
    name = tma_exec.barrier_name(op.barrier, targets, op.index is not None)
    tma_exec.run_barrier_step(
        ctx, inst, lanes, lambda: mbarrier.arrive(state, name, targets, ones, np.zeros_like(ones))
    )
