"""Progress on the interp: units spinning on memory yield to the others; a true livelock is reported."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, CUBE_POS, UNIT_POS, Array, Atomic, u32
from cubepy.errors import SanitizerError, SanitizerKind

SCHEDULES = [("lockstep", 0), ("random", 1), ("random", 7), ("adversarial", 0)]


@cp.cube(launch=True)
def locked_count(lock: Array[Atomic[u32]], total: Array[u32]):
    while lock[0].compare_exchange(u32(0), u32(1)) != u32(0):  # acquire: spin until we swap 0 -> 1
        pass
    total[0] = total[0] + u32(1)  # a plain read-modify-write, protected by the lock
    lock[0].exchange(u32(0))  # release


@cp.cube(launch=True)
def one_locker_per_cube(lock: Array[Atomic[u32]], total: Array[u32], order: Array[u32]):
    # Triton's layer-norm backward: one unit per cube takes a lock shared by every cube.
    if UNIT_POS == 0:
        while lock[0].compare_exchange(u32(0), u32(1)) != u32(0):
            pass
        order[CUBE_POS] = total[0]
        total[0] = total[0] + u32(1)
        lock[0].exchange(u32(0))


@cp.cube(launch=True)
def flag_never_set(flag: Array[u32], out: Array[u32]):
    while flag[0] == u32(0):  # nobody ever writes the flag
        pass
    out[ABSOLUTE_POS] = u32(1)


@cp.cube(launch=True)
def waits_for_a_flag_set_later(flag: Array[Atomic[u32]], out: Array[u32]):
    # Unit 0 waits for the flag that unit 40 (another plane) sets after it: progress needs unit 40 to run.
    if UNIT_POS == 0:
        while flag[0].load() == u32(0):
            pass
        out[0] = u32(7)
    if UNIT_POS == 40:
        flag[0].store(u32(1))


@cp.cube(launch=True)
def all_spin_on_a_bit_some_leave(flag: Array[Atomic[u32]], out: Array[u32]):
    # Lanes 0..3 leave at once; the others spin on a flag only lane 3 could set, and lane 3 never does.
    if UNIT_POS >= 4:
        while flag[0].load() == u32(0):
            pass
    out[UNIT_POS] = u32(1)


def _client(name: str, seed: int):
    return cp.client("interp", schedule=name, seed=seed) if name == "random" else cp.client("interp", schedule=name)


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES)
def test_a_spin_lock_taken_by_every_unit_of_four_cubes_counts_exactly(schedule, seed):
    client = _client(schedule, seed)
    lock, total = client.zeros((1,), np.uint32), client.zeros((1,), np.uint32)
    locked_count.launch(client, cp.CubeCount(4), cp.CubeDim(64), cp.ArrayArg(lock), cp.ArrayArg(total))
    assert client.read(total)[0] == 4 * 64  # every unit incremented once, none lost
    assert client.read(lock)[0] == 0


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES)
def test_a_lock_shared_by_one_unit_of_each_cube(schedule, seed):
    client = _client(schedule, seed)
    lock, total = client.zeros((1,), np.uint32), client.zeros((1,), np.uint32)
    order = client.zeros((8,), np.uint32)
    one_locker_per_cube.launch(
        client, cp.CubeCount(8), cp.CubeDim(64), cp.ArrayArg(lock), cp.ArrayArg(total), cp.ArrayArg(order)
    )
    assert client.read(total)[0] == 8
    assert sorted(client.read(order).tolist()) == list(range(8))  # each cube held the lock once, in turn


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES)
def test_a_unit_waiting_for_a_flag_another_plane_sets_later_goes_on(schedule, seed):
    client = _client(schedule, seed)
    flag, out = client.zeros((1,), np.uint32), client.zeros((1,), np.uint32)
    waits_for_a_flag_set_later.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(flag), cp.ArrayArg(out))
    assert client.read(out)[0] == 7


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES)
def test_a_livelock_is_reported_with_the_loop_and_what_it_reads(schedule, seed):
    client = _client(schedule, seed)
    flag, out = client.zeros((1,), np.uint32), client.zeros((64,), np.uint32)
    with pytest.raises(SanitizerError) as caught:
        flag_never_set.launch(client, cp.CubeCount(2), cp.CubeDim(32), cp.ArrayArg(flag), cp.ArrayArg(out))
    error = caught.value
    assert error.kind is SanitizerKind.LIVELOCK
    text = str(error)
    loop_line = flag_never_set.fn.__code__.co_firstlineno + 2  # the `while` line
    assert f"test_interp_progress.py:{loop_line}:" in text
    assert text.split(": ", 1)[1].startswith("livelock: ")
    assert f"(load of global buffer 0 (flag) at line {loop_line})" in text  # what is spun on, and where
    assert "nothing left to run can change what they read" in text


@pytest.mark.parametrize(("schedule", "seed"), SCHEDULES)
def test_a_livelock_after_some_units_left_is_reported(schedule, seed):
    client = _client(schedule, seed)
    flag, out = client.zeros((1,), np.uint32), client.zeros((64,), np.uint32)
    with pytest.raises(SanitizerError) as caught:
        all_spin_on_a_bit_some_leave.launch(
            client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(flag), cp.ArrayArg(out)
        )
    assert caught.value.kind is SanitizerKind.LIVELOCK
    assert "60 units spin in this loop" in str(caught.value)
