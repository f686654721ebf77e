"""Lowering of a ``KernelDefinition`` to an ``llvmlite.ir.Module`` for NVPTX: the driver.

Value model: CONST locals are SSA values; MUT locals are allocas in the entry block (LLVM's mem2reg,
part of O3, promotes them); CONSTANT variables are LLVM constants; builtins are read from
``llvm.nvvm.read.ptx.sreg.*`` once, in the entry block; buffers are the entry's ``ptr addrspace(1)``
parameters; SHARED memories are ``addrspace(3)`` globals, LOCAL_ARRAYs allocas and CONST_TABLEs
``addrspace(4)`` constant globals holding their values (PTX ``.const``, read with ``ld.const``).

The entry block holds only allocas and builtin reads and branches to ``body``.  Op families lower in
``lower_<family>`` modules (arith, memory, control, sync, plane, tma, cmma); each registers its
handlers in the ``LLVM`` op table with ``@lowers(OpClass, ...)``.
Kernel ABI (details in ``cubepy.compiler.abi``): the entry's parameters follow ``KernelDefinition.params``:
a buffer is ``ptr addrspace(1)``, a scalar its LLVM type (bool as i8), a tensor map ``ptr byval([128 x i8])
align 64 "nvvm.grid_constant"``; then the u32 metadata words by value (per buffer ``buffer_len`` and
``len``, and ``shape``/``stride`` words for the compiled rank where the kernel reads them), which
``lw.metadata`` holds.  The entry carries ``.reqntid`` = the definition's cube_dim.
"""

from __future__ import annotations

import os
import pkgutil
import re
from collections.abc import Callable
from typing import cast

import attrs
import llvmlite.ir as ir
import numpy as np

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.builtins import read_builtin
from cubepy.compiler.debuginfo import DebugInfo, first_location
from cubepy.compiler.targets import PerUnitStorage, TargetLayer
from cubepy.errors import CompileError, CubeError
from cubepy.ir import ConstTable, Instruction, KernelDefinition, Scope, Type, Variable, VarKind, walk
from cubepy.ir.ops import OpTable
from cubepy.ir.variable import SHARED_MIN_ALIGN

# Static shared memory is capped at 48 KiB per kernel; above that a kernel gets its shared memories
# as offsets into one dynamic (extern) array, and the launch opts in to the size (cuFuncSetAttribute).
STATIC_SHARED_LIMIT = 48 * 1024
DYNAMIC_SHARED_ALIGN = 1024

Lowering = Callable[["KernelLowering", Instruction], None]
# The LLVM back end's implementations, keyed by operation class; each family module registers its own
# with ``@lowers(OpClass, ...)`` and the table imports them on first use.
LLVM = OpTable(
    "llvm",
    # every ``lower_<name>`` module of this package (a new family's module is found without being listed)
    modules=tuple(
        f"cubepy.compiler.{info.name}"
        for info in sorted(pkgutil.iter_modules([os.path.dirname(__file__)]), key=lambda info: info.name)
        if info.name.startswith("lower_")
    ),
)
lowers = LLVM.implements


@attrs.frozen
class LoweredModule:
    """The result of lowering: the LLVM module, the PTX entry's name and the libdevice functions it calls."""

    module: ir.Module
    entry_name: str
    libdevice: frozenset[str]
    dynamic_shared_bytes: int = 0


def entry_name(name: str) -> str:
    """A valid PTX identifier for the kernel ``name`` (other characters become ``_``)."""
    text = re.sub(r"[^A-Za-z0-9_$]", "_", name) or "kernel"
    return text if re.match(r"[A-Za-z]|[_$][A-Za-z0-9_$]", text) else "k_" + text


@attrs.define
class Loop:
    """Targets of ``continue`` and ``break`` inside the innermost loop being lowered."""

    latch: ir.Block
    exit: ir.Block


class KernelLowering:
    """Lowers one kernel; the op-family modules call back into it for values, memories and intrinsics."""

    def __init__(self, definition: KernelDefinition, target: TargetLayer) -> None:
        self.definition = definition
        self.sm = target.sm
        self.target = target
        self.name = entry_name(definition.name)
        self.module = ir.Module(name=self.name)
        self.module.triple = self.target.triple
        self.module.data_layout = self.target.data_layout
        self.consts: dict[int, ir.Value] = {}
        self.slots: dict[int, ir.Value] = {}
        # MUT locals a branch reads and writes through a register-like alloca instead of their per-unit slot
        # (``lower_control.frame_locals_in_registers``)
        self.slot_overrides: dict[int, ir.Value] = {}
        self.params: dict[tuple[VarKind, int], ir.Value] = {}
        # (buffer slot, field, dim) -> the u32 metadata word, bound by the target's entry (abi.metadata_words)
        self.metadata: dict[tuple[int, str, int], ir.Value] = {}
        self.memories: dict[tuple[VarKind, int], ir.Value] = {}
        self.builtins: dict[str, ir.Value] = {}
        self.loops: list[Loop] = []
        # Set by a target that lowers a cube's units in loops (the host's fission at barriers): the per-unit
        # frame holding the locals and local arrays it ``holds``.
        self.per_unit: PerUnitStorage | None = None
        self.libdevice: set[str] = set()
        self._block_counter = 0
        self.function = self._declare_entry()
        self.entry = self.function.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(self.entry)
        self.builder = ir.IRBuilder(self.function.append_basic_block("body"))
        first = first_location(definition)
        self.debug = DebugInfo(self.module, self.function, definition, first) if first is not None else None
        self.target.prologue(self)

    # -- the entry function -------------------------------------------------------------------
    def _declare_entry(self) -> ir.Function:
        return self.target.declare_entry(self)

    def lower(self) -> LoweredModule:
        """Lower the whole kernel and return the module."""
        self._declare_memories()
        self._read_params()
        self._read_builtins()
        self.target.lower_body(self, self.definition.body)
        if not self.builder.block.is_terminated:
            self.target.emit_return(self)
        self.target.finish(self)
        self.alloca_builder.branch(self.function.blocks[1])
        return LoweredModule(self.module, self.name, frozenset(self.libdevice), self.dynamic_shared_bytes)

    def _declare_memories(self) -> None:
        self.dynamic_shared_bytes = 0
        self.target.declare_memories(self)
        for table in self.definition.const_tables:
            self.const_table(table)

    def const_table(self, table: ConstTable) -> ir.Value:
        """The ``addrspace(4)`` constant global of a CONST_TABLE, its values as little-endian bytes.

        Bytes rather than typed elements: one exact form for every element type (f16, bf16, bool's byte);
        loads address it by item type through the opaque pointer.
        """
        key = (VarKind.CONST_TABLE, table.var.id)
        if key not in self.memories:
            little_endian = table.var.elem.numpy.newbyteorder("<")  # NVPTX's and x86-64's byte order
            data = bytearray(np.asarray(table.values, dtype=little_endian).tobytes())
            array = ir.ArrayType(lt.I8, len(data))
            gv = ir.GlobalVariable(self.module, array, f"const{table.var.id}", addrspace=4)
            gv.type = lt.CONST_PTR  # opaque pointer: typed-pointer text is legacy
            gv.linkage = "internal"
            gv.global_constant = True
            gv.initializer = ir.Constant(array, data)
            gv.align = lt.item_align(table.var.type)
            self.memories[key] = gv
        return self.memories[key]

    def _shared_alignment(self, var: Variable) -> int:
        return max(var.alignment or 1, SHARED_MIN_ALIGN, lt.item_align(var.type))

    def _shared_layout(self) -> tuple[dict[int, int], int]:
        """Byte offset of every shared memory in one block laid out in declaration order, and its size."""
        offsets: dict[int, int] = {}
        end = 0
        for var in self.definition.shared_memories:
            if var.aliases is not None:  # a view of an earlier memory's bytes: no space of its own
                offsets[var.id] = offsets[var.aliases[0]] + var.aliases[1]
                continue
            align = self._shared_alignment(var)
            end = -(-end // align) * align
            offsets[var.id] = end
            end += (var.length or 0) * var.type.size
        return offsets, end

    def _declare_dynamic_shared(self, offsets: dict[int, int], total: int) -> None:
        """Place every shared memory at its offset in one ``extern`` dynamic shared array."""
        array = ir.ArrayType(lt.I8, 0)
        gv = ir.GlobalVariable(self.module, array, "dynamic_shared", addrspace=3)
        gv.type = lt.SHARED_PTR
        gv.linkage = "external"
        gv.align = DYNAMIC_SHARED_ALIGN
        for var in self.definition.shared_memories:
            if var.aliases is None and self._shared_alignment(var) > DYNAMIC_SHARED_ALIGN:
                raise CompileError(
                    f"kernel {self.definition.name}: shared memory {var!r} asks for alignment "
                    f"{var.alignment}, more than dynamic shared memory's {DYNAMIC_SHARED_ALIGN}"
                )
            pointer = ir.FormattedConstant(
                lt.SHARED_PTR, f"getelementptr inbounds (i8, ptr addrspace(3) @dynamic_shared, i32 {offsets[var.id]})"
            )
            self.memories[(VarKind.SHARED, var.id)] = pointer
        self.dynamic_shared_bytes = total

    def shared_memory(self, var: Variable) -> ir.Value:
        """The ``addrspace(3)`` global of a SHARED memory (declared on first use)."""
        key = (VarKind.SHARED, var.id)
        if key not in self.memories and var.aliases is not None:  # the bytes of another shared memory
            root_id, byte_offset = var.aliases
            root = next(v for v in self.definition.shared_memories if v.id == root_id)
            base = self.shared_memory(root).get_reference()  # a constant address, as the root's own
            self.memories[key] = ir.FormattedConstant(
                lt.SHARED_PTR, f"getelementptr inbounds (i8, ptr addrspace(3) {base}, i32 {byte_offset})"
            )
        if key not in self.memories:
            if not var.length:
                raise CompileError(f"kernel {self.definition.name}: shared memory {var!r} has no length")
            array = ir.ArrayType(lt.item_type(var.type, memory=True), var.length)
            gv = ir.GlobalVariable(self.module, array, f"shared{var.id}", addrspace=3)
            gv.type = lt.SHARED_PTR  # opaque pointer: typed-pointer text is legacy
            gv.linkage = "internal"
            gv.initializer = ir.Constant(array, ir.Undefined)
            gv.align = self._shared_alignment(var)
            self.memories[key] = gv
        return self.memories[key]

    def local_array(self, var: Variable) -> ir.Value:
        """The entry-block alloca of a LOCAL_ARRAY (declared on first use), or its slot in the unit's frame."""
        if self.per_unit is not None and self.per_unit.holds(var):
            return self.per_unit.pointer(var)
        key = (VarKind.LOCAL_ARRAY, var.id)
        if key not in self.memories:
            if not var.length:
                raise CompileError(f"kernel {self.definition.name}: local array {var!r} has no length")
            array = ir.ArrayType(lt.item_type(var.type, memory=True), var.length)
            slot = self.alloca(array, f"local{var.id}")
            slot.align = max(var.alignment or 1, lt.item_align(var.type))
            self.memories[key] = slot
        return self.memories[key]

    def _read_params(self) -> None:
        for param in self.definition.scalars:
            arg = self.params[(VarKind.SCALAR, param.var.id)]
            self.params[(VarKind.SCALAR, param.var.id)] = self.from_memory(arg, param.var.type)

    def _read_builtins(self) -> None:
        used = sorted(
            {
                cast(str, var.name)  # builtins are named
                for inst in walk(self.definition.body)
                for var in inst.operation.operands()
                if var.kind is VarKind.BUILTIN
            }
        )
        saved = self.builder
        self.builder = self.alloca_builder
        try:
            for name in used:
                value = read_builtin(self, name)
                if isinstance(value, ir.instructions.Instruction) and value.name.startswith("."):
                    value.name = name
                self.builtins[name] = value
        finally:
            self.builder = saved

    # -- values ------------------------------------------------------------------------------
    @property
    def contract(self) -> bool:
        """Whether float adds may fuse with a libdevice function's last multiply (the kernel contracts)."""
        return self.definition.contract

    def value(self, var: Variable) -> ir.Value:
        """The LLVM value of a variable read as an operand (registers: bool is i1)."""
        kind = var.kind
        if kind is VarKind.CONST:
            if self.per_unit is not None and self.per_unit.holds(var):
                return self.builder.load(self.per_unit.pointer(var), typ=lt.item_type(var.type))
            if self.per_unit is not None and self.per_unit.recomputes(var):
                return self.per_unit.recompute(var)
            try:
                return self.consts[var.id]
            except KeyError:
                raise CompileError(f"{var!r} is read before it is defined") from None
        if kind is VarKind.MUT:
            return self.builder.load(self.slot(var), name=f"m{var.id}.read", typ=lt.item_type(var.type))
        if kind is VarKind.CONSTANT:
            return lt.constant(var.type, var.value)
        if kind is VarKind.BUILTIN:
            return self.builtins[cast(str, var.name)]
        if kind is VarKind.SCALAR:
            return self.params[(kind, var.id)]
        raise CompileError(f"{var!r} ({kind.value}) cannot be used as a value")

    def define(self, out: Variable | None, value: ir.Value) -> None:
        """Bind an instruction's result: a CONST names the SSA value, a MUT stores to its alloca."""
        if out is None:
            return
        expected = lt.item_type(out.type)
        if value.type != expected:
            raise CompileError(f"internal: {out!r} expects {expected}, lowering produced {value.type}")
        if out.kind is VarKind.CONST and self.per_unit is not None and self.per_unit.holds(out):
            self.builder.store(value, self.per_unit.pointer(out))
        elif out.kind is VarKind.CONST:
            if isinstance(value, ir.instructions.Instruction) and value.name.startswith("."):
                value.name = f"v{out.id}"  # readable LLVM text: %v3 is the IR's %3
            self.consts[out.id] = value
        elif out.kind is VarKind.MUT:
            self.builder.store(value, self.slot(out))
        else:
            raise CompileError(f"result {out!r} is a {out.kind.value}, expected a local")

    def slot(self, var: Variable) -> ir.Value:
        """The alloca holding a MUT local (its slot in the unit's frame, when the target keeps it per unit)."""
        override = self.slot_overrides.get(var.id)
        if override is not None:
            return override
        if self.per_unit is not None and self.per_unit.holds(var):
            return self.per_unit.pointer(var)
        slot = self.slots.get(var.id)
        if slot is None:
            slot = self.slots[var.id] = self.alloca(lt.item_type(var.type), f"m{var.id}")
        return slot

    def alloca(self, llty: ir.Type, name: str) -> ir.Value:
        """An alloca in the entry block, typed as an opaque pointer."""
        slot = self.alloca_builder.alloca(llty, name=name)
        slot.type = lt.GENERIC_PTR
        return slot

    def to_memory(self, value: ir.Value, ty: Type) -> ir.Value:
        """A register value in its memory form (bool: i1 -> i8)."""
        if ty.elem.is_bool:
            return self.builder.zext(value, lt.item_type(ty, memory=True))
        return value

    def from_memory(self, value: ir.Value, ty: Type) -> ir.Value:
        """A memory value in its register form (bool: any nonzero byte is true)."""
        if ty.elem.is_bool:
            return self.builder.icmp_unsigned("!=", value, lt.constant(ty, 0, memory=True))
        return value

    # -- memories ------------------------------------------------------------------------------
    def memory_base(self, var: Variable) -> ir.Value:
        """The base pointer of a buffer, shared memory, local array or constant table."""
        if var.kind is VarKind.GLOBAL:
            return self.params[(VarKind.GLOBAL, var.id)]
        if var.kind is VarKind.SHARED:
            return self.shared_memory(var)
        if var.kind is VarKind.LOCAL_ARRAY:
            return self.local_array(var)
        if var.kind is VarKind.CONST_TABLE:
            declared = self.memories.get((VarKind.CONST_TABLE, var.id))
            if declared is None:
                raise CompileError(f"kernel {self.definition.name}: {var!r} is not a declared constant table")
            return declared
        raise CompileError(f"{var!r} ({var.kind.value}) is not an indexable memory")

    def metadata_word(self, slot: int, field: str, dim: int = 0) -> ir.Value:
        """The u32 metadata word ``field`` (and ``dim``) of buffer slot ``slot``: a by-value entry parameter.

        A buffer whose ``len`` the launch found equal to an earlier buffer's (``Param.same_len``) reads that
        buffer's word, so LLVM sees one value behind both buffers' checks and the kernel's guards.
        """
        if field == "len":
            same = self.definition.buffers[slot].same_len
            if same is not None:
                slot = same
        found = self.metadata.get((slot, field, dim))
        if found is None:
            raise CompileError(f"kernel {self.definition.name}: buffer {slot} has no {field} word in its ABI")
        return found

    # -- intrinsics and calls ----------------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Get or declare the function ``name`` (LLVM intrinsics, NVVM intrinsics, libdevice)."""
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    def call(self, name: str, ret: ir.Type, args: list[ir.Value], name_hint: str = "") -> ir.Value:
        """Call the intrinsic or function ``name`` with ``args`` (declared from their types)."""
        fn = self.declare(name, ret, [a.type for a in args])
        return self.builder.call(fn, args, name=name_hint)

    def call_in(self, builder: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        """Call ``name`` at another builder's position (a target's entry or epilogue blocks)."""
        return builder.call(self.declare(name, ret, [a.type for a in args]), args)

    def call_libdevice(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        """Call libdevice's ``name`` (``__nv_expf``); it is linked in and inlined later."""
        return self.target.math_call(self, name, ret, args)

    # -- blocks and scopes ---------------------------------------------------------------------------
    def new_block(self, hint: str) -> ir.Block:
        """A fresh basic block at the end of the function."""
        self._block_counter += 1
        return self.function.append_basic_block(f"{hint}{self._block_counter}")

    def branch_if_open(self, target: ir.Block) -> None:
        """Branch to ``target`` unless the current block already ended (break, continue, return)."""
        if not self.builder.block.is_terminated:
            self.builder.branch(target)

    def start_dead_block(self) -> None:
        """Continue in an unreachable block: code after a break/continue/return still gets lowered."""
        self.builder.position_at_end(self.new_block("dead"))

    def lower_scope(self, scope: Scope) -> None:
        """Lower every instruction of a scope into the current block (and the blocks it creates)."""
        for inst in scope.instructions:
            self.lower_instruction(inst)

    def lower_instruction(self, inst: Instruction) -> None:
        """Lower one instruction, attaching its source line; errors name the instruction."""
        if self.debug is not None:
            self.builder.debug_metadata = self.debug.location(inst.loc)
        # A target may replace some lowerings (the host's TMA and mbarriers) in its ``op_table``.
        lowering = self.target.op_table.get(type(inst.operation))
        where = f"{inst.loc.file}:{inst.loc.line}: " if inst.loc is not None else ""
        if lowering is None:
            raise CompileError(
                f"{where}kernel {self.definition.name}: {self.target.op_table.missing_message(type(inst.operation))}"
                f"\n  in instruction: {inst}"
            )
        try:
            lowering(self, inst)
        except CubeError as error:
            if "in instruction:" in str(error):
                raise
            raise type(error)(f"{where}{error}\n  in instruction: {inst}") from error
        except (TypeError, ValueError, AssertionError, KeyError) as error:
            raise CompileError(
                f"{where}kernel {self.definition.name}: lowering failed ({error!r})\n  in instruction: {inst}"
            ) from error


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", name) or "arg"


def lower_kernel(definition: KernelDefinition, target: TargetLayer) -> LoweredModule:
    """Lower a verified kernel to an LLVM module for ``target`` (``NvptxTarget(sm)`` or the host's)."""
    return KernelLowering(definition, target).lower()


def unsigned_index(lowering: KernelLowering, value: ir.Value, var: Variable) -> ir.Value:
    """An integer index widened to i64 (sign-extended for signed types, so negatives stay out of bounds)."""
    width = value.type.width
    if width == 64:
        return value
    if var.elem.kind == "int":
        return lowering.builder.sext(value, lt.I64)
    return lowering.builder.zext(value, lt.I64)


def as_u32(lowering: KernelLowering, value: ir.Value, var: Variable) -> ir.Value:
    """An integer scalar converted to i32 (truncated or extended by its signedness)."""
    width = value.type.width
    if width == 32:
        return value
    if width > 32:
        return lowering.builder.trunc(value, lt.I32)
    if var.elem.kind == "int":
        return lowering.builder.sext(value, lt.I32)
    return lowering.builder.zext(value, lt.I32)
