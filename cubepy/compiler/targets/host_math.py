"""The host target's math: libdevice's functions as C library calls, and ``exp`` of f32 as inline arithmetic.

A libdevice name becomes the C library's (``__nv_sinf`` -> ``sinf``); ``powi`` and ``rhypot``, which the C
library lacks, are composed from ``pow`` and ``hypot``.

A call of ``expf`` stops LLVM's loop vectorizer (the C library has no vector form it knows of here), so ``exp``
on f32 (and on f16/bf16, computed through f32) is arithmetic: in f64, ``e^x = 2^k * e^r`` with
``k = rint(x / ln 2)`` and ``|r| <= ln(2) / 2``, ``e^r`` by its Taylor polynomial of degree 8 (relative
error below 2.2e-10), the product rounded once to f32.  That is within 0.51 ulp of the exact value
(f32 subnormal results included: the f64 product is normal and the one rounding places it); glibc's
``expf`` measures 0.502 ulp, numpy's (the interp's) 2.42, and the runtimes are compared under the cpu
runtime's stated bound.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering

F64 = ir.DoubleType()
I64 = ir.IntType(64)
LOG2_E = 1.4426950408889634
LN2_HIGH = 0.6931471805599453  # ln 2 rounded to f64, and what it misses
LN2_LOW = 2.3190468138462996e-17
# e^x of an f32 is +inf above 88.73 and rounds to 0 below -103.98: the clamp keeps k's exponent valid.
EXP_CLAMP = (-104.0, 89.0)
TAYLOR_DEGREE = 8


def math_call(lw: KernelLowering, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    """The host's form of the libdevice function ``name`` applied to ``args``."""
    b = lw.builder
    single = ret == lt.F32_TYPE
    if name == "__nv_expf":  # inline, so that a loop over units calling it still vectorizes
        return expf(lw, args[0])
    if name in ("__nv_powif", "__nv_powi"):  # exact for |n| < 2**24 (f32) / 2**53 (f64)
        exponent = b.sitofp(args[1], ret)
        return lw.call("powf" if single else "pow", ret, [args[0], exponent])
    if name in ("__nv_rhypotf", "__nv_rhypot"):
        return b.fdiv(ir.Constant(ret, 1.0), lw.call("hypotf" if single else "hypot", ret, args))
    return lw.call(name.removeprefix("__nv_"), ret, args)


def expf(lw: KernelLowering, x: ir.Value) -> ir.Value:
    """``e^x`` of an f32 value (NaN stays NaN, +-inf give inf and 0)."""
    b = lw.builder
    wide = b.fpext(x, F64)
    low, high = (ir.Constant(F64, bound) for bound in EXP_CLAMP)
    clamped = lw.call("llvm.minnum.f64", F64, [lw.call("llvm.maxnum.f64", F64, [wide, low]), high])
    k = lw.call("llvm.rint.f64", F64, [b.fmul(clamped, ir.Constant(F64, LOG2_E))])
    minus_k = b.fneg(k)
    r = lw.call("llvm.fma.f64", F64, [minus_k, ir.Constant(F64, LN2_HIGH), clamped])
    r = lw.call("llvm.fma.f64", F64, [minus_k, ir.Constant(F64, LN2_LOW), r])
    series: ir.Value = ir.Constant(F64, 1.0 / math.factorial(TAYLOR_DEGREE))
    for power in range(TAYLOR_DEGREE - 1, -1, -1):
        series = lw.call("llvm.fma.f64", F64, [series, r, ir.Constant(F64, 1.0 / math.factorial(power))])
    exponent = b.add(b.fptosi(k, I64), ir.Constant(I64, 1023))
    scale = b.bitcast(b.shl(exponent, ir.Constant(I64, 52)), F64)
    result = b.fptrunc(b.fmul(series, scale), lt.F32_TYPE)
    return b.select(b.fcmp_unordered("uno", x, x), x, result)
