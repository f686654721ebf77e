"""The host target layer: the same lowering, compiled for the CPU this process runs on (the cpu runtime).

Execution model.  A kernel's body becomes ``<name>.unit(ptr params, ptr cube, i32 unit)``: one unit of one
cube.  ``params`` is the parameter block the cuda runtime packs (``cubepy.compiler.abi.param_layout``);
``cube`` is the per-cube context below; ``unit`` the linear unit index (``tid.x + tid.y*X + tid.z*X*Y``), then ``ctaid.x/y/z``.

* A kernel without ``sync_cube``, ``sync_plane`` or plane operations is a plain function, which also takes
  ``tid.x/y/z``; the driver calls it for every unit in loops over z, y and x, x innermost (inlined, so LLVM
  may vectorize across the units of a row).
* Otherwise the unit is an LLVM switched-resume coroutine (``host_suspend``).  ``sync_cube`` suspends with state
  ``AT_BARRIER``; each plane primitive (``activemask``, one shuffle, one vote, ``sync_plane``) publishes
  its 32-bit word, records its *site* (a number increasing in program order) and suspends with state
  ``AT_PLANE``.  The driver ``cubepy_run_cubes`` resumes every runnable unit once, then, per plane,
  releases the waiting units at the lowest site (the units that are together there form the active
  mask, as the lockstep interp's masks do: a then-branch runs before its else-branch, a loop body before
  the code after the loop), copying their published words to the snapshot they read partners from;
  when no plane is waiting it releases the barrier.  A unit that returns ends in the final suspend.
* Shared memories and mbarriers live at fixed offsets in the cube's shared block (``cube.shared``).
* Math (``host_math``): the C library (``sinf``, ``pow``, ...), which MCJIT resolves in this process; ``exp`` of f32 inline.

* TMA copies and mbarriers call the runtime's emulation (``host_async``); a wait that is not done suspends
  with state ``AT_MBARRIER``.
* ``mma_sync``, ``ldmatrix``, ``stmatrix`` and cmma tile loads, products and stores publish their
  operands to the runtime's emulation and suspend as plane collectives (``host_mma``).

* Named barriers keep their state in 16 rows of the cube's shared block and call the runtime too; a
  ``named_barrier_sync`` that is not complete waits as an mbarrier wait does (``host_async``).

* ``wgmma_mma_async`` is a warpgroup collective through the same emulation; descriptors hold offsets into the
  cube's shared block, as on the interp (``host_mma``).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import TYPE_CHECKING, Any

import llvmlite.ir as ir

from cubepy.compiler import abi
from cubepy.compiler import llvm_types as lt
from cubepy.compiler.builtins import read_builtin
from cubepy.compiler.targets.host_abi import (  # the cube context's layout and where memories live
    CTX_AXIS_BYTES,
    CTX_FAULT,
    CTX_FRAMES,
    CTX_MASK,
    CTX_NCTAID,
    CTX_PUBLISH,
    CTX_SHARED,
    CTX_SITE,
    CTX_SNAPSHOT,
    CTX_STATE,
    DONE,
    FRAME_ALIGN,
    NAMED_KEY,
    SHARED_ALIGN,
    frame_allocator,
    heap_locals,
    shared_layout,
)
from cubepy.compiler.targets.host_fp8 import convert_scalar_host
from cubepy.compiler.targets.host_row_guard import find_row_guard, lower_guarded_body
from cubepy.compiler.targets.host_suspend import (  # where units wait, and the operations that suspend
    TOKEN,
    TOKEN_NONE,
    HostSuspensions,
    suspension_kinds,
    waits_only_at_split_points,
)
from cubepy.ir import ElemType, VarKind, ops
from cubepy.ir.ops import OpTable
from cubepy.ir.variable import PLANE_WIDTH

if TYPE_CHECKING:
    from collections.abc import Callable

    from cubepy.compiler.lower import KernelLowering, Lowering
    from cubepy.compiler.targets.host_fission import CubeLoops
    from cubepy.ir import Instruction, KernelDefinition, Scope, Variable
    from cubepy.ir.ops import Operation

UNSUPPORTED: dict[type, str] = {
    # Peers exist only in a cluster launch, which the cpu runtime refuses (CpuBackend.run).
    **{
        op: "distributed shared memory and remote mbarrier arrivals need a cluster launch, which the cpu runtime "
        "does not run; use the interp runtime"
        for op in (ops.ClusterLoad, ops.ClusterStore, ops.BarrierArriveCluster)
    },
}


class HostOpTable(OpTable):
    """The cpu back end's coverage: every operation the one LLVM lowering implements, minus ``UNSUPPORTED``.

    Filled on first use from the LLVM table, so the completeness test walks the cpu back end too.
    """

    def _fill(self) -> None:
        """Copy the LLVM lowering's implementations and declare the host's unsupported operations."""
        from cubepy.compiler.lower import LLVM

        host_lowerings = _host_lowerings()
        for cls, implementation in LLVM.load().implementations.items():
            if cls in host_lowerings:
                self.implementations[cls] = host_lowerings[cls]
            elif cls in UNSUPPORTED:
                self.unsupported(cls, reason=UNSUPPORTED[cls])
            else:
                self.implementations[cls] = implementation
        for cls, reason in LLVM.unsupported_reasons.items():
            self.unsupported_reasons.setdefault(cls, reason)


def _host_lowerings() -> dict[type[Operation], Lowering]:
    """The operations the host lowers its own way: the ``HOST_LOWERINGS`` table of every ``host_*`` module of
    this package (a new one is found without being listed)."""
    found: dict[type[Operation], Lowering] = {}
    for info in sorted(pkgutil.iter_modules([os.path.dirname(__file__)]), key=lambda info: info.name):
        if info.name.startswith("host_"):
            module = importlib.import_module(f"{__package__}.{info.name}")
            found.update(getattr(module, "HOST_LOWERINGS", {}))
    return found


CPU = HostOpTable("cpu", modules=("cubepy.compiler.lower",))


I8 = ir.IntType(8)
I64 = lt.I64
I32 = lt.I32
PTR = lt.GENERIC_PTR


def _invariant(load: ir.Value) -> ir.Value:
    """Mark a load of launch-constant memory (parameter block, context pointers): LLVM may hoist it out of loops
    even past stores to buffers that could, for all it knows, alias the block."""
    load.set_metadata("invariant.load", load.parent.parent.module.add_metadata([]))
    return load


class HostTarget(HostSuspensions):
    """Lowers for the host CPU (``triple``/``data_layout`` of llvmlite's default target machine)."""

    name = "cpu"

    def __init__(
        self,
        triple: str,
        data_layout: str,
        definition: KernelDefinition,
        report_out_of_bounds: bool = False,
        vector_ldexp: bool = False,
    ) -> None:
        self.sm = 0  # no compute capability: the host
        self.reports_out_of_bounds = report_out_of_bounds
        # the branch keeps a miss out of the loop bodies the host vectorizes (and of the sanitizer's reports)
        self.branch_free_global_reads = False
        # The CPU scales a vector by powers of two in one instruction (AVX-512's vscalefps): exp uses llvm.ldexp.
        self.vector_ldexp = vector_ldexp
        self.triple = triple
        self.data_layout = data_layout
        self.suspends = suspension_kinds(definition)
        from cubepy.compiler.targets.host_fission_plan import plan_fission

        # A kernel whose barriers all sit in cube-uniform control runs its units in loops between them.
        self.fission = plan_fission(definition) if waits_only_at_split_points(definition) else None
        if self.fission is not None:
            self.suspends = frozenset()
        self.coroutine = bool(self.suspends)
        # A plain kernel's unit function gets its tid from the driver's nested loops (``declare_entry``).
        self.plain_tid = not self.coroutine and self.fission is None
        # ``if x < n`` around a plain kernel's body: the driver runs each row's admitted units without it.
        self.row_guard = find_row_guard(definition) if self.plain_tid else None
        # A fission plan keeps every local array in its per-unit frame (heap) already.
        self.heap_locals, self.scratch_bytes = heap_locals(definition) if self.fission is None else ({}, 0)
        self.scratch: ir.Value | None = None
        self.cube_loops: CubeLoops | None = None
        self.tid: tuple[ir.Value, ir.Value, ir.Value] | None = None  # in a loop over units: its x, y, z
        self.shared_bytes = 0
        self.placed: dict[tuple[VarKind, int], int] = {}
        self.barrier_rows = (0, 0)  # (first byte, bytes) of the mbarrier rows in the shared block
        self.param_bytes = 0  # the parameter block's size, set by the prologue
        self.buffer_offsets: list[int] = []  # a whole cube's or plain unit's buffer arguments: where in the block
        self.buffer_exclusive: list[bool] = []  # and whether the launch checked that nothing else overlaps each
        self.host_calls: list[Any] = []  # host_async.HostCall per emulated instruction, indexed by its site
        self.merge_x = False  # whether the driver runs consecutive cubes along x as one row (set by ``finish``)
        self.op_table = CPU
        self._site = 0
        self._ret_block: ir.Block | None = None

    # -- entry, parameters, context ------------------------------------------------------------
    def declare_entry(self, lw: KernelLowering) -> ir.Function:
        """``ptr|void <name>.unit(ptr params, ptr cube, i32 unit)``, internal: the driver calls it."""
        ret = PTR if self.coroutine else lt.VOID
        # ctaid comes as arguments (not from the context): LLVM then knows it cannot change inside a cube.
        # A whole cube's function (fission) also takes its shared block, per-unit frame and buffers as arguments,
        # ``noalias`` where nothing else reaches that memory (a buffer: where the launch checked that no other
        # argument overlaps it): LLVM then needs no overlap checks to vectorize the loops over units.
        # A plain unit also takes its tid x, y, z: the driver's loops give them (x innermost), so an address built
        # from them is affine in the innermost loop's counter and LLVM vectorizes 2-D and 3-D cubes too.
        # Its buffers come as arguments too: the driver's loops are in a function whose buffer arguments are
        # ``noalias`` where exclusive (``host_driver``), so vectorized rows need no overlap checks.
        fission = self.fission is not None
        buffers = (
            [p for p in lw.definition.params if p.role in ("array", "tensor")] if fission or self.plain_tid else []
        )
        extra = [PTR, PTR, *(lt.GLOBAL_PTR for _ in buffers)] if fission else []
        if self.plain_tid:
            extra = [I32, I32, I32, *(lt.GLOBAL_PTR for _ in buffers)]
        if self.row_guard is not None:  # its mode and probe words (``host_row_guard``)
            extra += [I32, PTR]
        self.buffer_exclusive = [p.exclusive for p in buffers]
        function = ir.Function(
            lw.module, ir.FunctionType(ret, [PTR, PTR, I32, I32, I32, I32, *extra]), f"{lw.name}.unit"
        )
        function.linkage = "internal"
        names = ["params", "cube", "unit", "ctaid_x", "ctaid_y", "ctaid_z"]
        names += ["tid_x", "tid_y", "tid_z"] if self.plain_tid else ["shared_block", "frame"]
        names += [f"buf{index}" for index in range(len(buffers))]
        names += ["mode", "probe"] if self.row_guard is not None else []
        for arg, name in zip(function.args, names):
            arg.name = name
        for arg in function.args[6:8] if fission else ():
            arg.attributes = lt.RawArgumentAttributes(["noalias", f"align {SHARED_ALIGN}"])
        for arg, param in zip(function.args[8:] if fission else (), buffers):
            if param.exclusive:
                arg.attributes = lt.RawArgumentAttributes(["noalias"])
        function.attributes = lt.RawFunctionAttributes(["presplitcoroutine" if self.coroutine else "alwaysinline"])
        return function

    def _ctx_load(self, b: ir.IRBuilder, offset: int, ty: ir.Type, name: str) -> ir.Value:
        ptr = b.gep(b.function.args[1], [ir.Constant(I64, offset)], source_etype=I8)
        return _invariant(b.load(ptr, typ=ty, name=name))

    def prologue(self, lw: KernelLowering) -> None:
        """Read every parameter from the block, the cube context, and start the coroutine."""
        b = lw.alloca_builder
        fn = lw.function
        params, unit = fn.args[0], fn.args[2]
        keys = iter((p.var.kind, p.var.id) for p in lw.definition.params)
        layout = abi.param_layout(lw.definition)
        self.param_bytes = layout.total_bytes  # the driver declares the block dereferenceable
        for slot in layout.slots:
            where = b.gep(params, [ir.Constant(I64, slot.offset)], source_etype=I8)
            if slot.word is not None:
                word = slot.word
                lw.metadata[(word.buffer, word.field, word.dim)] = _invariant(
                    b.load(where, typ=I32, align=abi.WORD_BYTES, name=f"buf{word.buffer}.{word.name}")
                )
                continue
            key = next(keys)
            if slot.role in ("array", "tensor") and (self.fission is not None or self.plain_tid):
                first = 9 if self.plain_tid else 8  # the driver loaded it (``declare_entry``)
                lw.params[key] = fn.args[first + slot.kind_index]
                self.buffer_offsets.append(slot.offset)
            elif slot.role in ("array", "tensor"):
                lw.params[key] = _invariant(b.load(where, typ=lt.GLOBAL_PTR, name=f"buf{slot.kind_index}"))
            elif slot.role == "scalar":
                assert slot.type is not None
                lw.params[key] = _invariant(
                    b.load(
                        where,
                        typ=lt.item_type(slot.type, memory=True),
                        align=slot.align,
                        name=f"scalar{slot.kind_index}",
                    )
                )
            else:
                lw.params[key] = where
        self._set_unit(b, unit)
        if self.plain_tid:
            self.tid = (fn.args[6], fn.args[7], fn.args[8])
        block = fn.args[6] if self.fission is not None else self._ctx_load(b, CTX_SHARED, PTR, "shared_block")
        self.shared = b.addrspacecast(block, lt.SHARED_PTR)
        if not self.coroutine:
            if self.scratch_bytes:  # units run one after another on this thread: they share one scratch
                frames = self._ctx_load(b, CTX_FRAMES, PTR, "frames")
                self.scratch = b.call(frame_allocator(lw.module), [frames, ir.Constant(I64, self.scratch_bytes)])
            return
        unit64 = b.zext(unit, I64)
        self.state = b.gep(self._ctx_load(b, CTX_STATE, PTR, "states"), [unit64], source_etype=I32)
        self.site = b.gep(self._ctx_load(b, CTX_SITE, PTR, "sites"), [unit64], source_etype=I32)
        self.mask = b.gep(self._ctx_load(b, CTX_MASK, PTR, "masks"), [unit64], source_etype=I32)
        self.publish = b.gep(self._ctx_load(b, CTX_PUBLISH, PTR, "published"), [unit64], source_etype=I64)
        self.snapshot = self._ctx_load(b, CTX_SNAPSHOT, PTR, "snapshot")
        self.coro_id = lw.call_in(
            b,
            "llvm.coro.id",
            TOKEN,
            [ir.Constant(I32, 0), ir.Constant(PTR, None), ir.Constant(PTR, None), ir.Constant(PTR, None)],
        )
        size = lw.call_in(b, "llvm.coro.size.i64", I64, [])
        # The frame holds vector spills (32-byte aligned stores): malloc's 16 bytes are not enough.
        rounded = b.and_(b.add(size, ir.Constant(I64, FRAME_ALIGN - 1)), ir.Constant(I64, -FRAME_ALIGN))
        frames = self._ctx_load(b, CTX_FRAMES, PTR, "frames")
        # A unit's heap scratch (large local arrays) follows its coroutine frame in the same allocation.
        frame_and_scratch = b.add(rounded, ir.Constant(I64, self.scratch_bytes)) if self.scratch_bytes else rounded
        memory = b.call(frame_allocator(lw.module), [b.gep(frames, [unit64], source_etype=PTR), frame_and_scratch])
        if self.scratch_bytes:
            self.scratch = b.gep(memory, [rounded], source_etype=I8, name="scratch")
        self.handle = lw.call_in(b, "llvm.coro.begin", PTR, [self.coro_id, memory])
        self._ret_block = fn.append_basic_block("coro.ret")
        self._cleanup_block = fn.append_basic_block("coro.cleanup")
        self._final_block = fn.append_basic_block("coro.final")

    def lower_body(self, lw: KernelLowering, body: Scope) -> None:
        """The body as written (one unit), or, for a kernel with a fission plan, as loops over the cube's units."""
        if self.row_guard is not None:  # the body ``find_row_guard`` read
            lower_guarded_body(lw, self.row_guard, lw.function.args[-2], lw.function.args[-1])
            return
        if self.fission is None:
            lw.lower_scope(body)
            return
        from cubepy.compiler.targets.host_fission import CubeLoops

        self.cube_loops = CubeLoops(lw, self, self.fission)
        self.cube_loops.lower(body)

    def enter_unit(
        self, lw: KernelLowering, unit: ir.Value, tid: tuple[ir.Value, ir.Value, ir.Value] | None = None
    ) -> None:
        """In a loop over units: what follows is unit ``unit`` at ``tid`` (derived from ``unit`` when None); its
        builtins are read again."""
        from cubepy.compiler.targets.host_fission_plan import UNIT_BUILTINS

        self._set_unit(lw.builder, unit)
        self.tid = tid
        for name in list(lw.builtins):
            if name.startswith(UNIT_BUILTINS):
                lw.builtins[name] = read_builtin(lw, name)

    def _set_unit(self, b: ir.IRBuilder, unit: ir.Value) -> None:
        """What follows runs as unit ``unit``: its lane and its plane's first unit."""
        self.unit = unit
        self.lane = b.and_(unit, ir.Constant(I32, PLANE_WIDTH - 1), name="lane")
        self.plane_base = b.and_(unit, ir.Constant(I32, ~(PLANE_WIDTH - 1)), name="plane_base")

    def frame(self, lw: KernelLowering) -> ir.Value:
        """The per-unit frame of a whole cube's function (its ``noalias`` argument)."""
        return lw.function.args[7]

    def declare_memories(self, lw: KernelLowering) -> None:
        """Shared memories and mbarriers at their offsets in the cube's shared block; local arrays as allocas."""
        placed, self.shared_bytes = shared_layout(lw.definition, lw)
        self.placed = placed
        rows = [offset for key, offset in placed.items() if key[0] is VarKind.BARRIER]
        if rows:
            self.barrier_rows = (min(rows), self.shared_bytes - min(rows))
        b = lw.alloca_builder
        for key, offset in placed.items():
            if key == NAMED_KEY:
                continue
            lw.memories[key] = b.gep(
                self.shared, [ir.Constant(I64, offset)], source_etype=I8, name=f"{key[0].value}{key[1]}"
            )
        for var in lw.definition.local_arrays:
            if var.id in self.heap_locals:
                offset = ir.Constant(I64, self.heap_locals[var.id])
                lw.memories[(VarKind.LOCAL_ARRAY, var.id)] = b.gep(self.scratch, [offset], source_etype=I8)
            elif self.fission is None:  # else each unit's array is in the frame
                lw.local_array(var)

    def special_register(self, lw: KernelLowering, name: str) -> ir.Value:
        """``tid`` from the unit index and the static cube_dim; ``ctaid``/``nctaid`` from the cube context."""
        b = lw.builder
        x, y, _ = lw.definition.cube_dim
        base, _, axis = name.partition(".")
        if name == "laneid":
            return self.lane
        if base == "tid" and self.tid is not None:
            return self.tid["xyz".index(axis)]
        if base == "tid":
            if axis == "x":
                return b.urem(self.unit, ir.Constant(I32, x)) if x > 1 else ir.Constant(I32, 0)
            if axis == "y":
                return b.urem(b.udiv(self.unit, ir.Constant(I32, x)), ir.Constant(I32, y))
            return b.udiv(self.unit, ir.Constant(I32, x * y))
        if base == "ctaid":
            return lw.function.args[3 + "xyz".index(axis)]
        if base == "cluster":  # the cpu runtime runs no clusters: every cube is a cluster of one
            return ir.Constant(I32, 1 if axis.startswith("ncta") else 0)
        return self._ctx_load(b, CTX_NCTAID + CTX_AXIS_BYTES * "xyz".index(axis), I32, name.replace(".", "_"))

    # -- shared addresses, reports, what the host needs no code for ------------------------------------
    def shared_address(self, lw: KernelLowering, pointer: ir.Value) -> ir.Value:
        """The byte offset of ``pointer`` in the cube's shared block (the interp's shared addresses too)."""
        b = lw.builder
        return b.sub(b.ptrtoint(pointer, I64), b.ptrtoint(self.shared, I64))

    def report_out_of_bounds(
        self, lw: KernelLowering, inst: Instruction, memory: Variable, index: ir.Value, length: ir.Value, access: str
    ) -> None:
        """A call into the runtime, which raises the out-of-bounds report after the launch."""
        from cubepy.compiler.targets import host_async

        host_async.report_out_of_bounds(lw, inst, memory, index, length, access)

    def fence_proxy_shared(self, lw: KernelLowering) -> None:
        """Nothing: there is no separate TMA proxy on the host."""

    def set_max_registers(self, lw: KernelLowering, count: int, increase: bool) -> None:
        """Nothing: a host unit's registers are the CPU's, not a budget shared among planes."""

    # -- math -----------------------------------------------------------------------------------------
    def math_call(self, lw: KernelLowering, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        """The C library function for libdevice's ``name`` (``__nv_expf`` -> ``expf``), or inline arithmetic."""
        from cubepy.compiler.targets.host_math import math_call

        return math_call(lw, name, ret, args, vector_ldexp=self.vector_ldexp)

    # -- the end of a unit ---------------------------------------------------------------------------
    def poll_cancel(self, lw: KernelLowering) -> None:
        """At a ``loop`` back-edge: leave the unit once the runtime set the cube context's fault word (Ctrl-C).

        An atomic load, so that LLVM reads it at every iteration; ``for`` loops do not poll (it would stop
        their vectorization), and the driver tests the same word before every cube.
        """
        b = lw.builder
        word = b.gep(b.function.args[1], [ir.Constant(I64, CTX_FAULT)], source_etype=I8)
        fault = b.load_atomic(word, "monotonic", 4, typ=I32)
        with b.if_then(b.icmp_signed("!=", fault, ir.Constant(I32, 0)), likely=False):
            self.emit_return(lw)

    def convert_fp8(
        self,
        lw: KernelLowering,
        value: ir.Value,
        src: ElemType,
        dst: ElemType,
        other: Callable[[ir.Value, ElemType, ElemType], ir.Value],
    ) -> ir.Value:
        """The same bits as PTX's ``cvt`` by integer arithmetic (``host_fp8``)."""
        return convert_scalar_host(lw, value, src, dst, other)

    def emit_return(self, lw: KernelLowering) -> None:
        """Plain: ``ret``; coroutine: go to the final suspend; in a loop over units: end that unit's stretch."""
        if self.cube_loops is not None and self.cube_loops.next_unit is not None:
            self.cube_loops.unit_returns()
        elif self.coroutine:
            lw.builder.branch(self._final_block)
        else:
            lw.builder.ret_void()

    def finish(self, lw: KernelLowering) -> None:
        """The coroutine's final suspend, cleanup and return blocks, then the cube driver."""
        if self.coroutine:
            none = TOKEN_NONE
            b = ir.IRBuilder(self._final_block)
            b.store(ir.Constant(I32, DONE), self.state)
            final = lw.call_in(b, "llvm.coro.suspend", I8, [none, ir.Constant(lt.I1, 1)])
            switch = b.switch(final, self._ret_block)
            switch.add_case(ir.Constant(I8, 0), self._cleanup_block)
            switch.add_case(ir.Constant(I8, 1), self._cleanup_block)
            b = ir.IRBuilder(self._cleanup_block)  # the frame stays with its unit slot (CTX_FRAMES)
            b.branch(self._ret_block)
            b = ir.IRBuilder(self._ret_block)
            lw.call_in(b, "llvm.coro.end", lt.VOID, [self.handle, ir.Constant(lt.I1, 0), none])
            b.ret(self.handle)
        from cubepy.compiler.targets.host_driver import emit_driver
        from cubepy.compiler.targets.host_plain import merges_cubes_along_x

        # The reports and the emulated instructions name a unit and its cube, which a merged run does not keep.
        self.merge_x = (
            self.plain_tid
            and not self.reports_out_of_bounds
            and not self.host_calls
            and merges_cubes_along_x(lw.definition)
        )
        loops = self.cube_loops
        whole_cube = (loops.frame_bytes, tuple(self.buffer_offsets)) if loops is not None else None
        plain = tuple(zip(self.buffer_offsets, self.buffer_exclusive)) if self.plain_tid else None
        definition = lw.definition
        emit_driver(
            lw.module,
            lw.function,
            definition,
            self.suspends,
            self.param_bytes,
            self.barrier_rows,
            whole_cube,
            plain_buffers=plain,
            row_guard=self.row_guard is not None,
            merge_x=self.merge_x,
        )
