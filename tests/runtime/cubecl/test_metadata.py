"""Port of CubeCL's ``metadata`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/metadata.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; the classic file at 3956d6153 has the same
kernels plus host-only ``Metadata::to_tiled`` tests).

Rust runs every test twice, with ``AddressType::U32`` and ``U64`` (``address_type = "dynamic"``);
cubepy's public API has no address type, so each runs once. Shapes and strides are given in elements, outermost
first, as ``TensorArg::from_raw_parts(handle, strides, shape)``. ``terminate!()`` is ``return``.
Not ported: ``test_buffer_len_offset`` (needs a sub-range of a handle).
"""

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Line, Tensor, cube, f32, u32


@cube(launch_unchecked=True)
def kernel_shape_dim_4(lhs: Tensor[f32], rhs: Tensor[f32], out: Tensor[u32]):
    if ABSOLUTE_POS >= out.len():
        return

    out[0] = u32(lhs.shape(0))
    out[1] = u32(lhs.shape(1))
    out[2] = u32(lhs.shape(2))
    out[3] = u32(lhs.shape(3))
    out[4] = u32(rhs.shape(0))
    out[5] = u32(rhs.shape(1))
    out[6] = u32(rhs.shape(2))
    out[7] = u32(rhs.shape(3))
    out[8] = u32(out.shape(0))
    out[9] = u32(out.shape(1))
    out[10] = u32(out.shape(2))
    out[11] = u32(out.shape(3))


@cube(launch_unchecked=True)
def kernel_shape_different_ranks(lhs: Tensor[f32], rhs: Tensor[f32], out: Tensor[u32]):
    if ABSOLUTE_POS >= out.len():
        return

    out[0] = u32(lhs.shape(0))
    out[1] = u32(lhs.shape(1))
    out[2] = u32(lhs.shape(2))
    out[3] = u32(lhs.shape(3))
    out[4] = u32(rhs.shape(0))
    out[5] = u32(rhs.shape(1))
    out[6] = u32(rhs.shape(2))
    out[7] = u32(out.shape(0))
    out[8] = u32(out.shape(1))
    out[9] = u32(lhs.rank())
    out[10] = u32(rhs.rank())
    out[11] = u32(out.rank())


@cube(launch_unchecked=True)
def kernel_stride_different_ranks(lhs: Tensor[f32], rhs: Tensor[f32], out: Tensor[u32]):
    if ABSOLUTE_POS >= out.len():
        return

    out[0] = u32(lhs.stride(0))
    out[1] = u32(lhs.stride(1))
    out[2] = u32(lhs.stride(2))
    out[3] = u32(lhs.stride(3))
    out[4] = u32(rhs.stride(0))
    out[5] = u32(rhs.stride(1))
    out[6] = u32(rhs.stride(2))
    out[7] = u32(out.stride(0))
    out[8] = u32(out.stride(1))


@cube(launch_unchecked=True)
def kernel_len_different_ranks(lhs: Tensor[f32], rhs: Tensor[f32], out: Tensor[u32]):
    if ABSOLUTE_POS >= out.len():
        return

    out[0] = u32(lhs.len())
    out[1] = u32(rhs.len())
    out[2] = u32(out.len())


@cube(launch_unchecked=True)
def kernel_buffer_len(out: Tensor[Line[u32]]):
    if ABSOLUTE_POS >= out.len():
        return

    out[0] = Line(u32(out.buffer_len()))


def launch_one(kernel, client, *args):
    kernel.launch_unchecked(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), *args)


def test_shape_dim_4(client):
    handle1 = client.empty((12,), np.float32)
    handle2 = client.empty((12,), np.float32)
    handle3 = client.empty((12,), np.uint32)

    launch_one(
        kernel_shape_dim_4,
        client,
        cp.TensorArg.from_raw_parts(handle1, [1, 1, 1, 1], [2, 3, 4, 5]),
        cp.TensorArg.from_raw_parts(handle2, [1, 1, 1, 1], [9, 8, 7, 6]),
        cp.TensorArg.from_raw_parts(handle3, [1, 1, 1, 1], [10, 11, 12, 13]),
    )

    expect = [2, 3, 4, 5, 9, 8, 7, 6, 10, 11, 12, 13]
    np.testing.assert_array_equal(client.read(handle3), expect)


def test_shape_different_ranks(client):
    handle1 = client.empty((12,), np.float32)
    handle2 = client.empty((12,), np.float32)
    handle3 = client.empty((12,), np.uint32)

    launch_one(
        kernel_shape_different_ranks,
        client,
        cp.TensorArg.from_raw_parts(handle1, [1, 1, 1, 1], [2, 3, 4, 5]),
        cp.TensorArg.from_raw_parts(handle2, [1, 1, 1], [9, 8, 7]),
        cp.TensorArg.from_raw_parts(handle3, [1, 1], [10, 11]),
    )

    expect = [2, 3, 4, 5, 9, 8, 7, 10, 11, 4, 3, 2]
    np.testing.assert_array_equal(client.read(handle3), expect)


def test_stride_different_ranks(client):
    handle1 = client.empty((9,), np.float32)
    handle2 = client.empty((9,), np.float32)
    handle3 = client.empty((9,), np.uint32)

    launch_one(
        kernel_stride_different_ranks,
        client,
        cp.TensorArg.from_raw_parts(handle1, [1, 2, 3, 4], [1, 1, 1, 1]),
        cp.TensorArg.from_raw_parts(handle2, [4, 5, 6], [1, 1, 1]),
        cp.TensorArg.from_raw_parts(handle3, [3, 2], [1, 1]),
    )

    expect = [1, 2, 3, 4, 4, 5, 6, 3, 2]
    np.testing.assert_array_equal(client.read(handle3), expect)


def test_len_different_ranks(client):
    handle1 = client.empty((3,), np.float32)
    handle2 = client.empty((3,), np.float32)
    handle3 = client.empty((3,), np.uint32)

    launch_one(
        kernel_len_different_ranks,
        client,
        cp.TensorArg.from_raw_parts(handle1, [1, 1, 1, 1], [2, 3, 4, 5]),
        cp.TensorArg.from_raw_parts(handle2, [1, 1, 1], [9, 8, 7]),
        cp.TensorArg.from_raw_parts(handle3, [1, 1], [10, 11]),
    )

    expect = [2 * 3 * 4 * 5, 9 * 8 * 7, 10 * 11]
    np.testing.assert_array_equal(client.read(handle3), expect)


def test_buffer_len_discontiguous(client):
    handle1 = client.empty((64,), np.uint32)

    launch_one(
        kernel_buffer_len,
        client,
        cp.TensorArg.from_raw_parts(handle1, [32, 16, 4, 1], [2, 2, 2, 2], line_size=1),
    )

    assert client.read(handle1)[0] == 64


def test_buffer_len_vectorized(client):
    handle1 = client.empty((32,), np.uint32)

    launch_one(
        kernel_buffer_len,
        client,
        cp.TensorArg.from_raw_parts(handle1, [16, 8, 4, 1], [2, 2, 2, 4], line_size=4),
    )

    assert client.read(handle1)[0] == 8
