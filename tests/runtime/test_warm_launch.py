"""A warm launch reuses what an earlier launch of the same signature decided, and only that.

``ComputeClient.launch`` remembers, per kernel, cube_dim, mode and launch signature (the buffers' handles by
identity, line sizes, shapes and strides; comptime values; integers' divisibility), the artifact and the back
end's memo.  These tests check that every change the compilation arguments or the metadata words depend on
misses that memory, and that it never keeps a buffer alive.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import cubepy as cp
from cubepy import Array, Tensor, cube, f32, u32
from cubepy.errors import LaunchError
from cubepy.frontend.buffer_launch import BufferType


@cube(launch=True)
def scaled_copy(src: Array[f32], dst: Array[f32], scale: f32, limit: u32):
    """dst[i] = src[i] * scale for i below ``limit`` (checked: never past either buffer)."""
    i = cp.ABSOLUTE_POS
    if i < limit:
        dst[i] = src[i] * scale


@cube(launch=True)
def row_sums(t: Tensor[f32], out: Array[f32], width: cp.Comptime[int]):
    """out[r] = sum of the first ``width`` columns of row r."""
    r = cp.ABSOLUTE_POS
    if r < t.shape(0):
        acc = f32(0.0)
        for c in range(width):
            acc += t[r, c]
        out[r] = acc


@pytest.fixture(params=["interp", "cpu"])
def client(request):
    return cp.client(request.param)


def _copy(client, src, dst, scale, limit, cubes=1):
    scaled_copy.launch(client, cp.CubeCount(cubes), cp.CubeDim(64), cp.ArrayArg(src), cp.ArrayArg(dst), scale, limit)


def test_a_second_launch_is_remembered_and_writes_its_own_buffers(client):
    x = np.arange(64, dtype=np.float32)
    src, dst = client.create(x), client.zeros(64, np.float32)
    _copy(client, src, dst, 2.0, 64)
    hits = client.stats["hits"]
    _copy(client, src, dst, 3.0, 64)  # same signature, another scale: remembered, scale packed anew
    assert client.stats["hits"] == hits + 1
    np.testing.assert_array_equal(client.read(dst), x * 3)
    other_src, other_dst = client.create(x + 1), client.zeros(64, np.float32)
    _copy(client, other_src, other_dst, 1.0, 64)  # other handles: not the remembered launch
    np.testing.assert_array_equal(client.read(other_dst), x + 1)
    np.testing.assert_array_equal(client.read(dst), x * 3)


@cube(launch=True)
def plain_copy(src: Array[f32], dst: Array[f32]):
    """dst[i] = src[i] (this test's own kernel: its launch plan is made under the test's signature)."""
    i = cp.ABSOLUTE_POS
    if i < dst.len():
        dst[i] = src[i]


def test_a_remembered_launch_serves_only_its_own_handles(client, monkeypatch):
    # A dead handle's id() can come back on a new handle of the same shape; the memo must then miss (else the
    # launch would use the old buffer's address).  Signatures that leave the handle out make every handle of a
    # shape collide, deterministically.
    def shape_only(self, arg):
        return (0, arg.line_size, arg.shape, arg.strides)

    monkeypatch.setattr(BufferType, "launch_signature", shape_only)
    first, second = client.create(np.ones(64, np.float32)), client.create(np.arange(64, dtype=np.float32))
    dst = client.zeros(64, np.float32)
    for _ in range(2):
        plain_copy.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(first), cp.ArrayArg(dst))
    plain_copy.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(second), cp.ArrayArg(dst))
    np.testing.assert_array_equal(client.read(dst), np.arange(64, dtype=np.float32))


@cube(launch=True)
def bounded_scale(src: Array[f32], dst: Array[f32], scale: f32, limit: u32):
    """dst[i] = src[i] * scale for i below ``limit`` (this test's own kernel: no other test compiled it)."""
    i = cp.ABSOLUTE_POS
    if i < limit:
        dst[i] = src[i] * scale


def test_an_integers_divisibility_is_part_of_the_signature(client):
    # A multiple of 16 compiles its own kernel (the range analysis knows its low bits): a launch with 37 after
    # one with 48 on the same buffers must not reuse 48's kernel.
    x = np.arange(64, dtype=np.float32)
    src, dst = client.create(x), client.zeros(64, np.float32)
    expected = np.zeros(64, np.float32)
    misses = client.stats["misses"]
    for step, limit in enumerate((48, 48, 37, 37, 48, 1, 64)):
        scale = float(step + 1)
        bounded_scale.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(src), cp.ArrayArg(dst), scale, limit)
        expected[:limit] = x[:limit] * scale
        np.testing.assert_array_equal(client.read(dst), expected)
    assert client.stats["misses"] == misses + 2  # one kernel for the multiples of 16, one for the rest


def test_a_changed_line_size_shape_or_comptime_value_misses(client):
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = client.create(data)
    out = client.zeros(4, np.float32)
    for width in (6, 2, 6):
        row_sums.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.TensorArg(t), cp.ArrayArg(out), width)
        np.testing.assert_array_equal(client.read(out), data[:, :width].sum(axis=1))
    # the same handle seen as its first two rows: another shape, another metadata word
    view = cp.TensorArg.from_raw_parts(t, (6, 1), (2, 6))
    out2 = client.zeros(4, np.float32)
    row_sums.launch(client, cp.CubeCount(1), cp.CubeDim(8), view, cp.ArrayArg(out2), 6)
    np.testing.assert_array_equal(client.read(out2), np.concatenate([data[:2].sum(axis=1), [0, 0]]))


@cube(launch=True)
def copy_source(src: Array[f32], dst: Array[f32]):
    """dst[i] = src[i] for every item of ``src``."""
    i = cp.ABSOLUTE_POS
    if i < src.len():
        dst[i] = src[i]


def test_an_argument_object_changed_in_place_misses(client):
    x = np.arange(64, dtype=np.float32)
    small, large = client.create(x[:16]), client.create(x)
    dst = client.zeros(64, np.float32)
    src_arg, dst_arg = cp.ArrayArg(small), cp.ArrayArg(dst)
    for _ in range(2):
        copy_source.launch(client, cp.CubeCount(1), cp.CubeDim(64), src_arg, dst_arg)
    np.testing.assert_array_equal(client.read(dst), np.concatenate([x[:16], np.zeros(48, np.float32)]))
    src_arg.handle, src_arg.shape = large, (64,)  # the same ArrayArg now names another buffer
    copy_source.launch(client, cp.CubeCount(1), cp.CubeDim(64), src_arg, dst_arg)
    np.testing.assert_array_equal(client.read(dst), x)


def test_bad_arguments_after_warm_launches_still_raise_the_full_paths_errors(client):
    src, dst = client.create(np.ones(64, np.float32)), client.zeros(64, np.float32)
    for _ in range(2):
        _copy(client, src, dst, 1.0, 64)
    with pytest.raises(LaunchError, match="out of range for u32"):
        _copy(client, src, dst, 1.0, -1)
    with pytest.raises(LaunchError, match="expected f32 elements"):
        _copy(client, client.create(np.ones(64, np.int32)), dst, 1.0, 64)
    with pytest.raises(LaunchError, match="expected a f32 scalar"):
        _copy(client, src, dst, "2", 64)


def test_an_unhashable_comptime_value_gets_the_full_paths_error(client):
    t, out = client.create(np.ones((4, 6), np.float32)), client.zeros(4, np.float32)
    row_sums.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.TensorArg(t), cp.ArrayArg(out), 6)
    with pytest.raises(LaunchError, match="must be hashable"):
        row_sums.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.TensorArg(t), cp.ArrayArg(out), [6])


def test_remembered_launches_keep_no_buffer_alive(client):
    src, dst = client.create(np.ones(64, np.float32)), client.zeros(64, np.float32)
    for _ in range(3):
        _copy(client, src, dst, 1.0, 64)
    storage = weakref.ref(src.storage)
    del src
    gc.collect()
    assert storage() is None
