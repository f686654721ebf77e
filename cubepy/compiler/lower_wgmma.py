"""Lowering of warpgroup MMA (``cubepy.ir.ops.wgmma``) to PTX ``wgmma`` instructions by inline assembly.

LLVM 22's NVPTX back end has no wgmma intrinsics, so each operation is an inline-asm block (as CUTLASS
writes them), for sm_90a:

* ``wgmma_descriptor``: ``ptrtoint`` of the ``addrspace(3)`` address (the shared-window offset), then the
  descriptor's fields with shifts and masks (bits 0-13 address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4,
  62-63 swizzle mode);
* ``wgmma_mma_async``: ``wgmma.mma_async.sync.aligned.m64n{N}k{K}.f32.{t}.{t}`` with the N/2 accumulator
  registers as ``"=f"`` outputs tied to the current values, A as a 64-bit descriptor (``"l"``) or four
  32-bit registers (``"r"``), B's descriptor, ``scale-d`` as a predicate set from a 32-bit operand, and for
  f16/bf16 the ``imm-trans-a`` / ``imm-trans-b`` immediates (1 for an MN-major tile);
* ``wgmma.fence``, ``wgmma.commit_group``, ``wgmma.wait_group N``: volatile asm with a memory clobber.

Around the fence, the commit and the wait every accumulator of the kernel goes through an empty volatile
asm that reads and rewrites its registers (CUTLASS's ``warpgroup_fence_operand``), so LLVM cannot move
reads of an accumulator across them.  Before a fence, the register A operands of the wgmmas that follow it
in its scope go through one too (packed as the instruction reads them), so their conversions are done before
the fence and ptxas has no reason to inject a ``warpgroup.arrive`` of its own.
"""

from __future__ import annotations

import weakref
from typing import cast

import attrs
import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, lowers, unsigned_index
from cubepy.errors import CompileError
from cubepy.ir import BF16, E4M3, E5M2, F16, F32, Instruction, KernelDefinition, Type, Variable, VarKind, ops
from cubepy.ir.scope import Scope, child_scopes

WGMMA_SM = 90
_FLOAT = ir.FloatType()
_PTX_TYPES = {F16: "f16", BF16: "bf16", F32: "tf32", E4M3: "e4m3", E5M2: "e5m2"}
_FIELD = 0x3FFF


def _require_sm90a(lw: KernelLowering) -> None:
    if lw.sm != WGMMA_SM:
        raise CompileError(f"wgmma needs sm_90a (the arch-specific Hopper target), got sm_{lw.sm}")


def _asm(lw: KernelLowering, ret: ir.Type, text: str, constraint: str, args: list[ir.Value]) -> ir.Value:
    ftype = ir.FunctionType(ret, [a.type for a in args])
    return lw.builder.asm(ftype, text, constraint, args, side_effect=True)


def _load_elements(lw: KernelLowering, var: Variable) -> list[ir.Value]:
    base = lw.local_array(var)
    item = lt.item_type(Type(var.elem), memory=True)
    b = lw.builder
    length = var.length or 0
    return [b.load(b.gep(base, [ir.Constant(lt.I32, i)], source_etype=item), typ=item) for i in range(length)]


def _store_elements(lw: KernelLowering, var: Variable, values: list[ir.Value]) -> None:
    base = lw.local_array(var)
    item = lt.item_type(Type(var.elem), memory=True)
    b = lw.builder
    for i, value in enumerate(values):
        b.store(value, b.gep(base, [ir.Constant(lt.I32, i)], source_etype=item))


@attrs.frozen
class _PinnedOperands:
    """The registers the sync instructions of one kernel pin: every wgmma accumulator (in program order), and
    for each ``wgmma_fence`` (by instruction id) the register A operands of the wgmmas that follow it in its
    scope before the next fence.  Found in one walk of the kernel, on its first sync instruction."""

    accumulators: tuple[Variable, ...]
    fragments_after_fence: dict[int, tuple[Variable, ...]]


def _find_pinned_operands(definition: KernelDefinition) -> _PinnedOperands:
    accumulators: dict[int, Variable] = {}
    fragments: dict[int, dict[int, Variable]] = {}

    def visit(scope: Scope) -> None:
        after_fence: dict[int, Variable] | None = None
        for inst in scope.instructions:
            op = inst.operation
            if isinstance(op, ops.WgmmaFence):
                after_fence = fragments.setdefault(id(inst), {})
            elif isinstance(op, ops.WgmmaMmaAsync):
                accumulators.setdefault(op.d.id, op.d)
                if op.a.kind is VarKind.LOCAL_ARRAY and after_fence is not None:
                    after_fence.setdefault(op.a.id, op.a)
            for child in child_scopes(op):
                visit(child)

    visit(definition.body)
    return _PinnedOperands(
        tuple(accumulators.values()), {fence: tuple(found.values()) for fence, found in fragments.items()}
    )


_PINNED: weakref.WeakKeyDictionary[KernelLowering, _PinnedOperands] = weakref.WeakKeyDictionary()


def _pinned_operands(lw: KernelLowering) -> _PinnedOperands:
    """The kernel's ``_PinnedOperands``, found once per lowering."""
    found = _PINNED.get(lw)
    if found is None:
        found = _PINNED[lw] = _find_pinned_operands(lw.definition)
    return found


def _fence_accumulators(lw: KernelLowering) -> None:
    """Read and rewrite every wgmma accumulator of the kernel through an empty volatile asm."""
    for accumulator in _pinned_operands(lw).accumulators:
        values = _load_elements(lw, accumulator)
        count = len(values)
        constraint = ",".join(["=f"] * count + [str(i) for i in range(count)])
        result = _asm(lw, ir.LiteralStructType([_FLOAT] * count), "", constraint, values)
        _store_elements(lw, accumulator, [lw.builder.extract_value(result, i) for i in range(count)])


def lower_descriptor(lw: KernelLowering, inst: Instruction) -> None:
    """The 64-bit matrix descriptor of ``smem[offset..]`` (for sm_90a)."""
    _require_sm90a(lw)
    lower_descriptor_bits(lw, inst)


def lower_descriptor_bits(lw: KernelLowering, inst: Instruction) -> None:
    """The descriptor's bits, on any target (the host's wgmma emulation reads the same descriptors)."""
    op = cast(ops.WgmmaDescriptor, inst.operation)
    b = lw.builder
    index = unsigned_index(lw, lw.value(op.offset), op.offset)
    pointer = b.gep(lw.shared_memory(op.smem), [index], source_etype=lt.item_type(op.smem.type, memory=True))
    address = lw.target.shared_address(lw, pointer)

    def field(value: ir.Value, shift: int) -> ir.Value:
        wide = value if value.type == lt.I64 else b.zext(value, lt.I64)
        masked = b.and_(b.lshr(wide, ir.Constant(lt.I64, 4)), ir.Constant(lt.I64, _FIELD))
        return b.shl(masked, ir.Constant(lt.I64, shift)) if shift else masked

    desc = b.or_(field(address, 0), field(lw.value(op.leading_byte_offset), 16))
    desc = b.or_(desc, field(lw.value(op.stride_byte_offset), 32))
    desc = b.or_(desc, ir.Constant(lt.I64, ops.WGMMA_SWIZZLES[op.swizzle] << 62))
    lw.define(inst.out, desc)


def _a_registers(lw: KernelLowering, a: Variable) -> list[ir.Value]:
    """A's registers packed into four b32: pairs of 16-bit, single tf32, quads of 8-bit elements."""
    b = lw.builder
    values = _load_elements(lw, a)
    per = 4 // a.elem.size
    packed = []
    for j in range(4):
        group = values[j * per : (j + 1) * per]
        if per == 1:
            packed.append(b.bitcast(group[0], lt.I32))
            continue
        vector: ir.Value = ir.Constant(ir.VectorType(group[0].type, per), None)
        for i, value in enumerate(group):
            vector = b.insert_element(vector, value, ir.Constant(lt.I32, i))
        packed.append(b.bitcast(vector, lt.I32))
    return packed


def lower_mma_async(lw: KernelLowering, inst: Instruction) -> None:
    """``wgmma.mma_async.sync.aligned.m64n{N}k{K}.f32.{t}.{t}`` by inline asm."""
    op = cast(ops.WgmmaMmaAsync, inst.operation)
    _require_sm90a(lw)
    b = lw.builder
    accumulators = _load_elements(lw, op.d)
    count = len(accumulators)
    from_registers = op.a.kind is VarKind.LOCAL_ARRAY
    a_args = _a_registers(lw, op.a) if from_registers else [lw.value(op.a)]
    args = [*a_args, lw.value(op.b), b.zext(lw.value(op.scale_d), lt.I32)]
    first = count
    a_text = "{" + ", ".join(f"${first + i}" for i in range(4)) + "}" if from_registers else f"${first}"
    b_index = first + len(a_args)
    scale_index = b_index + 1
    kind = _PTX_TYPES[op.elem]
    immediates = "1, 1"  # imm-scale-a, imm-scale-b: no negation
    if op.elem in (F16, BF16):  # imm-trans-a (descriptor A only), imm-trans-b: 1 reads an MN-major tile
        trans_b = f", {int(op.trans_b)}"
        immediates += trans_b if from_registers else f", {int(op.trans_a)}{trans_b}"
    d_text = "{" + ", ".join(f"${i}" for i in range(count)) + "}"
    shape = f"m64n{op.n}k{ops.wgmma_k(op.elem)}"
    text = (
        "{\n.reg .pred p;\n"
        f"setp.ne.b32 p, ${scale_index}, 0;\n"
        f"wgmma.mma_async.sync.aligned.{shape}.f32.{kind}.{kind} {d_text}, {a_text}, ${b_index}, p, {immediates};\n"
        "}"
    )
    constraint = ",".join(
        ["=f"] * count + (["r"] * 4 if from_registers else ["l"]) + ["l", "r"] + [str(i) for i in range(count)]
    )
    result = _asm(lw, ir.LiteralStructType([_FLOAT] * count), text, constraint, [*args, *accumulators])
    _store_elements(lw, op.d, [b.extract_value(result, i) for i in range(count)])


def _sync_asm(lw: KernelLowering, text: str) -> None:
    _require_sm90a(lw)
    _fence_accumulators(lw)
    _asm(lw, lt.VOID, text, "~{memory}", [])
    _fence_accumulators(lw)


def _pin_fragments(lw: KernelLowering, fragment: Variable) -> None:
    """Pack A's registers (``_a_registers``) and pass them through an empty volatile asm, storing the result
    back: their conversions and packing then happen before the fence that follows, not between it and the
    wgmma (where ptxas would inject a ``warpgroup.arrive`` of its own, C7519)."""
    b = lw.builder
    packed = _a_registers(lw, fragment)
    count = len(packed)
    constraint = ",".join(["=r"] * count + [str(i) for i in range(count)])
    result = _asm(lw, ir.LiteralStructType([lt.I32] * count), "", constraint, packed)
    item = lt.item_type(Type(fragment.elem), memory=True)
    per = 4 // fragment.elem.size
    values: list[ir.Value] = []
    for j in range(count):
        word = b.extract_value(result, j)
        if per == 1:
            values.append(b.bitcast(word, item))
            continue
        vector = b.bitcast(word, ir.VectorType(item, per))
        values.extend(b.extract_element(vector, ir.Constant(lt.I32, i)) for i in range(per))
    _store_elements(lw, fragment, values)


def lower_fence(lw: KernelLowering, inst: Instruction) -> None:
    """``wgmma.fence.sync.aligned``, after pinning the register A operands of the wgmmas it precedes."""
    _require_sm90a(lw)
    for fragment in _pinned_operands(lw).fragments_after_fence.get(id(inst), ()):
        _pin_fragments(lw, fragment)
    _sync_asm(lw, "wgmma.fence.sync.aligned;")


def lower_commit(lw: KernelLowering, inst: Instruction) -> None:
    """``wgmma.commit_group.sync.aligned``."""
    _sync_asm(lw, "wgmma.commit_group.sync.aligned;")


def lower_wait(lw: KernelLowering, inst: Instruction) -> None:
    """``wgmma.wait_group.sync.aligned N``."""
    op = cast(ops.WgmmaWaitGroup, inst.operation)
    _sync_asm(lw, f"wgmma.wait_group.sync.aligned {op.pending};")


for _op_type, _lowering in {
    ops.WgmmaDescriptor: lower_descriptor,
    ops.WgmmaMmaAsync: lower_mma_async,
    ops.WgmmaFence: lower_fence,
    ops.WgmmaCommitGroup: lower_commit,
    ops.WgmmaWaitGroup: lower_wait,
}.items():
    lowers(_op_type)(_lowering)
