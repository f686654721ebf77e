"""Deliberately buggy kernels: the sanitizer flags each with the right kind, unit, index and line.

Every kernel runs on ``cp.client("interp", sanitize=True)``; the correct twins at the end must pass
without a report (no false alarms).  Every ``SanitizerKind`` has at least one buggy kernel here.
"""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, UNIT_POS, Array, TensorMap, cube, f32, u32
from cubepy.errors import SanitizerError, SanitizerKind, TensorMapError
from tests.reliability.sanitizer_launch import INPUT, TENSOR_MAP, launch_kernel

# -- buggy kernels ------------------------------------------------------------------------------


@cube(launch=True)
def neighbour_read_without_sync(out: Array[f32]):
    tile = cp.SharedMemory[f32](64)
    tile[UNIT_POS] = f32(UNIT_POS)
    out[UNIT_POS] = tile[(UNIT_POS + 1) % 64]  # BUG: no sync_cube before reading another unit's slot


@cube(launch=True)
def broadcast_without_sync(out: Array[f32]):
    value = cp.SharedMemory[f32](1)
    if UNIT_POS == 0:
        value[0] = f32(3)
    out[UNIT_POS] = value[0]  # BUG


@cube(launch=True)
def overwrite_before_others_read(out: Array[f32]):
    tile = cp.SharedMemory[f32](64)
    tile[UNIT_POS] = f32(1)
    cp.sync_cube()
    out[UNIT_POS] = tile[63 - UNIT_POS]
    tile[UNIT_POS] = f32(2)  # BUG: write-after-read, the mirrored unit read this slot without a barrier


@cube(launch=True)
def two_units_write_different_values(out: Array[f32]):
    slot = cp.SharedMemory[f32](4)
    slot[UNIT_POS % 4] = f32(UNIT_POS)  # BUG: units 0, 4, 8, ... write slot 0 with different values
    cp.sync_cube()
    out[UNIT_POS] = slot[UNIT_POS % 4]


@cube(launch=True)
def writes_in_two_branches(out: Array[f32]):
    slot = cp.SharedMemory[f32](1)
    if UNIT_POS == 0:
        slot[0] = f32(1)
    if UNIT_POS == 1:
        slot[0] = f32(2)  # BUG: write-write race with unit 0
    cp.sync_cube()
    out[UNIT_POS] = slot[0]


@cube(launch=True)
def reduction_missing_barrier(out: Array[f32]):
    partial = cp.SharedMemory[f32](64)
    partial[UNIT_POS] = f32(1)
    cp.sync_cube()
    stride = u32(32)
    while stride > 0:
        if UNIT_POS < stride:
            partial[UNIT_POS] = partial[UNIT_POS] + partial[UNIT_POS + stride]  # BUG: no barrier per round
        stride = stride // 2
    out[UNIT_POS] = partial[0]


@cube(launch=True)
def plane_barrier_used_across_planes(out: Array[f32]):
    tile = cp.SharedMemory[f32](64)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_plane()
    out[UNIT_POS] = tile[63 - UNIT_POS]  # BUG: the mirrored unit is in the other plane; sync_plane is not enough


@cube(launch=True)
def read_never_written(out: Array[f32]):
    tile = cp.SharedMemory[f32](64)
    out[UNIT_POS] = tile[UNIT_POS]  # BUG: shared memory starts undefined


@cube(launch=True)
def read_past_the_written_part(out: Array[f32]):
    tile = cp.SharedMemory[f32](128)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    out[UNIT_POS] = tile[UNIT_POS + 64]  # BUG: the upper half was never written


@cube(launch=True)
def divergent_barrier(out: Array[f32]):
    if UNIT_POS < 40:
        cp.sync_cube()  # BUG: units 40.. never reach it
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def barrier_in_divergent_loop(out: Array[f32]):
    for _i in range(UNIT_POS % 3):
        cp.sync_cube()  # BUG: units run different trip counts
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def divergent_plane_barrier(out: Array[f32]):
    if UNIT_POS % 2 == 0:
        cp.sync_plane()  # BUG: half of every plane
    out[UNIT_POS] = f32(1)


@cube(launch_unchecked=True)
def global_write_past_end(out: Array[f32]):
    out[UNIT_POS + 1] = f32(1)  # BUG: the last unit writes one past the end


@cube(launch_unchecked=True)
def global_read_before_start(inp: Array[f32], out: Array[f32]):
    out[UNIT_POS] = inp[UNIT_POS - 1]  # BUG: unit 0 reads index 2**32 - 1


@cube(launch_unchecked=True)
def shared_write_past_end(out: Array[f32]):
    tile = cp.SharedMemory[f32](32)
    tile[UNIT_POS] = f32(1)  # BUG: 64 units, 32 slots
    cp.sync_cube()
    out[UNIT_POS] = f32(0)


@cube(launch_unchecked=True)
def local_array_overrun(out: Array[f32]):
    scratch = cp.LocalArray[f32](4)
    for i in range(5):
        scratch[i] = f32(i)  # BUG: i == 4 is past the end
    out[UNIT_POS] = scratch[0]


@cube(launch=True)
def checked_read_past_end(inp: Array[f32], out: Array[f32]):
    out[UNIT_POS] = inp[UNIT_POS + 1]  # BUG: checked mode reads 0 for the last unit instead of failing


@cube(launch=True)
def checked_write_past_end(out: Array[f32]):
    out[UNIT_POS + 1] = f32(1)  # BUG: checked mode drops the last unit's write


@cube(launch=True)
def checked_shared_read_past_end(out: Array[f32]):
    tile = cp.SharedMemory[f32](32)
    if UNIT_POS < 32:
        tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    out[UNIT_POS] = tile[UNIT_POS]  # BUG: 64 units, 32 slots; checked mode reads 0 past the end


@cube(launch=True)
def shuffle_from_inactive_lane(out: Array[f32]):
    value = f32(UNIT_POS)
    if UNIT_POS % 2 == 0:
        out[UNIT_POS] = cp.plane_shuffle(value, UNIT_POS + 1)  # BUG: odd lanes are inactive here


@cube(launch=True)
def cmma_in_half_of_each_plane(out: Array[f32]):
    acc = cp.cmma.Matrix[f32].uninitialized(cp.cmma.MatrixIdent.ACCUMULATOR, 16, 16, 16)
    if UNIT_POS % 32 < 16:
        cp.cmma.fill(acc, 1.0)  # BUG: cmma is cooperative, units 16..31 of every plane skip it
    cp.cmma.store(out, acc, 16, cp.cmma.MatrixLayout.ROW_MAJOR)


@cube(launch=True)
def barrier_never_initialised(out: Array[f32]):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == CUBE_DIM)  # no unit is elected to initialise it
    bar.arrive_and_wait()  # BUG: used before barrier_init
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def two_arrivals_on_a_phase_of_one(out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive_and_expect_tx(2, 0)  # BUG: the phase waits for one arrival
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def waits_for_one_unit_too_many(out: Array[f32]):
    bar = cp.Barrier.shared(CUBE_DIM + 1, UNIT_POS == 0)
    bar.arrive_and_wait()  # BUG: the phase needs one more arrival than the cube has units
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def tma_load_to_misaligned_shared(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 512, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage.slice(16, 272), 0, 0)  # BUG: 64 bytes past a 128-byte boundary
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(0)
    out[UNIT_POS] = stage[UNIT_POS]


@cube(launch=True)
def tma_store_without_proxy_fence(tmap: TensorMap[f32], out: Array[f32]):
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    for i in range(UNIT_POS, 256, CUBE_DIM):
        stage[i] = f32(i)
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, 0, 0)  # BUG: no fence_proxy_async between the stores and the TMA store
        cp.tma_group_commit()
        cp.tma_group_wait(0)
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def first_wait_on_a_fresh_barrier_with_parity_zero(out: Array[f32]):
    empty = cp.Barrier.shared(1, UNIT_POS == 0)
    empty.wait_parity(0)  # BUG: no phase completed yet; a wait that must pass at first uses parity 1
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def expects_more_bytes_than_ptx_counts(out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.expect_tx(1 << 20)  # BUG: a transaction count is at most 2^20 - 1
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def named_barrier_id_past_fifteen(out: Array[f32]):
    cp.named_barrier_sync(out.len() // 4, 64)  # BUG: ids are 0..15 (this one is 16 at run time)
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def range_with_a_zero_step(out: Array[f32]):
    step = cp.i32(UNIT_POS) // 64  # zero on every unit of a 64-unit cube
    for i in range(0, 8, step):  # BUG: a zero step (Python raises; the kernel would run zero iterations)
        out[UNIT_POS] = f32(i)


@cube(launch=True)
def wgmma_by_half_a_warpgroup(out: Array[f32]):
    tile = cp.SharedMemory[cp.f16](64 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 64):
        tile[i] = cp.f16(1)
    cp.sync_cube()
    acc = cp.LocalArray[f32](4)
    desc = cp.wgmma_descriptor(tile, 128, 256)
    cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16), elem=cp.f16, scale_d=False)  # BUG: 64 units
    out[UNIT_POS] = f32(0)


@cube(launch=True)
def wgmma_read_before_its_wait(out: Array[f32]):  # launched with 128 units: one warpgroup
    tile = cp.SharedMemory[cp.f16](64 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 128):
        tile[i] = cp.f16(1)
    cp.sync_cube()
    acc = cp.LocalArray[f32](4)
    desc = cp.wgmma_descriptor(tile, 128, 256)
    cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16), elem=cp.f16, scale_d=False)
    cp.wgmma_commit_group()
    value = acc[0]  # BUG: no wgmma_wait_group yet
    cp.wgmma_wait_group(0)
    if UNIT_POS < 64:
        out[UNIT_POS] = value


@cube(launch=True)
def wgmma_operand_overwritten(out: Array[f32]):  # launched with 128 units: one warpgroup
    tile = cp.SharedMemory[cp.f16](64 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 128):
        tile[i] = cp.f16(1)
    cp.sync_cube()
    acc = cp.LocalArray[f32](4)
    desc = cp.wgmma_descriptor(tile, 128, 256)
    cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16), elem=cp.f16, scale_d=False)
    cp.wgmma_commit_group()
    tile[UNIT_POS] = cp.f16(2)  # BUG: the wgmma may still read the tile until its wait
    cp.wgmma_wait_group(0)
    if UNIT_POS < 64:
        out[UNIT_POS] = acc[0]


@cube(launch=True)
def tma_stage_read_before_its_wait(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 0, 0)
        bar.arrive_and_expect_tx(1, 1024)
    out[UNIT_POS] = stage[UNIT_POS]  # BUG: read before the wait that covers the load
    bar.wait_parity(0)


@cube(launch=True)
def tma_reload_while_others_read(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 0, 0)
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(0)
    first = stage[UNIT_POS]
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 16, 0)  # BUG: the other units' reads of the stage are not released
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(1)
    out[UNIT_POS] = first + stage[UNIT_POS]


@cube(launch=True)
def async_copy_read_before_its_wait(inp: Array[f32], out: Array[f32]):
    stage = cp.SharedMemory[f32](64)
    if UNIT_POS < 16:
        cp.memcpy_async(inp[UNIT_POS * 4 : UNIT_POS * 4 + 4], stage[UNIT_POS * 4 : UNIT_POS * 4 + 4])
    cp.async_commit_group()
    out[UNIT_POS] = stage[UNIT_POS]  # BUG: read before the async_wait_group that covers the copy
    cp.async_wait_group(0)


@cube(launch=True)
def async_copy_from_misaligned_source(inp: Array[f32], out: Array[f32]):
    stage = cp.SharedMemory[f32](64)
    start = UNIT_POS % 1 + 1
    if UNIT_POS == 0:
        cp.memcpy_async(inp[start : start + 4], stage[0:4])  # BUG: a 16-byte copy from byte offset 4
    cp.async_commit_group()
    cp.async_wait_group(0)
    out[UNIT_POS] = f32(0)


@cube(launch=True)
def spin_on_a_value_nobody_changes(inp: Array[f32], out: Array[f32]):
    while inp[0] > f32(0.0):  # BUG: nothing ever clears inp[0]: every unit spins forever
        pass
    out[UNIT_POS] = f32(1)


BUGGY = [
    # kernel, kind, extra first argument (None, INPUT or TENSOR_MAP), what the message must name
    (neighbour_read_without_sync, SanitizerKind.DATA_RACE, None, "index 1"),
    (broadcast_without_sync, SanitizerKind.DATA_RACE, None, "index 0"),
    (overwrite_before_others_read, SanitizerKind.DATA_RACE, None, "read"),
    (two_units_write_different_values, SanitizerKind.DATA_RACE, None, "different values"),
    (writes_in_two_branches, SanitizerKind.DATA_RACE, None, "index 0"),
    (reduction_missing_barrier, SanitizerKind.DATA_RACE, None, "index"),
    (plane_barrier_used_across_planes, SanitizerKind.DATA_RACE, None, "index 63"),
    (read_never_written, SanitizerKind.UNINITIALIZED_READ, None, "index 0"),
    (read_past_the_written_part, SanitizerKind.UNINITIALIZED_READ, None, "index 64"),
    (divergent_barrier, SanitizerKind.DIVERGENT_BARRIER, None, "sync_cube"),
    (barrier_in_divergent_loop, SanitizerKind.DIVERGENT_BARRIER, None, "sync_cube"),
    (divergent_plane_barrier, SanitizerKind.DIVERGENT_BARRIER, None, "sync_plane"),
    (global_write_past_end, SanitizerKind.OUT_OF_BOUNDS, None, "index 64"),
    (global_read_before_start, SanitizerKind.OUT_OF_BOUNDS, INPUT, "index 4294967295"),
    (shared_write_past_end, SanitizerKind.OUT_OF_BOUNDS, None, "index 32"),
    (local_array_overrun, SanitizerKind.OUT_OF_BOUNDS, None, "index 4"),
    (shuffle_from_inactive_lane, SanitizerKind.INACTIVE_PLANE_LANE, None, "inactive"),
    (cmma_in_half_of_each_plane, SanitizerKind.PARTIAL_PLANE, None, "unit (16, 0, 0)"),
    (barrier_never_initialised, SanitizerKind.BARRIER_MISUSE, None, "before barrier_init"),
    (two_arrivals_on_a_phase_of_one, SanitizerKind.BARRIER_OVERFLOW, None, "2 arrivals"),
    (waits_for_one_unit_too_many, SanitizerKind.BARRIER_DEADLOCK, None, "1 of 65 arrivals pending"),
    (tma_load_to_misaligned_shared, SanitizerKind.TMA_MISUSE, TENSOR_MAP, "rule 24"),
    (range_with_a_zero_step, SanitizerKind.ZERO_RANGE_STEP, None, "range() step is zero"),
    (wgmma_by_half_a_warpgroup, SanitizerKind.WGMMA_MISUSE, None, "not a multiple of 128"),
    (wgmma_read_before_its_wait, SanitizerKind.WGMMA_PENDING_READ, None, "has not completed"),
    (wgmma_operand_overwritten, SanitizerKind.WGMMA_OPERAND_OVERWRITE, None, "may still read"),
    (tma_stage_read_before_its_wait, SanitizerKind.TMA_UNCOVERED_ACCESS, TENSOR_MAP, "test_sanitizer.py:"),
    (tma_reload_while_others_read, SanitizerKind.TMA_STAGE_REUSE, TENSOR_MAP, "read at "),
    (tma_store_without_proxy_fence, SanitizerKind.MISSING_PROXY_FENCE, TENSOR_MAP, "shared memory"),
    (first_wait_on_a_fresh_barrier_with_parity_zero, SanitizerKind.WRONG_PARITY, None, "waits for phase 0"),
    (expects_more_bytes_than_ptx_counts, SanitizerKind.TX_COUNT_RANGE, None, "1048576 bytes"),
    (named_barrier_id_past_fifteen, SanitizerKind.NAMED_BARRIER_MISUSE, None, "named barrier id 16"),
    (async_copy_read_before_its_wait, SanitizerKind.ASYNC_COPY_UNCOVERED, INPUT, "the cp.async copy at "),
    (async_copy_from_misaligned_source, SanitizerKind.ASYNC_COPY_MISUSE, INPUT, "16-byte aligned"),
    (spin_on_a_value_nobody_changes, SanitizerKind.LIVELOCK, INPUT, "livelock: "),
    (
        checked_read_past_end,
        SanitizerKind.OUT_OF_BOUNDS,
        INPUT,
        "read of global buffer 0 (inp) at index 64 "
        "(length 64) in checked mode (without the sanitizer the read gives 0)",
    ),
    (
        checked_write_past_end,
        SanitizerKind.OUT_OF_BOUNDS,
        None,
        "write of global buffer 0 (out) at index 64 "
        "(length 64) in checked mode (without the sanitizer the write is dropped)",
    ),
    (
        checked_shared_read_past_end,
        SanitizerKind.OUT_OF_BOUNDS,
        None,
        "read of shared memory 0 at index 32 (length 32) in checked mode",
    ),
]


def _bug_line(kernel) -> int:
    """The line of the kernel's source marked ``# BUG``."""
    lines, first = inspect.getsourcelines(kernel.fn if hasattr(kernel, "fn") else kernel.__wrapped__)
    return first + next(i for i, text in enumerate(lines) if "# BUG" in text)


# Under a schedule that runs planes apart (``--cubepy-schedule=random:N`` or ``adversarial``) a buggy kernel
# is still reported, but the exact report (kind, unit, index) is the lockstep order's: another order meets
# the same bug from another side first (a read of a slot the other plane has not written yet is an
# uninitialized read, not a race).  There the test checks that a SanitizerError names a unit and the
# kernel's file.  Two bugs are not found at all then: a unit that skips a barrier and finishes counts as
# exited (as in CUDA), so the barrier releases without it.
SKIPS_A_BARRIER_AND_FINISHES = {"divergent_barrier", "barrier_in_divergent_loop"}
BUGGY_PARAMS = [
    pytest.param(
        *entry,
        id=entry[0].name,
        marks=[pytest.mark.lockstep_report("the skipping units finish first and count as exited, as in CUDA")],
    )
    if entry[0].name in SKIPS_A_BARRIER_AND_FINISHES
    else pytest.param(*entry, id=entry[0].name)
    for entry in BUGGY
]


def _lockstep() -> bool:
    return os.environ.get("CUBEPY_SCHEDULE", "").strip() in ("", "lockstep")


@pytest.mark.parametrize(("kernel", "kind", "extra", "detail"), BUGGY_PARAMS)
def test_buggy_kernel_is_flagged(kernel, kind, extra, detail):
    with pytest.raises(SanitizerError) as info:
        launch_kernel(kernel, extra, cp.client("interp", sanitize=True))
    message = str(info.value)
    assert "unit (" in message and "of cube (" in message
    assert "test_sanitizer.py:" in message, message
    if not _lockstep():
        return
    assert info.value.kind is kind, message
    assert message.split(": ", 1)[1].startswith(kind.value), message  # "file:line: <kind>: ..."
    assert detail in message
    assert f"test_sanitizer.py:{_bug_line(kernel)}" in message, message


def test_every_kind_has_a_buggy_kernel():
    assert {kind for _, kind, *_ in BUGGY} == set(SanitizerKind)


def test_tma_misuse_is_also_a_tensor_map_error():
    with pytest.raises(TensorMapError) as info:
        launch_kernel(tma_load_to_misaligned_shared, TENSOR_MAP, cp.client("interp"))
    assert isinstance(info.value, SanitizerError) and info.value.kind is SanitizerKind.TMA_MISUSE


def test_sanitizer_error_keeps_its_kind_through_pickle():
    import pickle

    with pytest.raises(SanitizerError) as info:
        launch_kernel(read_never_written, None, cp.client("interp", sanitize=True))
    copy = pickle.loads(pickle.dumps(info.value))
    assert copy.kind is SanitizerKind.UNINITIALIZED_READ and str(copy) == str(info.value)


@pytest.mark.lockstep_report("under independent planes a unit of another plane may be the first reader")
def test_race_report_names_both_units_and_both_lines():
    with pytest.raises(SanitizerError) as info:
        launch_kernel(broadcast_without_sync, None, cp.client("interp", sanitize=True))
    message = str(info.value)
    write_line = _bug_line(broadcast_without_sync) - 1
    assert f"test_sanitizer.py:{write_line}" in message  # the earlier write
    assert "unit (0, 0, 0) of cube (0, 0, 0)" in message and "unit (1, 0, 0)" in message


@pytest.mark.races_by_design
def test_sanitizer_off_lets_racy_kernels_run():
    launch_kernel(neighbour_read_without_sync, None, cp.client("interp"))


@pytest.mark.parametrize("schedule", [("random", 1), ("adversarial", None)], ids=str)
@pytest.mark.parametrize(
    ("kernel", "kind"),
    [
        (tma_stage_read_before_its_wait, SanitizerKind.TMA_UNCOVERED_ACCESS),
        (tma_reload_while_others_read, SanitizerKind.TMA_STAGE_REUSE),
    ],
    ids=["uncovered", "reuse"],
)
def test_async_race_is_flagged_under_other_schedules(kernel, kind, schedule):
    with pytest.raises(SanitizerError) as info:
        launch_kernel(kernel, TENSOR_MAP, cp.client("interp", sanitize=True, schedule=schedule[0], seed=schedule[1]))
    # A random interleaving may run a reader before the load is even issued: then no unit wrote the bytes yet.
    early = {SanitizerKind.UNINITIALIZED_READ} if kind is SanitizerKind.TMA_UNCOVERED_ACCESS else set()
    assert info.value.kind in {kind} | early, str(info.value)
    assert f"test_sanitizer.py:{_bug_line(kernel)}" in str(info.value)


def test_without_the_sanitizer_checked_mode_reads_zero_and_drops_writes():
    client = cp.client("interp")
    inp = client.create(np.arange(1, 65, dtype=np.float32))
    out = client.create(np.full(64, 7, np.float32))
    checked_read_past_end.launch(client, 1, 64, cp.ArrayArg(inp), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), list(range(2, 65)) + [0.0])
    written = client.zeros((64,), np.float32)
    checked_write_past_end.launch(client, 1, 64, cp.ArrayArg(written))
    np.testing.assert_array_equal(client.read(written), [0.0] + [1.0] * 63)


def test_a_report_keeps_only_the_users_frames_and_the_launch_call():
    client = cp.client("interp", sanitize=True)
    with pytest.raises(SanitizerError) as info:
        neighbour_read_without_sync.launch(
            client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(client.zeros((64,), np.float32))
        )
    frames = []
    tb = info.tb
    while tb is not None:
        frames.append((os.path.basename(tb.tb_frame.f_code.co_filename), tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    # This test, then the entry point it called: no interpreter frames.
    assert frames == [
        ("test_sanitizer.py", "test_a_report_keeps_only_the_users_frames_and_the_launch_call"),
        ("kernel.py", "launch"),
    ]
