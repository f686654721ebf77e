"""Conversions from and to the 8-bit floats e4m3 and e5m2, through PTX's ``cvt`` (sm_89 and later).

An fp8 value is one byte (``i8``) in registers and memory.  PTX converts fp8 in pairs; this lowering
uses the low byte (or half) of each pair, by inline assembly, since LLVM has no fp8 type:

* f32 -> fp8: ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b`` (``b`` lands in the low byte);
* f16 -> fp8: ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f16x2 d, a`` (the low half lands in the low byte);
* fp8 -> f16: ``cvt.rn.f16x2.{e4m3x2,e5m2x2} d, a`` (exact); fp8 -> f32 is that, then f16 -> f32 (exact).

The cpu runtime has no such instruction: ``targets/host_fp8.py`` computes the same bits with integer arithmetic.

``.satfinite``: a magnitude past the largest finite value (448 for e4m3, 57344 for e5m2), infinities
included, becomes that value with its sign; NaN stays NaN.  Other types go through f32 (a value of
f64 is rounded to f32 first, as the interp does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.errors import CompileError
from cubepy.ir import F16, F32, ElemType, Type

if TYPE_CHECKING:
    from collections.abc import Callable

    from cubepy.compiler.lower import KernelLowering

FP8_MIN_SM = 89
_HALF = ir.HalfType()
_FLOAT = ir.FloatType()


def _asm(lw: KernelLowering, ret: ir.Type, text: str, constraint: str, args: list[ir.Value]) -> ir.Value:
    ftype = ir.FunctionType(ret, [a.type for a in args])
    return lw.builder.asm(ftype, text, constraint, args, side_effect=False)


def _check_arch(lw: KernelLowering) -> None:
    if lw.sm < FP8_MIN_SM:
        raise CompileError(f"fp8 conversions need sm_{FP8_MIN_SM} or later (cvt ... e4m3x2/e5m2x2), got sm_{lw.sm}")


def _to_fp8(lw: KernelLowering, value: ir.Value, src: ElemType, dst: ElemType) -> ir.Value:
    """One scalar of f16 or f32 to fp8 (an ``i8``)."""
    b = lw.builder
    fmt = f"{dst.name}x2"
    if src == F16:
        pair = b.zext(b.bitcast(value, lt.I16), lt.I32)
        bits = _asm(lw, lt.I16, f"cvt.rn.satfinite.{fmt}.f16x2 $0, $1;", "=h,r", [pair])
    else:
        bits = _asm(lw, lt.I16, f"cvt.rn.satfinite.{fmt}.f32 $0, $1, $1;", "=h,f", [value])
    return b.trunc(bits, lt.I8)


def _from_fp8(lw: KernelLowering, value: ir.Value, src: ElemType) -> ir.Value:
    """One fp8 scalar (an ``i8``) to f16 (exact)."""
    b = lw.builder
    pair = _asm(lw, lt.I32, f"cvt.rn.f16x2.{src.name}x2 $0, $1;", "=r,h", [b.zext(value, lt.I16)])
    return b.bitcast(b.trunc(pair, lt.I16), _HALF)


def convert_scalar(
    lw: KernelLowering,
    value: ir.Value,
    src: ElemType,
    dst: ElemType,
    other: Callable[[ir.Value, ElemType, ElemType], ir.Value],
) -> ir.Value:
    """Convert one scalar where ``src`` or ``dst`` is fp8 by PTX's ``cvt`` (the NVPTX target's ``convert_fp8``)."""
    _check_arch(lw)
    b = lw.builder
    if src.is_fp8:
        half = _from_fp8(lw, value, src)
        if dst == F16:
            return half
        wide = b.fpext(half, _FLOAT)
        return wide if dst == F32 else (_to_fp8(lw, wide, F32, dst) if dst.is_fp8 else other(wide, F32, dst))
    if src not in (F16, F32):
        value, src = other(value, src, F32), F32
    return _to_fp8(lw, value, src, dst)


def convert(
    lw: KernelLowering,
    value: ir.Value,
    src: ElemType,
    dst: ElemType,
    line: int,
    other: Callable[[ir.Value, ElemType, ElemType], ir.Value],
) -> ir.Value:
    """Convert ``value`` (a scalar or a line of ``line`` lanes) where ``src`` or ``dst`` is fp8."""
    if line == 1:
        return lw.target.convert_fp8(lw, value, src, dst, other)
    b = lw.builder
    result: ir.Value = ir.Constant(lt.item_type(Type(dst, line)), None)
    for lane in range(line):
        index = ir.Constant(lt.I32, lane)
        one = lw.target.convert_fp8(lw, b.extract_element(value, index), src, dst, other)
        result = b.insert_element(result, one, index)
    return result
