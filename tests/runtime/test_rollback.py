"""A failed launch writes nothing, on both host runtimes (``cubepy.runtime.rollback``): on the cpu runtime the
units have stored their results by the time the runtime raises the out-of-bounds report, and those stores are
undone."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, cube, f32


@cube(launch=True)
def shift_down(x: Array[f32], out: Array[f32]):
    out[UNIT_POS] = x[UNIT_POS + 3]  # unit 0 reads x[3]; the others read past the end


@pytest.mark.parametrize("runtime", ["cpu", "interp"])
def test_a_launch_that_fails_after_a_unit_stored_leaves_the_output_as_it_was(runtime):
    client = cp.client(runtime, sanitize=True)
    x, out = client.create(np.array([5, 6, 7, 8], np.float32)), client.create(np.full(4, -1, np.float32))
    with pytest.raises(cp.SanitizerError, match="out-of-bounds read"):
        shift_down.launch(client, cp.CubeCount(1), cp.CubeDim(4), cp.ArrayArg(x), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.full(4, -1, np.float32))
    np.testing.assert_array_equal(client.read(x), [5, 6, 7, 8])
