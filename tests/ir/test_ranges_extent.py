"""The ``bounds`` pass on an array as long as a tensor's extent (``Param.len_as_shape``): a layer norm's
``w[col]`` under ``col < x.shape(1) // L`` needs no check when the launch found ``w``'s items equal to
``x.shape(1)``, and keeps it otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Line, Tensor, cube, f32
from cubepy.ir import VarKind, ops, walk


@cube(launch=True, launch_unchecked=True)
def scale_rows(x: Tensor[Line[f32]], w: Array[Line[f32]], out: Tensor[Line[f32]]):
    """out[r, c] = x[r, c] * w[c] for the row r = CUBE_POS, a line at a time (Triton's layer-norm shape)."""
    lanes = x.line_size
    n = x.shape(1) // lanes
    row = CUBE_POS * (x.stride(0) // lanes)
    for start in range(0, n, 8):
        col = start + UNIT_POS
        if col < n:
            out[row + col] = x[row + col] * w[col]


@cube(launch=True)
def loose(x: Tensor[f32], w: Array[f32], out: Tensor[f32]):
    """``col <= n`` lets col reach n: the read of w may miss."""
    n = x.shape(1)
    col = UNIT_POS
    if col <= n:
        out[CUBE_POS * n + col] = w[col]


@cube(launch=True)
def other_dim(x: Tensor[f32], w: Array[f32], out: Tensor[f32]):
    """Guarded by x's rows, not the extent w matches."""
    col = UNIT_POS
    if col < x.shape(0):
        out[col] = w[col]


def _w_checked(compiled) -> bool:
    """Whether any access of ``w`` (buffer slot 1) is checked (a loop the bounds pass split keeps an unchecked
    copy beside the checked one)."""
    found = {
        op.checked
        for op in (inst.operation for inst in walk(compiled.definition.body))
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.memory.kind is VarKind.GLOBAL and op.memory.id == 1
    }
    assert found, "the kernel reads w"
    return True in found


def _args(client, rows: int, cols: int, w_len: int, lanes: int = 1):
    x = client.create(np.arange(rows * cols, dtype=np.float32).reshape(rows, cols))
    w = client.create(np.linspace(1.0, 2.0, w_len, dtype=np.float32))
    out = client.zeros((rows, cols), np.float32)
    size = {"line_size": lanes}
    return (x, w, out), (cp.TensorArg(x, **size), cp.ArrayArg(w, **size), cp.TensorArg(out, **size))


@pytest.mark.parametrize("lanes", [1, 4])
def test_an_array_as_long_as_the_guarding_extent_loses_its_check(lanes):
    client = cp.client("interp")
    _, args = _args(client, 3, 32, 32, lanes)
    compiled = scale_rows.compile(cp.CubeDim(8), *args)
    assert compiled.definition.params[1].len_as_shape == (0, 1)
    assert not _w_checked(compiled)
    assert "items = shape global[0], 1" in compiled.ir


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_the_unchecked_array_reads_what_numpy_reads(kind):
    client = cp.client(kind)
    (x, w, out), args = _args(client, 3, 32, 32, 4)
    scale_rows.launch(client, cp.CubeCount(3), cp.CubeDim(8), *args)
    expected = client.read(x) * client.read(w)[None, :]
    np.testing.assert_array_equal(client.read(out), expected)


def test_an_array_of_another_length_keeps_its_check_and_reads_zero_past_its_end():
    """w has 24 items where rows have 32: the launch finds no equal extent, the check stays, and the reads
    past w's end give 0 (checked mode's out-of-bounds read)."""
    client = cp.client("interp")
    (x, w, out), args = _args(client, 3, 32, 24)
    assert _w_checked(scale_rows.compile(cp.CubeDim(8), *args))
    scale_rows.launch(client, cp.CubeCount(3), cp.CubeDim(8), *args)
    padded = np.concatenate([client.read(w), np.zeros(8, np.float32)])
    np.testing.assert_array_equal(client.read(out), client.read(x) * padded[None, :])


def test_a_loose_guard_or_another_extent_keeps_the_check():
    client = cp.client("interp")
    _, args = _args(client, 3, 32, 32)
    assert _w_checked(loose.compile(cp.CubeDim(64), *args))
    _, args = _args(client, 32, 5, 32)  # w matches x.shape(0) = 32 here: the guard is on that extent
    assert not _w_checked(other_dim.compile(cp.CubeDim(64), *args))
    _, args = _args(client, 5, 32, 32)  # w matches x.shape(1), the guard is on x.shape(0)
    assert _w_checked(other_dim.compile(cp.CubeDim(64), *args))
