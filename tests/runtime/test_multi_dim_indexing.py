"""``t[i, j]`` on tensors (through their strides) and 2-D/3-D shared and local memories, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import f32, u32
from cubepy.errors import ExpandError

TILE = 8


@cp.cube(launch=True)
def transpose(src: cp.Tensor[f32], dst: cp.Tensor[f32]):
    tile = cp.SharedMemory[f32]((TILE, TILE + 1))  # padded row: the classic bank-conflict-free tile
    i, j = cp.UNIT_POS_Y, cp.UNIT_POS_X
    row, col = cp.CUBE_POS_Y * TILE + i, cp.CUBE_POS_X * TILE + j
    if row < src.shape(0) and col < src.shape(1):
        tile[i, j] = src[row, col]
    cp.sync_cube()
    out_row, out_col = cp.CUBE_POS_X * TILE + i, cp.CUBE_POS_Y * TILE + j
    if out_row < dst.shape(0) and out_col < dst.shape(1):
        dst[out_row, out_col] = tile[j, i]


@cp.cube(launch=True)
def local_3d(out: cp.Tensor[u32]):
    cube = cp.LocalArray[u32]((2, 3, 4))
    for a in range(2):
        for b in range(3):
            for c in range(4):
                cube[a, b, c] = a * 100 + b * 10 + c + cp.UNIT_POS
    for a in range(2):
        for b in range(3):
            for c in range(4):
                out[cp.UNIT_POS, a * 12 + b * 4 + c] = cube[a, b, c]


@cp.cube(launch=True)
def copy_3d(src: cp.Tensor[f32], dst: cp.Tensor[f32]):
    a, b, c = cp.UNIT_POS_Z, cp.UNIT_POS_Y, cp.UNIT_POS_X
    dst[a, b, c] = src[a, b, c] * 2.0


@pytest.mark.parametrize("rows, cols", [(16, 24), (13, 21)])
def test_shared_tile_transpose_matches_numpy(client, rows, cols):
    src = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    dst = client.zeros((cols, rows), np.float32)
    count = cp.CubeCount(-(-cols // TILE), -(-rows // TILE))
    transpose.launch(client, count, cp.CubeDim(TILE, TILE), cp.TensorArg(client.create(src)), cp.TensorArg(dst))
    np.testing.assert_array_equal(client.read(dst), src.T)


def test_tensor_indexing_follows_the_strides_of_a_transposed_view(client):
    src = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    handle = client.create(src)
    # A (4, 3, 2) view of the same buffer with reversed strides: numpy's src.transpose().
    view = cp.TensorArg.from_raw_parts(handle, (1, 4, 12), (4, 3, 2))
    dst = client.zeros((4, 3, 2), np.float32)
    copy_3d.launch(client, cp.CubeCount(1), cp.CubeDim(2, 3, 4), view, cp.TensorArg(dst))
    np.testing.assert_array_equal(client.read(dst), src.transpose() * 2)


def test_local_arrays_index_row_major_in_three_dimensions(client):
    out = client.zeros((4, 24), np.uint32)
    local_3d.launch(client, cp.CubeCount(1), cp.CubeDim(4), cp.TensorArg(out))
    expected = np.array(
        [[a * 100 + b * 10 + c + u for a in range(2) for b in range(3) for c in range(4)] for u in range(4)]
    )
    np.testing.assert_array_equal(client.read(out), expected)


@cp.cube
def too_many_indices(out: cp.Array[f32]):
    tile = cp.SharedMemory[f32]((4, 4))
    tile[0, 1, 2] = 1.0


@cp.cube
def two_indices_on_a_flat_array(out: cp.Array[f32]):
    out[0, 1] = 1.0


@pytest.mark.parametrize(
    "kernel, words",
    [
        (too_many_indices, "has shape (4, 4): expected 2 indices, got 3"),
        (two_indices_on_a_flat_array, "is one-dimensional"),
    ],
)
def test_wrong_index_counts_are_expand_errors_with_the_line(kernel, words):
    with pytest.raises(ExpandError, match=r"test_multi_dim_indexing.py:\d+") as caught:
        cp.testing.expand(kernel, cp.Array[f32])
    assert words in str(caught.value)
