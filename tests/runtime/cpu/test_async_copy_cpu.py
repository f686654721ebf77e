"""cp.async on the cpu runtime: copies happen at issue; correct kernels give the interp's results bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from tests.runtime import async_copy_kernels as k


@pytest.fixture(scope="module")
def cpu():
    return cp.client("cpu")


def test_double_buffered_kernel_matches_numpy_and_the_interp(cpu):
    got = k.run_double_buffered(cpu, 5)
    np.testing.assert_array_equal(got, k.summed_reference(k.tiles_input(5), 5))
    assert got.tobytes() == k.run_double_buffered(cp.client("interp"), 5).tobytes()


@pytest.mark.parametrize(("tiles", "stages"), [(1, 2), (5, 2), (6, 3), (4, 1)])
def test_pipeline_matches_numpy_and_the_interp(cpu, tiles, stages):
    got = k.run_pipelined(cpu, tiles, stages)
    np.testing.assert_array_equal(got, k.summed_reference(k.tiles_input(tiles), tiles))
    assert got.tobytes() == k.run_pipelined(cp.client("interp"), tiles, stages).tobytes()


@pytest.mark.parametrize("n", [256, 250, 7, 1])
def test_ragged_copies_zero_fill_like_the_interp(cpu, n):
    expected = np.zeros(256, dtype=np.float32)
    expected[:n] = np.arange(1, n + 1)
    got = k.run_ragged(cpu, n)
    np.testing.assert_array_equal(got, expected)
    assert got.tobytes() == k.run_ragged(cp.client("interp"), n).tobytes()


def test_the_cpu_runtime_does_not_find_a_missing_wait(cpu):
    # Documented: the copy lands at issue here, so the kernel happens to read the right data; the interp reports it.
    got = k.run_double_buffered(cpu, 4, "nowait")
    np.testing.assert_array_equal(got, k.summed_reference(k.tiles_input(4), 4))
