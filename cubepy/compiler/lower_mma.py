"""Lowering of register-fragment tensor-core ops (``cubepy.ir.ops.mma``) to NVVM ``mma``/``ldmatrix``/``stmatrix``.

A fragment is its LOCAL_ARRAY alloca, read and written as the 32-bit registers PTX wants (f16 pairs as
``<2 x half>``, bf16 pairs, tf32 values and s8 quadruples as ``i32``; f32 and s32 accumulators as
themselves), so after SROA it lives in registers.  Intrinsic names are LLVM's
(``llvm.nvvm.mma.m16n8k16.row.col.f32.f32`` is f16 inputs with f32 accumulators; bf16, tf32 and s8 are
named by their input type); shared addresses keep address space 3 so ptxas sees ``.shared``.
"""

from __future__ import annotations

from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, lowers, unsigned_index
from cubepy.ir import F16, ElemType, Instruction, Type, Variable, ops

_HALF2 = ir.VectorType(ir.HalfType(), 2)
_FLOAT = ir.FloatType()
REGISTER_BYTES = 4


def _register_type(elem: ElemType) -> ir.Type:
    """The type one 32-bit register of a fragment of ``elem`` is passed as."""
    if elem == F16:
        return _HALF2
    if elem.name == "f32":
        return _FLOAT
    return lt.I32  # bf16 pairs, s8 quadruples, s32, and tf32 inputs (see ``_input_register_type``)


def _input_register_type(elem: ElemType) -> ir.Type:
    return lt.I32 if elem.name == "f32" else _register_type(elem)  # tf32 travels as .b32


def _fragment(lw: KernelLowering, var: Variable) -> tuple[ir.Value, ir.Type, int]:
    """The alloca (aligned for 32-bit access), its item type and items per register."""
    slot = lw.local_array(var)
    slot.align = max(slot.align or 1, REGISTER_BYTES)
    return slot, lt.item_type(Type(var.elem), memory=True), REGISTER_BYTES // var.elem.size


def _read_registers(lw: KernelLowering, var: Variable, reg_type: ir.Type) -> list[ir.Value]:
    base, item, per_reg = _fragment(lw, var)
    b = lw.builder
    return [
        b.load(b.gep(base, [ir.Constant(lt.I32, r * per_reg)], source_etype=item), typ=reg_type, align=REGISTER_BYTES)
        for r in range((var.length or 0) // per_reg)
    ]


def _write_registers(lw: KernelLowering, var: Variable, values: list[ir.Value]) -> None:
    base, item, per_reg = _fragment(lw, var)
    b = lw.builder
    for r, value in enumerate(values):
        b.store(value, b.gep(base, [ir.Constant(lt.I32, r * per_reg)], source_etype=item), align=REGISTER_BYTES)


def _unpack(lw: KernelLowering, result: ir.Value, count: int) -> list[ir.Value]:
    if count == 1 and not isinstance(result.type, ir.LiteralStructType):
        return [result]
    return [lw.builder.extract_value(result, r) for r in range(count)]


def lower_mma_sync(lw: KernelLowering, inst: Instruction) -> None:
    """``mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c>``."""
    op = cast(ops.MmaSync, inst.operation)
    shape = ops.mma_shape(op.shape)
    input_type = _input_register_type(op.a.elem)
    acc_type = _register_type(op.c.elem)
    args = (
        _read_registers(lw, op.a, input_type)
        + _read_registers(lw, op.b, input_type)
        + _read_registers(lw, op.c, acc_type)
    )
    kind = {"f16": "f32.f32", "bf16": "bf16", "f32": "tf32", "i8": "s8"}[op.a.elem.name]
    name = f"llvm.nvvm.mma.{shape.name}.row.col.{kind}"
    result = lw.call(name, ir.LiteralStructType([acc_type] * shape.c.length), args)
    _write_registers(lw, op.d, _unpack(lw, result, shape.c.length))


def _rows_address(lw: KernelLowering, op: ops.Ldmatrix | ops.Stmatrix) -> ir.Value:
    index = unsigned_index(lw, lw.value(op.offset), op.offset)
    item = lt.item_type(op.memory.type, memory=True)
    return lw.builder.gep(lw.memory_base(op.memory), [index], source_etype=item)


def _matrix_name(verb: str, op: ops.Ldmatrix | ops.Stmatrix) -> str:
    return f"llvm.nvvm.{verb}.sync.aligned.m8n8.x{op.count}{'.trans' if op.trans else ''}.b16.p3"


def lower_ldmatrix(lw: KernelLowering, inst: Instruction) -> None:
    """``ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16``."""
    op = cast(ops.Ldmatrix, inst.operation)
    ret = lt.I32 if op.count == 1 else ir.LiteralStructType([lt.I32] * op.count)
    result = lw.call(_matrix_name("ldmatrix", op), ret, [_rows_address(lw, op)])
    _write_registers(lw, op.fragment, _unpack(lw, result, op.count))


def lower_stmatrix(lw: KernelLowering, inst: Instruction) -> None:
    """``stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`` (sm_90)."""
    op = cast(ops.Stmatrix, inst.operation)
    address = _rows_address(lw, op)
    registers = _read_registers(lw, op.fragment, lt.I32)
    fn = lw.declare(_matrix_name("stmatrix", op), ir.VoidType(), [address.type] + [lt.I32] * op.count)
    lw.builder.call(fn, [address, *registers])


for _op_type, _lowering in {
    ops.MmaSync: lower_mma_sync,
    ops.Ldmatrix: lower_ldmatrix,
    ops.Stmatrix: lower_stmatrix,
}.items():
    lowers(_op_type)(_lowering)
