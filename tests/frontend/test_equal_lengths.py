"""Launch facts: buffers of equal ``len()`` share one length in the compiled kernel (``same_len_as``)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, f32


@cp.cube(launch=True, launch_unchecked=True)
def add(x: Array[f32], y: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = x[ABSOLUTE_POS] + y[ABSOLUTE_POS]


def _args(client, nx: int, ny: int, nout: int):
    return tuple(cp.ArrayArg(client.zeros((n,), np.float32)) for n in (nx, ny, nout))


def test_equal_lengths_point_at_the_first_buffer_of_that_length():
    client = cp.client("interp")
    comp = add.compilation_args(_args(client, 9, 9, 9))
    assert [c.same_len_as for c in comp] == [None, 0, 0]
    comp = add.compilation_args(_args(client, 9, 5, 5))
    assert [c.same_len_as for c in comp] == [None, None, 1]
    comp = add.compilation_args(_args(client, 3, 5, 7))
    assert [c.same_len_as for c in comp] == [None, None, None]


def test_lines_compare_lengths_in_lines():
    @cp.cube(launch=True)
    def copy_lines(src: Array[cp.Line[f32]], out: Array[f32]):
        out[ABSOLUTE_POS] = src[ABSOLUTE_POS][0]

    client = cp.client("interp")
    src = cp.ArrayArg(client.zeros((8,), np.float32), line_size=4)  # 2 lines
    assert copy_lines.compilation_args((src, cp.ArrayArg(client.zeros((2,), np.float32))))[1].same_len_as == 0
    assert copy_lines.compilation_args((src, cp.ArrayArg(client.zeros((8,), np.float32))))[1].same_len_as is None


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_shorter_buffer_after_equal_ones_still_reads_zero_past_its_end(runtime):
    """The kernel compiled for equal lengths must not serve a launch where ``x`` is shorter."""
    client = cp.client(runtime)
    a = np.arange(1, 9, dtype=np.float32)
    b = np.full(8, 10, dtype=np.float32)
    out = client.zeros((8,), np.float32)
    hb = client.create(b)
    add.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(client.create(a)), cp.ArrayArg(hb), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), a + b)
    short = client.create(a[:5])
    add.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(short), cp.ArrayArg(hb), cp.ArrayArg(out))
    expected = b.copy()
    expected[:5] += a[:5]  # x[5:] is past x's end: a checked read gives 0
    np.testing.assert_array_equal(client.read(out), expected)


def _setps(ptx: str) -> int:
    return sum(line.strip().startswith("setp") for line in ptx.splitlines())


def test_one_guard_proves_every_check_when_lengths_are_equal():
    client = cp.client("interp")
    equal = _args(client, 64, 64, 64)
    checked = add.compile(cp.CubeDim(64), *equal, target="sm_90a").ptx
    unchecked = add.compile(cp.CubeDim(64), *equal, target="sm_90a", unchecked=True).ptx
    assert _setps(checked) == _setps(unchecked) == 1  # the kernel's own guard, nothing else
    different = add.compile(cp.CubeDim(64), *_args(client, 64, 63, 64), target="sm_90a").ptx
    assert _setps(different) == 2  # the guard (x is out's length), then y's own check
