"""fp8 (e4m3, e5m2) conversions on the host: the same bits as PTX's ``cvt.rn.satfinite``, by integer arithmetic
on the f32 bits (the host has no fp8 instruction; ``lower_fp8`` is the GPU's form)."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.ir import F16, F32, ElemType

if TYPE_CHECKING:
    from collections.abc import Callable

    from cubepy.compiler.lower import KernelLowering

_FLOAT = ir.FloatType()
# (exponent bits, mantissa bits, bias, largest finite code, NaN code) of each OCP FP8 format.
_HOST_FORMATS = {"e4m3": (4, 3, 7, 0x7E, 0x7F), "e5m2": (5, 2, 15, 0x7B, 0x7E)}


def _f32_bits(number: float) -> int:
    return cast(int, struct.unpack("<I", struct.pack("<f", number))[0])


def _i32(value: int) -> ir.Constant:
    return ir.Constant(lt.I32, value)


def _to_fp8_host(lw: KernelLowering, value: ir.Value, dst: ElemType) -> ir.Value:
    """f32 -> fp8 (an ``i8``): round to nearest even; past the largest finite value (infinities included) that
    value with its sign; NaN the format's NaN with its sign (numpy's ml_dtypes after clipping, as the interp)."""
    b = lw.builder
    ebits, mbits, bias, max_code, nan_code = _HOST_FORMATS[dst.name]
    bits = b.bitcast(value, lt.I32)
    sign = b.and_(b.lshr(bits, _i32(24)), _i32(0x80))
    magnitude = b.and_(bits, _i32(0x7FFFFFFF))
    # Normal fp8: drop 23 - mbits mantissa bits rounding to nearest even (a carry bumps the exponent), rebias.
    shift = 23 - mbits
    odd = b.and_(b.lshr(magnitude, _i32(shift)), _i32(1))
    rounded = b.add(magnitude, b.add(_i32((1 << (shift - 1)) - 1), odd))
    normal = b.sub(b.lshr(rounded, _i32(shift)), _i32((127 - bias) << mbits))
    # Subnormal fp8: the value in units of the smallest subnormal (an exact power-of-two scaling), rounded to
    # nearest even; 1 << mbits, the smallest normal's code, comes out of it as well.
    units = b.fmul(b.bitcast(magnitude, _FLOAT), ir.Constant(_FLOAT, 2.0 ** (bias - 1 + mbits)))
    rint = lw.module.declare_intrinsic("llvm.roundeven", [_FLOAT])
    subnormal = b.fptoui(b.call(rint, [units]), lt.I32)
    min_normal = _f32_bits(2.0 ** (1 - bias))
    code = b.select(b.icmp_unsigned("<", magnitude, _i32(min_normal)), subnormal, normal)
    largest = _f32_bits(_largest(ebits, mbits, bias, max_code))
    code = b.select(b.icmp_unsigned(">=", magnitude, _i32(largest)), _i32(max_code), code)
    code = b.select(b.icmp_unsigned(">", magnitude, _i32(0x7F800000)), _i32(nan_code), code)
    return b.trunc(b.or_(code, sign), lt.I8)


def _largest(ebits: int, mbits: int, bias: int, code: int) -> float:
    exponent, mantissa = code >> mbits, code & ((1 << mbits) - 1)
    return (1 + mantissa / (1 << mbits)) * 2.0 ** (exponent - bias)


def _from_fp8_host(lw: KernelLowering, value: ir.Value, src: ElemType) -> ir.Value:
    """fp8 (an ``i8``) -> f32, exactly; NaN becomes the quiet f32 NaN with its sign, e5m2's infinity infinity."""
    b = lw.builder
    ebits, mbits, bias, _, nan_code = _HOST_FORMATS[src.name]
    code = b.zext(value, lt.I32)
    sign = b.shl(b.and_(code, _i32(0x80)), _i32(24))
    magnitude = b.and_(code, _i32(0x7F))
    exponent = b.lshr(magnitude, _i32(mbits))
    mantissa = b.and_(magnitude, _i32((1 << mbits) - 1))
    normal = b.add(b.shl(magnitude, _i32(23 - mbits)), _i32((127 - bias) << 23))
    tiny = b.fmul(b.uitofp(mantissa, _FLOAT), ir.Constant(_FLOAT, 2.0 ** (1 - bias - mbits)))
    bits = b.select(b.icmp_unsigned("==", exponent, _i32(0)), b.bitcast(tiny, lt.I32), normal)
    if src.name == "e5m2":  # IEEE-like: the top exponent is infinity (mantissa 0) or NaN
        top = b.icmp_unsigned("==", exponent, _i32((1 << ebits) - 1))
        special = b.select(b.icmp_unsigned("==", mantissa, _i32(0)), _i32(0x7F800000), _i32(0x7FC00000))
        bits = b.select(top, special, bits)
    else:  # e4m3 has no infinity: S.1111.111 is its only NaN
        bits = b.select(b.icmp_unsigned("==", magnitude, _i32(nan_code)), _i32(0x7FC00000), bits)
    return b.bitcast(b.or_(bits, sign), _FLOAT)


def convert_scalar_host(
    lw: KernelLowering,
    value: ir.Value,
    src: ElemType,
    dst: ElemType,
    other: Callable[[ir.Value, ElemType, ElemType], ir.Value],
) -> ir.Value:
    """Convert one scalar where ``src`` or ``dst`` is fp8 (the host target's ``convert_fp8``)."""
    b = lw.builder
    if src.is_fp8:
        wide = _from_fp8_host(lw, value, src)
        if dst == F32:
            return wide
        return _to_fp8_host(lw, wide, dst) if dst.is_fp8 else other(wide, F32, dst)
    if src != F32:  # f16 widens exactly; f64 and integers round to f32 once, as the interp does
        value = b.fpext(value, _FLOAT) if src == F16 else other(value, src, F32)
    return _to_fp8_host(lw, value, dst)
