"""cp.async on the interp: copies land by the schedule's choice, no later than the wait; the sanitizer names misuse."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import cubepy as cp
from cubepy.errors import SanitizerError, SanitizerKind
from tests.runtime import async_copy_kernels as k

SCHEDULES = [("lockstep", None), ("random", 1), ("random", 7), ("adversarial", None)]
IDS = ["lockstep", "random1", "random7", "adversarial"]


def _client(schedule, sanitize: bool = True):
    return cp.client("interp", sanitize=sanitize, schedule=schedule[0], seed=schedule[1])


def _line(kernel, marker: str) -> int:
    """The source line of ``kernel`` marked ``# <marker>``."""
    lines, first = inspect.getsourcelines(kernel.fn if hasattr(kernel, "fn") else kernel.__wrapped__)
    return first + next(i for i, text in enumerate(lines) if f"# {marker}" in text)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
def test_double_buffered_kernel_matches_numpy_under_the_sanitizer(schedule):
    got = k.run_double_buffered(_client(schedule), 5)
    np.testing.assert_array_equal(got, k.summed_reference(k.tiles_input(5), 5))


@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
@pytest.mark.parametrize(("tiles", "stages"), [(1, 2), (5, 2), (6, 3), (2, 3), (4, 1), (7, 4), (2, 4), (9, 5), (3, 5)])
def test_pipeline_matches_numpy_under_the_sanitizer(schedule, tiles, stages):
    got = k.run_pipelined(_client(schedule), tiles, stages)
    np.testing.assert_array_equal(got, k.summed_reference(k.tiles_input(tiles), tiles))


@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
# 128, 48 and 16 are multiples of 16: the launch specializes on that, and each chunk is then tested whole
@pytest.mark.parametrize("n", [256, 250, 128, 48, 16, 7, 1])
def test_ragged_copies_zero_fill_past_the_source(schedule, n):
    expected = np.zeros(256, dtype=np.float32)
    expected[:n] = np.arange(1, n + 1)
    np.testing.assert_array_equal(k.run_ragged(_client(schedule), n), expected)


@pytest.mark.parametrize("variant", ["nowait", "wait1"])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
def test_a_missing_or_short_wait_is_reported_with_both_lines(schedule, variant):
    with pytest.raises(SanitizerError) as info:
        k.run_double_buffered(_client(schedule), 4, variant)
    message = str(info.value)
    assert info.value.kind is SanitizerKind.ASYNC_COPY_UNCOVERED, message
    assert message.startswith(f"{inspect.getsourcefile(k.double_buffered.fn)}:{_line(k.double_buffered, 'READ')}:")
    # the copy not waited for: the first tile's without any wait, the last tile's with a short one
    copy = _line(k.double_buffered, "FIRST" if variant == "nowait" else "COPY")
    assert f"the cp.async copy at {inspect.getsourcefile(k.double_buffered.fn)}:{copy} by unit" in message
    assert f"this access at {inspect.getsourcefile(k.double_buffered.fn)}:{_line(k.double_buffered, 'READ')}" in message


@pytest.mark.cubepy_sanitize(False)  # the missing or short wait is the point; the sanitizer reports it (above)
@pytest.mark.parametrize("variant", ["nowait", "wait1"])
def test_a_missing_or_short_wait_reads_stale_data_under_adversarial(variant):
    got = k.run_double_buffered(_client(("adversarial", None), sanitize=False), 4, variant)
    assert not np.array_equal(got, k.summed_reference(k.tiles_input(4), 4))


@pytest.mark.cubepy_sanitize(False)  # reads before the wait on purpose, to see the stale data
def test_lockstep_lands_at_the_wait_too():
    got = k.run_double_buffered(_client(("lockstep", None), sanitize=False), 4, "nowait")
    assert not np.array_equal(got, k.summed_reference(k.tiles_input(4), 4))


def test_another_units_read_after_only_the_copiers_wait_is_a_data_race():
    client = cp.client("interp", sanitize=True)
    a = client.create(np.arange(128, dtype=np.float32))
    out = client.zeros((32,), np.float32)
    with pytest.raises(SanitizerError) as info:
        k.read_after_wait_without_sync.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(a), cp.ArrayArg(out))
    message = str(info.value)
    assert info.value.kind is SanitizerKind.DATA_RACE, message
    assert f"async_copy_kernels.py:{_line(k.read_after_wait_without_sync, 'COPY')} with no sync_cube" in message
    assert f"this access at {inspect.getsourcefile(k.double_buffered.fn)}:" in message
    assert str(_line(k.read_after_wait_without_sync, "READ")) in message


@cp.cube(launch=True)
def overwrite_before_wait(a: cp.Array[cp.f32], out: cp.Array[cp.f32]):
    smem = cp.SharedMemory[cp.f32](128)
    u = cp.UNIT_POS
    cp.memcpy_async(a[u * 4 : u * 4 + 4], smem[u * 4 : u * 4 + 4])
    cp.async_commit_group()
    smem[u * 4] = cp.f32(1)  # a write of the copy's bytes before the wait
    cp.async_wait_group(0)
    out[u] = smem[u * 4]


def test_a_write_to_pending_bytes_is_reported():
    client = cp.client("interp", sanitize=True)
    a, out = client.create(np.arange(128, dtype=np.float32)), client.zeros((32,), np.float32)
    with pytest.raises(SanitizerError, match="async copy uncovered access: write of shared byte 0") as info:
        overwrite_before_wait.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(a), cp.ArrayArg(out))
    assert info.value.kind is SanitizerKind.ASYNC_COPY_UNCOVERED


@cp.cube(launch_unchecked=True)
def source_past_the_end_unchecked(a: cp.Array[cp.f32], out: cp.Array[cp.f32]):
    smem = cp.SharedMemory[cp.f32](4)
    if cp.UNIT_POS == 0:
        cp.memcpy_async(a[4:8], smem)
    cp.async_commit_group()
    cp.async_wait_group(0)
    out[cp.UNIT_POS] = cp.f32(0)


def test_an_unchecked_copy_past_the_source_end_is_out_of_bounds():
    client = cp.client("interp")
    a, out = client.create(np.arange(6, dtype=np.float32)), client.zeros((32,), np.float32)
    with pytest.raises(SanitizerError, match="out-of-bounds cp.async read of global buffer 0") as info:
        source_past_the_end_unchecked.launch_unchecked(
            client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(a), cp.ArrayArg(out)
        )
    assert info.value.kind is SanitizerKind.OUT_OF_BOUNDS


@pytest.mark.cubepy_sanitize(False)  # no wait at all, on purpose: when the copies land is what it measures
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_lands_some_copies_before_the_wait(seed):
    # Without any wait, adversarial never lands a copy; random lands some of them at random steps after issue.
    adversarial = k.run_double_buffered(_client(("adversarial", None), sanitize=False), 4, "nowait")
    drawn = k.run_double_buffered(_client(("random", seed), sanitize=False), 4, "nowait")
    assert not np.array_equal(drawn, adversarial)
    again = k.run_double_buffered(_client(("random", seed), sanitize=False), 4, "nowait")
    np.testing.assert_array_equal(drawn, again)  # the seed fixes the interleaving
