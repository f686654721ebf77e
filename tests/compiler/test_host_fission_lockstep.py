"""Inside a stretch of loop fission: a unit's own range loops run in lockstep (the rounds every unit runs first,
without tests, then the tested ones), and cube-uniform values computed once per cube.

Every kernel here runs on the interp and on ``cpu``; expected values come from numpy or from each unit's loop
walked by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Comptime, SharedMemory, cube, f32, i32, u32
from cubepy.compiler.targets.host_fission_plan import plan_fission
from tests.compiler.fission import RUNTIMES, _arrays, _definition


@cube(launch=True)
def strided_sums(x: Array[f32], out: Array[f32], cols: u32):
    """Each unit sums its own columns, from its position with a stride of 32: a loop run in lockstep."""
    total = f32(0.0)
    for c in range(UNIT_POS, cols, 32):
        total += cp.exp(x[c])
    tile = SharedMemory[f32](32)
    tile[UNIT_POS] = total
    cp.sync_cube()
    out[UNIT_POS] = tile[(UNIT_POS + 1) % 32]


@cube(launch=True)
def wrapping_walk(out: Array[u32], start: u32, end: u32, step: u32):
    """A unit's index wraps past 2**32 and comes back under ``end``: its loop goes on, as on the GPU."""
    count = u32(0)
    last = u32(0)
    for i in range(start + UNIT_POS, end, step):
        count += 1
        last = i
    cp.sync_cube()
    out[UNIT_POS * 2] = count
    out[UNIT_POS * 2 + 1] = last


def test_per_unit_loops_run_in_lockstep_and_uniform_values_once_per_cube():
    plan = plan_fission(
        _definition(strided_sums, cp.CubeDim(32), *_arrays("f32", "f32"), cp.ScalarCompilationArg("u32"))
    )
    # 2: checked mode splits the loop over x in two (cubepy.ir.versioning), and both parts run in lockstep
    assert plan is not None and len(plan.lockstep) == 2
    t = cp.BufferCompilationArg("f32", 1, rank=2)
    from examples.softmax import softmax_rows

    softmax = plan_fission(_definition(softmax_rows, cp.CubeDim(32), t, t))
    assert softmax is not None and len(softmax.lockstep) == 6 and softmax.hoisted  # cols, base: once per cube


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_loop_from_each_units_position_matches_numpy(runtime):
    client = cp.client(runtime)
    x = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    hx, ho = client.create(x), client.zeros(32, np.float32)
    strided_sums.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(hx), cp.ArrayArg(ho), 1000)
    sums = np.array([np.exp(x[u::32].astype(np.float64)).sum() for u in range(32)])
    np.testing.assert_allclose(client.read(ho), sums[(np.arange(32) + 1) % 32], rtol=1e-5)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("step", [(1 << 32) - 4, 1 << 31])  # -4 modulo 2**32; 2**31 fails, then passes again
def test_a_wrapping_index_walks_as_it_does_on_the_gpu(runtime, step):
    u = cp.ScalarCompilationArg("u32")
    plan = plan_fission(_definition(wrapping_walk, cp.CubeDim(32), *_arrays("u32"), u, u, u))
    assert plan is not None and len(plan.lockstep) == 1
    client = cp.client(runtime)
    ho = client.zeros(64, np.uint32)
    wrapping_walk.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(ho), 10, 20, step)
    expected = []
    for unit in range(32):  # the loop by hand: test, body, index + step modulo 2**32
        index, count, last = 10 + unit, 0, 0
        while index < 20:
            count, last = count + 1, index
            index = (index + step) % (1 << 32)
        expected += [count, last]
    np.testing.assert_array_equal(client.read(ho), np.array(expected, np.uint32))


@cube(launch=True)
def literal_walk(out: Array[i32], start: i32, end: i32, step: Comptime[int]):
    """A loop with a literal step from each unit's own start: the rounds every unit runs go without tests."""
    count = i32(0)
    last = i32(-1)
    for i in range(start + i32(UNIT_POS) * 3, end, step):
        count += 1
        last = i
    cp.sync_cube()
    out[UNIT_POS * 2] = count
    out[UNIT_POS * 2 + 1] = last


@cube(launch=True)
def literal_walk_u32(out: Array[u32], start: u32, end: u32, step: Comptime[int]):
    """The same over u32 (a start near 2**32: the trip counts are computed wider)."""
    count = u32(0)
    last = u32(7)
    for i in range(start + UNIT_POS, end, step):
        count += 1
        last = i
    cp.sync_cube()
    out[UNIT_POS * 2] = count
    out[UNIT_POS * 2 + 1] = last


def _walk_by_hand(start: int, end: int, step: int, bits: int, signed: bool, last: int) -> list[int]:
    """One unit's loop: test, body, index + step wrapped to the index type."""
    index, count = start, 0
    while (index < end) if step > 0 else (index > end):
        count, last = count + 1, index
        index = (index + step) % (1 << bits)
        if signed and index >= 1 << (bits - 1):
            index -= 1 << bits
    return [count, last]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    ("start", "end", "step"),
    [
        (0, 96, 1),  # every unit runs 96 - 3u iterations: the least is 3, then tested rounds
        (0, 200, 7),
        (-50, 40, 5),  # some units start past the end: none of their rounds runs, the others run
        (90, -10, -4),  # going down
        (5, 5, 2),  # nobody runs
        (-(2**31) + 5, 2**31 - 2**28 - 1, 2**28),  # end - start overflows i32: the trip counts are computed wider
    ],
)
def test_a_literal_step_loop_gives_each_unit_its_own_iterations(runtime, start, end, step):
    i32_arg = cp.ScalarCompilationArg("i32")
    plan = plan_fission(_definition(literal_walk, cp.CubeDim(32), *_arrays("i32"), i32_arg, i32_arg, step))
    assert plan is not None and len(plan.lockstep) == 1
    client = cp.client(runtime)
    ho = client.zeros(64, np.int32)
    literal_walk.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(ho), start, end, step)
    expected = [v for u in range(32) for v in _walk_by_hand(start + 3 * u, end, step, 32, True, -1)]
    np.testing.assert_array_equal(client.read(ho), np.array(expected, np.int32))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    ("start", "end", "step"),
    [
        (3, 70, 2),
        (0, 20, 1),
        (2**32 - 80, 2**32 - 8, 4),
        (0, 64, 32),  # every unit runs two iterations: no tested round after the untested ones
        # one iteration each by the trip count, but start - 4 wraps below 0 to under the end: the loops go on
        (10, 50, 2**32 - 4),
    ],
)
def test_a_literal_step_loop_over_u32(runtime, start, end, step):
    client = cp.client(runtime)
    ho = client.zeros(64, np.uint32)
    literal_walk_u32.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(ho), start, end, step)
    expected = [v for u in range(32) for v in _walk_by_hand((start + u) % 2**32, end, step, 32, False, 7)]
    np.testing.assert_array_equal(client.read(ho), np.array(expected, np.uint32))


@cube(launch=True)
def uniform_chain(out: Array[u32], n: u32):
    """``doubled`` is uniform but built from ``bumped``, itself built from a mutable local: both stay in the
    stretch's loop over units (the mutable local's assignment comes first there)."""
    tile = SharedMemory[u32](32)
    chosen = u32(1)
    if n > 3:
        chosen = n
    bumped = chosen + 1
    doubled = bumped * 2
    tile[UNIT_POS] = doubled + UNIT_POS
    cp.sync_cube()
    out[UNIT_POS] = tile[31 - UNIT_POS] + doubled


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_uniform_value_built_from_a_mutable_local_is_not_hoisted(runtime):
    plan = plan_fission(_definition(uniform_chain, cp.CubeDim(32), *_arrays("u32"), cp.ScalarCompilationArg("u32")))
    assert plan is not None and len(plan.hoisted) == 1  # n > 3 alone
    client = cp.client(runtime)
    ho = client.zeros(32, np.uint32)
    uniform_chain.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(ho), 7)
    doubled = (7 + 1) * 2
    np.testing.assert_array_equal(client.read(ho), (doubled + (31 - np.arange(32)) + doubled).astype(np.uint32))


@cube(launch=True)
def after_early_returns(out: Array[u32], n: u32, end: u32):
    """Units below ``n`` return before a loop run in lockstep; the others sum their own indices."""
    if UNIT_POS < n:
        return
    total = u32(0)
    for i in range(UNIT_POS, end, 32):
        total += i
    cp.sync_cube()
    out[UNIT_POS] = total


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("returned", [0, 5, 32])
def test_a_lockstep_loop_after_units_returned(runtime, returned):
    """With every unit returned, no unit's trip count lowers the least of them: the rounds every unit runs were
    once 2**31 - 1 empty ones (a 32-unit launch took 17 s on the cpu runtime); they are none now."""
    plan = plan_fission(
        _definition(after_early_returns, cp.CubeDim(32), *_arrays("u32"), *[cp.ScalarCompilationArg("u32")] * 2)
    )
    assert plan is not None and plan.returns and len(plan.lockstep) == 1
    client = cp.client(runtime)
    out = client.zeros(32, np.uint32)
    after_early_returns.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), returned, 100)
    expected = [0 if u < returned else sum(range(u, 100, 32)) for u in range(32)]
    np.testing.assert_array_equal(client.read(out), np.array(expected, np.uint32))
