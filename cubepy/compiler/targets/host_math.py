"""The host target's math: libdevice's functions as C library calls, and ``exp`` of f32 as inline arithmetic.

A libdevice function becomes the C library's that the operation's record names (``OpRecord.c_library``:
``__nv_sinf`` -> ``sinf``); ``powi`` and ``rhypot``, which the C library lacks (a record with ``libdevice``
and no ``c_library``), are composed from ``pow`` and ``hypot`` here (``COMPOSED``).

A call of ``expf`` stops LLVM's loop vectorizer (the C library has no vector form it knows of here), so ``exp``
on f32 (and on f16/bf16, computed through f32) is arithmetic, in f32 so that a 512-bit register holds 16
lanes: ``e^x = 2^k * e^r`` with ``k = rint(x / ln 2)``, ``r = x - k ln 2`` (ln 2 in two f32 parts, each
product fused) and ``e^r = 1 + r (1 + r t(r))``, ``t`` a degree-5 polynomial (the Chebyshev interpolant of
``(e^r - 1 - r) / r^2`` on ``[-ln2/2, ln2/2]``, f32 coefficients; relative error 7e-10), then the scaling by
``2^k``: one ``llvm.ldexp`` where the CPU has it as a vector instruction (x86 with AVX-512: ``vscalefps``,
12% off a row softmax), else two exact multiplications by powers of two (``2^k`` itself can overflow f32's
exponent at ``k = 128``); both round once, so they give the same bits.  That is within
one ulp of the exact value (0.87 is the worst of 8 million samples; subnormal results included); glibc's
``expf`` measures 0.502 ulp, numpy's (the interp's) 2.44, libdevice's ``__nv_expf`` is documented at 2, and
the runtimes are compared under the cpu runtime's stated bound.  An f64 evaluation (0.51 ulp) ran at half
the speed: the exponential was three quarters of a row softmax's time.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.errors import CompileError
from cubepy.ir.ops import all_operations

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering

F32 = ir.FloatType()
I32 = ir.IntType(32)
LOG2_E = 1.4426950408889634
LN2_HIGH = float.fromhex("0x1.62e43p-1")  # f32(ln 2), and the f32 nearest to what it misses
LN2_LOW = float.fromhex("-0x1.05c61p-29")
# e^x of an f32 is +inf above 88.73 and rounds to 0 below -103.98: the clamp keeps k's exponent valid.
EXP_CLAMP = (-104.0, 89.0)
# t(r) = (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2], lowest degree first: numpy.polynomial.Chebyshev.interpolate
# of it, degree 5, .convert(kind=Polynomial).coef rounded to f32 (the tests derive them again and compare).
EXP_TAIL = tuple(
    float.fromhex(c)
    for c in ("0x1p-1", "0x1.555556p-3", "0x1.5554eap-5", "0x1.1110ep-7", "0x1.6d4316p-10", "0x1.a124e4p-13")
)


# libdevice base names the C library lacks, composed by ``math_call`` (the records name no ``c_library``).
COMPOSED = frozenset({"powi", "rhypot"})


@functools.cache
def c_functions() -> dict[str, str]:
    """libdevice's function name -> the C library's (``__nv_sinf`` -> ``sinf``, ``__nv_sin`` -> ``sin``)."""
    names = {r.libdevice: r.c_library for r in (cls.RECORD for cls in all_operations()) if r.c_library}
    return {f"__nv_{base}{suffix}": f"{c}{suffix}" for base, c in names.items() for suffix in ("f", "")}


def math_call(
    lw: KernelLowering, name: str, ret: ir.Type, args: list[ir.Value], *, vector_ldexp: bool = False
) -> ir.Value:
    """The host's form of the libdevice function ``name`` applied to ``args``.

    ``vector_ldexp``: the CPU scales a vector by powers of two in one instruction (see ``expf``).
    """
    b = lw.builder
    single = ret == lt.F32_TYPE
    if name == "__nv_expf":  # inline, so that a loop over units calling it still vectorizes
        return expf(lw, args[0], vector_ldexp=vector_ldexp)
    if name in ("__nv_powif", "__nv_powi"):  # exact for |n| < 2**24 (f32) / 2**53 (f64)
        exponent = b.sitofp(args[1], ret)
        return lw.call("powf" if single else "pow", ret, [args[0], exponent])
    if name in ("__nv_rhypotf", "__nv_rhypot"):
        return b.fdiv(ir.Constant(ret, 1.0), lw.call("hypotf" if single else "hypot", ret, args))
    c_name = c_functions().get(name)
    if c_name is None:
        raise CompileError(f"the host target has no C library function for libdevice's {name}")
    return lw.call(c_name, ret, args)


def expf(lw: KernelLowering, x: ir.Value, *, vector_ldexp: bool = False) -> ir.Value:
    """``e^x`` of an f32 value in f32 arithmetic (16 lanes to a 512-bit register, not 8).

    ``vector_ldexp``: scale by ``2^k`` with ``llvm.ldexp`` (one ``vscalefps`` with AVX-512), else by two
    multiplications; either rounds once, so both give the same bits.
    """
    b = lw.builder

    def c(value: float) -> ir.Constant:
        return ir.Constant(F32, value)

    def fma(p: ir.Value, q: ir.Value, r: ir.Value) -> ir.Value:
        return lw.call("llvm.fma.f32", F32, [p, q, r])

    low, high = EXP_CLAMP
    clamped = lw.call("llvm.minnum.f32", F32, [lw.call("llvm.maxnum.f32", F32, [x, c(low)]), c(high)])
    k = lw.call("llvm.rint.f32", F32, [b.fmul(clamped, c(LOG2_E))])
    minus_k = b.fneg(k)
    r = fma(minus_k, c(LN2_HIGH), clamped)
    r = fma(minus_k, c(LN2_LOW), r)
    tail: ir.Value = c(EXP_TAIL[-1])
    for coefficient in reversed(EXP_TAIL[:-1]):
        tail = fma(tail, r, c(coefficient))
    series = fma(fma(tail, r, c(1.0)), r, c(1.0))  # 1 + r * (1 + r * tail)
    k_int = b.fptosi(k, I32)
    if vector_ldexp:
        result = lw.call("llvm.ldexp.f32.i32", F32, [series, k_int])
    else:
        half = b.ashr(k_int, ir.Constant(I32, 1))

        def power_of_two(exponent: ir.Value) -> ir.Value:
            return b.bitcast(b.shl(b.add(exponent, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)

        result = b.fmul(b.fmul(series, power_of_two(half)), power_of_two(b.sub(k_int, half)))
    return b.select(b.fcmp_unordered("uno", x, x), x, result)
