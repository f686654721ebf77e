"""The ``bounds`` pass (``cubepy.ir.ranges``): checks it proves dead are gone, the others stay and still work."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cubepy as cp
from cubepy import (
    PLANE_POS,
    UNIT_POS,
    UNIT_POS_PLANE,
    UNIT_POS_X,
    UNIT_POS_Y,
    Array,
    LocalArray,
    SharedMemory,
    cube,
    f32,
    u32,
)
from cubepy.compiler import ptxas
from cubepy.ir import VarKind, ops, walk
from cubepy.ir.ranges import _binary, type_range
from cubepy.ir.types import I32, U8, U32
from tests.filecheck import filecheck

needs_ptxas = pytest.mark.skipif(not ptxas.available(), reason="ptxas not available")


def _checks(compiled) -> dict[int, bool]:
    """source line -> whether the shared/local access on it is still checked (after the passes)."""
    found: dict[int, bool] = {}
    for inst in walk(compiled.definition.body):
        op = inst.operation
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.memory.kind is not VarKind.GLOBAL:
            found[inst.loc.line] = found.get(inst.loc.line, False) or op.checked
    return found


@cube(launch=True, launch_unchecked=True)
def provable(out: Array[f32]):
    tile = SharedMemory[f32](256)
    regs = LocalArray[f32](8)
    slots = SharedMemory[f32](8)
    tile[UNIT_POS_Y * 16 + UNIT_POS_X] = f32(UNIT_POS)  # line A: axis ranges of a 16x16 cube
    cp.sync_cube()
    for k in cp.range(0, 16, 1, unroll=1):
        regs[k % 8] = tile[k * 16 + UNIT_POS_X]  # line B: loop index, mod
    if UNIT_POS_PLANE == 0:
        slots[PLANE_POS] = regs[(UNIT_POS >> 5) & 7]  # line C: plane position, shift and and
    cp.sync_cube()
    total = tile[(UNIT_POS + 3) % 256] + tile[cp.min(UNIT_POS * 2, u32(255))]  # line D: mod, min
    if UNIT_POS < 8:
        total += slots[UNIT_POS]  # line E: narrowed by the branch
    out[UNIT_POS] = total


def _line_of(fn, marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def _out(units: int = 256):
    return cp.ArrayArg(cp.client("interp").zeros(units, f32))


def test_provable_accesses_lose_their_checks():
    checks = _checks(provable.compile(cp.CubeDim(16, 16), _out()))
    for marker in ("line A", "line B", "line C", "line D", "line E"):
        assert checks[_line_of(provable, marker)] is False, (marker, checks)


def test_the_same_index_in_a_bigger_cube_keeps_its_check():
    """32x16 units: ``UNIT_POS_Y * 16 + UNIT_POS_X`` reaches 16 * 15 + 31 = 271 >= 256."""
    checks = _checks(provable.compile(cp.CubeDim(32, 16), _out(512)))
    assert checks[_line_of(provable, "line A")] is True
    assert checks[_line_of(provable, "line D")] is False  # (UNIT_POS + 3) % 256, min(UNIT_POS * 2, 255)


@needs_ptxas
def test_checked_ptx_of_provable_accesses_is_the_unchecked_ptx():
    """Zero cost in the end product: no compare beyond the global store's (LLVM folds some of these checks by
    itself from the tid ranges; the tests above pin that the IR no longer asks for any of them)."""

    def body(unchecked: bool) -> list[str]:
        ptx = provable.compile(cp.CubeDim(16, 16), _out(), unchecked=unchecked).ptx
        return [line.split()[0] for line in ptx.splitlines() if line.startswith("\t") and "setp" in line]

    # the only compare left in checked mode is the global store's (the unchecked kernel has none)
    assert len(body(False)) == len(body(True)) + 1


@cube(launch=True, launch_unchecked=True)
def unprovable(out: Array[f32], shift: u32):
    # CHECK: .entry unprovable
    # CHECK: bar.sync
    # CHECK: setp.lt.u32 [[IN:%p[0-9]+]], {{%r[0-9]+}}, 32;
    # CHECK-NEXT: selp.b32 {{%r[0-9]+}}, {{%r[0-9]+}}, 0, [[IN]];
    # CHECK-NOT: bra
    # CHECK: ld.shared.b32 [[V:%r[0-9]+]]
    # CHECK-NEXT: selp.f32 {{%r[0-9]+}}, [[V]], 0f00000000, [[IN]];
    tile = SharedMemory[f32](32)
    tile[UNIT_POS] = f32(UNIT_POS + 1)
    cp.sync_cube()
    out[UNIT_POS] = tile[UNIT_POS + shift]  # past the end for UNIT_POS + shift >= 32: reads 0


@cube(launch=True, launch_unchecked=True)
def store_past(out: Array[f32]):
    tile = SharedMemory[f32](32)
    tile[UNIT_POS] = f32(0.0)
    cp.sync_cube()
    tile[UNIT_POS + 16] = f32(UNIT_POS + 1)  # units 16.. write past the end: dropped
    cp.sync_cube()
    out[UNIT_POS] = tile[UNIT_POS]


def test_unprovable_accesses_keep_their_checks():
    assert set(_checks(unprovable.compile(cp.CubeDim(32), _out(32), cp.ScalarArg(1, u32))).values()) == {False, True}
    assert True in _checks(store_past.compile(cp.CubeDim(32), _out(32))).values()


@needs_ptxas
def test_an_unprovable_shared_read_is_branch_free(tmp_path):
    """The index is clamped and the value selected; the only branch left is the global store's."""
    compiled = unprovable.compile(cp.CubeDim(32), _out(32), cp.ScalarArg(1, u32))
    filecheck(unprovable, compiled.ptx, tmp_path)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_out_of_range_reads_give_zero_and_writes_are_dropped(runtime):
    client = cp.client(runtime)
    out = client.zeros(32, f32)
    unprovable.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), cp.ScalarArg(5, u32))
    expected = np.where(np.arange(32) + 5 < 32, np.arange(32) + 6, 0).astype(np.float32)
    np.testing.assert_array_equal(client.read(out), expected)
    store_past.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out))
    expected = np.concatenate([np.zeros(16), np.arange(1, 17)]).astype(np.float32)
    np.testing.assert_array_equal(client.read(out), expected)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_provable_kernel_results_are_unchanged(runtime):
    """Against numpy, by hand: the same values whatever the checks."""
    client = cp.client(runtime)
    out = client.zeros(256, f32)
    provable.launch(client, cp.CubeCount(1), cp.CubeDim(16, 16), cp.ArrayArg(out))
    units = np.arange(256)  # tile[i] = i; regs[j] ends as tile[(8 + j) * 16 + x]; plane p's lane 0 has x = 0
    expected = (units + 3) % 256 + np.minimum(units * 2, 255)
    expected[:8] += (8 + units[:8]) * 16  # slots[p] = regs[p & 7] of unit 32 p
    np.testing.assert_array_equal(client.read(out), expected.astype(np.float32))


@cube(launch=True)
def reassigned_index(out: Array[f32]):
    tile = SharedMemory[f32](16)
    tile[UNIT_POS] = f32(1.0)
    cp.sync_cube()
    i = UNIT_POS
    while i < 16:
        i += 8
    out[UNIT_POS] = tile[i]  # a mutable local: unknown, checked (i is 16..23 here: reads 0)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_mutable_index_keeps_its_check(runtime):
    assert True in _checks(reassigned_index.compile(cp.CubeDim(16), _out(16))).values()
    client = cp.client(runtime)
    out = client.zeros(16, f32)
    reassigned_index.launch(client, cp.CubeCount(1), cp.CubeDim(16), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.zeros(16, np.float32))


@cube(launch=True)
def wrapping_loop(out: Array[f32], start: u32):
    tile = SharedMemory[f32](4)
    tile[UNIT_POS] = f32(UNIT_POS + 1)
    cp.sync_cube()
    total = f32(0.0)
    for i in cp.range(start, u32(0xFFFFFFFF), u32(0x80000000), unroll=1):
        total += tile[i - start]  # i wraps past 2**32: the lower bound of i is lost, the check stays
    out[UNIT_POS] = total


def test_a_loop_index_that_may_wrap_keeps_its_check():
    assert True in _checks(wrapping_loop.compile(cp.CubeDim(4), _out(4), cp.ScalarArg(0, u32))).values()


# -- the interval rules against exhaustive evaluation ----------------------------------------------------------
def _python(kind, a: int, b: int) -> int | None:
    """What the IR operations compute on values that do not wrap (Python's and C's conventions)."""
    if kind is ops.Floordiv:
        return a // b if b else None
    if kind is ops.Mod:
        return a % b if b else None
    if kind is ops.DivTrunc:
        return int(a / b) if b else None
    if kind is ops.RemTrunc:
        return a - int(a / b) * b if b else None
    if kind is ops.Shl:
        return a << b
    if kind is ops.Shr:
        return a >> b
    table = {
        ops.Add: a + b,
        ops.Sub: a - b,
        ops.Mul: a * b,
        ops.Min: min(a, b),
        ops.Max: max(a, b),
        ops.Bitand: a & b,
        ops.Bitor: a | b,
        ops.Bitxor: a ^ b,
    }
    return table[kind]


KINDS = (
    ops.Add,
    ops.Sub,
    ops.Mul,
    ops.Min,
    ops.Max,
    ops.Floordiv,
    ops.Mod,
    ops.DivTrunc,
    ops.RemTrunc,
    ops.Shl,
    ops.Shr,
    ops.Bitand,
    ops.Bitor,
    ops.Bitxor,
)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_each_interval_rule_contains_every_result(kind):
    rng = np.random.default_rng(7)
    for _ in range(60):
        a = tuple(sorted(int(v) for v in rng.integers(-20, 40, 2)))
        b = tuple(sorted(int(v) for v in rng.integers(-6, 12, 2)))
        found = _binary(kind, a, b, 32)
        if found is None:
            continue
        for x, y in itertools.product(range(a[0], a[1] + 1), range(b[0], b[1] + 1)):
            value = _python(kind, x, y)
            if value is not None:
                assert found[0] <= value <= found[1], (kind.__name__, a, b, x, y, value, found)


def test_type_ranges():
    assert type_range(U32) == (0, 2**32 - 1)
    assert type_range(I32) == (-(2**31), 2**31 - 1)
    assert type_range(U8) == (0, 255)


# -- loop splitting (cubepy.ir.versioning) -------------------------------------------------------------------
@cube(launch=True, launch_unchecked=True)
def scale_rows(x: Array[f32], out: Array[f32], cols: u32):
    base = cp.CUBE_POS * cols
    for c in range(UNIT_POS, cols, 32):
        out[base + c] = x[base + c] * f32(2.0)


@cube(launch=True)
def synced_rows(x: Array[f32], out: Array[f32], cols: u32):
    base = cp.CUBE_POS * cols
    for c in cp.range(UNIT_POS, cols, 32):
        out[base + c] = x[base + c]
        cp.sync_cube()


@cube(launch=True)
def fixed_trip(x: Array[f32], out: Array[f32]):
    for i in range(UNIT_POS, 256, 32):
        out[i] = x[i]


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


def _rows_args(n: int, out_n: int | None = None):
    client = cp.client("interp")
    return cp.ArrayArg(client.zeros(n, f32)), cp.ArrayArg(client.zeros(out_n or n, f32)), cp.ScalarArg(10, u32)


def test_a_row_loop_is_split_into_an_unchecked_part_and_the_checked_rest():
    compiled = scale_rows.compile(cp.CubeDim(32), *_rows_args(40))
    assert _loops(compiled) == [[False, False], [True, True]]  # the fast part, then the loop as written
    top = [i.operation for i in compiled.definition.body.instructions]
    assert not any(isinstance(op, (ops.If, ops.IfElse)) for op in top)  # two plain loops, no branch around them


def test_loops_with_barriers_or_literal_ends_are_not_split():
    assert _loops(synced_rows.compile(cp.CubeDim(32), *_rows_args(40))) == [[True, True]]
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros(256, f32)), cp.ArrayArg(client.zeros(256, f32)))
    assert _loops(fixed_trip.compile(cp.CubeDim(32), *args)) == [[True, True]]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(
    ("x_len", "out_len", "cubes"),
    [(40, 40, 4), (40, 40, 5), (39, 40, 4), (40, 31, 4), (0, 40, 1)],
    ids=["exact", "one-cube-too-many", "x-short-by-one", "out-short", "empty-x"],
)
def test_split_loops_keep_checked_results(runtime, x_len, out_len, cubes):
    """Each side of the test, and its edge: a read past x gives 0, a write past out is dropped (by hand)."""
    client = cp.client(runtime)
    data = np.arange(1, x_len + 1, dtype=np.float32)
    x = client.create(data) if x_len else client.zeros(0, f32)
    out = client.zeros(out_len, f32)
    scale_rows.launch(
        client, cp.CubeCount(cubes), cp.CubeDim(32), cp.ArrayArg(x), cp.ArrayArg(out), cp.ScalarArg(10, u32)
    )
    expected = np.zeros(out_len, np.float32)
    reach = min(out_len, cubes * 10)
    padded = np.concatenate([data, np.zeros(max(0, reach - x_len), np.float32)])
    expected[:reach] = padded[:reach] * 2
    np.testing.assert_array_equal(client.read(out), expected)


@cube(launch=True)
def wrapping_sum(x: Array[f32], out: Array[f32], start: u32, end: u32):
    total = f32(0.0)
    for i in cp.range(start, end, u32(0xFFFFFFFC), unroll=1):  # -4 modulo 2**32: wraps below 0
        total += x[i]
    out[UNIT_POS] = total


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(
    ("x_len", "start", "end"),
    # (40, 2, 20) and (8, 3, 20): the fast part runs one round, stopping before its index wraps; the rest
    # resumes at start - 4 modulo 2**32, past the end
    [(8, 10, 20), (12, 10, 20), (40, 10, 20), (40, 30, 35), (40, 2, 20), (8, 3, 20)],
)
def test_a_split_loop_whose_index_wraps_visits_what_the_original_visits(runtime, x_len, start, end):
    assert _loops(wrapping_sum.compile(cp.CubeDim(1), *_rows_args(x_len)[:2], start, end)) == [[False], [True]]
    client = cp.client(runtime)
    data = np.arange(1, x_len + 1, dtype=np.float32)
    out = client.zeros(1, f32)
    wrapping_sum.launch(
        client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(client.create(data)), cp.ArrayArg(out), start, end
    )
    expected, i = 0.0, start  # the u32 loop walked by hand: a read past x gives 0
    while i < end:
        expected += float(data[i]) if i < x_len else 0.0
        i = (i + 0xFFFFFFFC) % 2**32
    assert client.read(out)[0] == np.float32(expected)


@cube(launch=True)
def up_to_len(x: Array[f32], out: Array[f32]):
    acc = f32(0.0)
    for c in range(UNIT_POS, x.len(), 32):
        acc += x[c]  # c < x.len(), the word x's check reads: no check, no split
    out[UNIT_POS] = acc


def test_a_loop_up_to_the_buffers_own_len_needs_no_check_and_no_split():
    assert _loops(up_to_len.compile(cp.CubeDim(32), *_rows_args(100)[:2])) == [[False]]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_view_shorter_than_its_allocation_keeps_the_split(runtime):
    """``len()`` 40 over an allocation of 48: the check compares with 48, so ``c < len()`` proves nothing."""
    client = cp.client(runtime)
    data = np.arange(48, dtype=np.float32)
    view = cp.TensorArg.from_raw_parts(client.create(data), (1,), (40,))
    out = client.zeros(32, f32)
    assert _loops(up_to_len.compile(cp.CubeDim(32), view, cp.ArrayArg(out))) == [[False], [True]]
    up_to_len.launch(client, cp.CubeCount(1), cp.CubeDim(32), view, cp.ArrayArg(out))
    expected = data[:32] + np.concatenate([data[32:40], np.zeros(24, np.float32)])
    np.testing.assert_array_equal(client.read(out), expected)
