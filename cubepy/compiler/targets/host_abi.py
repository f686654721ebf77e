"""The host target's ABI with the cpu runtime: the per-cube context, unit states, and where memories live.

The runtime (``cubepy.runtime.cpu``) writes a cube context of ``CTX_BYTES`` before it calls the driver, and the
lowering (``host.py``, ``host_driver.py``) reads it at these offsets: both import them from here, so the layout
is declared once.  Shared memories and mbarrier rows sit at the offsets ``shared_layout`` gives; local arrays
beyond ``STACK_LOCAL_BYTES`` per unit live in a per-unit heap scratch (``heap_locals``).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.ir import VarKind, ops, walk

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering
    from cubepy.ir import KernelDefinition

PTR = lt.GENERIC_PTR
I64 = lt.I64

CubeAxis = ctypes.c_uint32  # one axis of a cube position or count


class CubeContext(ctypes.Structure):
    """The per-cube context: written by the runtime, read by the compiled code; its layout is declared only here.

    The per-unit arrays it points to are padded to a multiple of 32 units."""

    _fields_ = [
        ("shared", ctypes.c_void_p),  # the cube's shared block: shared memories, then mbarrier and named rows
        ("state", ctypes.c_void_p),  # i32 per unit: runnable, or where it waits (RUNNABLE, AT_BARRIER, ...)
        ("site", ctypes.c_void_p),  # i32 per unit: the plane primitive it waits at (increasing in program order)
        ("mask", ctypes.c_void_p),  # i32 per unit: the active mask its plane was released with
        ("publish", ctypes.c_void_p),  # i64 per unit: its published word (plane operand, vote, host call waited in)
        ("snapshot", ctypes.c_void_p),  # i64 per unit: the words its released plane reads partners from
        ("handles", ctypes.c_void_p),  # ptr per unit: its coroutine handle
        ("ctaid", CubeAxis * 3),  # the running cube's position (x, y, z), written by the driver per cube
        ("nctaid", CubeAxis * 3),  # the launch's cube count (x, y, z)
        ("epoch", ctypes.c_int32),  # barrier-state changes so far: the driver re-tests waiting units after one
        # The cube's fault: 0, or 1 + the unit found deadlocked at an mbarrier wait, or -1 when an emulated
        # operation raised; a context whose fault is set runs no more cubes.
        ("fault", ctypes.c_int32),
        # The per-unit coroutine frames (ptr per unit, null until the unit's first cube allocates it): a worker
        # reuses them cube after cube instead of an aligned_alloc/free pair per unit per cube; the runtime frees them.
        ("frames", ctypes.c_void_p),
    ]


# The fields' byte offsets, for the lowering's GEPs and the runtime's reads and writes of raw context bytes.
CTX_SHARED = CubeContext.shared.offset
CTX_STATE = CubeContext.state.offset
CTX_SITE = CubeContext.site.offset
CTX_MASK = CubeContext.mask.offset
CTX_PUBLISH = CubeContext.publish.offset
CTX_SNAPSHOT = CubeContext.snapshot.offset
CTX_HANDLES = CubeContext.handles.offset
CTX_CTAID = CubeContext.ctaid.offset
CTX_NCTAID = CubeContext.nctaid.offset
CTX_EPOCH = CubeContext.epoch.offset
CTX_FAULT = CubeContext.fault.offset
CTX_FRAMES = CubeContext.frames.offset
CTX_BYTES = ctypes.sizeof(CubeContext)
CTX_AXIS_BYTES = ctypes.sizeof(CubeAxis)  # axis a of ctaid (nctaid) is at CTX_CTAID (CTX_NCTAID) + a * this
RUNNABLE, AT_BARRIER, AT_PLANE, DONE, AT_MBARRIER = 0, 1, 2, 3, 4
BARRIER_ROW_BYTES = 40  # an mbarrier's emulated state (cubepy.runtime.interp.mbarrier.ROW_BYTES)
NAMED_ROW_BYTES = 24  # a named barrier's state: units arrived, units expected, generation (i64 each)
DRIVER_NAME = "cubepy_run_cubes"
SHARED_ALIGN = 64
FRAME_ALIGN = 64
# Local arrays a unit keeps on the running thread's stack: beyond this, the largest go to a per-unit heap
# scratch (the caller's thread may be a user thread with a small stack; a 8 MiB array overflowed the main one).
STACK_LOCAL_BYTES = 16 * 1024


def frame_allocator(module: ir.Module) -> ir.Function:
    """``ptr cubepy.frame(ptr slot, i64 bytes)``: the frame in ``*slot``, allocated on the slot's first use.

    A function of its own so that the coroutine's entry block keeps no branch (its allocas stay there)."""
    existing = module.globals.get("cubepy.frame")
    if existing is not None:
        return existing
    fn = ir.Function(module, ir.FunctionType(PTR, [PTR, I64]), "cubepy.frame")
    fn.linkage = "internal"
    slot, size = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    cached = b.load(slot, typ=PTR, name="cached")
    fresh, done = fn.append_basic_block("fresh"), fn.append_basic_block("done")
    b.cbranch(b.icmp_unsigned("==", cached, ir.Constant(PTR, None)), fresh, done)
    b.position_at_end(fresh)
    allocate = module.globals.get("aligned_alloc") or ir.Function(
        module, ir.FunctionType(PTR, [I64, I64]), "aligned_alloc"
    )
    memory = b.call(allocate, [ir.Constant(I64, FRAME_ALIGN), size])
    b.store(memory, slot)
    b.branch(done)
    b.position_at_end(done)
    result = b.phi(PTR)
    result.add_incoming(cached, b.function.blocks[0])
    result.add_incoming(memory, fresh)
    b.ret(result)
    return fn


def heap_locals(definition: KernelDefinition) -> tuple[dict[int, int], int]:
    """The local arrays kept in a unit's heap scratch (id -> byte offset) and the scratch's size: the largest
    ones, until those left on the stack take at most ``STACK_LOCAL_BYTES``."""
    sizes = {var.id: (var.length or 0) * var.type.size for var in definition.local_arrays}
    on_stack = sum(sizes.values())
    placed: dict[int, int] = {}
    end = 0
    for var in sorted(definition.local_arrays, key=lambda var: sizes[var.id], reverse=True):
        if on_stack <= STACK_LOCAL_BYTES:
            break
        if (var.alignment or 1) > FRAME_ALIGN:
            continue  # the scratch is only FRAME_ALIGN-aligned
        placed[var.id] = end
        end = -(-(end + sizes[var.id]) // FRAME_ALIGN) * FRAME_ALIGN
        on_stack -= sizes[var.id]
    return placed, end


NAMED_KEY = (VarKind.BARRIER, -1)  # the named barriers' rows in ``shared_layout``


def shared_layout(definition: KernelDefinition, lw: KernelLowering) -> tuple[dict[tuple[VarKind, int], int], int]:
    """Byte offset of every shared memory and mbarrier state row in the cube's shared block, and the block's size.

    The barrier rows come last, one after another (the driver zeroes them when a cube starts), then, in a
    kernel with named barriers, their 16 rows (key ``NAMED_KEY``)."""
    offsets, end = lw._shared_layout()
    placed = {(VarKind.SHARED, var_id): offset for var_id, offset in offsets.items()}
    end = -(-end // 8) * 8
    for var in definition.barriers:
        placed[(VarKind.BARRIER, var.id)] = end
        end += BARRIER_ROW_BYTES * (var.length or 1)  # an array's rows one after another
    named = (ops.NamedBarrierSync, ops.NamedBarrierArrive)
    if any(isinstance(inst.operation, named) for inst in walk(definition.body)):
        placed[NAMED_KEY] = end
        end += ops.NAMED_BARRIERS * NAMED_ROW_BYTES
    return placed, end
