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


@pytest.mark.parametrize("n", [256, 250, 128, 48, 16, 7, 1])
def test_ragged_copies_zero_fill_like_the_interp(cpu, n):
    expected = np.zeros(256, dtype=np.float32)
    expected[:n] = np.arange(1, n + 1)
    got = k.run_ragged(cpu, n)
    np.testing.assert_array_equal(got, expected)
    assert got.tobytes() == k.run_ragged(cp.client("interp"), n).tobytes()


# A 16-byte line is one chunk (tested whole at any length); lines of 2 f32 are tested whole at multiples of 16
# lines (128, 48, 16) and clamped otherwise (40, 3)
@pytest.mark.parametrize(("width", "lines"), [(4, 64), (4, 40), (4, 3), (2, 128), (2, 48), (2, 16), (2, 40), (2, 3)])
def test_ragged_copies_of_lines_zero_fill_like_the_interp(cpu, width, lines):
    expected = np.zeros(256, dtype=np.float32)
    expected[: width * lines] = np.arange(1, width * lines + 1)
    got = k.run_ragged_lines(cpu, lines, width)
    np.testing.assert_array_equal(got, expected)
    assert got.tobytes() == k.run_ragged_lines(cp.client("interp"), lines, width).tobytes()


@pytest.mark.parametrize("start", [12, 14, 16])
def test_a_chunk_crossing_or_past_the_end_never_reads_past_it(cpu, start):
    # 16 items: a length in whole 16-byte chunks, so each chunk is tested whole.  Start 14 is misaligned (a misuse
    # the interp reports; the GPU faults): its chunk crosses the end and reads nothing rather than the items
    # behind the buffer, which hold 99 here.
    backing = np.full(32, 99.0, dtype=np.float32)
    backing[:16] = np.arange(1, 17)
    a = cp.from_dlpack(backing[:16], cpu)
    out = cpu.zeros((4,), np.float32)
    k.one_chunk_from.launch(
        cpu, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(a), cp.ArrayArg(out), cp.ScalarArg(start, cp.u32)
    )
    expected = {12: [13, 14, 15, 16], 14: [0, 0, 0, 0], 16: [0, 0, 0, 0]}[start]
    np.testing.assert_array_equal(cpu.read(out), np.array(expected, dtype=np.float32))


def test_the_cpu_runtime_does_not_find_a_missing_wait(cpu):
    # Documented: the copy lands at issue here, so the kernel happens to read the right data; the interp reports it.
    got = k.run_double_buffered(cpu, 4, "nowait")
    np.testing.assert_array_equal(got, k.summed_reference(k.tiles_input(4), 4))
