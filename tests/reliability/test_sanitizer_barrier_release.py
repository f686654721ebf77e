"""The race checker orders plain shared accesses through an asynchronous barrier, as CUDA does.

``mbarrier.arrive`` releases and a wait (or a ``try_wait_parity``) that passes acquires: a unit's stores
before its arrive are visible to a unit that then waited for that phase.  Such a hand-over is no race;
an arrive *before* the store orders nothing, and stays a ``data race``.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Comptime, f32
from cubepy.errors import SanitizerError, SanitizerKind

SCHEDULES = [{}, {"schedule": "random", "seed": 1}, {"schedule": "random", "seed": 2}, {"schedule": "adversarial"}]
IDS = ["lockstep", "random1", "random2", "adversarial"]


@cp.cube(launch=True)
def hand_over(x: Array[f32], out: Array[f32], released: Comptime[bool], spin: Comptime[bool]):
    """Plane 0 stores 2 x and arrives; plane 1 waits for the phase and reads (arrive first when not ``released``)."""
    full = cp.Barrier.shared(32, UNIT_POS == 0)
    data = cp.SharedMemory[f32](32)
    if UNIT_POS < 32:
        data[UNIT_POS] = f32(0.0)
    cp.sync_cube()
    if UNIT_POS < 32:
        if released:
            data[UNIT_POS] = x[UNIT_POS] * f32(2.0)
            full.arrive()
        else:
            full.arrive()
            data[UNIT_POS] = x[UNIT_POS] * f32(2.0)  # BUG: after the arrive, nothing orders this store
    else:
        if spin:
            while not full.try_wait_parity(0):
                pass
        else:
            full.wait_parity(0)
        out[UNIT_POS - 32] = data[UNIT_POS - 32]


def _launch(client, released: bool, spin: bool) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(32, dtype=np.float32) + 1
    out = client.zeros((32,), np.float32)
    hand_over.launch(client, 1, 64, cp.ArrayArg(client.create(x)), cp.ArrayArg(out), released, spin)
    return client.read(out), x * 2


@pytest.mark.parametrize("spin", [False, True], ids=["wait_parity", "try_wait_parity"])
@pytest.mark.parametrize("options", SCHEDULES, ids=IDS)
def test_stores_before_an_arrive_are_ordered_for_the_unit_that_waited(options, spin):
    got, expected = _launch(cp.client("interp", sanitize=True, **options), released=True, spin=spin)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("spin", [False, True], ids=["wait_parity", "try_wait_parity"])
@pytest.mark.parametrize("options", SCHEDULES, ids=IDS)
def test_a_store_after_the_arrive_is_still_a_race(options, spin):
    with pytest.raises(SanitizerError) as info:
        _launch(cp.client("interp", sanitize=True, **options), released=False, spin=spin)
    assert info.value.kind is SanitizerKind.DATA_RACE, str(info.value)
    assert "test_sanitizer_barrier_release.py:" in str(info.value)
