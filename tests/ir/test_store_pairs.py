"""``cubepy.ir.store_pairs``: adjacent guarded stores under equivalent guards merge into one ``if`` (one wide
store on the GPU); every fact the merge needs missing leaves the stores alone, and results never change."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, cube, f16, f32, u32
from cubepy.compiler.passes import run_passes
from cubepy.ir import format_kernel, ops, walk
from tests.compiler.fission import on_interp_and_cpu

UNITS = 8


@cube(launch=True, launch_unchecked=True)
def epilogue(c: Array[f16], m: u32, n: u32):
    """Row CUBE_POS of an m x n matrix: unit u writes columns 2u and 2u + 1, each behind its own guard."""
    row = CUBE_POS
    col = UNIT_POS * 2
    for i in cp.unroll(range(2)):
        if row < m and col + i < n:
            c[row * n + col + i] = f16(f32(col + i) + f32(0.5))


@cube(launch=True)
def gap_of_two(c: Array[f16], m: u32, n: u32):
    """Columns 4u and 4u + 2: not adjacent."""
    row = CUBE_POS
    col = UNIT_POS * 4
    for i in cp.unroll(range(2)):
        if row < m and col + 2 * i < n:
            c[row * n + col + 2 * i] = f16(1.0)


@cube(launch=True)
def reads_between(c: Array[f16], m: u32, n: u32):
    """A read of ``c`` between the two stores: the first store may not move past it."""
    row = CUBE_POS
    col = UNIT_POS * 2
    if row < m and col < n:
        c[row * n + col] = f16(1.0)
    seen = c[0]
    if row < m and col + 1 < n:
        c[row * n + col + 1] = seen


@cube(launch=True)
def odd_start(c: Array[f16], m: u32, n: u32):
    """Columns 2u + 1 and 2u + 2: adjacent, but the first index is odd."""
    row = CUBE_POS
    col = UNIT_POS * 2 + 1
    for i in cp.unroll(range(2)):
        if row < m and col + i < n:
            c[row * n + col + i] = f16(1.0)


def _pairs(kernel, c, m: int, n: int, checked: bool = True) -> list[ops.IndexAssign]:
    args = (cp.ArrayArg(c), cp.ScalarArg(m, u32), cp.ScalarArg(n, u32))
    definition = kernel.define(kernel.compilation_args(args), cp.CubeDim(UNITS), checked=checked)
    final, _ = run_passes(definition)
    stores = [i.operation for i in walk(final.body) if isinstance(i.operation, ops.IndexAssign)]
    return [s for s in stores if s.pair]


def _buffer(count: int, start: int = 0):
    """``count`` f16 items on the interp, ``start`` items into their allocation."""
    whole = cp.client("interp").zeros((count + start,), np.float16)
    return whole[start:] if start else whole


def test_adjacent_guarded_stores_pair_when_every_fact_holds():
    assert len(_pairs(epilogue, _buffer(48), 3, 16)) == 1
    assert len(_pairs(epilogue, _buffer(48), 3, 16, checked=False)) == 1


def test_the_merged_stores_sit_in_one_if_in_order():
    args = (cp.ArrayArg(_buffer(48)), cp.ScalarArg(3, u32), cp.ScalarArg(16, u32))
    final, _ = run_passes(epilogue.define(epilogue.compilation_args(args), cp.CubeDim(UNITS), checked=True))
    text = format_kernel(final)
    assert text.count("if %") == 1
    stores = [line for line in text.splitlines() if "index_assign" in line]
    assert len(stores) == 2 and "pair=True" in stores[0] and "pair=True" not in stores[1]


@pytest.mark.parametrize(
    ("why", "kernel", "count", "start", "n", "checked"),
    [
        ("n odd: col < n is not col + 1 < n", epilogue, 48, 0, 15, True),
        ("n even but not known to be (no multiple-of-16 fact)", epilogue, 48, 0, 14, True),
        ("a view starting one item in: the base is not 4-byte aligned", epilogue, 48, 1, 16, True),
        ("checked, and the length is not known even", epilogue, 50, 0, 16, True),
        ("items two apart", gap_of_two, 48, 0, 16, True),
        ("a read of the buffer between", reads_between, 48, 0, 16, True),
        ("the first index odd", odd_start, 48, 0, 16, True),
    ],
)
def test_no_pair_without_its_facts(why, kernel, count, start, n, checked):
    assert _pairs(kernel, _buffer(count, start), 3, n, checked) == [], why


def test_an_unknown_length_does_not_matter_unchecked():
    assert len(_pairs(epilogue, _buffer(50), 3, 16, checked=False)) == 1


@pytest.mark.parametrize(("m", "n"), [(3, 16), (5, 32), (2, 14)])
def test_paired_kernels_write_what_numpy_says_on_interp_and_cpu(m, n):
    rows = m + 1  # one more row than m: the guard keeps it untouched

    def make(client):
        return (client.create(np.full(rows * n, -1.0, np.float16)),)

    def launch(client, c):
        epilogue.launch(client, cp.CubeCount(rows), cp.CubeDim(UNITS), cp.ArrayArg(c), m, n)

    expected = np.full((rows, n), -1.0, np.float16)
    cols = min(n, 2 * UNITS)
    expected[:m, :cols] = np.arange(cols, dtype=np.float32) + 0.5
    for (got,) in on_interp_and_cpu(launch, make):
        np.testing.assert_array_equal(got.reshape(rows, n), expected)


def test_the_gpu_writes_a_pair_as_one_predicated_word():
    args = (cp.ArrayArg(_buffer(48)), cp.ScalarArg(3, u32), cp.ScalarArg(16, u32))
    kernel = epilogue.compile(cp.CubeDim(UNITS), *args, target="sm_90a")
    ptx = kernel.ptx
    assert len([line for line in ptx.splitlines() if "st.global.b32" in line and line.strip().startswith("@")]) == 1
    assert "st.global.b16" not in ptx
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas not found: the PTX was not assembled")
    assert kernel.resources is not None  # ptxas accepted it
