"""If-conversion of guarded bodies on NVPTX (``lower_control.lower_guarded``): a tail-masked ``if i < n:`` whose
body stores runs its arithmetic on every unit, reads through ``@p ld.global`` and stores through ``@p st.global``
(Triton's masked loads and stores), so the PTX has no branch per element; a checked access joins its bounds test
to the guard's predicate; bodies with other effects, integer division, and read-only bodies too small to
need it keep their branch."""

from __future__ import annotations

import re

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Line, f16, f32, u32
from cubepy.compiler import lower_control

UNITS = 32
PER_UNIT = 4


@cp.cube(launch=True, launch_unchecked=True)
def masked_asin(x: Array[f32], y: Array[f32]):
    start = CUBE_POS * (UNITS * PER_UNIT) + UNIT_POS
    n = y.len()
    for i in cp.unroll(range(PER_UNIT)):
        offset = start + i * UNITS
        if offset < n:
            y[offset] = cp.asin(x[offset])


@cp.cube(launch=True, launch_unchecked=True)
def masked_sum_and_copy(x: Array[f32], y: Array[f32], out: Array[f32]):
    """Accumulates a mutable local under the guard, and copies: the sum keeps its value where the guard fails."""
    total = f32(0.0)
    n = x.len()
    for i in cp.unroll(range(PER_UNIT)):
        offset = UNIT_POS + i * UNITS
        if offset < n:
            v = x[offset]
            total += v
            y[offset] = v * 2.0
    out[UNIT_POS] = total


@cp.cube(launch=True, launch_unchecked=True)
def masked_divide(x: Array[u32], y: Array[u32], d: u32):
    n = y.len()
    for i in cp.unroll(range(PER_UNIT)):
        offset = UNIT_POS + i * UNITS
        if offset < n:
            y[offset] = x[offset] // d


@cp.cube(launch=True, launch_unchecked=True)
def masked_lines(x: Array[Line[f32]], y: Array[Line[f32]]):
    n = y.len()
    for i in cp.unroll(range(2)):
        offset = UNIT_POS + i * UNITS
        if offset < n:
            y[offset] = x[offset] / 3.0  # a division: worth predicating (``_heavy``)


@cp.cube(launch=True, launch_unchecked=True)
def masked_half_lines(x: Array[Line[f16]], y: Array[Line[f16]]):
    n = y.len()
    for i in cp.unroll(range(2)):
        offset = UNIT_POS + i * UNITS
        if offset < n:
            y[offset] = x[offset] / (x[offset] + x[offset])


@cp.cube(launch=True, launch_unchecked=True)
def masked_in_place(y: Array[f32]):
    n = y.len()
    for i in cp.unroll(range(2)):
        offset = UNIT_POS + i * UNITS
        if offset < n:
            y[offset] = y[offset] / 3.0


@cp.cube(launch=True, launch_unchecked=True)
def masked_read_only(x: Array[f32], out: Array[f32]):
    total = f32(0.0)
    for i in cp.unroll(range(PER_UNIT)):
        offset = UNIT_POS + i * UNITS
        if offset < x.len():
            total += x[offset]
    out[UNIT_POS] = total


def _ptx(kernel, *dtypes_and_lines, scalars=(), unchecked=True) -> str:
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros((256,), dtype), line_size=lanes) for dtype, lanes in dtypes_and_lines]
    compiled = kernel.compile(cp.CubeDim(UNITS), *args, *scalars, target="sm_90a", unchecked=unchecked)
    return compiled.ptx


def _count(pattern: str, ptx: str) -> int:
    return len(re.findall(pattern, ptx))


def test_a_masked_elementwise_body_has_no_branch_and_predicated_memory():
    ptx = _ptx(masked_asin, (np.float32, 1), (np.float32, 1))
    assert _count(r"\bbra", ptx) == 0
    assert _count(r"@%p\d+ ld\.global\.nc\.b32", ptx) == PER_UNIT  # x is read-only and unaliased
    assert _count(r"@%p\d+ st\.global\.b32", ptx) == PER_UNIT


def test_a_mutable_local_keeps_its_value_where_the_guard_fails():
    ptx = _ptx(masked_sum_and_copy, (np.float32, 1), (np.float32, 1), (np.float32, 1))
    assert _count(r"@%p\d+ st\.global\.b32", ptx) == PER_UNIT
    assert _count(r"selp\.f32", ptx) >= PER_UNIT - 1  # total = guard ? total + v : total (the first may fold)
    assert _count(r"\bbra", ptx) == 0


def test_integer_division_keeps_its_branch():
    ptx = _ptx(masked_divide, (np.uint32, 1), (np.uint32, 1), scalars=(cp.ScalarArg(3, u32),))
    assert _count(r"@%p\d+ st\.global", ptx) == 0
    assert _count(r"\bbra", ptx) >= PER_UNIT


def test_lines_are_stored_whole():
    ptx = _ptx(masked_lines, (np.float32, 4), (np.float32, 4))
    assert _count(r"@%p\d+ ld\.global\.nc\.v4\.b32", ptx) == 2
    assert _count(r"@%p\d+ st\.global\.v4\.b32", ptx) == 2
    ptx = _ptx(masked_lines, (np.float32, 8), (np.float32, 8))  # 32 bytes: two 16-byte halves
    assert _count(r"@%p\d+ st\.global\.v4\.b32", ptx) == 4
    ptx = _ptx(masked_half_lines, (np.float16, 8), (np.float16, 8))
    assert _count(r"@%p\d+ ld\.global\.nc\.v4\.b32", ptx) == 2
    assert _count(r"@%p\d+ st\.global\.v4\.b32", ptx) == 2
    ptx = _ptx(masked_half_lines, (np.float16, 1), (np.float16, 1))
    assert _count(r"@%p\d+ st\.global\.b16", ptx) == 2


def test_a_written_buffer_is_read_coherently():
    ptx = _ptx(masked_in_place, (np.float32, 1))
    assert _count(r"@%p\d+ ld\.global\.b32", ptx) == 2
    assert _count(r"ld\.global\.nc", ptx) == 0


@cp.cube(launch=True, launch_unchecked=True)
def masked_shifted_copy(x: Array[f32], y: Array[f32], shift: u32):
    """Checked accesses the guard does not prove: ``offset + shift`` may pass either end."""
    n = y.len()
    for i in cp.unroll(range(PER_UNIT)):
        offset = UNIT_POS + i * UNITS
        if offset < n:
            y[offset + shift] = x[offset + shift] * 2.0


def test_checked_accesses_join_their_bounds_test_to_the_guard():
    client = cp.client("interp")
    x, y = cp.ArrayArg(client.zeros((300,), np.float32)), cp.ArrayArg(client.zeros((256,), np.float32))
    args = (x, y, cp.ScalarArg(3, u32))
    ptx = masked_shifted_copy.compile(cp.CubeDim(UNITS), *args, target="sm_90a").ptx  # lengths differ: 3 tests
    assert _count(r"\bbra", ptx) == 0
    loads = re.findall(r"mov\.b32 %r\d+, 0; @(%p\d+) ld\.global(?:\.nc)?\.b32", ptx)
    stores = re.findall(r"@(%p\d+) st\.global\.b32", ptx)
    assert len(loads) == len(stores) == PER_UNIT
    joined = set(re.findall(r"and\.pred\s+(%p\d+),", ptx))
    assert set(loads) <= joined and set(stores) <= joined, "each access's predicate is guard and bounds test"


def test_a_guard_on_the_checked_length_proves_the_checks():
    """``if i < y.len()`` with ``x`` and ``y`` of one length: the checked kernel is the unchecked one."""
    checked = _ptx(masked_asin, (np.float32, 1), (np.float32, 1), unchecked=False)
    unchecked = _ptx(masked_asin, (np.float32, 1), (np.float32, 1))

    def code(ptx: str) -> list[str]:
        body = ptx[ptx.index(".entry") : ptx.index("$L__func_end0")]
        return [line.strip() for line in body.splitlines() if not line.strip().startswith((".loc", "//"))]

    assert code(checked) == code(unchecked)


def test_small_read_only_bodies_keep_their_branches():
    ptx = _ptx(masked_read_only, (np.float32, 1), (np.float32, 1))
    assert _count(r"@%p\d+ ld\.global", ptx) == 0  # LLVM and ptxas predicate these small blocks themselves


def test_switching_it_off_brings_the_branches_back(monkeypatch):
    monkeypatch.setattr(lower_control, "SPECULATE", False)

    @cp.cube(launch=True, launch_unchecked=True)
    def masked_asin_branchy(x: Array[f32], y: Array[f32]):  # its own kernel: nothing compiled is reused
        n = y.len()
        for i in cp.unroll(range(PER_UNIT)):
            offset = UNIT_POS + i * UNITS
            if offset < n:
                y[offset] = cp.asin(x[offset])

    ptx = _ptx(masked_asin_branchy, (np.float32, 1), (np.float32, 1))
    assert _count(r"@%p\d+ st\.global", ptx) == 0
    assert _count(r"\bbra", ptx) >= PER_UNIT


def test_the_converted_kernels_still_compute_what_numpy_does():
    """The interp and cpu runtimes run the same IR; the cpu build is untouched by the conversion (NVPTX only)."""
    for name in ("interp", "cpu"):
        client = cp.client(name)
        x = np.linspace(-1.0, 1.0, 200, dtype=np.float32)
        hx, hy, hout = client.create(x), client.zeros((200,), np.float32), client.zeros((UNITS,), np.float32)
        masked_sum_and_copy.launch(client, 1, UNITS, cp.ArrayArg(hx), cp.ArrayArg(hy), cp.ArrayArg(hout))
        want = np.zeros(200, np.float32)
        want[: UNITS * PER_UNIT] = 2 * x[: UNITS * PER_UNIT]
        np.testing.assert_array_equal(client.read(hy), want)
        sums = [sum(float(x[u + i * UNITS]) for i in range(PER_UNIT)) for u in range(UNITS)]
        np.testing.assert_allclose(client.read(hout), np.array(sums, np.float32), rtol=1e-6)


@cp.cube(launch=True, launch_unchecked=True)
def masked_add(x: Array[f32], y: Array[f32], out: Array[f32]):
    n = out.len()
    for i in cp.unroll(range(2)):
        offset = UNIT_POS + i * UNITS
        if offset < n:
            out[offset] = x[offset] + y[offset]


def test_a_short_body_of_plain_arithmetic_keeps_its_branch():
    """Two loads, an add and a store: one branch each is cheaper than predicating (the vector add's SASS)."""
    ptx = _ptx(masked_add, (np.float32, 1), (np.float32, 1), (np.float32, 1))
    assert _count(r"@%p\d+ st\.global", ptx) == 0
    assert _count(r"@%p\d+ bra", ptx) == 2


@cp.cube(launch=True, launch_unchecked=True)
def masked_fragment_epilogue(out: Array[f32], m: u32, n: u32):
    """An mma epilogue's shape: elements of a local array at literal indices stored under row/column guards."""
    values = cp.LocalArray[f32](4)
    for i in cp.unroll(range(4)):
        values[i] = f32(UNIT_POS + i)
    for i in cp.unroll(range(4)):
        row = UNIT_POS // 4 + (i // 2) * 8
        col = (UNIT_POS % 4) * 2 + i % 2
        if row < m and col < n:
            out[row * n + col] = values[i] * 3.0 + 1.0


def test_a_literal_index_inside_a_local_array_reads_without_a_select():
    """Where the guard fails the read is never used, and an index below the array's static length cannot leave
    it: no select of the index (it became a select between elements once the array was in registers)."""
    ptx = _ptx(masked_fragment_epilogue, (np.float32, 1), scalars=(cp.ScalarArg(16, u32), cp.ScalarArg(8, u32)))
    assert _count(r"@%p\d+ st\.global\.b32", ptx) == 4
    assert _count(r"\bselp", ptx) == 0


def test_the_fragment_epilogue_matches_numpy():
    for name in ("interp", "cpu"):
        client = cp.client(name)
        for m, n in ((16, 8), (5, 3)):
            out = client.zeros((m * n + 64,), np.float32)
            args = (cp.ArrayArg(out), cp.ScalarArg(m, u32), cp.ScalarArg(n, u32))
            masked_fragment_epilogue.launch(client, 1, UNITS, *args)
            want = np.zeros(m * n + 64, np.float32)
            for unit in range(UNITS):
                for i in range(4):
                    row, col = unit // 4 + (i // 2) * 8, (unit % 4) * 2 + i % 2
                    if row < m and col < n:
                        want[row * n + col] = (unit + i) * 3.0 + 1.0
            np.testing.assert_array_equal(client.read(out), want, err_msg=f"{name} {m}x{n}")
