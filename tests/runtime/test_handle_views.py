"""Host-side views: ``handle[a:b]`` is a launch argument over the parent's storage, with no copy."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import f32
from cubepy.errors import LaunchError


@cp.cube(launch=True)
def fill_positions(out: cp.Array[f32]):
    out[cp.ABSOLUTE_POS] = f32(cp.ABSOLUTE_POS) + 100.0


@cp.cube(launch=True)
def double_rows(t: cp.Tensor[f32]):
    r, c = cp.UNIT_POS_Y, cp.UNIT_POS_X
    if r < t.shape(0) and c < t.shape(1):
        t[r, c] = t[r, c] * 2.0


@pytest.mark.cubepy_sanitize(False)  # units past the view's end are dropped by checked mode, on purpose
def test_a_kernel_writing_through_a_view_changes_only_that_range(client):
    parent = client.create(np.zeros(32, np.float32))
    view = parent[8:20]
    assert view.storage is parent.storage and view.shape == (12,) and view.size == 12
    # 32 units: the checked launch stops at the view's end, so nothing past index 19 of the parent changes.
    fill_positions.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(view))
    expected = np.zeros(32, np.float32)
    expected[8:20] = np.arange(12) + 100
    np.testing.assert_array_equal(client.read(parent), expected)
    np.testing.assert_array_equal(client.read(view), expected[8:20])


def test_a_row_range_of_a_2d_handle_is_a_tensor_view(client):
    data = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    parent = client.create(data)
    double_rows.launch(client, cp.CubeCount(1), cp.CubeDim(4, 6), cp.TensorArg(parent[2:4]))
    expected = data.copy()
    expected[2:4] *= 2
    np.testing.assert_array_equal(client.read(parent), expected)


def test_views_of_views_and_empty_and_clamped_ranges(client):
    parent = client.create(np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(client.read(parent[2:8][1:3]), [3, 4])
    assert parent[7:3].shape == (0,) and parent[5:100].shape == (5,)
    np.testing.assert_array_equal(client.read(parent[-3:]), [7, 8, 9])


@pytest.mark.parametrize("index", [slice(0, 8, 2), 3, (slice(0, 2), slice(0, 2))])
def test_unsupported_views_are_launch_errors(client, index):
    with pytest.raises(LaunchError, match="one slice with step 1"):
        client.create(np.zeros((4, 4), np.float32))[index]
