"""The NVPTX target layer: PTX special registers, ``bar.sync``, ``shfl.sync``/``vote.sync``, libdevice.

The entry is a ``ptx_kernel`` whose parameters follow ``cubepy.compiler.abi``; shared memories are
``addrspace(3)`` globals (or offsets into one dynamic array above 48 KiB); mbarriers ``i64`` globals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import abi
from cubepy.compiler import llvm_types as lt
from cubepy.compiler.abi import DATA_LAYOUT, TRIPLE
from cubepy.compiler.lower import LLVM
from cubepy.compiler.lower_fp8 import convert_scalar
from cubepy.ir import VarKind, ops, walk
from cubepy.ir.kernel import written_slots

if TYPE_CHECKING:
    from collections.abc import Callable

    from cubepy.compiler.lower import KernelLowering
    from cubepy.ir import ElemType, Instruction, Scope, Variable

_SHUFFLE_CLAMP = {"idx": 31, "bfly": 31, "down": 31, "up": 0}


class NvptxTarget:
    """Lowers for an NVIDIA GPU of compute capability ``sm`` (PTX, assembled by ptxas)."""

    name = "cuda"
    triple = TRIPLE
    data_layout = DATA_LAYOUT
    reports_out_of_bounds = False
    branch_free_global_reads = True
    op_table = LLVM  # every operation as the shared lowering emits it

    def __init__(self, sm: int = 90) -> None:
        self.sm = sm

    def report_out_of_bounds(
        self, lw: KernelLowering, inst: Instruction, memory: Variable, index: ir.Value, length: ir.Value, access: str
    ) -> None:
        """Never called: checked mode on the GPU reads 0 and drops writes without a word."""
        raise NotImplementedError("the NVPTX target does not report out-of-bounds accesses")

    def declare_entry(self, lw: KernelLowering) -> ir.Function:
        """The ``ptx_kernel`` entry: one parameter per kernel parameter, then the u32 metadata words by value."""
        arg_types: list[ir.Type] = []
        for param in lw.definition.params:
            if param.role in ("array", "tensor"):
                arg_types.append(lt.GLOBAL_PTR)
            elif param.role == "scalar":
                arg_types.append(lt.item_type(param.var.type, memory=True))
            else:
                arg_types.append(lt.GENERIC_PTR)
        words = abi.metadata_words(lw.definition)
        arg_types += [lt.I32] * len(words)
        fnty = ir.FunctionType(lt.VOID, arg_types)
        function = ir.Function(lw.module, fnty, lw.name)
        function.calling_convention = "ptx_kernel"
        x, y, z = lw.definition.cube_dim
        # The kernel is specialized for its cube_dim: launching it with another one fails loudly.
        attributes = [f'"nvvm.reqntid"="{x},{y},{z}"']
        if any(isinstance(inst.operation, ops.SetMaxNReg) for inst in walk(lw.definition.body)):
            # ptxas honours setmaxnreg only when it knows the registers a unit holds at entry: with the exact
            # unit count and at least one cube per SM (.minnctapersm 1) it does; without, it drops every
            # setmaxnreg with a C7508 "Potential Performance Loss" note.
            attributes.append('"nvvm.minctasm"="1"')
        function.attributes = lt.RawFunctionAttributes(attributes)
        from cubepy.compiler.lower import _safe_name

        written, _ = written_slots(lw.definition)
        # An atomic access (an atomic load too) is never a read-only one: other cubes' atomics may change the word.
        atomic = {
            inst.operation.memory.id for inst in walk(lw.definition.body) if isinstance(inst.operation, ops.AtomicOp)
        }
        for param, arg in zip(lw.definition.params, function.args):
            arg.name = _safe_name(param.name)
            read_only = param.var.id not in written and param.var.id not in atomic
            if param.role in ("array", "tensor") and param.exclusive and read_only:
                # Nothing else the launch binds overlaps it and the kernel never writes it: read-only and
                # unaliased, so NVPTX loads it through the non-coherent path (ld.global.nc).
                arg.attributes = lt.RawArgumentAttributes(["noalias", "readonly"])
            if param.role == "tensor_map":
                arg.attributes = lt.RawArgumentAttributes(
                    [f"byval([{abi.TENSOR_MAP_BYTES} x i8])", f"align {abi.TENSOR_MAP_ALIGN}", '"nvvm.grid_constant"']
                )
            lw.params[(param.var.kind, param.var.id)] = arg
        names = {param.var.id: _safe_name(param.name) for param in lw.definition.buffers}
        for word, arg in zip(words, function.args[len(lw.definition.params) :]):
            arg.name = f"{names[word.buffer]}.{word.name}"
            lw.metadata[(word.buffer, word.field, word.dim)] = arg
        return function

    def prologue(self, lw: KernelLowering) -> None:
        """Nothing: a PTX kernel's entry needs no setup."""

    def lower_body(self, lw: KernelLowering, body: Scope) -> None:
        """Every unit runs the body as written."""
        lw.lower_scope(body)

    def declare_memories(self, lw: KernelLowering) -> None:
        """Shared memories as ``addrspace(3)`` globals (one dynamic array above 48 KiB), mbarriers as i64 globals."""
        from cubepy.compiler.lower import STATIC_SHARED_LIMIT

        offsets, total = lw._shared_layout()
        if total > STATIC_SHARED_LIMIT:
            lw._declare_dynamic_shared(offsets, total)
        for var in lw.definition.shared_memories:
            lw.shared_memory(var)
        for var in lw.definition.barriers:
            rows = ir.ArrayType(lt.I64, var.length or 1)  # an array of barriers is one global
            gv = ir.GlobalVariable(lw.module, rows, f"barrier{var.id}", addrspace=3)
            gv.type = lt.SHARED_PTR
            gv.linkage = "internal"
            gv.initializer = ir.Constant(rows, ir.Undefined)
            gv.align = 8
            lw.memories[(VarKind.BARRIER, var.id)] = gv
        for var in lw.definition.local_arrays:
            lw.local_array(var)

    def special_register(self, lw: KernelLowering, name: str) -> ir.Value:
        """``llvm.nvvm.read.ptx.sreg.<name>``; ``tid.<axis>`` and ``laneid`` carry their ``!range``.

        ``tid.x`` lies in ``[0, cube_dim.x)`` (per axis, not the cube's unit count LLVM would assume from
        ``reqntid``), so ``UNIT_POS_Y * 16 + k < 256`` is provable and checked shared accesses fold away.
        """
        value = lw.call(f"llvm.nvvm.read.ptx.sreg.{name}", lt.I32, [], name_hint=name.replace(".", "_"))
        base, _, axis = name.partition(".")
        bound = lw.definition.cube_dim["xyz".index(axis)] if base == "tid" else 32 if name == "laneid" else None
        if bound is not None:
            value.set_metadata("range", lw.module.add_metadata([ir.Constant(lt.I32, 0), ir.Constant(lt.I32, bound)]))
        return value

    def shared_address(self, lw: KernelLowering, pointer: ir.Value) -> ir.Value:
        """The ``addrspace(3)`` pointer's value: the address in the shared window."""
        return lw.builder.ptrtoint(pointer, lt.I64)

    def sync_cube(self, lw: KernelLowering) -> None:
        """bar.sync 0: every unit of the cube, with shared-memory visibility."""
        lw.call("llvm.nvvm.barrier.cta.sync.aligned.all", lt.VOID, [ir.Constant(lt.I32, 0)])

    def sync_plane(self, lw: KernelLowering, mask: ir.Value | None = None) -> None:
        """bar.warp.sync over the whole plane, or over ``mask``'s lanes."""
        lw.call("llvm.nvvm.bar.warp.sync", lt.VOID, [ir.Constant(lt.I32, -1) if mask is None else mask])

    def fence_proxy_shared(self, lw: KernelLowering) -> None:
        """fence.proxy.async.shared::cta."""
        lw.call("llvm.nvvm.fence.proxy.async.shared_cta", lt.VOID, [])

    def set_max_registers(self, lw: KernelLowering, count: int, increase: bool) -> None:
        """``setmaxnreg.{inc,dec}.sync.aligned.u32 count`` (sm_90a)."""
        direction = "inc" if increase else "dec"
        lw.call(f"llvm.nvvm.setmaxnreg.{direction}.sync.aligned.u32", lt.VOID, [ir.Constant(lt.I32, count)])

    def active_mask(self, lw: KernelLowering) -> ir.Value:
        """``activemask.b32``."""
        return lw.call("llvm.nvvm.activemask", lt.I32, [], name_hint="active_mask")

    def shuffle_word(self, lw: KernelLowering, mode: str, word: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
        """``shfl.sync.<mode>.b32`` with the whole plane as one segment."""
        clamp = ir.Constant(lt.I32, _SHUFFLE_CLAMP[mode])
        return lw.call(f"llvm.nvvm.shfl.sync.{mode}.i32", lt.I32, [mask, word, arg, clamp])

    def vote(self, lw: KernelLowering, kind: str, predicate: ir.Value, mask: ir.Value) -> ir.Value:
        """``vote.sync.<kind>``."""
        ret = lt.I32 if kind == "ballot" else lt.I1
        return lw.call(f"llvm.nvvm.vote.{kind}.sync", ret, [mask, predicate])

    def match(self, lw: KernelLowering, kind: str, bits: ir.Value, mask: ir.Value) -> ir.Value:
        """``match.any.sync``/``match.all.sync`` (the mask when every lane matched, else 0)."""
        width = f"i{bits.type.width}"
        if kind == "match_any":
            return lw.call(f"llvm.nvvm.match.any.sync.{width}", lt.I32, [mask, bits])
        pair = lw.call(f"llvm.nvvm.match.all.sync.{width}p", ir.LiteralStructType([lt.I32, lt.I1]), [mask, bits])
        return lw.builder.extract_value(pair, 0)

    def sync_cube_reduce(self, lw: KernelLowering, kind: str, predicate: ir.Value) -> ir.Value:
        """``bar.red.popc/and/or`` on barrier 0."""
        return lw.call(f"llvm.nvvm.barrier0.{kind}", lt.I32, [predicate])

    def elect(self, lw: KernelLowering, mask: ir.Value) -> ir.Value:
        """``elect.sync`` on sm_90+, else the lowest active lane."""
        if self.sm >= 90:
            return lw.builder.extract_value(
                lw.call("llvm.nvvm.elect.sync", ir.LiteralStructType([lt.I32, lt.I1]), [mask]), 1
            )
        first = lw.call("llvm.cttz.i32", lt.I32, [mask, ir.Constant(lt.I1, 1)])
        return lw.builder.icmp_unsigned("==", self.special_register(lw, "laneid"), first)

    def math_call(self, lw: KernelLowering, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        """Call libdevice's ``name``; it is linked in and inlined after lowering."""
        lw.libdevice.add(name)
        return lw.call(name, ret, args)

    def emit_return(self, lw: KernelLowering) -> None:
        """``ret``: the unit exits."""
        lw.builder.ret_void()

    def finish(self, lw: KernelLowering) -> None:
        """Nothing to add."""

    def poll_cancel(self, lw: KernelLowering) -> None:
        """Nothing: a GPU launch is not cancelled from inside."""

    def convert_fp8(
        self,
        lw: KernelLowering,
        value: ir.Value,
        src: ElemType,
        dst: ElemType,
        other: Callable[[ir.Value, ElemType, ElemType], ir.Value],
    ) -> ir.Value:
        """PTX's ``cvt`` (sm_89 and later)."""
        return convert_scalar(lw, value, src, dst, other)
