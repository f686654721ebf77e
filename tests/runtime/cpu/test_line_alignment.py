"""Buffers read in lines must start on a line boundary: a launch refuses a view that starts mid-line.

The cpu runtime (like the GPU) reads a line as one aligned vector; before the launch checked alignment, a
``handle[1:]`` view passed with ``line_size=4`` crashed the process with a segmentation fault.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Line, cube, f32
from cubepy.errors import LaunchError


@cube(launch=True)
def doubled(x: Array[Line[f32]], out: Array[Line[f32]]):
    if UNIT_POS < out.len():
        out[UNIT_POS] = x[UNIT_POS] + x[UNIT_POS]


def _launch(client, view, out):
    doubled.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(view, 4), cp.ArrayArg(out, 4))


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("start", [1, 2, 3])
def test_a_view_starting_mid_line_is_refused_and_nothing_is_written(runtime, start):
    client = cp.client(runtime)
    base = client.create(np.arange(64, dtype=np.float32))
    out = client.create(np.full(32, -1.0, np.float32))
    with pytest.raises(LaunchError, match=rf"parameter 'x'.*{start * 4} bytes past a multiple of 16"):
        _launch(client, base[start : start + 32], out)
    assert (client.read(out) == -1.0).all()


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_view_starting_on_a_line_runs(runtime):
    client = cp.client(runtime)
    data = np.arange(64, dtype=np.float32)
    base = client.create(data)
    out = client.zeros((32,), np.float32)
    _launch(client, base[8:40], out)
    np.testing.assert_array_equal(client.read(out), 2 * data[8:40])
