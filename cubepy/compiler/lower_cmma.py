"""Lowering of cooperative matrices (``cubepy.ir.ops.cmma``) to the NVVM ``wmma.m16n16k16`` intrinsics.

A fragment is its LOCAL_ARRAY alloca; each operation loads the registers it needs from it and stores
the registers it produces back, so after SROA the fragment lives in registers.  Register forms (LLVM's
``IntrinsicsNVPTX.td``): f16 ``a``/``b`` are 8 x ``<2 x half>``, bf16 ``a``/``b`` 4 x ``i32`` (bf16 pairs),
f32 accumulators 8 x ``float``, f16 accumulators 4 x ``<2 x half>``.  Memory addresses keep their
address space (``.p3`` shared, ``.p1`` global) so ptxas sees ``wmma.load/store.shared``/``.global``.
"""

from __future__ import annotations

from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, lowers, unsigned_index
from cubepy.errors import CompileError
from cubepy.ir import F16, F32, ElemType, Instruction, Type, Variable, VarKind, ops

_HALF2 = ir.VectorType(ir.HalfType(), 2)
_FLOAT = ir.FloatType()
_HALF = ir.HalfType()


def _registers(ident: str, elem: ElemType) -> tuple[ir.Type, int, int]:
    """(register type, register count, fragment elements per register) of a fragment."""
    if ident == "accumulator":
        return (_FLOAT, 8, 1) if elem == F32 else (_HALF2, 4, 2)
    return (_HALF2, 8, 2) if elem == F16 else (lt.I32, 4, 2)


def _type_suffix(elem: ElemType) -> str:
    return elem.name  # "f16", "bf16", "f32"


def _read_registers(lw: KernelLowering, var: Variable, ident: str) -> list[ir.Value]:
    reg_type, count, per_reg = _registers(ident, var.elem)
    base = lw.local_array(var)
    item = lt.item_type(Type(var.elem), memory=True)
    b = lw.builder
    return [
        b.load(b.gep(base, [ir.Constant(lt.I32, i * per_reg)], source_etype=item), typ=reg_type) for i in range(count)
    ]


def _write_registers(lw: KernelLowering, var: Variable, ident: str, result: ir.Value) -> None:
    _reg_type, count, per_reg = _registers(ident, var.elem)
    base = lw.local_array(var)
    item = lt.item_type(Type(var.elem), memory=True)
    b = lw.builder
    for i in range(count):
        b.store(b.extract_value(result, i), b.gep(base, [ir.Constant(lt.I32, i * per_reg)], source_etype=item))


def _address(lw: KernelLowering, memory: Variable, offset: Variable) -> tuple[ir.Value, str]:
    """``&memory[offset]`` in its own address space, and the intrinsic's pointer suffix."""
    if memory.kind not in (VarKind.SHARED, VarKind.GLOBAL):
        raise CompileError(f"cmma memory {memory!r} must be shared or global")
    index = unsigned_index(lw, lw.value(offset), offset)
    pointer = lw.builder.gep(lw.memory_base(memory), [index], source_etype=lt.item_type(memory.type, memory=True))
    return pointer, ("p3" if memory.kind is VarKind.SHARED else "p1")


def _struct(reg_type: ir.Type, count: int) -> ir.LiteralStructType:
    return ir.LiteralStructType([reg_type] * count)


def lower_fill(lw: KernelLowering, inst: Instruction) -> None:
    """Store the value into every element of the fragment."""
    op = cast(ops.CmmaFill, inst.operation)
    base = lw.local_array(op.fragment)
    item = lt.item_type(Type(op.fragment.elem), memory=True)
    value = lw.value(op.value)
    assert op.fragment.length is not None  # fragments are local arrays of a fixed length
    for i in range(op.fragment.length):
        lw.builder.store(value, lw.builder.gep(base, [ir.Constant(lt.I32, i)], source_etype=item))


def lower_load(lw: KernelLowering, inst: Instruction) -> None:
    """``wmma.load.{a,b,c}.sync.aligned.{row,col}.m16n16k16``."""
    op = cast(ops.CmmaLoad, inst.operation)
    pointer, space = _address(lw, op.memory, op.offset)
    which = "c" if op.ident == "accumulator" else op.ident
    reg_type, count, _ = _registers(op.ident, op.fragment.elem)
    name = f"llvm.nvvm.wmma.m16n16k16.load.{which}.{op.layout}.stride.{_type_suffix(op.fragment.elem)}.{space}"
    result = lw.call(name, _struct(reg_type, count), [pointer, lw.value(op.stride)])
    _write_registers(lw, op.fragment, op.ident, result)


def lower_execute(lw: KernelLowering, inst: Instruction) -> None:
    """``wmma.mma.sync.aligned.{row,col}.{row,col}.m16n16k16.f32.{f16,bf16}`` with f32 accumulators."""
    op = cast(ops.CmmaExecute, inst.operation)
    args = _read_registers(lw, op.a, "a") + _read_registers(lw, op.b, "b") + _read_registers(lw, op.c, "accumulator")
    kind = "f32.f32" if op.a.elem == F16 else "bf16"
    name = f"llvm.nvvm.wmma.m16n16k16.mma.{op.a_layout}.{op.b_layout}.{kind}"
    result = lw.call(name, _struct(_FLOAT, 8), args)
    _write_registers(lw, op.d, "accumulator", result)


def lower_store(lw: KernelLowering, inst: Instruction) -> None:
    """``wmma.store.d.sync.aligned.{row,col}.m16n16k16``."""
    op = cast(ops.CmmaStore, inst.operation)
    pointer, space = _address(lw, op.memory, op.offset)
    registers = _read_registers(lw, op.fragment, "accumulator")
    name = f"llvm.nvvm.wmma.m16n16k16.store.d.{op.layout}.stride.{_type_suffix(op.fragment.elem)}.{space}"
    fn = lw.declare(name, ir.VoidType(), [pointer.type] + [r.type for r in registers] + [lt.I32])
    lw.builder.call(fn, [pointer, *registers, lw.value(op.stride)])


def lower_cast(lw: KernelLowering, inst: Instruction) -> None:
    """Convert element by element (accumulators keep the same element order in both types)."""
    op = cast(ops.CmmaCast, inst.operation)
    b = lw.builder
    src_item = lt.item_type(Type(op.input.elem), memory=True)
    dst_item = lt.item_type(Type(op.output.elem), memory=True)
    src, dst = lw.local_array(op.input), lw.local_array(op.output)
    assert op.output.length is not None  # fragments are local arrays of a fixed length
    for i in range(op.output.length):
        index = [ir.Constant(lt.I32, i)]
        value = b.load(b.gep(src, index, source_etype=src_item), typ=src_item)
        if src_item != dst_item:
            value = b.fptrunc(value, dst_item) if op.input.elem == F32 else b.fpext(value, dst_item)
        b.store(value, b.gep(dst, index, source_etype=dst_item))


for _op_type, _lowering in {
    ops.CmmaFill: lower_fill,
    ops.CmmaLoad: lower_load,
    ops.CmmaExecute: lower_execute,
    ops.CmmaStore: lower_store,
    ops.CmmaCast: lower_cast,
}.items():
    lowers(_op_type)(_lowering)
