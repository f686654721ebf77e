"""The correct twins of the sanitizer's buggy kernels: each runs without a report (no false alarms).

Every kernel runs on ``cp.client("interp", sanitize=True)``; the buggy kernels are in ``test_sanitizer.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, UNIT_POS, Array, TensorMap, cube, f32, u32
from tests.reliability.sanitizer_launch import INPUT, TENSOR_MAP, launch_kernel

# -- correct twins --------------------------------------------------------------


@cube(launch=True)
def tree_reduction(out: Array[f32]):
    partial = cp.SharedMemory[f32](64)
    partial[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    stride = u32(32)
    while stride > 0:
        if UNIT_POS < stride:
            partial[UNIT_POS] = partial[UNIT_POS] + partial[UNIT_POS + stride]
        cp.sync_cube()
        stride = stride // 2
    out[UNIT_POS] = partial[0]


@cube(launch=True)
def same_value_flag_and_plane_exchange(out: Array[f32]):
    flag = cp.SharedMemory[u32](1)
    flag[0] = u32(1)  # every unit writes the same value: benign, as in CUDA's racecheck
    lane_values = cp.SharedMemory[f32](64)
    lane_values[UNIT_POS] = f32(UNIT_POS)
    cp.sync_plane()  # orders the accesses within each plane
    partner = (UNIT_POS // 32) * 32 + (UNIT_POS + 1) % 32
    value = lane_values[partner]
    cp.sync_cube()
    out[UNIT_POS] = value + f32(flag[0])


@cube(launch=True)
def double_buffered(out: Array[f32]):
    tile = cp.SharedMemory[f32](128)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    tile[64 + UNIT_POS] = tile[63 - UNIT_POS]
    cp.sync_cube()
    out[UNIT_POS] = tile[64 + (UNIT_POS + 1) % 64]


@cube(launch=True)
def shared_atomics_then_sync(out: Array[u32]):
    counter = cp.SharedMemory[cp.Atomic[u32]](1)
    if UNIT_POS == 0:
        counter[0].store(u32(0))
    cp.sync_cube()
    counter[0].fetch_add(u32(1))
    cp.sync_cube()
    out[UNIT_POS] = counter[0].load()


@cube(launch=True)
def guarded_reads(inp: Array[f32], out: Array[f32]):
    # A checked read on the right of `and` runs eagerly on every lane (it cannot fault); where the guard is
    # false it is out of bounds, which is not a bug.  The ternary's read runs only where its guard holds.
    next_positive = UNIT_POS + 1 < inp.len() and inp[UNIT_POS + 1] > f32(0)
    nxt = inp[UNIT_POS + 1] if UNIT_POS + 1 < inp.len() else f32(0)
    out[UNIT_POS] = cp.select(next_positive, nxt, f32(-1))


@cube(launch=True)
def tma_stage_read_after_its_wait(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 0, 0)
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(0)
    out[UNIT_POS] = stage[UNIT_POS]


@cube(launch=True)
def tma_reload_after_a_release(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    empty = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 0, 0)
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(0)
    first = stage[UNIT_POS]
    empty.arrive()  # every unit releases the stage
    if UNIT_POS == 0:
        empty.wait_parity(0)  # the producer waits for the release before reusing the stage
        bar.tma_load_2d(tmap, stage, 16, 0)
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(1)
    out[UNIT_POS] = first + stage[UNIT_POS]


CORRECT = [
    tree_reduction,
    same_value_flag_and_plane_exchange,
    double_buffered,
    shared_atomics_then_sync,
    guarded_reads,
    tma_stage_read_after_its_wait,
    tma_reload_after_a_release,
]
EXTRA = {guarded_reads: INPUT, tma_stage_read_after_its_wait: TENSOR_MAP, tma_reload_after_a_release: TENSOR_MAP}


@pytest.mark.parametrize("kernel", CORRECT, ids=lambda k: k.name)
def test_correct_kernel_has_no_report(kernel):
    launch_kernel(kernel, EXTRA.get(kernel), cp.client("interp", sanitize=True))


@pytest.mark.parametrize("schedule", [("random", 1), ("random", 2), ("adversarial", None)], ids=str)
@pytest.mark.parametrize("kernel", [tma_stage_read_after_its_wait, tma_reload_after_a_release], ids=lambda k: k.name)
def test_correct_tma_kernel_has_no_report_under_other_schedules(kernel, schedule):
    launch_kernel(kernel, TENSOR_MAP, cp.client("interp", sanitize=True, schedule=schedule[0], seed=schedule[1]))


def test_guarded_reads_are_hoisted_and_compute_the_guarded_values():
    ops = cp.testing.expand(guarded_reads, Array[f32], Array[f32], checked=True).ops
    assert ops.index("index") < ops.index("if")  # the `and` kept its read eager, before the ternary's branch
    assert ops.count("if") == 1 and "if_else" not in ops
    client = cp.client("interp", sanitize=True)
    out = client.zeros((64,), np.float32)
    guarded_reads.launch(client, 1, 64, cp.ArrayArg(client.create(np.ones(64, np.float32))), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), [1.0] * 63 + [-1.0])
