"""The ``bounds`` pass's rules for global buffers added beside the tensor rule: a guard ``i < n.len()`` proves
``m[i]`` when ``n.len()`` is the word ``m``'s check compares with; a split loop shares one precondition among
accesses whose offsets another one dominates; a large lane-local loop body is not split.  Results are
compared with numpy on the interp and cpu runtimes at lengths that make each access miss."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32, u32
from cubepy.ir import VarKind, ops, walk
from cubepy.ir.versioning import LANE_SPLIT_LIMIT

UNROLL = 4
ROWS = 2  # rows a round of ``scaled_rows``: its body stays under the split limit


@cube(launch=True)
def guarded_add(x: Array[f32], y: Array[f32], out: Array[f32]):
    """The tutorial's vector add: one guard on ``out``'s length."""
    i = ABSOLUTE_POS
    if i < out.len():
        out[i] = x[i] + y[i]


@cube(launch=True)
def unrolled_window(x: Array[f32], out: Array[f32], start: u32, n: u32):
    """out[c] = x[start + c] + ... + x[start + c + UNROLL - 1], the loop split on ``x``'s length."""
    for c in cp.range(0, n, 1):
        acc = f32(0.0)
        for k in cp.unroll(range(UNROLL)):
            acc += x[start + c + k]
        out[c] = acc


@cube(launch=True)
def scaled_rows(x: Array[f32], out: Array[f32], rows: u32, cols: u32):
    """out[col] = sum over r of x[r * cols + col], ROWS rows a round (the dW/dB column sums' form)."""
    col = ABSOLUTE_POS
    acc = f32(0.0)
    for r0 in cp.range(0, rows, ROWS):
        for k in cp.unroll(range(ROWS)):
            if r0 + k < rows:
                acc += x[(r0 + k) * cols + col]
    out[col] = acc


def _checked(compiled) -> dict[int, list[bool]]:
    """Buffer slot -> whether each of its global accesses (program order) is checked."""
    found: dict[int, list[bool]] = {}
    for inst in walk(compiled.definition.body):
        op = inst.operation
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.memory.kind is VarKind.GLOBAL:
            found.setdefault(op.memory.id, []).append(op.checked)
    return found


def _length_reads(compiled) -> int:
    """How many ``len``/``buffer_len`` words of ``x`` (slot 0) the kernel reads: one per split precondition."""
    return sum(
        isinstance(inst.operation, (ops.Len, ops.BufferLen)) and inst.operation.memory.id == 0
        for inst in walk(compiled.definition.body)
    )


def _loop_count(compiled) -> int:
    return sum(isinstance(inst.operation, ops.RangeLoop) for inst in walk(compiled.definition.body))


# -- a guard on the checked length -------------------------------------------------------------------------
def test_a_guard_on_an_equal_length_buffer_proves_every_check():
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros((100,), np.float32)) for _ in range(3)]
    assert _checked(guarded_add.compile(cp.CubeDim(32), *args)) == {0: [False], 1: [False], 2: [False]}


def test_a_longer_guard_proves_only_its_own_buffer():
    client = cp.client("interp")
    x, y = (cp.ArrayArg(client.zeros((100,), np.float32)) for _ in range(2))
    out = cp.ArrayArg(client.zeros((120,), np.float32))
    assert _checked(guarded_add.compile(cp.CubeDim(32), x, y, out)) == {0: [True], 1: [True], 2: [False]}


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(("x_len", "out_len"), [(100, 100), (90, 100), (100, 80)])
def test_guarded_add_matches_numpy_with_misses_read_as_zero(runtime, x_len, out_len):
    client = cp.client(runtime)
    x = np.arange(1, x_len + 1, dtype=np.float32)
    y = np.full(out_len, 0.5, np.float32)
    out = client.zeros((out_len,), np.float32)
    guarded_add.launch(
        client,
        cp.CubeCount(4),
        cp.CubeDim(32),
        cp.ArrayArg(client.create(x)),
        cp.ArrayArg(client.create(y)),
        cp.ArrayArg(out),
    )
    padded = np.concatenate([x, np.zeros(max(out_len - x_len, 0), np.float32)])[:out_len]
    np.testing.assert_array_equal(client.read(out), padded + y)


# -- one precondition for dominated offsets -----------------------------------------------------------------
def test_unrolled_offsets_share_one_precondition():
    """``start + c + k`` for k < UNROLL: the check of k = UNROLL - 1 implies the others'."""
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((64,), np.float32)), cp.ArrayArg(client.zeros((32,), np.float32)))
    compiled = unrolled_window.compile(cp.CubeDim(1), *args, cp.ScalarArg(0, u32), cp.ScalarArg(32, u32))
    assert _loop_count(compiled) == 2  # split: the fast part and the checked rest
    assert _checked(compiled)[0] == [False] * UNROLL + [True] * UNROLL
    assert _length_reads(compiled) == 1


def test_scaled_offsets_share_one_precondition():
    """``(r0 + k) * cols + col``: offsets ``k * cols + col`` grow with k for every ``cols``."""
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((64,), np.float32)), cp.ArrayArg(client.zeros((8,), np.float32)))
    compiled = scaled_rows.compile(cp.CubeDim(8), *args, cp.ScalarArg(8, u32), cp.ScalarArg(8, u32))
    assert _checked(compiled)[0] == [False] * ROWS + [True] * ROWS
    assert _length_reads(compiled) == 1


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(("x_len", "start", "n"), [(40, 0, 32), (34, 0, 32), (20, 3, 32), (40, 8, 0)])
def test_unrolled_window_matches_numpy(runtime, x_len, start, n):
    client = cp.client(runtime)
    data = np.arange(1, x_len + 1, dtype=np.float32)
    out = client.zeros((max(n, 1),), np.float32)
    args = (cp.ArrayArg(client.create(data)), cp.ArrayArg(out), cp.ScalarArg(start, u32), cp.ScalarArg(n, u32))
    unrolled_window.launch(client, cp.CubeCount(1), cp.CubeDim(1), *args)
    padded = np.concatenate([data, np.zeros(start + n + UNROLL, np.float32)])
    expected = [sum(padded[start + c + k] for k in range(UNROLL)) for c in range(n)]
    np.testing.assert_array_equal(client.read(out)[:n], np.asarray(expected, np.float32))


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(("x_len", "rows", "cols"), [(64, 8, 8), (60, 8, 8), (64, 7, 8), (10, 6, 8)])
def test_scaled_rows_match_numpy(runtime, x_len, rows, cols):
    client = cp.client(runtime)
    data = np.arange(1, x_len + 1, dtype=np.float32)
    out = client.zeros((8,), np.float32)
    args = (cp.ArrayArg(client.create(data)), cp.ArrayArg(out), cp.ScalarArg(rows, u32), cp.ScalarArg(cols, u32))
    scaled_rows.launch(client, cp.CubeCount(1), cp.CubeDim(8), *args)
    padded = np.concatenate([data, np.zeros(rows * cols + 8, np.float32)])
    expected = [sum(padded[r * cols + col] for r in range(rows)) for col in range(8)]
    np.testing.assert_array_equal(client.read(out), np.asarray(expected, np.float32))


# -- no copy of a large lane-local body ---------------------------------------------------------------------
def _wide_window(width: int):
    @cube(launch=True)
    def wide_window(x: Array[f32], out: Array[f32], n: u32):
        for c in cp.range(0, n, 1):
            acc = f32(0.0)
            for k in cp.unroll(range(width)):
                acc += x[c * width + k]
            out[c] = acc

    return wide_window


@pytest.mark.parametrize(("width", "split"), [(2, True), (LANE_SPLIT_LIMIT, False)])
def test_a_large_lane_local_body_is_not_split(width, split):
    client = cp.client("interp")
    kernel = _wide_window(width)
    args = (cp.ArrayArg(client.zeros((width * 8,), np.float32)), cp.ArrayArg(client.zeros((8,), np.float32)))
    compiled = kernel.compile(cp.CubeDim(1), *args, cp.ScalarArg(8, u32))
    assert _loop_count(compiled) == (2 if split else 1)


@cube(launch=True)
def shifted_guard(x: Array[f32], out: Array[f32], shift: u32):
    """The guard bounds ``i``, the read is at ``i + shift``: only ``out``'s check is proven."""
    i = ABSOLUTE_POS
    if i < out.len():
        out[i] = x[i + shift]


def test_a_guard_proves_only_the_index_it_compares():
    client = cp.client("interp")
    x, out = (cp.ArrayArg(client.zeros((64,), np.float32)) for _ in range(2))
    compiled = shifted_guard.compile(cp.CubeDim(32), x, out, cp.ScalarArg(1, u32))
    assert _checked(compiled) == {0: [True], 1: [False]}


# -- an offset rebuilt from a 64-bit product is taken modulo 2**32 ------------------------------------------
@cube(launch=True)
def strided_rows(x: Array[f32], out: Array[f32], stride: u32, cols: u32):
    """out[r * cols + c] = x[r * stride + c] for the cube's row r: the offset ``CUBE_POS * stride`` is built inside
    the loop from two 32-bit values (as ``x[row, c]`` of a tensor builds ``row * x.shape(1)``)."""
    for c in range(cp.UNIT_POS, cols, 4):
        out[cp.CUBE_POS * cols + c] = x[cp.CUBE_POS * stride + c]


def test_an_offset_past_63_bits_is_split_on_its_u32_value():
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((16,), np.float32)), cp.ArrayArg(client.zeros((24,), np.float32)))
    compiled = strided_rows.compile(cp.CubeDim(4), *args, cp.ScalarArg(8, u32), cp.ScalarArg(8, u32))
    assert _loop_count(compiled) == 2
    assert _checked(compiled)[0] == [False, True]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("stride", [8, 2**31, 2**31 + 4, 2**32 - 4])
def test_strided_rows_wrap_as_the_kernel_computes_them(runtime, stride):
    """Row r reads from ``(r * stride) mod 2**32``: with stride 2**31, row 2 wraps back to 0 and reads x[0:8];
    row 1 starts past the end and reads zeros (checked misses); 2**32 - 4 makes row 1 start at -4 mod 2**32."""
    client = cp.client(runtime)
    data = np.arange(1, 17, dtype=np.float32)
    out = client.zeros((24,), np.float32)
    args = (cp.ArrayArg(client.create(data)), cp.ArrayArg(out), cp.ScalarArg(stride, u32), cp.ScalarArg(8, u32))
    strided_rows.launch(client, cp.CubeCount(3), cp.CubeDim(4), *args)
    want = np.zeros(24, np.float32)
    for row in range(3):
        for c in range(8):
            index = (row * stride + c) % 2**32
            want[row * 8 + c] = data[index] if index < 16 else 0.0
    np.testing.assert_array_equal(client.read(out), want)
