"""Checked global accesses in loops: linear indices (``c * scale + offset``) and cube-uniform splits of loops
with barriers (``cubepy.ir.versioning``), checked against numpy references built from the documented
checked-mode semantics (a read past a buffer gives 0, a write past it is dropped)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import (
    ABSOLUTE_POS,
    CUBE_POS_X,
    CUBE_POS_Y,
    UNIT_POS,
    UNIT_POS_X,
    UNIT_POS_Y,
    Array,
    SharedMemory,
    cube,
    f32,
    u32,
)
from cubepy.ir import VarKind, ops, walk

TILE = 4


@cube(launch=True, launch_unchecked=True)
def tiled_matmul(a: Array[f32], b: Array[f32], c: Array[f32], m: u32, k: u32, n: u32):
    """c = a @ b through TILE x TILE shared tiles (a: m x k, b: k x n, row-major; short buffers read 0)."""
    a_tile = SharedMemory[f32](TILE * TILE)
    b_tile = SharedMemory[f32](TILE * TILE)
    row = CUBE_POS_Y * TILE + UNIT_POS_Y
    col = CUBE_POS_X * TILE + UNIT_POS_X
    acc = f32(0.0)
    for k0 in cp.range(0, k, TILE, unroll=1):
        a_tile[UNIT_POS_Y * TILE + UNIT_POS_X] = a[row * k + k0 + UNIT_POS_X]
        b_tile[UNIT_POS_Y * TILE + UNIT_POS_X] = b[(k0 + UNIT_POS_Y) * n + col]
        cp.sync_cube()
        for kk in cp.unroll(range(TILE)):
            acc += a_tile[UNIT_POS_Y * TILE + kk] * b_tile[kk * TILE + UNIT_POS_X]
        cp.sync_cube()
    if row < m and col < n:
        c[row * n + col] = acc


@cube(launch=True)
def column_sums(x: Array[f32], out: Array[f32], rows: u32, cols: u32):
    """out[col] = sum of x[r * cols + col] over r < rows (a strided, scaled index)."""
    col = ABSOLUTE_POS
    acc = f32(0.0)
    for r in cp.range(0, rows, 1, unroll=1):
        acc += x[r * cols + col]
    out[col] = acc


@cube(launch=True)
def per_unit_start(x: Array[f32], out: Array[f32], n: u32):
    """A loop with a barrier whose start differs between units: it cannot be split cube-uniformly."""
    tile = SharedMemory[f32](32)
    for c in cp.range(UNIT_POS, n, 32):
        tile[UNIT_POS] = x[c]
        cp.sync_cube()
        out[c] = tile[UNIT_POS]
        cp.sync_cube()


@cube(launch=True)
def mutable_index(x: Array[f32], out: Array[f32], n: u32):
    """``j`` is carried between rounds: round ``c`` reads ``x[c - 1]`` (``x[100]`` first), not ``x[c]``."""
    j = u32(100)
    for c in cp.range(0, n, 1):
        out[c] = x[j]
        j = c


def _loops(compiled) -> list[list[bool]]:
    """Per range_loop (program order): whether each global access in it is checked."""
    found = []
    for inst in walk(compiled.definition.body):
        if isinstance(inst.operation, ops.RangeLoop):
            found.append(
                [
                    i.operation.checked
                    for i in walk(inst.operation.body)
                    if isinstance(i.operation, (ops.Index, ops.IndexAssign))
                    and i.operation.memory.kind is VarKind.GLOBAL
                ]
            )
    return found


def _matmul_args(client, a_len: int, b_len: int, m: int, k: int, n: int):
    a = client.create(np.arange(1, a_len + 1, dtype=np.float32) % 7) if a_len else client.zeros(0, f32)
    b = client.create(np.arange(1, b_len + 1, dtype=np.float32) % 5) if b_len else client.zeros(0, f32)
    c = client.zeros(m * n, f32)
    scalars = (cp.ScalarArg(m, u32), cp.ScalarArg(k, u32), cp.ScalarArg(n, u32))
    return (a, b, c), (cp.ArrayArg(a), cp.ArrayArg(b), cp.ArrayArg(c), *scalars)


def _matmul_reference(a_len: int, b_len: int, m: int, k: int, n: int) -> np.ndarray:
    """What the kernel computes in checked mode: the flat indices it reads, 0 past each buffer."""
    rounds = -(-k // TILE) * TILE  # k0 runs over multiples of TILE below k, each reading TILE columns
    a = np.zeros(m * k + rounds + 1, np.float64)
    a[:a_len] = np.arange(1, a_len + 1) % 7
    b = np.zeros(rounds * n + n + 1, np.float64)
    b[:b_len] = (np.arange(1, b_len + 1) % 5)[: b.size]
    out = np.zeros((m, n))
    for r in range(m):
        for col in range(n):
            out[r, col] = sum(a[r * k + j] * b[j * n + col] for j in range(rounds))
    return out.reshape(-1).astype(np.float32)


def test_a_tile_loop_with_barriers_is_split_cube_uniformly():
    client = cp.client("interp")
    _, args = _matmul_args(client, 64, 64, 8, 8, 8)
    compiled = tiled_matmul.compile(cp.CubeDim(TILE, TILE), *args)
    assert _loops(compiled) == [[False, False], [True, True]]  # the fast part, then the loop as written
    unchecked = tiled_matmul.compile(cp.CubeDim(TILE, TILE), *args, unchecked=True)
    assert _loops(unchecked) == [[False, False]]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(
    ("a_len", "b_len", "m", "k", "n", "cubes"),
    [
        (64, 64, 8, 8, 8, (2, 2)),  # every access in range: only the fast part runs
        (63, 64, 8, 8, 8, (2, 2)),  # a short by one: its last unit's last read misses
        (64, 40, 8, 8, 8, (2, 2)),  # b short: the whole loop runs checked
        (64, 64, 8, 8, 8, (3, 3)),  # a cube past the matrix reads 0 and writes nothing
        (48, 60, 6, 8, 10, (3, 2)),  # m, n not multiples of the tile
        (54, 54, 6, 9, 6, (2, 2)),  # k not a multiple of the tile: reads run into the next row
        (0, 64, 8, 8, 8, (2, 2)),  # an empty a
    ],
)
def test_split_tile_loops_keep_checked_results(runtime, a_len, b_len, m, k, n, cubes):
    client = cp.client(runtime)
    (_, _, c), args = _matmul_args(client, a_len, b_len, m, k, n)
    tiled_matmul.launch(client, cp.CubeCount(*cubes), cp.CubeDim(TILE, TILE), *args)
    expected = _matmul_reference(a_len, b_len, m, k, n)
    rows, cols = min(m, cubes[1] * TILE), min(n, cubes[0] * TILE)
    mask = np.zeros((m, n), bool)
    mask[:rows, :cols] = True
    np.testing.assert_array_equal(client.read(c), np.where(mask.reshape(-1), expected, 0))


def test_a_scaled_index_splits_the_loop():
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros(12, f32)), cp.ArrayArg(client.zeros(4, f32)), cp.ScalarArg(3, u32))
    compiled = column_sums.compile(cp.CubeDim(4), *args, cp.ScalarArg(4, u32))
    assert _loops(compiled) == [[False], [True]]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(("x_len", "rows", "cols"), [(12, 3, 4), (11, 3, 4), (3, 3, 4), (12, 3, 0), (0, 2, 4)])
def test_scaled_split_loops_keep_checked_results(runtime, x_len, rows, cols):
    client = cp.client(runtime)
    data = np.arange(1, x_len + 1, dtype=np.float32)
    x = client.create(data) if x_len else client.zeros(0, f32)
    out = client.zeros(4, f32)
    column_sums.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(4),
        cp.ArrayArg(x),
        cp.ArrayArg(out),
        cp.ScalarArg(rows, u32),
        cp.ScalarArg(cols, u32),
    )
    padded = np.concatenate([data, np.zeros(rows * cols + 4, np.float32)])
    expected = [sum(padded[r * cols + col] for r in range(rows)) for col in range(4)]
    np.testing.assert_array_equal(client.read(out), np.asarray(expected, np.float32))


def test_a_barrier_loop_whose_start_differs_between_units_is_not_split():
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros(64, f32)), cp.ArrayArg(client.zeros(64, f32)), cp.ScalarArg(64, u32))
    assert _loops(per_unit_start.compile(cp.CubeDim(32), *args)) == [[True, True]]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_scaled_index_that_wraps_reads_what_the_original_reads(runtime):
    """cols = 2**31: row 1 reads past x (0), row 2's index wraps to ``col`` (u32) and reads x[col] again."""
    client = cp.client(runtime)
    data = np.arange(1, 9, dtype=np.float32)
    x, out = client.create(data), client.zeros(4, f32)
    column_sums.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(4),
        cp.ArrayArg(x),
        cp.ArrayArg(out),
        cp.ScalarArg(3, u32),
        cp.ScalarArg(2**31, u32),
    )
    np.testing.assert_array_equal(client.read(out), 2 * data[:4])


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_an_index_held_in_a_mutable_local_keeps_its_check(runtime):
    client = cp.client(runtime)
    x, out = client.create(np.arange(1, 9, dtype=np.float32)), client.create(np.ones(4, np.float32))
    args = (cp.ArrayArg(x), cp.ArrayArg(out), cp.ScalarArg(4, u32))
    mutable_index.launch(client, cp.CubeCount(1), cp.CubeDim(1), *args)
    np.testing.assert_array_equal(client.read(out), [0, 1, 2, 3])  # x[100] is past x: 0


@cube(launch=True)
def _gather_lines(src: Array[cp.Line[cp.f16]], out: Array[cp.Line[cp.f16]], shift: u32):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = src[ABSOLUTE_POS + shift]


def test_a_checked_global_read_is_one_predicated_load_on_the_gpu():
    """A miss keeps the zeroing moves' 0: four ``mov.b32 0`` and one ``@p ld.global.v4.b32`` for a 16-byte line,
    with the guard and the bounds test joined in one predicate; no address select, no branch."""
    client = cp.client("interp")
    src = cp.ArrayArg(client.zeros((64,), np.float16), line_size=8)  # 8 lines of 16 bytes
    out = cp.ArrayArg(client.zeros((64,), np.float16), line_size=8)
    ptx = _gather_lines.compile(cp.CubeDim(8), src, out, cp.ScalarArg(1, u32), target="sm_90a").ptx
    body = ptx[ptx.index(".entry") :]
    load = re.search(r"((?:mov\.b32 %r\d+, 0; ){4})@(%p\d+) ld\.global(?:\.nc)?\.v4\.b32", body)
    assert load is not None, body
    assert re.search(rf"and\.pred\s+{load.group(2)},", body), "the guard and the bounds test are one predicate"
    assert "cubepy_zero" not in ptx and "selp.b64" not in body
    assert not any(line.strip().startswith("@%p") and "bra" in line for line in body.splitlines())


@cp.cube(launch=True)
def _gather_bytes(src: Array[cp.u8], out: Array[cp.u8], shift: u32):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = src[ABSOLUTE_POS + shift]


def test_a_checked_byte_read_selects_a_zero_filled_constant():
    """PTX has no 8-bit register to predicate a load into: a 1-byte item reads ``cubepy_zero_1`` on a miss."""
    client = cp.client("interp")
    src, out = (cp.ArrayArg(client.zeros((64,), np.uint8)) for _ in range(2))
    ptx = _gather_bytes.compile(cp.CubeDim(8), src, out, cp.ScalarArg(1, u32), target="sm_90a").ptx
    body = ptx[ptx.index(".entry") :]
    assert ".global .align 16 .b8 cubepy_zero_1[1]" in ptx
    assert "selp.b64" in body and re.search(r"\n\s+ld\.global(\.nc)?\.b8", body)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_checked_byte_reads_past_the_end_give_zero(runtime):
    client = cp.client(runtime)
    data = np.arange(1, 65, dtype=np.uint8)
    out = client.zeros((64,), np.uint8)
    args = (cp.ArrayArg(client.create(data)), cp.ArrayArg(out), cp.ScalarArg(60, u32))
    _gather_bytes.launch(client, cp.CubeCount(8), cp.CubeDim(8), *args)
    expected = np.zeros(64, np.uint8)
    expected[:4] = data[60:]
    np.testing.assert_array_equal(client.read(out), expected)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_checked_line_reads_past_the_end_give_zero_lines(runtime):
    client = cp.client(runtime)
    data = np.arange(1, 65, dtype=np.float16)
    out = client.zeros((64,), np.float16)
    args = (cp.ArrayArg(client.create(data), line_size=8), cp.ArrayArg(out, line_size=8), cp.ScalarArg(3, u32))
    _gather_lines.launch(client, cp.CubeCount(1), cp.CubeDim(8), *args)
    expected = np.zeros(64, np.float16)
    expected[:40] = data[24:]  # lines 3..7 land in lines 0..4; lines 5..7 read past the end: zero lines
    np.testing.assert_array_equal(client.read(out), expected)
