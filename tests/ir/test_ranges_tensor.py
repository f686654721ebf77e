"""The ``bounds`` pass on rank-2 tensors: ``m[r * t.shape(d) + c]`` under ``r < t.shape(1 - d)`` and
``c < t.shape(d)`` is in bounds when the check's bound is ``t.len() = shape(0) * shape(1)`` (``m`` is ``t``, or
a buffer the launch found of ``t``'s length)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS_X, ABSOLUTE_POS_Y, Tensor, cube, f32
from cubepy.ir import VarKind, ops, walk


@cube(launch=True, launch_unchecked=True)
def copy_t(x: Tensor[f32], out: Tensor[f32]):
    """out = x.T, one unit per element, guarded by x's shape."""
    rows = x.shape(0)
    cols = x.shape(1)
    r = ABSOLUTE_POS_Y
    c = ABSOLUTE_POS_X
    if r < rows and c < cols:
        out[c * rows + r] = x[r * cols + c]


@cube(launch=True)
def loose_guard(x: Tensor[f32], out: Tensor[f32]):
    """``r <= rows`` lets r reach rows: the read may miss."""
    rows = x.shape(0)
    cols = x.shape(1)
    r = ABSOLUTE_POS_Y
    c = ABSOLUTE_POS_X
    if r <= rows and c < cols:
        out[r * cols + c] = x[r * cols + c]


@cube(launch=True)
def wrong_stride(x: Tensor[f32], out: Tensor[f32]):
    """The row is scaled by shape(0), not shape(1): not the row-major form the proof knows."""
    rows = x.shape(0)
    cols = x.shape(1)
    r = ABSOLUTE_POS_Y
    c = ABSOLUTE_POS_X
    if r < rows and c < cols:
        out[r * cols + c] = x[r * rows + c]


def _checked(compiled) -> dict[int, bool]:
    """Buffer slot -> whether its accesses are checked (all agree in these kernels)."""
    found: dict[int, bool] = {}
    for inst in walk(compiled.definition.body):
        op = inst.operation
        if isinstance(op, (ops.Index, ops.IndexAssign)) and op.memory.kind is VarKind.GLOBAL:
            found[op.memory.id] = op.checked
    return found


def _args(x_shape, out_shape):
    client = cp.client("interp")
    return cp.TensorArg(client.zeros(x_shape, f32)), cp.TensorArg(client.zeros(out_shape, f32))


def test_a_guarded_row_major_read_loses_its_check():
    compiled = copy_t.compile(cp.CubeDim(8, 8), *_args((5, 7), (7, 5)))
    # out has x's length (the launch compares them): c * rows + r with r < rows and c < cols is below it
    assert _checked(compiled) == {0: False, 1: False}


def test_a_write_to_a_buffer_of_another_length_keeps_its_check():
    """out (7 x 6) is longer than x (5 x 7): its length is another word, and x's shape proves nothing of it."""
    assert _checked(copy_t.compile(cp.CubeDim(8, 8), *_args((5, 7), (7, 6)))) == {0: False, 1: True}


def test_a_loose_guard_or_another_stride_keeps_the_check():
    assert _checked(loose_guard.compile(cp.CubeDim(8, 8), *_args((5, 7), (6, 7))))[0] is True
    assert _checked(wrong_stride.compile(cp.CubeDim(8, 8), *_args((5, 7), (5, 7))))[0] is True


def test_a_view_not_covering_its_allocation_keeps_the_check():
    client = cp.client("interp")
    handle = client.zeros((40,), f32)
    x = cp.TensorArg.from_raw_parts(handle, (7, 1), (5, 7))  # 35 of 40 items: len != buffer_len
    out = cp.TensorArg(client.zeros((7, 5), f32))
    assert _checked(copy_t.compile(cp.CubeDim(8, 8), x, out))[0] is True


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("shape", [(5, 7), (8, 8), (1, 9), (9, 1)])
def test_proven_reads_give_the_transpose(runtime, shape):
    client = cp.client(runtime)
    data = np.arange(1, shape[0] * shape[1] + 1, dtype=np.float32).reshape(shape)
    x, out = client.create(data), client.zeros((shape[1], shape[0]), f32)
    cubes = cp.CubeCount(-(-shape[1] // 4), -(-shape[0] // 4))
    copy_t.launch(client, cubes, cp.CubeDim(4, 4), cp.TensorArg(x), cp.TensorArg(out))
    np.testing.assert_array_equal(client.read(out), data.T)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_loose_guard_still_reads_zero_past_the_end(runtime):
    client = cp.client(runtime)
    data = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    x, out = client.create(data), client.zeros((4, 4), f32)
    loose_guard.launch(client, cp.CubeCount(1, 1), cp.CubeDim(4, 4), cp.TensorArg(x), cp.TensorArg(out))
    expected = np.zeros((4, 4), np.float32)
    expected[:3] = data  # row 3 passes the guard (3 <= 3) and reads past x: 0
    np.testing.assert_array_equal(client.read(out), expected)
