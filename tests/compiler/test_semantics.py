"""The lowering's arithmetic matches the interp's semantics on edge cases (run on the host JIT).

References are numpy (what the interp runtime computes) or, where numpy leaves a case undefined
(integer division by zero, shifts past the width, float -> int overflow), the rule cubepy defines:
CUDA's values.  ``fold_constants`` is checked against the same references.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from cubepy.compiler import passes
from cubepy.compiler.lower_arith import binary, compare, convert, unary
from cubepy.ir import (
    ALL_ELEM_TYPES,
    BF16,
    BOOL,
    F16,
    F32,
    F64,
    U32,
    ElemType,
    Instruction,
    Type,
    Variable,
    VarKind,
    constant,
    ops,
)

from . import hostjit
from .hostjit import storage_dtype


def elementwise(body, in_elems, out_elem):
    """The host-JIT kernel, or a skip when this machine lacks a soft-float helper it needs."""
    try:
        return hostjit.elementwise(body, in_elems, out_elem)
    except hostjit.MissingRuntime as missing:
        pytest.skip(str(missing))


INTS = [e for e in ALL_ELEM_TYPES if e.is_int]
FLOATS = [F16, BF16, F32, F64]


def _int_edges(elem: ElemType) -> list[int]:
    bits = elem.bits
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if elem.kind == "int" else (0, (1 << bits) - 1)
    values = {
        0,
        1,
        2,
        3,
        5,
        7,
        bits - 1,
        bits,
        bits + 1,
        2 * bits,
        high,
        high - 1,
        low,
        low + 1,
        high // 2,
        (high // 3) | 1,
    }
    if elem.kind == "int":
        values |= {-1, -2, -3, -5, -7, -bits}
    return sorted(v for v in values if low <= v <= high)


def _wrap(value: int, elem: ElemType) -> int:
    value &= (1 << elem.bits) - 1
    if elem.kind == "int" and value >= 1 << (elem.bits - 1):
        value -= 1 << elem.bits
    return value


def int_reference(name: str, a: int, b: int, elem: ElemType) -> int:
    """cubepy's integer semantics, written out independently of the compiler."""
    bits = elem.bits
    if name in ("floordiv", "div_trunc") and b == 0:
        return _wrap(-1, elem)  # CUDA: all ones
    if name in ("mod", "rem_trunc") and b == 0:
        return a  # CUDA: the dividend
    if name == "floordiv":
        return _wrap(a // b, elem)
    if name == "mod":
        return _wrap(a % b, elem)
    if name == "div_trunc":
        q = abs(a) // abs(b)
        return _wrap(q if (a >= 0) == (b > 0) else -q, elem)
    if name == "rem_trunc":
        r = abs(a) % abs(b)
        return _wrap(r if a >= 0 else -r, elem)
    if name == "mul_hi":
        return _wrap((a * b) >> bits, elem)
    if name in ("shl", "shr"):
        amount = b % (1 << bits)  # the amount is read as unsigned
        if amount >= bits:
            return -1 if (name == "shr" and a < 0) else 0
        return _wrap(a << amount, elem) if name == "shl" else a >> amount
    return _wrap(
        {
            "add": a + b,
            "sub": a - b,
            "mul": a * b,
            "min": min(a, b),
            "max": max(a, b),
            "bitand": a & b,
            "bitor": a | b,
            "bitxor": a ^ b,
        }[name],
        elem,
    )


def _folded(name: str, x, y, elem: ElemType):
    """What the constant-folding pass makes of ``x name y`` (literals of ``elem``)."""
    operation = ops.lookup(name)(constant(x, Type(elem)), constant(y, Type(elem)))
    folded = passes._fold(Instruction(Variable(VarKind.CONST, 0, Type(elem)), operation))
    assert folded is not None and folded.is_constant, f"{name} on {elem} did not fold"
    return folded.value


INT_BINARY = [
    "add",
    "sub",
    "mul",
    "floordiv",
    "mod",
    "div_trunc",
    "rem_trunc",
    "shl",
    "shr",
    "min",
    "max",
    "bitand",
    "bitor",
    "bitxor",
    "mul_hi",
]


@pytest.mark.parametrize("name", INT_BINARY)
@pytest.mark.parametrize("elem", INTS, ids=[e.name for e in INTS])
def test_integer_binary(elem, name):
    edges = _int_edges(elem)
    pairs = list(itertools.product(edges, edges))
    a = np.array([p[0] for p in pairs], dtype=storage_dtype(elem))
    b = np.array([p[1] for p in pairs], dtype=storage_dtype(elem))
    run = elementwise(lambda lw, x, y: binary(lw, name, x, y, Type(elem)), [elem, elem], elem)
    got = run(a, b).tolist()
    expected = [int_reference(name, x, y, elem) for x, y in pairs]
    wrong = [(x, y, g, e) for (x, y), g, e in zip(pairs, got, expected) if g != e]
    assert not wrong, f"{name} on {elem}: (a, b, got, expected) {wrong[:8]}"
    folded = [_folded(name, x, y, elem) for x, y in pairs]
    assert folded == expected, "fold_constants disagrees with the reference"


def _float_edges(elem: ElemType) -> np.ndarray:
    values = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        3.0,
        -3.0,
        7.25,
        -7.25,
        0.1,
        -0.1,
        5.0,
        1e-30,
        -1e-30,
        1e30,
        -1e30,
        65504.0,
        3.0e38,
        math.inf,
        -math.inf,
        math.nan,
        1e-45,
        2.0**24 + 1,
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array(values, dtype=np.float64).astype(storage_dtype(elem))


def _same_floats(got: np.ndarray, expected: np.ndarray, signed_zero: bool = True) -> np.ndarray:
    g, e = got.astype(np.float64), expected.astype(np.float64)
    same = (g == e) | (np.isnan(g) & np.isnan(e))
    if signed_zero:
        same &= (np.signbit(g) == np.signbit(e)) | np.isnan(e)
    return same


FLOAT_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "floordiv": np.floor_divide,
    "mod": np.remainder,
    "min": np.fmin,
    "max": np.fmax,
}


@pytest.mark.parametrize("name", sorted(FLOAT_BINARY))
@pytest.mark.parametrize("elem", FLOATS, ids=[e.name for e in FLOATS])
def test_float_binary(elem, name):
    edges = _float_edges(elem)
    a = np.repeat(edges, len(edges))
    b = np.tile(edges, len(edges))
    run = elementwise(lambda lw, x, y: binary(lw, name, x, y, Type(elem)), [elem, elem], elem)
    got = run(a, b)
    with np.errstate(all="ignore"):
        expected = FLOAT_BINARY[name](a, b)
    # min/max of +0 and -0 may return either zero (IEEE minNum), as numpy's fmin may.
    same = _same_floats(got, expected, signed_zero=name not in ("min", "max"))
    bad = np.flatnonzero(~same)
    assert not len(bad), [(a[i], b[i], got[i], expected[i]) for i in bad[:8]]
    if elem in (F32, F64):
        folded = np.array([_folded(name, float(x), float(y), elem) for x, y in zip(a, b)], dtype=storage_dtype(elem))
        assert _same_floats(folded, expected, signed_zero=name not in ("min", "max")).all()


@pytest.mark.parametrize("elem", FLOATS + INTS + [BOOL], ids=[e.name for e in FLOATS + INTS + [BOOL]])
def test_compare(elem):
    edges = (
        _float_edges(elem)
        if elem.is_float
        else np.array([0, 1] if elem.is_bool else _int_edges(elem), dtype=storage_dtype(elem))
    )
    a, b = np.repeat(edges, len(edges)), np.tile(edges, len(edges))
    numpy_ops = {
        "eq": np.equal,
        "ne": np.not_equal,
        "lt": np.less,
        "le": np.less_equal,
        "gt": np.greater,
        "ge": np.greater_equal,
    }
    for name, reference in numpy_ops.items():
        run = elementwise(lambda lw, x, y, n=name: compare(lw, n, x, y, elem), [elem, elem], BOOL)
        assert (run(a, b).astype(bool) == reference(a, b)).all(), name


def _cast_reference(values: np.ndarray, src: ElemType, dst: ElemType) -> np.ndarray:
    out_dtype = storage_dtype(dst)
    if dst.is_bool:
        return (values.astype(np.float64) != 0).astype(np.uint8) if src.is_float else (values != 0).astype(np.uint8)
    if src.is_float and dst.is_int:
        info = np.iinfo(out_dtype)
        wide = values.astype(np.float64)
        result = [
            0 if math.isnan(x) else info.min if x <= info.min else info.max if x >= info.max else int(x) for x in wide
        ]
        return np.array(result, dtype=out_dtype)
    if src.is_bool or src.is_int and dst.is_float:
        return values.astype(np.float64).astype(out_dtype) if dst.is_float else values.astype(out_dtype)
    return values.astype(out_dtype)


# fp8 conversions are PTX instructions with no host form (the cpu runtime declines them): they are checked
# on the interp and in PTX by tests/frontend/test_fp8.py.
NON_FP8 = [e for e in ALL_ELEM_TYPES if not e.is_fp8]


@pytest.mark.parametrize("src", NON_FP8, ids=[e.name for e in NON_FP8])
def test_casts(src):
    if src.is_float:
        values = _float_edges(src)
    elif src.is_bool:
        values = np.array([0, 1], dtype=np.uint8)
    else:
        values = np.array(_int_edges(src), dtype=storage_dtype(src))
    for dst in NON_FP8:
        run = elementwise(lambda lw, x, d=dst: convert(lw, x, src, d, 1), [src], dst)
        got = run(values)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            expected = _cast_reference(values, src, dst)
        if dst.is_float:
            same = _same_floats(got, expected)
        else:
            same = got == expected
        bad = np.flatnonzero(~same)
        assert not len(bad), f"{src} -> {dst}: " + str([(values[i], got[i], expected[i]) for i in bad[:6]])


FLOAT_UNARY = {
    "neg": np.negative,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "round": np.rint,
    "sqrt": np.sqrt,
    "recip": lambda x: np.divide(np.ones_like(x), x),
    # f16/bf16 compute in f32 and round once, as the interp does (two roundings in the half type differ)
    "rsqrt": lambda x: np.divide(1.0, np.sqrt(x.astype(np.float32) if x.dtype.itemsize == 2 else x)).astype(x.dtype),
}


@pytest.mark.parametrize("elem", FLOATS, ids=[e.name for e in FLOATS])
def test_float_unary(elem):
    values = _float_edges(elem)
    for name, reference in FLOAT_UNARY.items():
        run = elementwise(lambda lw, x, n=name: unary(lw, n, x, Type(elem)), [elem], elem)
        with np.errstate(all="ignore"):
            expected = reference(values)
        same = _same_floats(run(values), expected)
        assert same.all(), (name, values[~same], run(values)[~same], expected[~same])
    for name, reference in {"is_nan": np.isnan, "is_inf": np.isinf}.items():
        run = elementwise(lambda lw, x, n=name: unary(lw, n, x, Type(elem)), [elem], BOOL)
        assert (run(values).astype(bool) == reference(values.astype(np.float64))).all(), name


@pytest.mark.parametrize("elem", INTS, ids=[e.name for e in INTS])
def test_integer_unary(elem):
    edges = _int_edges(elem)
    values = np.array(edges, dtype=storage_dtype(elem))
    mask = (1 << elem.bits) - 1
    references = {
        "neg": [_wrap(-x, elem) for x in edges],
        "abs": [_wrap(abs(x), elem) for x in edges],
        "bitnot": [_wrap(~x, elem) for x in edges],
        "reverse_bits": [_wrap(int(f"{x & mask:0{elem.bits}b}"[::-1], 2), elem) for x in edges],
    }
    for name, expected in references.items():
        run = elementwise(lambda lw, x, n=name: unary(lw, n, x, Type(elem)), [elem], elem)
        assert run(values).tolist() == expected, name
    counts = {
        "count_ones": [bin(x & mask).count("1") for x in edges],
        "leading_zeros": [elem.bits - (x & mask).bit_length() for x in edges],
        "trailing_zeros": [((x & mask) & -(x & mask)).bit_length() - 1 if x & mask else elem.bits for x in edges],
        "find_first_set": [((x & mask) & -(x & mask)).bit_length() for x in edges],
    }
    for name, expected in counts.items():
        run = elementwise(lambda lw, x, n=name: unary(lw, n, x, Type(elem)), [elem], U32)
        assert run(values).tolist() == expected, name


def _fma_inputs(elem: ElemType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every triple of a few edge values, then random triples where one rounding and two differ."""
    edges = _float_edges(elem)[[0, 1, 2, 3, 8, 14, 15, 17, 18, 21, 23, 24, 25, 26]]
    a, b, c = (g.ravel() for g in np.meshgrid(edges, edges, edges, indexing="ij"))
    rng = np.random.default_rng(12)
    n = 4000
    dtype = storage_dtype(elem)
    with np.errstate(all="ignore"):
        x = (rng.standard_normal(n) * 2.0 ** rng.integers(-8, 8, n)).astype(dtype)
        y = (rng.standard_normal(n) * 2.0 ** rng.integers(-8, 8, n)).astype(dtype)
        # c close to -x*y: the sum cancels, so the product's low bits (kept only by a fused op) decide it
        z = (-(x.astype(np.float64) * y.astype(np.float64)) * (1 + rng.standard_normal(n) * 2.0**-10)).astype(dtype)
    return np.concatenate([a, x]), np.concatenate([b, y]), np.concatenate([c, z])


@pytest.mark.parametrize("elem", FLOATS, ids=[e.name for e in FLOATS])
def test_fma_matches_the_interp(elem):
    """``llvm.fma`` (what the ``fma`` op lowers to) equals the interp's correctly rounded fma, bit for bit."""
    from cubepy.compiler.lower_arith import intrinsic
    from cubepy.ir import semantics

    a, b, c = _fma_inputs(elem)
    run = elementwise(lambda lw, x, y, z: intrinsic(lw, "llvm.fma", [x, y, z]), [elem, elem, elem], elem)
    got = run(a, b, c)
    with np.errstate(all="ignore"):
        expected = semantics.fma(a, b, c)
        unfused = (a * b + c).astype(a.dtype) if elem in (F32, F64) else None
    same = _same_floats(got, expected)
    bad = np.flatnonzero(~same)
    assert not len(bad), [(a[i], b[i], c[i], got[i], expected[i]) for i in bad[:8]]
    if unfused is not None:  # the inputs do tell one rounding from two
        assert not _same_floats(unfused, expected).all()
