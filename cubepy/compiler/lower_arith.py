"""Lowering of arithmetic, comparisons, conversions and assignment.

Integer semantics match the interp exactly, including where LLVM would leave them undefined:

* ``floordiv``/``mod`` are Python's (floor; the remainder takes the divisor's sign), ``div_trunc`` and
  ``rem_trunc`` are C's.  Division by zero gives CUDA's values (quotient all ones / -1, remainder =
  dividend) and ``MIN / -1`` wraps; LLVM's ``sdiv``/``udiv`` are UB there, so the divisor is replaced
  by 1 with a select and the result patched afterwards.
* shift amounts >= the bit width give 0 (``shl``, logical ``shr``) or the sign fill (arithmetic
  ``shr``); LLVM shifts by that much are poison, so the amount is clamped first.
* float -> int casts saturate and map NaN to 0 (``llvm.fptosi.sat``); ``round`` is half-to-even;
  float ``min``/``max`` return the non-NaN operand (``minnum``/``maxnum``).
* float ``floordiv``/``mod`` follow numpy's ``npy_divmod`` step by step (``fmod`` from libdevice, since
  LLVM's ``frem`` lowers to an inexact sequence on NVPTX).

Transcendental functions call libdevice; f16/bf16 compute them in f32.

Fast math (``KernelDefinition.fastmath``, on the GPU target only): f32 ``exp2``, ``exp``, ``log2``, ``log``,
``sin``, ``cos``, ``rsqrt`` and ``/`` become the approximate PTX instructions nvcc's ``-use_fast_math`` emits
(``ex2.approx.ftz.f32``, ``lg2.approx.ftz.f32``, ...; ``exp(x) = ex2(x * log2 e)``, ``log(x) = lg2(x) * ln 2``).
The host target and the interp keep the accurate functions, which meet every fast-math bound
(docs/semantics/math-accuracy.md).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, lowers
from cubepy.errors import CompileError
from cubepy.ir import BF16, F16, F32, F64, ElemType, Instruction, Type, ops

# IR operation -> libdevice base name (``__nv_<name>f`` for f32, ``__nv_<name>`` for f64), from the records
# (``OpRecord.libdevice``); ``powi``, whose exponent is an integer, lowers through ``powi()`` below.
LIBDEVICE_FUNCTIONS = {
    cls.RECORD.name: cls.RECORD.libdevice
    for cls in (*ops.UNARY_OPS, *ops.BINARY_OPS)
    if cls.RECORD.libdevice and cls is not ops.Powi
}


def _f32(value: float) -> float:
    """``value`` rounded to the nearest f32."""
    return cast(float, struct.unpack("f", struct.pack("f", value))[0])


# to_degrees/to_radians multiply by one constant (f32 compute, f64), rounded to the compute type first
# as numpy's ``npy_degreesf`` (``x * (180.0f / NPY_PIf)``) does.
_ANGLE_FACTORS = {
    "to_degrees": (_f32(180.0 / _f32(math.pi)), 180.0 / math.pi),
    "to_radians": (_f32(_f32(math.pi) / 180.0), math.pi / 180.0),
}
# Fast math's f32 forms (NVPTX intrinsics named by their PTX instruction); exp and log scale ex2/lg2 by f32 constants.
FAST_UNARY_INTRINSICS = {
    "exp2": "llvm.nvvm.ex2.approx.ftz.f32",
    "exp": "llvm.nvvm.ex2.approx.ftz.f32",
    "log2": "llvm.nvvm.lg2.approx.ftz.f",
    "log": "llvm.nvvm.lg2.approx.ftz.f",
    "sin": "llvm.nvvm.sin.approx.ftz.f",
    "cos": "llvm.nvvm.cos.approx.ftz.f",
    "rsqrt": "llvm.nvvm.rsqrt.approx.ftz.f",
}
FAST_DIV_INTRINSIC = "llvm.nvvm.div.approx.ftz.f"
FAST_MUL_INTRINSIC = "llvm.nvvm.mul.rn.ftz.f"  # mul.rn.ftz.f32: exp's and log's scaling, as nvcc's FMUL.FTZ
_FAST_LOG2_E = _f32(1 / math.log(2))  # 0x3FB8AA3B, nvcc's __expf constant
_FAST_LN_2 = _f32(math.log(2))  # 0x3F317218, nvcc's __logf constant
ROUNDING_INTRINSICS = {"floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc", "round": "llvm.roundeven"}
_HALF_TYPES = (F16, BF16)


# -- small helpers shared with the other families ----------------------------------------------------
def intrinsic(lw: KernelLowering, base: str, args: list[ir.Value], ret: ir.Type | None = None) -> ir.Value:
    """Call the overloaded LLVM intrinsic ``base`` mangled by its first argument's type."""
    llty = args[0].type
    return lw.call(f"{base}.{lt.intrinsic_suffix(llty)}", ret or llty, args)


def map_lanes(lw: KernelLowering, fn: Callable[..., ir.Value], args: list[ir.Value], out: ir.Type) -> ir.Value:
    """Apply a scalar function lane by lane when ``out`` is a vector (scalars pass straight through)."""
    if not isinstance(out, ir.VectorType):
        return fn(*args)
    b = lw.builder
    result = ir.Constant(out, ir.Undefined)
    for lane in range(out.count):
        index = ir.Constant(lt.I32, lane)
        lanes = [b.extract_element(a, index) if isinstance(a.type, ir.VectorType) else a for a in args]
        result = b.insert_element(result, fn(*lanes), index)
    return result


def splat_value(lw: KernelLowering, value: ir.Value, count: int) -> ir.Value:
    """Broadcast a scalar SSA value to a vector of ``count`` lanes."""
    b = lw.builder
    vec_t = ir.VectorType(value.type, count)
    first = b.insert_element(ir.Constant(vec_t, ir.Undefined), value, ir.Constant(lt.I32, 0))
    mask = ir.Constant(ir.VectorType(lt.I32, count), [0] * count)
    return b.shuffle_vector(first, ir.Constant(vec_t, ir.Undefined), mask)


def libdevice_name(base: str, elem: ElemType) -> str:
    """libdevice's function for ``base`` on ``elem``: ``__nv_<base>`` for f64, ``__nv_<base>f`` otherwise."""
    return f"__nv_{base}{'' if elem is F64 else 'f'}"


def call_libdevice_math(lw: KernelLowering, base: str, args: list[ir.Value], elem: ElemType) -> ir.Value:
    """``__nv_<base>[f]`` applied lane-wise; f16/bf16 arguments are computed in f32."""
    b = lw.builder
    compute = F64 if elem is F64 else F32
    scalar_t = lt.elem_type(compute)
    fn_name = libdevice_name(base, elem)
    out_t = args[0].type
    if elem in _HALF_TYPES:
        args = [b.fpext(a, _with_scalar(a.type, scalar_t)) for a in args]
    wide_t = args[0].type
    result = map_lanes(lw, lambda *xs: lw.call_libdevice(fn_name, scalar_t, list(xs)), args, wide_t)
    return b.fptrunc(result, out_t) if elem in _HALF_TYPES else result


def nextafter_half(lw: KernelLowering, x: ir.Value, y: ir.Value) -> ir.Value:
    """nextafter on one f16/bf16 value by its bits: away from zero is bits + 1, toward zero bits - 1."""
    b = lw.builder
    bits_t = lt.I16
    xb, yb = b.bitcast(x, bits_t), b.bitcast(y, bits_t)
    zero = ir.Constant(x.type, 0.0)
    smallest = b.or_(b.and_(yb, ir.Constant(bits_t, 0x8000)), ir.Constant(bits_t, 1))  # +-the least subnormal
    away = b.icmp_unsigned("==", b.fcmp_ordered("<", x, y), b.fcmp_ordered(">", x, zero))
    stepped = b.select(away, b.add(xb, ir.Constant(bits_t, 1)), b.sub(xb, ir.Constant(bits_t, 1)))
    moved = b.bitcast(b.select(b.fcmp_ordered("==", x, zero), smallest, stepped), x.type)
    result = b.select(b.fcmp_ordered("==", x, y), y, moved)
    return b.select(b.fcmp_unordered("uno", x, y), b.fadd(x, y), result)


def in_f32(lw: KernelLowering, x: ir.Value, elem: ElemType, fn: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``fn(x)``, with an f16/bf16 ``x`` computed in f32 and rounded once (as the interp's semantics do)."""
    if elem not in _HALF_TYPES:
        return fn(x)
    b = lw.builder
    return b.fptrunc(fn(b.fpext(x, _with_scalar(x.type, lt.elem_type(F32)))), x.type)


def scale_float(lw: KernelLowering, x: ir.Value, factor: float, elem: ElemType) -> ir.Value:
    """``x * factor`` with f16/bf16 computed in f32 and rounded once."""
    b = lw.builder
    out_t = x.type
    if elem in _HALF_TYPES:
        x = b.fpext(x, _with_scalar(out_t, lt.elem_type(F32)))
    result = b.fmul(x, lt.splat(x.type, factor))
    return b.fptrunc(result, out_t) if elem in _HALF_TYPES else result


def mul_hi(lw: KernelLowering, a: ir.Value, c: ir.Value, elem: ElemType) -> ir.Value:
    """The high half of the double-width product (64-bit operands multiply as i128)."""
    b = lw.builder
    signed = elem.kind == "int"
    wide_a, wide_c = _resize_int(lw, a, 2 * elem.bits, signed), _resize_int(lw, c, 2 * elem.bits, signed)
    product = b.mul(wide_a, wide_c)
    return _resize_int(lw, b.lshr(product, lt.splat(product.type, elem.bits)), elem.bits, signed)


def _with_scalar(llty: ir.Type, scalar: ir.Type) -> ir.Type:
    return ir.VectorType(scalar, llty.count) if isinstance(llty, ir.VectorType) else scalar


def _resize_int(lw: KernelLowering, value: ir.Value, bits: int, signed: bool) -> ir.Value:
    target = _with_scalar(value.type, ir.IntType(bits))
    width = lt.scalar_of(value.type).width
    if width > bits:
        return lw.builder.trunc(value, target)
    if width < bits:
        return (lw.builder.sext if signed else lw.builder.zext)(value, target)
    return value


def on_gpu(lw: KernelLowering) -> bool:
    """Whether this lowering targets a GPU (NVPTX)."""
    # getattr: the arithmetic helpers also serve lowerings without a kernel or target (tests/compiler/hostjit.py)
    return getattr(getattr(lw, "target", None), "name", None) == "cuda"


def fast_math(lw: KernelLowering, elem: ElemType) -> bool:
    """Whether this kernel's f32 math may be approximate here: fast math is on, ``elem`` is f32, the target a GPU."""
    if elem is not F32:
        return False
    definition = getattr(lw, "definition", None)
    return definition is not None and definition.fastmath and on_gpu(lw)


def fast_unary(lw: KernelLowering, name: str, x: ir.Value) -> ir.Value:
    """``name`` of an f32 (or f32 line) value with fast math's approximate instruction, lane by lane."""
    scalar_t = lt.elem_type(F32)
    intrinsic_name = FAST_UNARY_INTRINSICS[name]

    def one(v: ir.Value) -> ir.Value:
        if name == "exp":  # as nvcc's __expf: ex2.approx.ftz(x * log2 e), the product rounded once
            v = lw.call(FAST_MUL_INTRINSIC, scalar_t, [v, ir.Constant(scalar_t, _FAST_LOG2_E)])
        result = lw.call(intrinsic_name, scalar_t, [v])
        if name == "log":  # as nvcc's __logf: lg2.approx.ftz(x) * ln 2
            result = lw.call(FAST_MUL_INTRINSIC, scalar_t, [result, ir.Constant(scalar_t, _FAST_LN_2)])
        return result

    return map_lanes(lw, one, [x], x.type)


_DOUBLE = ir.DoubleType()
_RCP_APPROX_F64 = "llvm.nvvm.rcp.approx.ftz.d"


def wide_reciprocal(lw: KernelLowering, x: ir.Value, elem: ElemType) -> ir.Value:
    """``wide_recip`` of one lane: 1 / x in f64.

    On the GPU, for an f16/bf16/f32 x: ``rcp.approx.ftz.f64`` (the reciprocal of x's top 20 mantissa bits, to
    20 bits: within 2^-18) and two Newton steps ``r + r * (1 - x * r)`` by fma, each squaring the error, so
    the result is within 2^-72 + one rounding of 1/x: no slow path and no branch, where ``rcp.rn.f64`` has
    both.  x comes from an f32, so it is never an f64 subnormal and 1/x never leaves f64's normal range; for
    0, infinities and NaN the first step's residual is NaN and the approximation itself, exact there
    (+-inf, +-0, NaN), is kept.  Elsewhere (an f64 x, the host) the correctly rounded division.
    """
    b = lw.builder
    if elem is F64:
        return b.fdiv(ir.Constant(_DOUBLE, 1.0), x)
    wide = b.fpext(x, _DOUBLE)
    if not on_gpu(lw):
        return b.fdiv(ir.Constant(_DOUBLE, 1.0), wide)
    approx = lw.call(_RCP_APPROX_F64, _DOUBLE, [wide])
    negated, one = b.fneg(wide), ir.Constant(_DOUBLE, 1.0)
    residual = intrinsic(lw, "llvm.fma", [negated, approx, one])
    refined = intrinsic(lw, "llvm.fma", [approx, residual, approx])
    refined = intrinsic(lw, "llvm.fma", [refined, intrinsic(lw, "llvm.fma", [negated, refined, one]), refined])
    return b.select(b.fcmp_unordered("uno", residual, residual), approx, refined)


# -- unary --------------------------------------------------------------------------------------------
def unary(lw: KernelLowering, name: str, x: ir.Value, ty: Type) -> ir.Value:
    """The lowering of one unary operation on a value of item type ``ty``."""
    b = lw.builder
    elem = ty.elem
    llty = x.type
    if name in FAST_UNARY_INTRINSICS and fast_math(lw, elem):
        return fast_unary(lw, name, x)
    if name == "neg":
        return b.fneg(x) if elem.is_float else b.neg(x)
    if name == "abs":
        if elem.is_float:
            return intrinsic(lw, "llvm.fabs", [x])
        if elem.kind == "int":
            return intrinsic(lw, "llvm.abs", [x, ir.Constant(lt.I1, 0)])
        return x
    if name in LIBDEVICE_FUNCTIONS:
        return call_libdevice_math(lw, LIBDEVICE_FUNCTIONS[name], [x], elem)
    if name in _ANGLE_FACTORS:
        return scale_float(lw, x, _ANGLE_FACTORS[name][elem is F64], elem)
    if name == "sqrt":
        return intrinsic(lw, "llvm.sqrt", [x])
    if name == "rsqrt":  # the correctly rounded pair (sqrt.rn, div.rn), not rsqrt.approx; halves in f32, rounded once
        return in_f32(lw, x, elem, lambda v: b.fdiv(lt.splat(v.type, 1.0), intrinsic(lw, "llvm.sqrt", [v])))
    if name == "recip":
        return b.fdiv(lt.splat(llty, 1.0), x)
    if name == "wide_recip":
        out = ir.VectorType(_DOUBLE, llty.count) if isinstance(llty, ir.VectorType) else _DOUBLE
        return map_lanes(lw, lambda v: wide_reciprocal(lw, v, elem), [x], out)
    if name in ROUNDING_INTRINSICS:
        return intrinsic(lw, ROUNDING_INTRINSICS[name], [x])
    if name == "is_nan":
        return b.fcmp_unordered("uno", x, x)
    if name == "is_inf":
        return b.fcmp_ordered("==", intrinsic(lw, "llvm.fabs", [x]), lt.splat(llty, math.inf))
    if name == "bitnot":
        return b.xor(x, lt.splat(llty, -1))
    if name == "not":
        return b.xor(x, lt.splat(llty, 1))
    if name == "count_ones":
        return _resize_int(lw, intrinsic(lw, "llvm.ctpop", [x]), 32, signed=False)
    if name == "leading_zeros":
        return _resize_int(lw, intrinsic(lw, "llvm.ctlz", [x, ir.Constant(lt.I1, 0)]), 32, signed=False)
    if name == "reverse_bits":
        return intrinsic(lw, "llvm.bitreverse", [x])
    if name == "trailing_zeros":
        return _resize_int(lw, intrinsic(lw, "llvm.cttz", [x, ir.Constant(lt.I1, 0)]), 32, signed=False)
    if name == "find_first_set":  # 1 + trailing zeros, 0 for 0
        zeros = _resize_int(lw, intrinsic(lw, "llvm.cttz", [x, ir.Constant(lt.I1, 0)]), 32, signed=False)
        is_zero = b.icmp_unsigned("==", x, lt.splat(llty, 0))
        return b.select(is_zero, lt.splat(zeros.type, 0), b.add(zeros, lt.splat(zeros.type, 1)))
    raise CompileError(f"no lowering for unary operation {name!r} on {ty!r}")


def lower_unary(lw: KernelLowering, inst: Instruction) -> None:
    """out = op(input)."""
    op = cast(ops.Unary, inst.operation)
    lw.define(inst.out, unary(lw, op.name, lw.value(op.input), op.input.type))


# -- binary -------------------------------------------------------------------------------------------
def binary(lw: KernelLowering, name: str, a: ir.Value, c: ir.Value, ty: Type) -> ir.Value:
    """The lowering of one binary operation on two values of item type ``ty``."""
    b = lw.builder
    elem = ty.elem
    if elem.is_float:
        if name == "div" and fast_math(lw, elem):  # div.approx.ftz.f32, as nvcc's -use_fast_math
            scalar_t = lt.elem_type(F32)
            return map_lanes(lw, lambda p, q: lw.call(FAST_DIV_INTRINSIC, scalar_t, [p, q]), [a, c], a.type)
        simple = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}
        if name in ("add", "sub") and lw.contract:
            # `contract` lets LLVM fuse the add with a libdevice function's final multiply (expf's
            # ex2 * 2^k), as nvcc does; cubepy's own multiplies carry no flag, so they never fuse here:
            # the contract pass alone decides those.
            return simple[name](a, c, flags=("contract",))
        if name in simple:
            return simple[name](a, c)
        if name in ("min", "max"):
            return intrinsic(lw, f"llvm.{name}num", [a, c])
        if name in ("floordiv", "mod"):
            return float_floordiv_mod(lw, name, a, c, elem)
        if name == "nextafter" and elem in _HALF_TYPES:  # one ulp of the half type, not of f32
            return map_lanes(lw, lambda x, y: nextafter_half(lw, x, y), [a, c], a.type)
        if name in LIBDEVICE_FUNCTIONS:
            return call_libdevice_math(lw, LIBDEVICE_FUNCTIONS[name], [a, c], elem)
    elif elem.is_bool:
        if name in ("and", "or"):
            return b.and_(a, c) if name == "and" else b.or_(a, c)
    else:
        simple = {"add": b.add, "sub": b.sub, "mul": b.mul, "bitand": b.and_, "bitor": b.or_, "bitxor": b.xor}
        if name in simple:
            return simple[name](a, c)
        if name in ("min", "max"):
            prefix = "s" if elem.kind == "int" else "u"
            return intrinsic(lw, f"llvm.{prefix}{name}", [a, c])
        if name in ("floordiv", "mod", "div_trunc", "rem_trunc"):
            return int_division(lw, name, a, c, elem)
        if name in ("shl", "shr"):
            return shift(lw, name, a, c, elem)
        if name == "mul_hi":
            return mul_hi(lw, a, c, elem)
    raise CompileError(f"no lowering for binary operation {name!r} on {ty!r}")


def int_division(lw: KernelLowering, name: str, a: ir.Value, c: ir.Value, elem: ElemType) -> ir.Value:
    """Integer quotient/remainder, Python-style (floordiv, mod) or C-style (div_trunc, rem_trunc)."""
    b = lw.builder
    llty = a.type
    one, zero, all_ones = lt.splat(llty, 1), lt.splat(llty, 0), lt.splat(llty, -1)
    is_zero = b.icmp_unsigned("==", c, zero)
    wants_quotient = name in ("floordiv", "div_trunc")
    if elem.kind == "uint":
        safe = b.select(is_zero, one, c)
        result = b.udiv(a, safe) if wants_quotient else b.urem(a, safe)
        return b.select(is_zero, all_ones if wants_quotient else a, result)
    is_minus_one = b.icmp_signed("==", c, all_ones)
    safe = b.select(b.or_(is_zero, is_minus_one), one, c)
    quotient, remainder = b.sdiv(a, safe), b.srem(a, safe)
    if name in ("floordiv", "mod"):
        # C truncates toward zero; Python floors: step once when the remainder's sign differs from c's.
        differs = b.icmp_signed("<", b.xor(remainder, c), zero)
        adjust = b.and_(b.icmp_unsigned("!=", remainder, zero), differs)
        quotient = b.select(adjust, b.sub(quotient, one), quotient)
        remainder = b.select(adjust, b.add(remainder, c), remainder)
    if wants_quotient:
        result = b.select(is_minus_one, b.neg(a), quotient)  # MIN / -1 wraps to MIN
        return b.select(is_zero, all_ones, result)
    result = b.select(is_minus_one, zero, remainder)
    return b.select(is_zero, a, result)


def float_floordiv_mod(lw: KernelLowering, name: str, a: ir.Value, c: ir.Value, elem: ElemType) -> ir.Value:
    """Python/numpy float ``//`` and ``%`` (numpy's ``npy_divmod``), f16/bf16 computed in f32."""
    b = lw.builder
    out_t = a.type
    if elem in _HALF_TYPES:
        wide_t = _with_scalar(out_t, lt.elem_type(F32))
        a, c = b.fpext(a, wide_t), b.fpext(c, wide_t)
    llty = a.type
    zero, one, half = lt.splat(llty, 0.0), lt.splat(llty, 1.0), lt.splat(llty, 0.5)
    raw_mod = call_libdevice_math(lw, "fmod", [a, c], F64 if elem is F64 else F32)
    div = b.fdiv(b.fsub(a, raw_mod), c)
    mod_nonzero = b.fcmp_unordered("!=", raw_mod, zero)  # C's `if (mod)`: NaN counts as true
    signs_differ = b.xor(b.fcmp_ordered("<", c, zero), b.fcmp_ordered("<", raw_mod, zero))
    adjust = b.and_(mod_nonzero, signs_differ)
    mod = b.select(adjust, b.fadd(raw_mod, c), raw_mod)
    div = b.select(adjust, b.fsub(div, one), div)
    mod = b.select(mod_nonzero, mod, intrinsic(lw, "llvm.copysign", [zero, c]))
    floor = intrinsic(lw, "llvm.floor", [div])
    floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), half), b.fadd(floor, one), floor)
    quotient = b.fdiv(a, c)
    floordiv = b.select(b.fcmp_unordered("!=", div, zero), floor, intrinsic(lw, "llvm.copysign", [zero, quotient]))
    divisor_zero = b.fcmp_ordered("==", c, zero)
    if name == "floordiv":
        result = b.select(divisor_zero, quotient, floordiv)
    else:
        result = b.select(divisor_zero, raw_mod, mod)
    return b.fptrunc(result, out_t) if elem in _HALF_TYPES else result


def shift(lw: KernelLowering, name: str, a: ir.Value, amount: ir.Value, elem: ElemType) -> ir.Value:
    """Shifts whose amount (read as unsigned) may reach or exceed the width: 0 or the sign fill then."""
    b = lw.builder
    llty = a.type
    bits = lt.splat(llty, elem.bits)
    too_big = b.icmp_unsigned(">=", amount, bits)
    if name == "shr" and elem.kind == "int":
        return b.ashr(a, b.select(too_big, lt.splat(llty, elem.bits - 1), amount))
    safe = b.select(too_big, lt.splat(llty, 0), amount)
    shifted = b.shl(a, safe) if name == "shl" else b.lshr(a, safe)
    return b.select(too_big, lt.splat(llty, 0), shifted)


def powi(lw: KernelLowering, base: ir.Value, exponent: ir.Value, base_ty: Type, exp_ty: Type) -> ir.Value:
    """``base ** exponent`` with an integer exponent (libdevice ``__nv_powi[f]``).

    Exponents that do not fit i32 (u32, 64-bit) are converted to the base's float type and use
    ``pow`` instead; this is exact while the exponent is exactly representable there.
    """
    b = lw.builder
    elem, exp_elem = base_ty.elem, exp_ty.elem
    if exp_ty.line == 1 and base_ty.is_line:
        exponent = splat_value(lw, exponent, base_ty.line)
    if exp_elem.bits < 32 or (exp_elem.bits == 32 and exp_elem.kind == "int"):
        exponent = _resize_int(lw, exponent, 32, signed=exp_elem.kind == "int")
        compute = F64 if elem is F64 else F32
        scalar_t = lt.elem_type(compute)
        name = libdevice_name("powi", elem)
        out_t = base.type
        if elem in _HALF_TYPES:
            base = b.fpext(base, _with_scalar(out_t, scalar_t))
        result = map_lanes(lw, lambda x, n: lw.call_libdevice(name, scalar_t, [x, n]), [base, exponent], base.type)
        return b.fptrunc(result, out_t) if elem in _HALF_TYPES else result
    as_float = convert(lw, exponent, exp_elem, elem, base_ty.line)
    return call_libdevice_math(lw, "pow", [base, as_float], elem)


def lower_binary(lw: KernelLowering, inst: Instruction) -> None:
    """out = lhs op rhs."""
    op = cast(ops.Binary, inst.operation)
    a, c = lw.value(op.lhs), lw.value(op.rhs)
    if op.name == "powi":
        result = powi(lw, a, c, op.lhs.type, op.rhs.type)
    else:
        result = binary(lw, op.name, a, c, op.lhs.type)
    lw.define(inst.out, result)


# -- comparisons, selection, fma, clamp -----------------------------------------------------------------
_COMPARE_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def compare(lw: KernelLowering, name: str, a: ir.Value, c: ir.Value, elem: ElemType) -> ir.Value:
    """``a op c`` as i1; float ``ne`` is unordered (NaN != NaN), every other float compare ordered."""
    b = lw.builder
    symbol = _COMPARE_SYMBOL[name]
    if elem.is_float:
        return (b.fcmp_unordered if name == "ne" else b.fcmp_ordered)(symbol, a, c)
    if elem.kind == "int":
        return b.icmp_signed(symbol, a, c)
    return b.icmp_unsigned(symbol, a, c)


def lower_compare(lw: KernelLowering, inst: Instruction) -> None:
    """out = lhs cmp rhs (bool)."""
    op = cast(ops.Compare, inst.operation)
    lw.define(inst.out, compare(lw, op.name, lw.value(op.lhs), lw.value(op.rhs), op.lhs.elem))


def lower_clamp(lw: KernelLowering, inst: Instruction) -> None:
    """out = min(max(input, lo), hi) (floats: a NaN bound is ignored, as minnum/maxnum do)."""
    op = cast(ops.Clamp, inst.operation)
    ty = Type(op.input.elem)
    low = binary(lw, "max", lw.value(op.input), lw.value(op.lo), ty)
    lw.define(inst.out, binary(lw, "min", low, lw.value(op.hi), ty))


def lower_fma(lw: KernelLowering, inst: Instruction) -> None:
    """out = a * b + c, one rounding."""
    op = cast(ops.Fma, inst.operation)
    lw.define(inst.out, intrinsic(lw, "llvm.fma", [lw.value(op.a), lw.value(op.b), lw.value(op.c)]))


def lower_select(lw: KernelLowering, inst: Instruction) -> None:
    """out = cond ? then : otherwise."""
    op = cast(ops.Select, inst.operation)
    lw.define(inst.out, lw.builder.select(lw.value(op.cond), lw.value(op.then), lw.value(op.otherwise)))


def lower_assign(lw: KernelLowering, inst: Instruction) -> None:
    """out = input."""
    lw.define(inst.out, lw.value(cast(ops.Assign, inst.operation).input))


# -- conversions ---------------------------------------------------------------------------------------
def convert(lw: KernelLowering, value: ir.Value, src: ElemType, dst: ElemType, line: int) -> ir.Value:
    """Convert a register value element-wise from ``src`` to ``dst`` (same line size)."""
    b = lw.builder
    target = lt.item_type(Type(dst, line))
    if src == dst:
        return value
    if src.is_fp8 or dst.is_fp8:
        from cubepy.compiler import lower_fp8

        return lower_fp8.convert(lw, value, src, dst, line, lambda v, s, d: convert(lw, v, s, d, 1))
    if dst.is_bool:
        if src.is_float:  # NaN is true, as in C and numpy
            return b.fcmp_unordered("!=", value, lt.splat(value.type, 0.0))
        return b.icmp_unsigned("!=", value, lt.splat(value.type, 0))
    if src.is_bool:
        return b.uitofp(value, target) if dst.is_float else b.zext(value, target)
    if src.is_int and dst.is_int:
        return _resize_int(lw, value, dst.bits, signed=src.kind == "int")
    if src.is_int:
        return (b.sitofp if src.kind == "int" else b.uitofp)(value, target)
    if dst.is_int:
        if src in _HALF_TYPES:  # f16/bf16 -> f32 is exact; saturating casts are then plain f32 ones
            value = b.fpext(value, _with_scalar(value.type, lt.elem_type(F32)))
        kind = "fptosi" if dst.kind == "int" else "fptoui"
        name = f"llvm.{kind}.sat.{lt.intrinsic_suffix(target)}.{lt.intrinsic_suffix(value.type)}"
        return lw.call(name, target, [value])
    if {src, dst} == {F16, BF16}:  # neither holds the other: go through f32
        value = b.fpext(value, _with_scalar(value.type, lt.elem_type(F32)))
        return b.fptrunc(value, target)
    return (b.fpext if dst.size > src.size else b.fptrunc)(value, target)


def lower_cast(lw: KernelLowering, inst: Instruction) -> None:
    """out = input converted to out's element type (a scalar input is broadcast to out's line)."""
    op = cast(ops.Cast, inst.operation)
    out = inst.out
    assert out is not None
    src_ty = op.input.type
    value = convert(lw, lw.value(op.input), src_ty.elem, out.elem, src_ty.line)
    if out.type.is_line and not src_ty.is_line:
        value = splat_value(lw, value, out.type.line)
    lw.define(out, value)


def lower_bitcast(lw: KernelLowering, inst: Instruction) -> None:
    """out = the bits of input as out's type (bools go through their one-byte memory form)."""
    op = cast(ops.Bitcast, inst.operation)
    out = inst.out
    assert out is not None
    bits = lw.to_memory(lw.value(op.input), op.input.type)
    target = lt.item_type(out.type, memory=True)
    if bits.type != target:
        bits = lw.builder.bitcast(bits, target)
    lw.define(out, lw.from_memory(bits, out.type))


lowers(*ops.UNARY_OPS)(lower_unary)
lowers(*ops.BINARY_OPS)(lower_binary)
lowers(*ops.COMPARE_OPS)(lower_compare)
for _op_type, _lowering in {
    ops.Fma: lower_fma,
    ops.Clamp: lower_clamp,
    ops.Select: lower_select,
    ops.Cast: lower_cast,
    ops.Bitcast: lower_bitcast,
    ops.Assign: lower_assign,
}.items():
    lowers(_op_type)(_lowering)
