"""Arithmetic semantics of the interp: integer division, shifts, casts, half floats, math functions."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cubepy.ir import Type, ops
from cubepy.runtime.interp.values import numpy_dtype

from .irb import BF16, BOOL, F16, F32, F64, I8, I32, I64, U8, U32, U64, Builder, bi, c, launch, line


def run_binary(name: str, ty: Type, lhs, rhs, rhs_ty: Type | None = None) -> np.ndarray:
    """out[i] = lhs[i] <name> rhs[i] over one lane per pair."""
    lhs = np.asarray(lhs, dtype=numpy_dtype(ty.elem))
    rhs = np.asarray(rhs, dtype=numpy_dtype((rhs_ty or ty).elem))
    b = Builder()
    a_buf, b_buf, out = b.buffer(ty), b.buffer(rhs_ty or ty), b.buffer(ty)
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, c(len(lhs)))):
        b.store(out, pos, b.binary(name, b.load(a_buf, pos), b.load(b_buf, pos)))
    return launch(b.kernel(), -(-len(lhs) // 32), [lhs, rhs, np.zeros_like(lhs)])[2]


def run_unary(name: str, ty: Type, values, out_ty: Type | None = None) -> np.ndarray:
    values = np.asarray(values, dtype=numpy_dtype(ty.elem))
    out_ty = out_ty or ty
    b = Builder()
    inp, out = b.buffer(ty), b.buffer(out_ty)
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, c(len(values)))):
        b.store(out, pos, b.unary(name, b.load(inp, pos), out_ty))
    return launch(b.kernel(), -(-len(values) // 32), [values, np.zeros(len(values), numpy_dtype(out_ty.elem))])[1]


def run_cast(src: Type, dst: Type, values) -> np.ndarray:
    values = np.asarray(values, dtype=numpy_dtype(src.elem))
    b = Builder()
    inp, out = b.buffer(src), b.buffer(dst)
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, c(len(values)))):
        b.store(out, pos, b.cast(b.load(inp, pos), dst))
    return launch(b.kernel(), -(-len(values) // 32), [values, np.zeros(len(values), numpy_dtype(dst.elem))])[1]


# -- integer division ---------------------------------------------------------------------------

PAIRS = [
    (7, 2),
    (-7, 2),
    (7, -2),
    (-7, -2),
    (6, 3),
    (-6, 3),
    (0, 5),
    (5, 0),
    (-5, 0),
    (0, 0),
    (-(2**31), -1),
    (-(2**31), 1),
    (2**31 - 1, -1),
]


@pytest.mark.parametrize("name", ["floordiv", "mod", "div_trunc", "rem_trunc"])
def test_signed_division_table(name):
    lhs, rhs = np.array(PAIRS, dtype=np.int64).T
    got = run_binary(name, I32, lhs, rhs)
    expected = []
    for a, b in PAIRS:
        if b == 0:  # all ones for quotients, the dividend for remainders
            expected.append(-1 if name in ("floordiv", "div_trunc") else a)
        elif name == "floordiv":
            expected.append(a // b)
        elif name == "mod":
            expected.append(a % b)
        elif name == "div_trunc":
            expected.append(int(a / b) if abs(a) < 2**31 else -(a // -b) if (a < 0) != (b < 0) else a // b)
        else:
            expected.append(int(math.fmod(a, b)))
    expected = np.array(expected, dtype=np.int64).astype(np.int32)  # INT_MIN / -1 wraps to INT_MIN
    np.testing.assert_array_equal(got, expected)


def test_unsigned_division_by_zero_is_all_ones():
    lhs, rhs = [7, 7, 0, 2**32 - 1], [2, 0, 0, 2]
    assert list(run_binary("floordiv", U32, lhs, rhs)) == [3, 2**32 - 1, 2**32 - 1, 2**31 - 1]
    assert list(run_binary("div_trunc", U32, lhs, rhs)) == [3, 2**32 - 1, 2**32 - 1, 2**31 - 1]
    assert list(run_binary("mod", U32, lhs, rhs)) == [1, 7, 0, 1]
    assert list(run_binary("rem_trunc", U32, lhs, rhs)) == [1, 7, 0, 1]


def test_float_floordiv_and_mod_follow_python():
    lhs, rhs = [7.5, -7.5, 7.5, -7.5], [2.0, 2.0, -2.0, -2.0]
    np.testing.assert_array_equal(run_binary("floordiv", F32, lhs, rhs), [a // b for a, b in zip(lhs, rhs)])
    np.testing.assert_array_equal(run_binary("mod", F32, lhs, rhs), [a % b for a, b in zip(lhs, rhs)])
    np.testing.assert_array_equal(run_binary("div", F32, [1.0, 1.0], [0.0, -0.0]), [np.inf, -np.inf])


def test_integer_overflow_wraps():
    assert list(run_binary("add", U32, [2**32 - 1], [2])) == [1]
    assert list(run_binary("mul", I32, [2**30], [4])) == [0]
    assert list(run_binary("sub", U8, [0], [1])) == [255]
    assert list(run_unary("neg", I32, [-(2**31)])) == [-(2**31)]
    assert list(run_unary("abs", I32, [-(2**31), -3])) == [-(2**31), 3]


# -- shifts ---------------------------------------------------------------------------------------


def test_shifts_clamp_like_ptx():
    amounts = [0, 1, 31, 32, 33, 100]
    assert list(run_binary("shl", U32, [1] * 6, amounts)) == [1, 2, 2**31, 0, 0, 0]
    assert list(run_binary("shr", U32, [2**31] * 6, amounts)) == [2**31, 2**30, 1, 0, 0, 0]
    assert list(run_binary("shr", I32, [-8] * 6, amounts)) == [-8, -4, -1, -1, -1, -1]
    assert list(run_binary("shr", I32, [8] * 6, amounts)) == [8, 4, 0, 0, 0, 0]
    # Negative signed amounts read as unsigned: far beyond the width.
    assert list(run_binary("shl", I32, [1, -1], [-1, -1])) == [0, 0]
    assert list(run_binary("shr", I32, [-5, 5], [-1, -1])) == [-1, 0]
    assert list(run_binary("shl", U8, [1, 1], [7, 8])) == [128, 0]
    assert list(run_binary("shl", I64, [1, 1], [63, 64])) == [-(2**63), 0]


def test_bit_operations():
    values = np.array([0, 1, 0x80000000, 0xFFFFFFFF, 0x0F0F0001], dtype=np.uint32)
    assert list(run_unary("count_ones", U32, values)) == [0, 1, 1, 32, 9]
    assert list(run_unary("leading_zeros", U32, values)) == [32, 31, 0, 0, 4]
    assert list(run_unary("reverse_bits", U32, values)) == [int(f"{v:032b}"[::-1], 2) for v in values]
    assert list(run_unary("bitnot", U32, values)) == [0xFFFFFFFF ^ int(v) for v in values]
    assert list(run_unary("count_ones", I32, [-1, -2], U32)) == [32, 31]
    assert list(run_unary("leading_zeros", I8, [-1, 1, 0], U32)) == [0, 7, 8]
    assert list(run_unary("leading_zeros", U64, [1, 2**63], U32)) == [63, 0]
    assert list(run_unary("reverse_bits", I8, [1, -128])) == [-128, 1]
    assert list(run_unary("trailing_zeros", U32, values, U32)) == [32, 0, 31, 0, 0]
    assert list(run_unary("trailing_zeros", I8, [0, -128, 12], U32)) == [8, 7, 2]
    assert list(run_unary("find_first_set", U32, values, U32)) == [0, 1, 32, 1, 1]
    assert list(run_unary("find_first_set", I64, [0, -(2**63), 12], U32)) == [0, 64, 3]


def test_mul_hi():
    assert list(run_binary("mul_hi", U32, [0xFFFFFFFF, 0x80000000, 3], [0xFFFFFFFF, 2, 4])) == [0xFFFFFFFE, 1, 0]
    assert list(run_binary("mul_hi", I32, [-1, -(2**31), 2**30], [1, -(2**31), 8])) == [-1, 2**30, 2]
    assert list(run_binary("mul_hi", U64, [2**64 - 1, 2**63], [2**64 - 1, 4])) == [2**64 - 2, 2]
    assert list(run_binary("mul_hi", I64, [-1, 2**62], [5, 8])) == [-1, 2]
    assert list(run_binary("mul_hi", I8, [-128, 100], [-128, 100])) == [64, 39]


# -- casts ----------------------------------------------------------------------------------------


def test_float_to_int_casts_truncate_and_saturate():
    values = [1.9, -1.9, 0.5, -0.5, 3e9, -3e9, np.nan, np.inf, -np.inf, 2147483647.0, -2147483648.0]
    assert list(run_cast(F32, I32, values)) == [
        1,
        -1,
        0,
        0,
        2**31 - 1,
        -(2**31),
        0,
        2**31 - 1,
        -(2**31),
        2**31 - 1,
        -(2**31),
    ]
    assert list(run_cast(F32, U32, values)) == [1, 0, 0, 0, 3000000000, 0, 0, 2**32 - 1, 0, 2**31, 0]
    assert list(run_cast(F64, U8, [255.9, 256.0, -1.0, 17.2])) == [255, 255, 0, 17]
    assert list(run_cast(F64, I64, [1e19, -1e19, 9.2e18])) == [2**63 - 1, -(2**63), 9200000000000000000]
    assert list(run_cast(F64, U64, [1e20, 1.8e19, -5.0])) == [2**64 - 1, 18000000000000000000, 0]
    assert list(run_cast(F16, I8, [300.0, -300.0, 100.7])) == [127, -128, 100]


def test_int_and_bool_casts():
    assert list(run_cast(I32, U8, [-1, 256, 257])) == [255, 0, 1]
    assert list(run_cast(I32, BOOL, [0, 5, -1])) == [False, True, True]
    assert list(run_cast(BOOL, F32, [True, False])) == [1.0, 0.0]
    assert list(run_cast(F32, BOOL, [0.0, -0.0, 0.5, np.nan])) == [False, False, True, True]
    # int -> float rounds to nearest even: 2**24 + 1 is halfway between two f32 values.
    assert list(run_cast(I32, F32, [2**24 + 1, 2**24 + 3])) == [2**24, 2**24 + 4]
    # int -> bf16 rounds once (through f32 it would round twice and land on 2**24).
    assert float(run_cast(I64, BF16, [2**24 + 2**16 + 1])[0]) == 2**24 + 2**17


def test_half_float_rounding():
    # f16: 2049 is not representable; 2048 + 1 rounds to even (2048), 2048 + 3 to 2052.
    np.testing.assert_array_equal(run_binary("add", F16, [2048, 2048], [1, 3]).astype(np.float64), [2048, 2052])
    # bf16 has 8 significant bits: 256 + 1 -> 256, 256 + 3 -> 260 (ties to even, then up).
    got = run_binary("add", BF16, [256, 256, 1], [1, 3, 2**-9]).astype(np.float64)
    np.testing.assert_array_equal(got, [256, 260, 1])
    # bf16 multiply rounds once: 1.0078125**2 = 1.01568603..., nearest bf16 is 1.015625.
    assert float(run_binary("mul", BF16, [1.0078125], [1.0078125])[0]) == 1.015625
    assert float(run_cast(F32, BF16, [1.0 + 2**-8 + 2**-20])[0]) == 1.0078125
    assert float(run_cast(F32, F16, [65520.0])[0]) == np.inf  # rounds past the largest f16
    # Division computes in f32 and rounds once to the half type.
    got = run_binary("div", BF16, [1.0], [3.0])
    assert got[0] == ml_dtypes.bfloat16(1 / 3)


def test_float_min_max_ignore_nan():
    assert list(run_binary("min", F32, [np.nan, 1.0, 2.0], [3.0, np.nan, 1.0])) == [3.0, 1.0, 1.0]
    assert list(run_binary("max", F32, [np.nan, 1.0, -0.5], [3.0, np.nan, 1.0])) == [3.0, 1.0, 1.0]
    assert list(run_binary("min", I32, [-5, 5], [3, 3])) == [-5, 3]


def test_float_unary_functions():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, 4.0], dtype=np.float32)
    np.testing.assert_array_equal(run_unary("round", F32, x), np.rint(x))
    np.testing.assert_array_equal(run_unary("round", F32, x)[:6], [-2, -2, -0.0, 0, 2, 2])
    np.testing.assert_array_equal(run_unary("trunc", F32, x), np.trunc(x))
    np.testing.assert_array_equal(run_unary("floor", F32, x), np.floor(x))
    np.testing.assert_array_equal(run_unary("recip", F32, x), np.float32(1) / x)
    pos = np.abs(x)
    np.testing.assert_allclose(run_unary("rsqrt", F32, pos), 1 / np.sqrt(pos), rtol=1e-6)
    np.testing.assert_allclose(run_unary("exp", F32, x), np.exp(x), rtol=1e-6)
    assert list(run_unary("is_nan", F32, [np.nan, 1.0, np.inf], Type(BOOL.elem))) == [True, False, False]
    assert list(run_unary("is_inf", F16, [np.nan, 1.0, -np.inf], Type(BOOL.elem))) == [False, False, True]


@pytest.mark.parametrize("ty", [F32, F64, F16, BF16], ids=repr)
def test_erf_matches_math_erf(ty):
    x = np.linspace(-6, 6, 601)
    got = run_unary("erf", ty, x).astype(np.float64)
    dtype = numpy_dtype(ty.elem)
    expected = np.array([math.erf(float(v)) for v in x.astype(dtype).astype(np.float64)])
    if ty == F64:  # Cody's approximation is good to a few f64 ulps
        np.testing.assert_allclose(got, expected, rtol=1e-15, atol=1e-300)
        return
    expected = expected.astype(dtype).astype(np.float64)  # rounded once to the type
    np.testing.assert_array_equal(got, expected)


def test_powf_powi_atan2():
    np.testing.assert_allclose(run_binary("powf", F32, [2.0, 9.0], [10.0, 0.5]), [1024.0, 3.0])
    got = run_binary("powi", F32, [2.0, 3.0, 2.0], [10, 3, -1], rhs_ty=I32)
    np.testing.assert_array_equal(got, [1024.0, 27.0, 0.5])
    np.testing.assert_allclose(
        run_binary("atan2", F32, [1.0, -1.0], [1.0, -1.0]), [np.pi / 4, -3 * np.pi / 4], rtol=1e-6
    )


def test_fma_rounds_once():
    # (1 + 2**-12)**2 - 1 in f32: the product needs 25 bits; a separate multiply would drop 2**-24.
    b = Builder()
    out = b.buffer(F32)
    x = c(1 + 2**-12, F32)
    b.store(out, c(0), b.emit(ops.Fma(x, x, c(-1.0, F32)), F32))
    (result,) = launch(b.kernel((1, 1, 1)), 1, [np.zeros(1, np.float32)])
    assert result[0] == np.float32(2**-11 + 2**-24)


def test_select_clamp_and_line_broadcast():
    b = Builder()
    out = b.buffer(line(F32, 4))
    pos = b.cast(bi("unit_pos"), F32)
    clamped = b.emit(ops.Clamp(pos, c(2.0, F32), c(5.0, F32)), F32)
    as_line = b.cast(clamped, line(F32, 4))  # a scalar broadcast into a line
    odd = b.compare("eq", b.binary("mod", bi("unit_pos"), c(2)), c(1))
    chosen = b.emit(ops.Select(odd, as_line, c(-1.0, line(F32, 4))), line(F32, 4))
    b.store(out, bi("unit_pos"), chosen)
    (result,) = launch(b.kernel((8, 1, 1)), 1, [np.zeros(32, np.float32)], line_sizes={0: 4})
    lanes = np.arange(8)
    expected = np.where(lanes % 2 == 1, np.clip(lanes, 2, 5), -1.0)
    np.testing.assert_array_equal(result.reshape(8, 4), np.repeat(expected[:, None], 4, axis=1))


def test_bitcast_between_types_and_lines():
    b = Builder()
    src, as_u32, halves = b.buffer(F32), b.buffer(U32), b.buffer(line(F16, 2))
    value = b.load(src, bi("unit_pos"))
    b.store(as_u32, bi("unit_pos"), b.emit(ops.Bitcast(value), U32))
    b.store(halves, bi("unit_pos"), b.emit(ops.Bitcast(value), line(F16, 2)))
    data = np.array([1.0, -2.5, np.inf, 3.25], dtype=np.float32)
    _, bits, pairs = launch(
        b.kernel((4, 1, 1)), 1, [data, np.zeros(4, np.uint32), np.zeros(8, np.float16)], line_sizes={2: 2}
    )
    np.testing.assert_array_equal(bits, data.view(np.uint32))
    np.testing.assert_array_equal(pairs.view(np.uint16), data.view(np.uint16))


def test_uniform_values_stay_uniform_and_correct():
    # Everything here is lane-independent; the store still reaches every lane's slot.
    b = Builder()
    out = b.buffer(I32)
    value = b.binary("add", b.binary("mul", c(6, I32), c(7, I32)), c(-2, I32))
    b.store(out, bi("unit_pos"), value)
    (result,) = launch(b.kernel(), 1, [np.zeros(32, np.int32)])
    assert (result == 40).all()


# -- properties of the numeric kernels against Python integers ------------------------------------

INT_TYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64]


def _python_reference(name: str, a: int, b: int, dtype) -> int:
    info = np.iinfo(dtype)
    bits = info.bits
    if name in ("floordiv", "div_trunc") and b == 0:
        return -1 if info.min < 0 else info.max
    if name in ("mod", "rem_trunc") and b == 0:
        return a
    if name == "floordiv":
        result = a // b
    elif name == "mod":
        result = a % b
    elif name == "div_trunc":
        result = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    elif name == "rem_trunc":
        result = a - (abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)) * b
    elif name == "shl":
        amount = b % (1 << bits)
        result = 0 if amount >= bits else a << amount
    else:  # shr
        amount = b % (1 << bits)
        result = (-1 if a < 0 else 0) if amount >= bits else a >> amount
    result %= 1 << bits  # wrap into the type
    return result - (1 << bits) if info.min < 0 and result > info.max else result


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from(INT_TYPES),
    name=st.sampled_from(["floordiv", "mod", "div_trunc", "rem_trunc", "shl", "shr"]),
)
def test_integer_kernels_match_python(data, dtype, name):
    from cubepy.ir import numerics

    info = np.iinfo(dtype)
    values = st.integers(int(info.min), int(info.max))
    a = data.draw(values)
    b = data.draw(st.one_of(values, st.sampled_from([0, 1, -1 if info.min < 0 else 2, info.bits, info.bits - 1])))
    fn = {
        "floordiv": numerics.int_floordiv,
        "mod": numerics.int_mod,
        "div_trunc": numerics.int_div_trunc,
        "rem_trunc": numerics.int_rem_trunc,
        "shl": numerics.shift_left,
        "shr": numerics.shift_right,
    }[name]
    with np.errstate(all="ignore"):
        got = fn(np.array([a], dtype=dtype), np.array([b], dtype=dtype))
    assert int(got[0]) == _python_reference(name, a, b, dtype)
