"""TMA copies and mbarriers on the host target: calls into the runtime's emulation, one call per instruction.

The GPU lowering (``cubepy.compiler.lower_tma``) emits NVVM intrinsics; on the host each of these operations
becomes a call of ``cubepy_host_op(params, cube, unit, site, operands)``, which the cpu runtime binds to
``cubepy.runtime.cpu.emulation``: the same tensor-map walk, swizzle and out-of-bounds fill
(``cubepy.runtime.interp.tma``) and the same barrier state machine (``cubepy.runtime.interp.mbarrier``) the
interp runs.  ``site`` indexes the kernel's ``HostCall`` table (what the instruction is: its kind, the
barrier and shared memory it names and where they sit in the cube's shared block, its source line);
``operands`` points to the instruction's run-time values widened to i64 (the tensor map's address in the
parameter block, the slice offset and length, coordinates, tokens, byte counts).  The call returns the
token of an arrival and 1/0 for "this wait is done".

Copies complete when they are issued, as on the interp.  A wait that is not done suspends the unit
(state ``AT_MBARRIER``, the call site in its ``published`` word) and tests again when the driver resumes
it; the driver resumes waiting units after the barrier state changed (``CTX_EPOCH`` counts the calls that
change it) and reports a deadlock when it did not.  A barrier's state is a ``mbarrier.ROW_BYTES`` row in
its slot of the shared block, zeroed by the driver when a cube starts; an array of n barriers has n rows one
after another, and an operation on one of its elements passes the element's index as its last operand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import attrs
import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import unsigned_index
from cubepy.errors import CompileError
from cubepy.ir import Instruction, Variable, VarKind, ops
from cubepy.ir.variable import describe_memory

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering
    from cubepy.compiler.targets.host import HostTarget

HOST_OP_SYMBOL = "cubepy_host_op"
I64 = lt.I64
I32 = lt.I32
PTR = lt.GENERIC_PTR


@attrs.frozen
class HostCall:
    """One TMA or mbarrier instruction of a host kernel, as the runtime's emulation needs to know it."""

    # init | arrive | arrive_expect_tx | expect_tx | wait | wait_parity | load | load_im2col | store,
    # named_arrive | named_wait (named barriers: barrier_offset is their rows' offset), print (debug_print),
    # or oob_read | oob_write: a checked access that missed, reported under sanitize=True
    kind: str
    name: str  # the operation's name (tma_load, barrier_wait, ...)
    where: str  # "file:line: " or ""
    text: str  # the instruction, for error messages
    barrier: str = ""  # repr of the barrier variable
    barrier_offset: int = -1  # its (first) state row in the shared block
    barrier_count: int = 1  # the barriers of an array: rows one after another
    indexed: bool = False  # the element's index is the last operand (an array's element)
    smem: str = ""  # repr of the shared memory a copy reads or writes
    smem_offset: int = 0
    smem_capacity: int = 0  # items
    item: int = 0  # bytes per item
    rank: int = 0
    mode: str = ""  # tiled | im2col
    memory: str = ""  # an out-of-bounds report's memory, as messages name it ("global buffer 0 (x)")


def _call(lw: KernelLowering, kind: str, inst: Instruction, operands: list[ir.Value], **static: Any) -> ir.Value:
    """Record ``inst`` in the target's call table and call the runtime with its operands; the i64 result."""
    target: HostTarget = lw.target  # type: ignore[assignment]
    op = inst.operation
    barrier = getattr(op, "barrier", None)
    if barrier is not None and barrier.kind is VarKind.BARRIER:
        static.update(
            barrier=repr(barrier),
            barrier_offset=target.placed[(VarKind.BARRIER, barrier.id)],
            barrier_count=barrier.length or 1,
        )
        index = getattr(op, "index", None)
        if index is not None:  # an element of an array: its index follows the other operands
            operands = [*operands, _wide(lw, index)]
            static.update(indexed=True)
    smem = getattr(op, "smem", None)
    if smem is not None:
        static.update(
            smem=repr(smem),
            smem_offset=target.placed[(VarKind.SHARED, smem.id)],
            smem_capacity=smem.length or 0,
            item=smem.type.size,
        )
    where = f"{inst.loc.file}:{inst.loc.line}: " if inst.loc is not None else ""
    target.host_calls.append(HostCall(kind, op.name, where, str(inst), **static))
    site = ir.Constant(I32, len(target.host_calls) - 1)
    b = lw.builder
    block = lw.alloca_builder.alloca(ir.ArrayType(I64, max(len(operands), 1)), name=f"{kind}.operands")
    block.type = PTR  # opaque pointers, as the rest of the lowering
    for index, value in enumerate(operands):
        b.store(value, b.gep(block, [ir.Constant(I64, index)], source_etype=I64))
    fn = lw.function
    result = lw.call(HOST_OP_SYMBOL, I64, [fn.args[0], fn.args[1], target.unit, site, block])
    return result


def _wide(lw: KernelLowering, var: Variable) -> ir.Value:
    """An integer operand as i64, extended by its signedness (as the interp reads it)."""
    value = lw.value(var)
    if value.type == lt.I1:
        return lw.builder.zext(value, I64)
    return unsigned_index(lw, value, var)


def bump_epoch(lw: KernelLowering) -> None:
    """Count a change of some barrier's state (the driver re-tests waiting units after one)."""
    target: HostTarget = lw.target  # type: ignore[assignment]
    target.bump_epoch(lw)


def lower_barrier_init(lw: KernelLowering, inst: Instruction) -> None:
    """Elected units initialise the barrier; then the whole cube syncs (as ``bar.sync 0`` on the GPU)."""
    op = cast(ops.BarrierInit, inst.operation)
    b = lw.builder
    init, join = lw.new_block("mbarrier.init"), lw.new_block("mbarrier.ready")
    b.cbranch(lw.value(op.is_elected), init, join)
    b.position_at_end(init)
    _call(lw, "init", inst, [_wide(lw, op.arrival_count)])
    bump_epoch(lw)
    b.branch(join)
    b.position_at_end(join)
    lw.target.sync_cube(lw)


def lower_barrier_arrive(lw: KernelLowering, inst: Instruction) -> None:
    """One arrival; the token is the phase arrived on."""
    lw.define(inst.out, _call(lw, "arrive", inst, []))
    bump_epoch(lw)


def lower_barrier_arrive_expect_tx(lw: KernelLowering, inst: Instruction) -> None:
    """Expect the bytes, then ``arrivals`` arrivals."""
    op = cast(ops.BarrierArriveExpectTx, inst.operation)
    lw.define(inst.out, _call(lw, "arrive_expect_tx", inst, [_wide(lw, op.arrivals), _wide(lw, op.tx_bytes)]))
    bump_epoch(lw)


def lower_barrier_expect_tx(lw: KernelLowering, inst: Instruction) -> None:
    """Raise the current phase's expected bytes."""
    op = cast(ops.BarrierExpectTx, inst.operation)
    _call(lw, "expect_tx", inst, [_wide(lw, op.tx_bytes)])
    bump_epoch(lw)


def wait_until_done(lw: KernelLowering, inst: Instruction, kind: str, operands: list[ir.Value], **static: Any) -> None:
    """Test the phase; while it is not complete, suspend (state AT_MBARRIER) and test again when resumed."""
    target: HostTarget = lw.target  # type: ignore[assignment]
    b = lw.builder
    test, waiting, done = lw.new_block("mbarrier.test"), lw.new_block("mbarrier.suspend"), lw.new_block("mbarrier.done")
    b.branch(test)
    b.position_at_end(test)
    result = _call(lw, kind, inst, operands, **static)
    b.cbranch(b.icmp_unsigned("!=", result, ir.Constant(I64, 0)), done, waiting)
    b.position_at_end(waiting)
    target.suspend_on_mbarrier(lw, len(target.host_calls) - 1)
    b.branch(test)
    b.position_at_end(done)


def lower_barrier_wait(lw: KernelLowering, inst: Instruction) -> None:
    """Wait until the token's phase has completed."""
    wait_until_done(lw, inst, "wait", [_wide(lw, cast(ops.BarrierWait, inst.operation).token)])


def lower_barrier_wait_parity(lw: KernelLowering, inst: Instruction) -> None:
    """Wait until the current phase's parity differs from the operand's."""
    wait_until_done(lw, inst, "wait_parity", [_wide(lw, cast(ops.BarrierWaitParity, inst.operation).phase)])


def lower_barrier_try_wait_parity(lw: KernelLowering, inst: Instruction) -> None:
    """One test of the phase; a unit that finds it incomplete suspends once, so a spinning loop lets others run.

    (On the GPU a try_wait may time out and give false as well; the driver resumes the unit after some
    barrier state changed, or reports the deadlock when nothing can change it.)
    """
    target: HostTarget = lw.target  # type: ignore[assignment]
    op = cast(ops.BarrierTryWaitParity, inst.operation)
    b = lw.builder
    result = _call(lw, "wait_parity", inst, [_wide(lw, op.phase)])
    done = b.icmp_unsigned("!=", result, ir.Constant(I64, 0))
    waiting, join = lw.new_block("mbarrier.try.suspend"), lw.new_block("mbarrier.try.done")
    b.cbranch(done, join, waiting)
    b.position_at_end(waiting)
    target.suspend_on_mbarrier(lw, len(target.host_calls) - 1)
    b.branch(join)
    b.position_at_end(join)
    lw.define(inst.out, done)


def _named_operands(lw: KernelLowering, inst: Instruction) -> tuple[list[ir.Value], dict[str, int]]:
    from cubepy.compiler.targets.host_abi import NAMED_KEY

    op = cast("ops.NamedBarrierSync | ops.NamedBarrierArrive", inst.operation)
    target: HostTarget = lw.target  # type: ignore[assignment]
    return [_wide(lw, op.barrier_id), _wide(lw, op.units)], {"barrier_offset": target.placed[NAMED_KEY]}


def lower_named_barrier_arrive(lw: KernelLowering, inst: Instruction) -> None:
    """``bar.arrive``: count this unit's arrival and go on."""
    operands, static = _named_operands(lw, inst)
    _call(lw, "named_arrive", inst, operands, **static)
    bump_epoch(lw)


def lower_named_barrier_sync(lw: KernelLowering, inst: Instruction) -> None:
    """``bar.sync``: count this unit's arrival (the call returns the barrier's generation), then wait until that
    generation has completed, as an mbarrier wait does."""
    operands, static = _named_operands(lw, inst)
    generation = _call(lw, "named_arrive", inst, operands, **static)
    bump_epoch(lw)
    wait_until_done(lw, inst, "named_wait", [operands[0], generation], **static)


def lower_debug_print(lw: KernelLowering, inst: Instruction) -> None:
    """Pass the arguments, promoted as C's varargs (floats as f64 bits), to the runtime, which formats the line
    and prints the launch's lines when it ends."""
    from cubepy.compiler.lower_print import promoted_argument

    op = cast(ops.DebugPrint, inst.operation)
    b = lw.builder
    operands = []
    for var in op.args:
        value = promoted_argument(lw, var)
        if isinstance(value.type, ir.DoubleType):
            value = b.bitcast(value, I64)
        elif value.type != I64:
            value = b.zext(value, I64)
        operands.append(value)
    _call(lw, "print", inst, operands)


def _copy_operands(lw: KernelLowering, op: ops.TmaLoad | ops.TmaLoadIm2col | ops.TmaStore) -> list[ir.Value]:
    tensor_map = lw.builder.ptrtoint(lw.params[(VarKind.TENSOR_MAP, op.tensor_map.id)], I64)
    return [tensor_map, _wide(lw, op.offset), _wide(lw, op.length), *(_wide(lw, c) for c in op.coords)]


def lower_tma_load(lw: KernelLowering, inst: Instruction) -> None:
    """Copy the box into shared memory now and credit the barrier with its bytes."""
    op = cast(ops.TmaLoad, inst.operation)
    if op.multicast is not None:
        raise CompileError(
            f"op {op.name} is not supported by back end cpu: a multicast mask needs a cluster launch, which the "
            "cpu runtime does not run; use the interp runtime"
        )
    _call(lw, "load", inst, _copy_operands(lw, op), rank=op.rank, mode="tiled")
    bump_epoch(lw)


def lower_tma_load_im2col(lw: KernelLowering, inst: Instruction) -> None:
    """The im2col walk into shared memory now; the barrier is credited with its bytes."""
    op = cast(ops.TmaLoadIm2col, inst.operation)
    operands = _copy_operands(lw, op) + [_wide(lw, o) for o in op.offsets]
    _call(lw, "load_im2col", inst, operands, rank=op.rank, mode="im2col")
    bump_epoch(lw)


def lower_tma_store(lw: KernelLowering, inst: Instruction) -> None:
    """Write the shared box to global memory now (the store completes at issue)."""
    op = cast(ops.TmaStore, inst.operation)
    _call(lw, "store", inst, _copy_operands(lw, op), rank=op.rank, mode="tiled")


def lower_group(lw: KernelLowering, inst: Instruction) -> None:
    """Nothing: stores complete at issue, so committing and waiting on bulk groups has nothing left to do."""


HOST_LOWERINGS = {
    ops.BarrierInit: lower_barrier_init,
    ops.BarrierArrive: lower_barrier_arrive,
    ops.BarrierArriveExpectTx: lower_barrier_arrive_expect_tx,
    ops.BarrierExpectTx: lower_barrier_expect_tx,
    ops.BarrierWait: lower_barrier_wait,
    ops.BarrierWaitParity: lower_barrier_wait_parity,
    ops.BarrierTryWaitParity: lower_barrier_try_wait_parity,
    ops.SyncCluster: lambda lw, inst: lw.target.sync_cube(lw),  # a cluster of one cube
    ops.DebugPrint: lower_debug_print,
    ops.NamedBarrierArrive: lower_named_barrier_arrive,
    ops.NamedBarrierSync: lower_named_barrier_sync,
    ops.TmaLoad: lower_tma_load,
    ops.TmaLoadIm2col: lower_tma_load_im2col,
    ops.TmaStore: lower_tma_store,
    ops.TmaGroupCommit: lower_group,
    ops.TmaGroupWait: lower_group,
    ops.TmaGroupWaitRead: lower_group,
}


def report_out_of_bounds(
    lw: KernelLowering, inst: Instruction, memory: Variable, index: ir.Value, length: ir.Value, access: str
) -> None:
    """A checked access that missed: the runtime raises the out-of-bounds report (unit, index, line)."""
    param = next((p for p in lw.definition.params if p.var == memory), None)
    label = describe_memory(memory, param.name if param is not None else None)
    _call(lw, f"oob_{access}", inst, [index, length], memory=label)
