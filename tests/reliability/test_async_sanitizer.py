"""The sanitizer's synchronous rules for TMA and mbarriers: each buggy kernel is flagged, its twin is silent.

Rules (docs/runtime/sanitizer.md): a TMA store reading ordinary writes no proxy fence covers; a parity
other than 0/1 or a parity wait stuck on a phase nothing reached; more arrivals in one instruction than
the phase waits for; a transaction count outside the PTX range [-(2^20 - 1), 2^20 - 1] (a transiently
negative count is legal); a phase that can never complete, with its pending arrivals and bytes.
Every report names its kind, the unit, the memory or barrier, and the source line(s).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, UNIT_POS, Array, TensorMap, f32
from cubepy.errors import SanitizerError, SanitizerKind

SANITIZED = cp.client("interp", sanitize=True)
UNITS = 64


def _line(kernel, marker: str) -> int:
    """The line of the kernel's source that contains ``marker``."""
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def _tile_map(client, source=None):
    if source is None:
        source = client.create(np.zeros((32, 32), np.float32))
    return cp.TensorMapArg.tiled(cp.TensorArg(source), (16, 16))


def _run(kernel, client=SANITIZED, with_map=False):
    out = client.zeros((UNITS,), np.float32)
    args = [_tile_map(client)] if with_map else []
    kernel.launch(client, 2, UNITS, *args, cp.ArrayArg(out))
    return client.read(out)


def _flagged(kernel, kind: SanitizerKind, with_map=False) -> str:
    with pytest.raises(SanitizerError) as info:
        _run(kernel, with_map=with_map)
    message = str(info.value)
    assert info.value.kind is kind, message
    assert message.split(": ", 1)[1].startswith(kind.value), message
    assert "unit (" in message and "of cube (" in message, message
    assert f"test_async_sanitizer.py:{_line(kernel, '# BUG')}:" in message, message
    return message


# -- a TMA store after ordinary stores -------------------------------------------------------------------
@cp.cube(launch=True)
def store_without_fence(tmap: TensorMap[f32], out: Array[f32]):
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = f32(i)  # WRITE
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, 0, 0)  # BUG: no proxy fence after the ordinary stores
        cp.tma_group_commit()
        cp.tma_group_wait(0)
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def fence_before_the_writes(tmap: TensorMap[f32], out: Array[f32]):
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    cp.fence_proxy_async()
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = f32(i)  # WRITE
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, 0, 0)  # BUG: the fence came before the writes
        cp.tma_group_commit()
        cp.tma_group_wait(0)
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def one_unit_fences_before_the_barrier(tmap: TensorMap[f32], out: Array[f32]):
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = f32(i)  # WRITE
    if UNIT_POS == 0:
        cp.fence_proxy_async()  # orders unit 0's own writes only: the others' are not behind it yet
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, 0, 0)  # BUG: units 1.. wrote without a fence that covers them
        cp.tma_group_commit()
        cp.tma_group_wait(0)
    out[UNIT_POS] = f32(1)


@pytest.mark.parametrize("kernel", [store_without_fence, fence_before_the_writes, one_unit_fences_before_the_barrier])
def test_a_tma_store_of_unfenced_ordinary_writes_is_flagged_with_both_lines(kernel):
    message = _flagged(kernel, SanitizerKind.MISSING_PROXY_FENCE, with_map=True)
    assert f"ordinary store at {kernel.fn.__code__.co_filename}:{_line(kernel, '# WRITE')}" in message
    assert "shared memory 0 index" in message and "shared byte" in message


def test_the_report_names_the_writing_unit_not_the_storing_one():
    message = _flagged(one_unit_fences_before_the_barrier, SanitizerKind.MISSING_PROXY_FENCE, with_map=True)
    # unit 0 fenced its own writes (indices 0, 64, 128, 192); index 1 is unit 1's
    assert "index 1 (shared byte 4) written by unit (1, 0, 0) of cube (0, 0, 0)" in message


@cp.cube(launch=True)
def every_unit_fences_then_store(tmap: TensorMap[f32], out: Array[f32]):
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = f32(i)
    cp.fence_proxy_async()
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, 1, 1)
        cp.tma_group_commit()
        cp.tma_group_wait(0)


@cp.cube(launch=True)
def barrier_then_the_storing_unit_fences(tmap: TensorMap[f32], out: Array[f32]):
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = f32(i)
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.sync_async_proxy_shared()  # after the barrier, so every unit's writes come before it
        cp.tma_store_2d(stage, tmap, 1, 1)
        cp.tma_group_commit()
        cp.tma_group_wait(0)


@pytest.mark.parametrize("kernel", [every_unit_fences_then_store, barrier_then_the_storing_unit_fences])
def test_a_fenced_store_is_silent_and_stores_the_stage(kernel):
    source = SANITIZED.create(np.zeros((32, 32), np.float32))
    kernel.launch(SANITIZED, 1, UNITS, _tile_map(SANITIZED, source), cp.ArrayArg(SANITIZED.zeros((UNITS,), np.float32)))
    expected = np.zeros((32, 32), np.float32)
    expected[1:17, 1:17] = np.arange(256, dtype=np.float32).reshape(16, 16)  # the box at (y, x) = (1, 1)
    np.testing.assert_array_equal(SANITIZED.read(source), expected)


@cp.cube(launch=True)
def tma_load_then_store_back(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.arrive_and_expect_tx(1, 1024)
        bar.tma_load_2d(tmap, stage, 0, 0)
    bar.wait_parity(0)
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, 16, 16)  # bytes the async proxy wrote need no proxy fence
        cp.tma_group_commit()
        cp.tma_group_wait(0)


def test_a_store_of_bytes_a_tma_load_wrote_needs_no_fence():
    data = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    source = SANITIZED.create(data)
    out = SANITIZED.zeros((UNITS,), np.float32)
    tma_load_then_store_back.launch(SANITIZED, 1, UNITS, _tile_map(SANITIZED, source), cp.ArrayArg(out))
    expected = data.copy()
    expected[16:, 16:] = data[:16, :16]
    np.testing.assert_array_equal(SANITIZED.read(source), expected)


# -- parity ------------------------------------------------------------------------------------------------
@cp.cube(launch=True)
def producer_starts_with_parity_zero(out: Array[f32]):
    empty = cp.Barrier.shared(1, UNIT_POS == 0)
    empty.wait_parity(0)  # BUG: nothing completed phase 0 and nobody will; a first wait that passes uses 1
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def parity_flipped_twice(out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive()
    bar.wait_parity(0)
    bar.wait_parity(1)  # BUG: waits for phase 1, which no unit arrives at
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def parity_is_the_phase_count(out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    for k in range(3):
        if UNIT_POS == 0:
            bar.arrive()
        bar.wait_parity(k)  # BUG: a parity is k % 2
    out[UNIT_POS] = f32(1)


@pytest.mark.parametrize(
    ("kernel", "detail"),
    [
        (producer_starts_with_parity_zero, "waits for phase 0, which no unit has arrived at"),
        (parity_flipped_twice, "waits for phase 1, which no unit has arrived at and no copy has reached; phase 0"),
        (parity_is_the_phase_count, "phase parity 2 on barrier"),
    ],
)
def test_a_wrong_parity_is_flagged(kernel, detail):
    for client in (cp.client("interp"), SANITIZED):  # barrier rules hold with and without the sanitizer
        with pytest.raises(SanitizerError) as info:
            _run(kernel, client)
        assert info.value.kind is SanitizerKind.WRONG_PARITY and detail in str(info.value), str(info.value)
    _flagged(kernel, SanitizerKind.WRONG_PARITY)


@cp.cube(launch=True)
def producer_consumer_round_trip(out: Array[f32]):
    """Full/empty hand-offs over three rounds; the producer's first wait on the fresh empty barrier uses parity 1.

    (The sanitizer's race checker does not yet take an mbarrier wait as ordering shared accesses, so the
    rounds pass only the barrier phases, not data.)
    """
    full = cp.Barrier.shared(1, UNIT_POS == 0)
    empty = cp.Barrier.shared(CUBE_DIM - 1, UNIT_POS == 0)
    rounds = f32(0)
    for k in range(3):
        if UNIT_POS == 0:
            empty.wait_parity((k + 1) % 2)
            full.arrive()
        full.wait_parity(k % 2)
        rounds += f32(1)
        if UNIT_POS != 0:
            empty.arrive()
    out[UNIT_POS] = rounds


def test_a_correct_round_trip_is_silent():
    np.testing.assert_array_equal(_run(producer_consumer_round_trip), np.full(UNITS, 3.0))


# -- arrivals ------------------------------------------------------------------------------------------------
@cp.cube(launch=True)
def two_arrivals_where_one_is_pending(out: Array[f32]):
    bar = cp.Barrier.shared(2, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive()
        bar.arrive_and_expect_tx(2, 0)  # BUG: the phase waits for one more arrival, not two
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def arrivals_that_fill_the_phase(out: Array[f32]):
    bar = cp.Barrier.shared(2, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive()
        bar.arrive_and_expect_tx(1, 0)
    bar.wait_parity(0)
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def every_unit_arrives_on_a_barrier_of_eight(out: Array[f32]):
    bar = cp.Barrier.shared(8, UNIT_POS == 0)
    bar.wait(bar.arrive())  # 64 single arrivals complete eight phases in turn: legal, not an overflow
    out[UNIT_POS] = f32(1)


def test_more_arrivals_than_the_phase_expects_in_one_arrive():
    message = _flagged(two_arrivals_where_one_is_pending, SanitizerKind.BARRIER_OVERFLOW)
    assert "2 arrivals on barrier[0] but its phase waits for only 1 more" in message
    np.testing.assert_array_equal(_run(arrivals_that_fill_the_phase), np.ones(UNITS))
    np.testing.assert_array_equal(_run(every_unit_arrives_on_a_barrier_of_eight), np.ones(UNITS))


# -- transaction counts ----------------------------------------------------------------------------------------
@cp.cube(launch=True)
def expected_bytes_add_up_past_the_range(out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.expect_tx(600000)
        bar.expect_tx(600000)  # BUG: 1200000 bytes pending; the count holds at most 2^20 - 1
    out[UNIT_POS] = f32(1)


def test_a_transaction_count_past_the_ptx_range_is_flagged():
    message = _flagged(expected_bytes_add_up_past_the_range, SanitizerKind.TX_COUNT_RANGE)
    assert "becomes 1200000 bytes, outside the PTX range [-1048575, 1048575]" in message


@cp.cube(launch=True)
def copy_lands_before_its_expect_tx(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 0, 0)  # the count is -1024 until the next line: legal
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(0)
    out[UNIT_POS] = stage[UNIT_POS]


def test_a_transiently_negative_count_is_not_flagged():
    data = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out = SANITIZED.zeros((UNITS,), np.float32)
    tile = _tile_map(SANITIZED, SANITIZED.create(data))
    copy_lands_before_its_expect_tx.launch(SANITIZED, 2, UNITS, tile, cp.ArrayArg(out))
    np.testing.assert_array_equal(SANITIZED.read(out), data[:16, :16].reshape(-1)[:UNITS])


# -- a phase that can never complete --------------------------------------------------------------------
@cp.cube(launch=True)
def phase_short_of_an_arrival_and_bytes(out: Array[f32]):
    bar = cp.Barrier.shared(2, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive_and_expect_tx(1, 512)
    bar.wait_parity(0)  # BUG: one arrival and 512 bytes never come
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def phase_completed_by_two_arrivals(out: Array[f32]):
    bar = cp.Barrier.shared(2, UNIT_POS == 0)
    if UNIT_POS == 0 or UNIT_POS == 33:
        bar.arrive()
    bar.wait_parity(0)
    out[UNIT_POS] = f32(1)


def test_a_phase_that_cannot_complete_is_a_deadlock_with_what_is_pending():
    message = _flagged(phase_short_of_an_arrival_and_bytes, SanitizerKind.BARRIER_DEADLOCK)
    assert "phase 0 has 1 of 2 arrivals pending and 512 transaction bytes outstanding" in message
    np.testing.assert_array_equal(_run(phase_completed_by_two_arrivals), np.ones(UNITS))


def test_the_cpu_runtime_names_a_wrong_parity_too():
    client = cp.client("cpu")
    with pytest.raises(SanitizerError) as info:
        _run(producer_starts_with_parity_zero, client)
    assert info.value.kind is SanitizerKind.WRONG_PARITY and "waits for phase 0" in str(info.value)
    with pytest.raises(SanitizerError) as info:
        _run(expected_bytes_add_up_past_the_range, client)
    assert info.value.kind is SanitizerKind.TX_COUNT_RANGE
