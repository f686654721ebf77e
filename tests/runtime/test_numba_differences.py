"""The rules of docs/semantics/numba-differences.md, each shown on the interp (and in the PTX where the
rule is about the GPU's instruction)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import f16, f32, i64, u32
from cubepy.errors import ExpandError

NUMPY_TABLE = np.array([1.0, 2.0, 3.0], np.float32)
NUMPY_F64_GLOBAL = np.float64(0.1)


@cp.cube(launch=True)
def atomic_max_min(hi: cp.Array[cp.Atomic[f32]], lo: cp.Array[cp.Atomic[f32]], values: cp.Array[f32]):
    i = cp.ABSOLUTE_POS
    hi[0].fetch_max(values[i])
    lo[0].fetch_min(values[i])


def test_float_atomic_max_and_min_ignore_nan_like_fmaxf(client):
    values = np.array([1.0, np.nan, 5.0, -2.0] * 8, np.float32)
    for start in (0.0, np.nan):  # a NaN among the values, and a NaN already in memory
        hi, lo = client.create(np.array([start], np.float32)), client.create(np.array([start], np.float32))
        atomic_max_min.launch(
            client,
            cp.CubeCount(1),
            cp.CubeDim(32),
            cp.ArrayArg(hi),
            cp.ArrayArg(lo),
            cp.ArrayArg(client.create(values)),
        )
        assert client.read(hi)[0] == np.fmax.reduce(np.r_[np.float32(start), values]) == 5.0
        assert client.read(lo)[0] == np.fmin.reduce(np.r_[np.float32(start), values])


@pytest.mark.ptxas
def test_float_atomic_max_is_a_compare_and_swap_loop_around_the_nan_ignoring_max_f32():
    client = cp.client("interp")
    a = cp.ArrayArg(client.zeros((1,), np.float32))
    ptx = atomic_max_min.compile((32, 1, 1), a, a, a).ptx
    assert "max.f32" in ptx and "min.f32" in ptx and "atom.relaxed.gpu.global.cas.b32" in ptx
    assert "atom.global.max.f32" not in ptx


@cp.cube(launch=True)
def unit_minus_one(out: cp.Array[u32]):
    out[cp.UNIT_POS_X] = cp.UNIT_POS_X - 1


def test_unit_positions_are_u32_so_unit_pos_minus_one_wraps(client):
    out = client.zeros((4,), np.uint32)
    unit_minus_one.launch(client, cp.CubeCount(1), cp.CubeDim(4), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), [2**32 - 1, 0, 1, 2])


@cp.cube(launch=True)
def mixed_types(h: cp.Array[f16], x: cp.Array[f32], n: cp.Array[cp.i32], big: cp.Array[i64], r: cp.Array[cp.f64]):
    h[1] = h[0] + n[0]  # f16 with an integer stays f16
    x[1] = x[0] * NUMPY_F64_GLOBAL  # a numpy float64 global takes the other operand's type
    k = 3_000_000_000 // 1_000_000_000  # a Python int local is i32
    n[1] = k
    r[0] = cp.sqrt(big[0])  # a 64-bit integer computes in f64


def test_literal_and_mixed_type_rules(client):
    h, x = client.create(np.array([2048.0, 0], np.float16)), client.create(np.array([3.0, 0], np.float32))
    n, big = client.create(np.array([1, 0], np.int32)), client.create(np.array([2**53 + 1], np.int64))
    r = client.zeros((1,), np.float64)
    mixed_types.launch(client, cp.CubeCount(1), cp.CubeDim(1), *(cp.ArrayArg(a) for a in (h, x, n, big, r)))
    assert client.read(h)[1] == np.float16(2048.0) + np.float16(1)  # 2049 rounds to 2048 in f16; numpy widens
    assert client.read(x)[1] == np.float32(3.0) * np.float32(0.1)  # not float64(3 * 0.1) rounded
    assert client.read(n)[1] == 3
    assert client.read(r)[0] == np.sqrt(np.float64(2**53 + 1))  # f32 would give sqrt(9.007199e15) rounded
    expansion = cp.testing.expand(
        mixed_types, cp.Array[f16], cp.Array[f32], cp.Array[cp.i32], cp.Array[i64], cp.Array[cp.f64]
    )
    assert "f16 = add" in expansion.ir and "f32 = mul" in expansion.ir and "f64 = sqrt" in expansion.ir


@cp.cube
def indexes_a_numpy_table(out: cp.Array[f32], i: u32):
    out[0] = NUMPY_TABLE[i]


@cp.cube
def overflowing_constant(out: cp.Array[f32]):
    out[0] = np.float64(1e300) * out[1]


@pytest.mark.parametrize(
    "kernel, args, words",
    [
        (indexes_a_numpy_table, (cp.Array[f32], u32), "cannot index or become a numpy array"),
        (overflowing_constant, (cp.Array[f32],), "constant 1e+300 overflows f32"),
    ],
)
def test_silent_numba_cases_are_expand_errors_with_the_line(kernel, args, words):
    with pytest.raises(ExpandError, match=r"test_numba_differences.py:\d+") as caught:
        cp.testing.expand(kernel, *args)
    assert words in str(caught.value)


@cp.cube
def comptime_numpy_index(out: cp.Array[f32]):
    out[0] = NUMPY_TABLE[2]


def test_a_comptime_index_into_a_numpy_table_is_a_constant():
    assert "3.0f32" in cp.testing.expand(comptime_numpy_index, cp.Array[f32]).ir


@cp.cube
def counts_in_a_python_int_local(
    a: cp.Array[f32], out: cp.Array[cp.i32], wide: cp.Array[cp.i64], store_narrow: cp.Comptime[bool]
):
    n = 0
    for i in range(a.len()):
        if a[i] > 0.0:
            n += 1
    if store_narrow:
        out[0] = n
    wide[0] = n


def test_a_python_int_local_is_i32_unless_its_uses_need_another_type():
    specs = (cp.Array[f32], cp.Array[cp.i32], cp.Array[cp.i64])
    narrow = cp.testing.expand(counts_in_a_python_int_local, *specs, store_narrow=True).ir
    assert "%m1: i32 = assign 0i32" in narrow and "i64 = cast %m1" in narrow  # widened for the i64 store
    wide = cp.testing.expand(counts_in_a_python_int_local, *specs, store_narrow=False).ir
    assert "%m1: i64 = assign 0i64" in wide  # expanded again with the type its only typed use needs
