"""``cp.const_array`` tables read with runtime indices, on the interp and the cpu runtime, against numpy."""

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, f32, i32, u32

DTYPES = [
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]


def _table(dtype, n: int) -> np.ndarray:
    """``n`` values of ``dtype`` including its extremes (and -0.0, inf, nan for floats)."""
    rng = np.random.default_rng(7)
    if dtype is np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        values = rng.standard_normal(n) * 100
        values[:3] = (-0.0, np.inf, np.nan)
        return values.astype(dtype)
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    values[:2] = (info.min, info.max)
    return values


def _lookup_kernel(table: np.ndarray, elem):
    @cp.cube(launch=True, launch_unchecked=True)
    def lookup(idx: Array[u32], out: Array[elem]):
        tbl = cp.const_array(table)
        i = ABSOLUTE_POS
        if i < out.len():
            out[i] = tbl[idx[i]]

    return lookup


def _run(kernel, client, idx: np.ndarray, dtype, unchecked: bool = False) -> np.ndarray:
    out = client.create(np.zeros(len(idx), dtype=dtype))
    launch = kernel.launch_unchecked if unchecked else kernel.launch
    launch(client, cp.CubeCount(2), cp.CubeDim(64), cp.ArrayArg(client.create(idx)), cp.ArrayArg(out))
    return client.read(out)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_runtime_indices_read_the_table_like_numpy(runtime, dtype):
    table = _table(dtype, 37)
    kernel = _lookup_kernel(table, cp.frontend.elem.scalar_type(cp.frontend.elem.to_elem(np.dtype(dtype))))
    idx = np.random.default_rng(1).integers(0, len(table), 100).astype(np.uint32)  # repeats, every order
    got = _run(kernel, cp.client(runtime), idx, dtype)
    expected = table[idx]
    np.testing.assert_array_equal(got.view(f"u{expected.itemsize}"), expected.view(f"u{expected.itemsize}"))


F32_TABLE = np.array([0.5, 1.5, -2.0, 3.25, 7.0], dtype=np.float32)
LOOKUP_F32 = _lookup_kernel(F32_TABLE, f32)
WITH_OUT_OF_RANGE = np.array([4, 0, 5, 3, 4294967295], dtype=np.uint32)


@pytest.mark.cubepy_sanitize(False)  # the out-of-range read is the point; the sanitizer reports it (tested below)
@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_checked_read_out_of_range_gives_zero(runtime):
    got = _run(LOOKUP_F32, cp.client(runtime), WITH_OUT_OF_RANGE, np.float32)
    np.testing.assert_array_equal(got, [7.0, 0.5, 0.0, 3.25, 0.0])


@cp.cube(launch=True)
def signed_lookup(idx: Array[i32], out: Array[f32]):
    out[ABSOLUTE_POS] = cp.const_array(F32_TABLE)[idx[ABSOLUTE_POS]]


@pytest.mark.cubepy_sanitize(False)  # the out-of-range reads are the point
@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_negative_runtime_index_is_out_of_bounds(runtime):
    client = cp.client(runtime)
    out = client.zeros((3,), np.float32)
    idx = client.create(np.array([-1, 1, -5], dtype=np.int32))
    signed_lookup.launch(client, cp.CubeCount(1), cp.CubeDim(3), cp.ArrayArg(idx), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), [0.0, 1.5, 0.0])  # numpy's -1 would wrap to 7.0


def test_the_sanitizer_reports_a_checked_read_out_of_range():
    with pytest.raises(cp.SanitizerError, match=r"out-of-bounds read of constant table 0 at index 5 \(length 5\)"):
        _run(LOOKUP_F32, cp.client("interp", sanitize=True), WITH_OUT_OF_RANGE, np.float32)


def test_an_unchecked_read_out_of_range_is_a_sanitizer_error():
    with pytest.raises(cp.SanitizerError, match="out-of-bounds read of constant table 0 at index 5") as info:
        _run(LOOKUP_F32, cp.client("interp"), WITH_OUT_OF_RANGE, np.float32, unchecked=True)
    assert "test_const_array.py" in str(info.value)


def test_unchecked_reads_in_range_match_numpy_on_the_cpu_runtime():
    idx = np.array([4, 0, 2, 3, 1, 1], dtype=np.uint32)
    got = _run(LOOKUP_F32, cp.client("cpu"), idx, np.float32, unchecked=True)
    np.testing.assert_array_equal(got, F32_TABLE[idx])


# A 2-D table read row-major, from a cube function, in divergent code (the lanes past n do not read).
PASCAL = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 2, 1, 0], [1, 3, 3, 1]], dtype=np.int32)
SIGNS = np.array([1, -1], dtype=np.int32)


@cp.cube
def _binomial(row, col):
    pascal = cp.const_array(PASCAL)
    return pascal[row, col]


@cp.cube(launch=True)
def binomials(rows: Array[u32], cols: Array[u32], out: Array[i32]):
    i = ABSOLUTE_POS
    if i < out.len():
        out[i] = _binomial(rows[i], cols[i]) * cp.const_array(SIGNS)[i % 2]


def test_a_2d_table_from_a_cube_function_matches_numpy(client):
    rng = np.random.default_rng(3)
    rows, cols = rng.integers(0, 4, 50).astype(np.uint32), rng.integers(0, 4, 50).astype(np.uint32)
    out = client.zeros((50,), np.int32)
    binomials.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(64),
        cp.ArrayArg(client.create(rows)),
        cp.ArrayArg(client.create(cols)),
        cp.ArrayArg(out),
    )
    expected = PASCAL[rows, cols] * SIGNS[np.arange(50) % 2]
    np.testing.assert_array_equal(client.read(out), expected)
