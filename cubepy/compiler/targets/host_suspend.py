"""Suspension points of the host target: where a unit waits for others, and the plane collectives it waits at.

A host unit that may wait is an LLVM switched-resume coroutine (``cubepy.compiler.targets.host``); this module
holds what decides and emits its waits.  ``suspension_kinds`` names the kinds of wait a kernel has (``barrier``,
``plane``, ``mbarrier``), which choose the coroutine and the driver's scheduler parts (``host_driver``);
``TokenType`` is the ``token`` LLVM's coroutine intrinsics take.  ``HostSuspensions``, a base of ``HostTarget``,
is every target-layer operation that suspends: each stores its state (``AT_BARRIER``, ``AT_PLANE``,
``AT_MBARRIER``) and, under ``plane``, its site in the cube context, then suspends.  The plane collectives
(``activemask``, shuffles, votes, ``match``, ``elect``, the reducing cube barriers) publish their word first and,
when the driver resumes the units released together, read their partners' words from the snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.targets.host_abi import AT_BARRIER, AT_MBARRIER, AT_PLANE, CTX_EPOCH
from cubepy.ir import ops, walk
from cubepy.ir.variable import PLANE_WIDTH

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering
    from cubepy.ir import KernelDefinition
    from cubepy.ir.ops import Operation


class TokenType(ir.Type):  # type: ignore[misc]  # llvmlite ships no types
    """LLVM's ``token`` type (llvmlite has none): what ``llvm.coro.id`` returns."""

    def _to_string(self) -> str:
        return "token"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenType)

    def __hash__(self) -> int:
        return hash("token")


TOKEN = TokenType()
TOKEN_NONE = ir.FormattedConstant(TOKEN, "none")
I8 = ir.IntType(8)
I64 = lt.I64
I32 = lt.I32


_WAITS: dict[str, tuple[type[Operation], ...]] = {
    # barrier_init syncs the cube; a cluster is one cube; the predicate barriers reduce at the release
    "barrier": (ops.SyncCube, ops.BarrierInit, ops.SyncCluster, ops.SyncCubeCount, ops.SyncCubeAnd, ops.SyncCubeOr),
    "plane": (
        (ops.SyncPlane, ops.PlaneOp)
        + (ops.MmaSync, ops.Ldmatrix, ops.Stmatrix)  # plane collectives (``host_mma``)
        + (ops.CmmaFill, ops.CmmaLoad, ops.CmmaStore, ops.CmmaExecute, ops.CmmaCast)
    ),
    # named_barrier_sync waits as an mbarrier wait does: test, suspend, test again after a state change
    "mbarrier": (
        (ops.BarrierWait, ops.BarrierWaitParity, ops.BarrierTryWaitParity, ops.NamedBarrierSync)
        + (ops.WgmmaMmaAsync,)  # a warpgroup collective: its units wait until all 128 published
    ),
}


def suspension_kinds(definition: KernelDefinition) -> frozenset[str]:
    """Where a unit may have to wait for others: ``barrier``, ``plane`` and/or ``mbarrier`` (empty: never)."""
    found = {type(inst.operation) for inst in walk(definition.body)}
    return frozenset(kind for kind, waits in _WAITS.items() if any(issubclass(cls, waits) for cls in found))


def waits_only_at_split_points(definition: KernelDefinition) -> bool:
    """Whether every operation a unit waits at is a barrier or a plane collective (``host_fission`` decides
    which of those it can split at): no mbarrier, tensor-core collective or reducing barrier."""
    waits = tuple(cls for group in _WAITS.values() for cls in group)
    splittable = (ops.SyncCube, ops.SyncPlane, ops.PlaneOp)
    return all(
        isinstance(inst.operation, splittable) or not isinstance(inst.operation, waits)
        for inst in walk(definition.body)
    )


class HostSuspensions:
    """The target-layer operations at which a host unit suspends (a base of ``HostTarget``, which sets the cube
    context's pointers below in its prologue and the unit's index, lane and plane in ``_set_unit``)."""

    suspends: frozenset[str]
    unit: ir.Value
    lane: ir.Value
    plane_base: ir.Value
    state: ir.Value  # the unit's words in the cube context: its state, site, released mask and published word
    site: ir.Value
    mask: ir.Value
    publish: ir.Value
    snapshot: ir.Value  # the plane's published words as the driver released them
    _site: int
    _ret_block: ir.Block | None
    _cleanup_block: ir.Block

    # -- suspension points ---------------------------------------------------------------------------
    def _suspend(self, lw: KernelLowering, state: int) -> None:
        b = lw.builder
        self._site += 1
        if "plane" in self.suspends:  # only the plane release orders units by site
            b.store(ir.Constant(I32, self._site), self.site)
        b.store(ir.Constant(I32, state), self.state)
        result = lw.call("llvm.coro.suspend", I8, [TOKEN_NONE, ir.Constant(lt.I1, 0)])
        resume = lw.new_block("resumed")
        switch = b.switch(result, self._ret_block)
        switch.add_case(ir.Constant(I8, 0), resume)
        switch.add_case(ir.Constant(I8, 1), self._cleanup_block)
        b.position_at_end(resume)

    def sync_cube(self, lw: KernelLowering) -> None:
        """Suspend until every unit of the cube that has not returned waits at a barrier."""
        self._suspend(lw, AT_BARRIER)

    def sync_plane(self, lw: KernelLowering, mask: ir.Value | None = None) -> None:
        """Suspend as a plane collective: the plane's units here resume together (``mask`` names them)."""
        self._suspend(lw, AT_PLANE)

    def suspend_on_mbarrier(self, lw: KernelLowering, call_site: int) -> None:
        """Suspend at an mbarrier wait that is not done; ``call_site`` (in the published word) names it."""
        lw.builder.store(ir.Constant(I64, call_site), self.publish)
        self._suspend(lw, AT_MBARRIER)

    def bump_epoch(self, lw: KernelLowering) -> None:
        """Count one change of barrier state in the cube context."""
        b = lw.builder
        where = b.gep(b.function.args[1], [ir.Constant(I64, CTX_EPOCH)], source_etype=I8)
        b.store(b.add(b.load(where, typ=I32), ir.Constant(I32, 1)), where)

    def active_mask(self, lw: KernelLowering) -> ir.Value:
        """Suspend; the driver writes the mask of the plane's units released together."""
        self._suspend(lw, AT_PLANE)
        return lw.builder.load(self.mask, typ=I32, name="active_mask")

    def _exchange(self, lw: KernelLowering, word: ir.Value) -> None:
        lw.builder.store(lw.builder.zext(word, I64), self.publish)
        self._suspend(lw, AT_PLANE)

    def _partner(self, lw: KernelLowering, lane: ir.Value) -> ir.Value:
        b = lw.builder
        index = b.zext(b.add(self.plane_base, lane), I64)
        return b.trunc(b.load(b.gep(self.snapshot, [index], source_etype=I64), typ=I64), I32)

    def shuffle_word(self, lw: KernelLowering, mode: str, word: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
        """PTX ``shfl.sync`` source-lane rules over the snapshot; a source outside ``mask`` yields the own word."""
        from cubepy.compiler.lower_plane import source_lane

        b = lw.builder
        self._exchange(lw, word)
        lane = self.lane
        source = source_lane(b, mode, lane, arg)
        in_mask = b.trunc(b.lshr(mask, b.and_(source, ir.Constant(I32, PLANE_WIDTH - 1))), lt.I1)
        source = b.select(in_mask, source, lane)
        own = b.load(self.publish, typ=I64)
        moved = self._partner(lw, source)
        return b.select(b.icmp_unsigned("==", source, lane), b.trunc(own, I32), moved)

    def vote(self, lw: KernelLowering, kind: str, predicate: ir.Value, mask: ir.Value) -> ir.Value:
        """The ballot of ``mask``'s published predicates; all/any from it."""
        from cubepy.compiler.lower_plane import vote_from_ballot

        b = lw.builder
        self._exchange(lw, b.zext(predicate, I32))
        ballot = ir.Constant(I32, 0)
        for lane in range(PLANE_WIDTH):
            bit = b.icmp_unsigned("!=", self._partner(lw, ir.Constant(I32, lane)), ir.Constant(I32, 0))
            ballot = b.or_(ballot, b.shl(b.zext(bit, I32), ir.Constant(I32, lane)))
        return vote_from_ballot(b, kind, ballot, mask)

    def match(self, lw: KernelLowering, kind: str, bits: ir.Value, mask: ir.Value) -> ir.Value:
        """Publish the value's bits; the lanes of ``mask`` holding the same bits (all of them, or 0 for ``all``)."""
        b = lw.builder
        wide = b.zext(bits, I64) if bits.type.width < 64 else bits
        b.store(wide, self.publish)
        self._suspend(lw, AT_PLANE)
        same = ir.Constant(I32, 0)
        for lane in range(PLANE_WIDTH):
            index = b.zext(b.add(self.plane_base, ir.Constant(I32, lane)), I64)
            partner = b.load(b.gep(self.snapshot, [index], source_etype=I64), typ=I64)
            bit = b.zext(b.icmp_unsigned("==", partner, wide), I32)
            same = b.or_(same, b.shl(bit, ir.Constant(I32, lane)))
        same = b.and_(same, mask)
        if kind == "match_any":
            return same
        return b.select(b.icmp_unsigned("==", same, mask), mask, ir.Constant(I32, 0))

    def sync_cube_reduce(self, lw: KernelLowering, kind: str, predicate: ir.Value) -> ir.Value:
        """Publish the predicate and wait at the cube barrier; the driver leaves ``count << 32 | arrived`` of the
        units it released in each one's snapshot word."""
        b = lw.builder
        b.store(b.zext(predicate, I64), self.publish)
        self._suspend(lw, AT_BARRIER)
        word = b.load(b.gep(self.snapshot, [b.zext(self.unit, I64)], source_etype=I64), typ=I64)
        count = b.trunc(b.lshr(word, ir.Constant(I64, 32)), I32)
        arrived = b.trunc(word, I32)
        if kind == "popc":
            return count
        if kind == "and":
            return b.zext(b.icmp_unsigned("==", count, arrived), I32)
        return count

    def elect(self, lw: KernelLowering, mask: ir.Value) -> ir.Value:
        """The lowest unit of ``mask``."""
        first = lw.call("llvm.cttz.i32", I32, [mask, ir.Constant(lt.I1, 1)])
        return lw.builder.icmp_unsigned("==", self.lane, first)
