"""Loop fission at barriers on the host target: which kernels qualify, and that they compute what numpy does.

Every kernel here runs on the interp and on ``cpu``; expected values are computed with numpy from the
kernel's definition, by hand.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import (
    UNIT_POS,
    UNIT_POS_X,
    UNIT_POS_Y,
    UNIT_POS_Z,
    Array,
    Comptime,
    LocalArray,
    SharedMemory,
    cube,
    f32,
    i32,
    u32,
)
from cubepy.compiler.emit_host import compile_host
from cubepy.compiler.targets.host_fission_plan import plan_fission
from cubepy.errors import SanitizerError
from examples.matmul_tiled import matmul
from examples.reduce_sum import block_sum, plane_sum_kernel
from tests.compiler.fission import RUNTIMES, _arrays, _definition

MATRIX = cp.BufferCompilationArg("f32", 1, rank=2)


@cube(launch=True)
def rotate_survivors(data: Array[f32], out: Array[f32], alive: u32):
    """Units at or past ``alive`` return before the barrier; the others read their right neighbour's value."""
    tile = SharedMemory[f32](64)
    if UNIT_POS >= alive:
        return
    tile[UNIT_POS] = data[UNIT_POS] * 2.0
    cp.sync_cube()
    out[UNIT_POS] = tile[(UNIT_POS + 1) % alive]


@cube(launch=True)
def leave_midway(out: Array[f32], rounds: u32):
    """Unit u takes part in rounds 0..u-1 of a loop with barriers, then returns inside the loop."""
    tile = SharedMemory[f32](32)
    total = f32(0.0)
    for r in range(rounds):
        if r >= UNIT_POS:
            out[UNIT_POS] = total
            return
        tile[UNIT_POS] = f32(r + UNIT_POS)
        cp.sync_cube()
        total += tile[r + 1]  # unit r + 1 wrote it this round: it leaves at round r + 1
        cp.sync_cube()
    out[UNIT_POS] = total + 1000.0


@cube(launch=True)
def carried(out: Array[f32], rounds: u32):
    """``previous`` is written at the end of one iteration's last stretch and read in the next one's first."""
    tile = SharedMemory[f32](16)
    previous = f32(0.0)
    for r in range(rounds):
        tile[UNIT_POS] = previous + f32(UNIT_POS)
        cp.sync_cube()
        previous = tile[(UNIT_POS + r) % 16]
    out[UNIT_POS] = previous


@cube(launch=True)
def local_then_shared(out: Array[f32], flags: Array[u32], pairs: Array[cp.Line[f32]]):
    """A local array, a bool and a line live across barriers; a uniform if/else holds barriers too."""
    mine = LocalArray[f32](3)
    tile = SharedMemory[f32](24)
    for i in range(3):
        mine[i] = f32(UNIT_POS * 3 + i)
    odd = UNIT_POS % 2 == 1
    pair = pairs[UNIT_POS]
    tile[UNIT_POS] = mine[2]
    cp.sync_cube()
    if flags.len() > 4:
        moved = tile[(UNIT_POS + 1) % 8] + mine[0]
        cp.sync_cube()
        tile[UNIT_POS] = moved
        cp.sync_cube()
    else:
        tile[UNIT_POS] = tile[UNIT_POS] - 1.0
        cp.sync_cube()
    value = tile[(UNIT_POS + 7) % 8] + pair[1]
    if odd:
        value = -value
    out[UNIT_POS] = value
    flags[UNIT_POS] = u32(odd)


@cube(launch=True)
def positions_3d(out: Array[u32]):
    """Unit positions of a 3-D cube read in two stretches; the second reads the first's through shared memory."""
    tile = SharedMemory[u32](60)
    tile[UNIT_POS] = UNIT_POS_X * 100 + UNIT_POS_Y * 10 + UNIT_POS_Z
    cp.sync_cube()
    out[UNIT_POS] = tile[59 - UNIT_POS] * 1000 + UNIT_POS


@cube(launch=True)
def divergent_barrier(out: Array[f32]):
    tile = SharedMemory[f32](32)
    if UNIT_POS < 16:
        tile[UNIT_POS] = 1.0
        cp.sync_cube()
    out[UNIT_POS] = 2.0


@cube(launch=True)
def break_out_of_barrier_loop(out: Array[f32], rounds: u32):
    tile = SharedMemory[f32](32)
    for r in range(rounds):
        tile[UNIT_POS] = f32(r)
        cp.sync_cube()
        if out[0] > 5.0:
            break
    out[UNIT_POS] = tile[0]


@cube(launch=True)
def halving_sum(out: Array[f32], width: u32):
    tile = SharedMemory[f32](32)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    stride = width // 2
    while stride > 0:
        if UNIT_POS < stride:
            tile[UNIT_POS] += tile[UNIT_POS + stride]
        cp.sync_cube()
        stride = stride // 2
    out[UNIT_POS] = tile[0]


@cube(launch=True)
def leave_when_mine(data: Array[f32], out: Array[f32]):
    """A ``break`` under a per-unit condition: units leave the loop apart, so it runs as coroutines."""
    tile = SharedMemory[f32](32)
    count = u32(0)
    while True:
        tile[UNIT_POS] = data[UNIT_POS] + f32(count)
        cp.sync_cube()
        count += 1
        if count > UNIT_POS % 4:
            break
    out[UNIT_POS] = f32(count)


@cube(launch=True)
def shift_read(x: Array[f32], out: Array[f32], n: Comptime[int]):
    tile = SharedMemory[f32](n)
    tile[UNIT_POS] = x[UNIT_POS]
    cp.sync_cube()
    out[UNIT_POS] = x[UNIT_POS + 3] + tile[0]


def test_the_tiled_matmul_qualifies_and_keeps_its_accumulator_per_unit():
    plan = plan_fission(_definition(matmul, cp.CubeDim(16, 16), MATRIX, MATRIX, MATRIX, 16))
    # the checked K loop is split by the bounds pass (a check-free part and a checked rest): both qualify
    assert plan is not None and len(plan.split) == 2 and not plan.returns
    assert any(var.kind.value == "mut" for var in plan.per_unit)  # acc


@pytest.mark.parametrize(
    ("kernel", "args", "why"),
    [
        (divergent_barrier, _arrays("f32"), "a barrier under a per-unit condition"),
        (break_out_of_barrier_loop, (*_arrays("f32"), cp.ScalarCompilationArg("u32")), "a break out of a barrier loop"),
        (leave_when_mine, _arrays("f32", "f32"), "a while loop each unit leaves on its own"),
    ],
)
def test_kernels_that_do_not_qualify_run_as_coroutines(kernel, args, why):
    definition = _definition(kernel, cp.CubeDim(32), *args)
    assert plan_fission(definition) is None, why
    assert "llvm.coro" in compile_host(definition).llvm


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_tree_reduction_unrolled_at_expansion_qualifies_and_sums(runtime):
    definition = _definition(block_sum, cp.CubeDim(32), *_arrays("f32", "f32"), 32)
    assert plan_fission(definition) is not None  # ``block`` is comptime: the while loop is unrolled
    client = cp.client(runtime)
    data = np.arange(100, dtype=np.float32)
    hd, hp = client.create(data), client.zeros(4, np.float32)
    block_sum.launch(client, cp.CubeCount(4), cp.CubeDim(32), cp.ArrayArg(hd), cp.ArrayArg(hp), 32)
    np.testing.assert_array_equal(client.read(hp), [data[i * 32 : (i + 1) * 32].sum() for i in range(4)])


def test_whole_plane_reductions_and_moves_split_and_divergent_moves_keep_the_coroutine_driver():
    plan = plan_fission(_definition(plane_sum_kernel, cp.CubeDim(64), *_arrays("f32", "f32")))
    assert plan is not None and plan.split == frozenset()
    assert compile_host(_definition(rotate_in_plane, cp.CubeDim(64), *_arrays("f32"))).shape == "unit loops"
    divergent = _definition(rotate_some, cp.CubeDim(64), *_arrays("f32"))
    assert plan_fission(divergent) is None and "llvm.coro" in compile_host(divergent).llvm


@cube(launch=True)
def rotate_some(out: Array[f32]):
    if UNIT_POS < 40:
        out[UNIT_POS] = cp.plane_shuffle(f32(UNIT_POS), (cp.UNIT_POS_PLANE + 1) % 32)


@cube(launch=True)
def every_move_and_vote(x: Array[f32], n: Array[i32], wide: Array[cp.f64], out: Array[f32], bits: Array[u32]):
    """Each plane move (offsets in and out of the plane) and vote, between barriers, on three value types."""
    value = x[UNIT_POS]
    count = n[UNIT_POS]
    big = wide[UNIT_POS]
    cp.sync_cube()
    lane = cp.UNIT_POS_PLANE
    out[UNIT_POS * 8] = cp.plane_shuffle(value, (lane * 7 + 3) % 37)  # 32..36 wrap to 0..4
    out[UNIT_POS * 8 + 1] = cp.plane_shuffle_xor(value, lane % 3 + 31)  # 31, 32, 33: outside reads its own
    out[UNIT_POS * 8 + 2] = cp.plane_shuffle_up(value, lane % 5)
    out[UNIT_POS * 8 + 3] = cp.plane_shuffle_down(value, u32(9))
    out[UNIT_POS * 8 + 4] = cp.plane_broadcast(value, u32(6))
    out[UNIT_POS * 8 + 5] = f32(cp.plane_shuffle_down(count, u32(1)))
    out[UNIT_POS * 8 + 6] = f32(cp.plane_shuffle_xor(big, u32(5)))
    out[UNIT_POS * 8 + 7] = value
    cp.sync_cube()
    bits[UNIT_POS * 4] = cp.plane_ballot(value > 0.0)[0]
    bits[UNIT_POS * 4 + 1] = u32(cp.plane_all(count > -100))
    bits[UNIT_POS * 4 + 2] = u32(cp.plane_any(count > 5))
    bits[UNIT_POS * 4 + 3] = u32(cp.plane_all(value > 0.0))


def test_plane_moves_and_votes_between_stretches_give_the_interps_bits():
    args = (*_arrays("f32", "i32", "f64", "f32", "u32"),)
    assert compile_host(_definition(every_move_and_vote, cp.CubeDim(64), *args)).shape == "unit loops"
    rng = np.random.default_rng(12)
    x = rng.standard_normal(64).astype(np.float32)
    n = rng.integers(-9, 9, 64).astype(np.int32)
    wide = rng.standard_normal(64)
    results = {}
    for runtime in RUNTIMES:
        client = cp.client(runtime)
        hx, hn, hw = client.create(x), client.create(n), client.create(wide)
        ho, hb = client.zeros(64 * 8, np.float32), client.zeros(64 * 4, np.uint32)
        every_move_and_vote.launch(
            client,
            cp.CubeCount(1),
            cp.CubeDim(64),
            *(cp.ArrayArg(h) for h in (hx, hn, hw, ho, hb)),
        )
        results[runtime] = (client.read(ho).reshape(64, 8), client.read(hb).reshape(64, 4))
    np.testing.assert_array_equal(results["cpu"][0], results["interp"][0])
    np.testing.assert_array_equal(results["cpu"][1], results["interp"][1])
    moved, voted = results["cpu"]
    lanes, planes = np.arange(64) % 32, np.arange(64) // 32 * 32
    np.testing.assert_array_equal(moved[:, 0], x[planes + (lanes * 7 + 3) % 37 % 32])  # by hand
    xor = lanes ^ (lanes % 3 + 31)
    np.testing.assert_array_equal(moved[:, 1], x[planes + np.where(xor < 32, xor, lanes)])
    up = lanes - lanes % 5
    np.testing.assert_array_equal(moved[:, 2], x[planes + up])
    np.testing.assert_array_equal(moved[:, 3], x[planes + np.where(lanes + 9 < 32, lanes + 9, lanes)])
    np.testing.assert_array_equal(moved[:, 4], x[planes + 6])
    np.testing.assert_array_equal(moved[:, 6], wide[planes + (lanes ^ 5)].astype(np.float32))
    ballots = [int(sum(1 << i for i in range(32) if x[p * 32 + i] > 0)) for p in range(2)]
    np.testing.assert_array_equal(voted[:, 0], np.repeat(ballots, 32))
    np.testing.assert_array_equal(
        voted[:, 2], np.repeat([int((n[p * 32 : p * 32 + 32] > 5).any()) for p in range(2)], 32)
    )


@cube(launch=True)
def line_moves_and_elect(x: Array[cp.Line[f32]], out: Array[cp.Line[f32]], elected: Array[u32]):
    """Moves of whole lines and an election, each reached by the whole plane, between barriers."""
    value = x[UNIT_POS]
    cp.sync_cube()
    lane = cp.UNIT_POS_PLANE
    out[UNIT_POS * 3] = cp.plane_shuffle(value, (lane + 5) % 32)
    out[UNIT_POS * 3 + 1] = cp.plane_shuffle_down(value, u32(3))
    out[UNIT_POS * 3 + 2] = cp.plane_broadcast(value, u32(7))
    if cp.plane_elect():
        elected[UNIT_POS] = u32(1)


def test_moves_of_lines_and_a_whole_plane_election_split_and_give_the_interps_bits():
    lines = (cp.BufferCompilationArg("f32", 4), cp.BufferCompilationArg("f32", 4), *_arrays("u32"))
    assert compile_host(_definition(line_moves_and_elect, cp.CubeDim(64), *lines)).shape == "unit loops"
    x = np.random.default_rng(4).standard_normal((64, 4)).astype(np.float32)
    results = {}
    for runtime in RUNTIMES:
        client = cp.client(runtime)
        hx, ho, he = client.create(x.reshape(-1)), client.zeros(64 * 3 * 4, np.float32), client.zeros(64, np.uint32)
        line_moves_and_elect.launch(
            client,
            cp.CubeCount(1),
            cp.CubeDim(64),
            cp.ArrayArg(hx, line_size=4),
            cp.ArrayArg(ho, line_size=4),
            cp.ArrayArg(he),
        )
        results[runtime] = (client.read(ho).reshape(64, 3, 4), client.read(he))
    np.testing.assert_array_equal(results["cpu"][0], results["interp"][0])
    np.testing.assert_array_equal(results["cpu"][1], results["interp"][1])
    moved, elected = results["cpu"]
    lanes, planes = np.arange(64) % 32, np.arange(64) // 32 * 32
    np.testing.assert_array_equal(moved[:, 0], x[planes + (lanes + 5) % 32])  # by hand: whole lines move
    np.testing.assert_array_equal(moved[:, 1], x[planes + np.where(lanes + 3 < 32, lanes + 3, lanes)])
    np.testing.assert_array_equal(moved[:, 2], x[planes + 7])
    np.testing.assert_array_equal(np.flatnonzero(elected), [0, 32])  # each plane's lowest lane


@cube(launch=True)
def every_reduction(x: Array[f32], out: Array[f32], half: Array[cp.f16], out_half: Array[cp.f16]):
    """Each whole-plane reduction and scan of f32 and f16 values, between barriers."""
    value = x[UNIT_POS]
    small = half[UNIT_POS]
    cp.sync_cube()
    results = (
        cp.plane_sum(value),
        cp.plane_prod(value),
        cp.plane_min(value),
        cp.plane_max(value),
        cp.plane_inclusive_sum(value),
        cp.plane_exclusive_sum(value),
        cp.plane_inclusive_prod(value),
        cp.plane_exclusive_prod(value),
    )
    for k in cp.unroll(range(8)):
        out[k * 64 + UNIT_POS] = results[k]
    out_half[UNIT_POS] = cp.plane_sum(small)
    out_half[64 + UNIT_POS] = cp.plane_inclusive_sum(small)


@cube(launch=True)
def rotate_in_plane(out: Array[f32]):
    out[UNIT_POS] = cp.plane_shuffle(f32(UNIT_POS), (cp.UNIT_POS_PLANE + 1) % 32)


def test_plane_reductions_between_stretches_give_the_interps_bits():
    assert plan_fission(_definition(every_reduction, cp.CubeDim(64), *_arrays("f32", "f32", "f16", "f16"))) is not None
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(64) * 3).astype(np.float32)
    half = rng.standard_normal(64).astype(np.float16)
    results = {}
    for runtime in RUNTIMES:
        client = cp.client(runtime)
        hx, ho, hh, hoh = (
            client.create(x),
            client.zeros(512, np.float32),
            client.create(half),
            client.zeros(128, np.float16),
        )
        args = (cp.ArrayArg(hx), cp.ArrayArg(ho), cp.ArrayArg(hh), cp.ArrayArg(hoh))
        every_reduction.launch(client, cp.CubeCount(1), cp.CubeDim(64), *args)
        results[runtime] = (client.read(ho), client.read(hoh))
    for interp, cpu in zip(results["interp"], results["cpu"]):
        np.testing.assert_array_equal(interp.view(np.uint8), cpu.view(np.uint8))
    out = results["cpu"][0].reshape(8, 2, 32)
    planes = x.reshape(2, 32)
    np.testing.assert_allclose(out[0], np.repeat(planes.sum(axis=1, keepdims=True), 32, axis=1), rtol=1e-5)
    np.testing.assert_array_equal(out[3], np.repeat(planes.max(axis=1, keepdims=True), 32, axis=1))
    np.testing.assert_allclose(out[4], np.cumsum(planes, axis=1), rtol=1e-4, atol=1e-5)
    assert (out[5][:, 0] == 0).all()


def test_the_matmul_units_run_as_vector_code():
    host = compile_host(_definition(matmul, cp.CubeDim(16, 16), MATRIX, MATRIX, MATRIX, 16))
    assert "llvm.coro" not in host.llvm
    assert re.search(r"<(8|16) x float>", host.llvm_opt), "the loop over units was not vectorized"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_tiled_matmul_matches_numpy(runtime):
    client = cp.client(runtime)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((48, 32)).astype(np.float32)
    b = rng.standard_normal((32, 40)).astype(np.float32)
    ha, hb, hc = client.create(a), client.create(b), client.zeros((48, 40), np.float32)
    matmul.launch(
        client, cp.CubeCount(3, 3), cp.CubeDim(16, 16), cp.TensorArg(ha), cp.TensorArg(hb), cp.TensorArg(hc), 16
    )
    np.testing.assert_allclose(client.read(hc), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_units_that_return_before_a_barrier_are_not_waited_for(runtime):
    client = cp.client(runtime)
    data = np.arange(64, dtype=np.float32)
    hd, ho = client.create(data), client.zeros(64, np.float32)
    rotate_survivors.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(hd), cp.ArrayArg(ho), 40)
    expected = np.zeros(64, np.float32)
    expected[:40] = 2 * data[(np.arange(40) + 1) % 40]
    np.testing.assert_array_equal(client.read(ho), expected)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_units_that_return_inside_a_loop_with_barriers(runtime):
    client = cp.client(runtime)
    ho = client.zeros(32, np.float32)
    leave_midway.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(ho), 5)
    expected = []
    for unit in range(32):  # round r adds tile[r + 1] = r + (r + 1); unit u leaves at round u, or runs all 5
        total = sum(2.0 * r + 1 for r in range(min(unit, 5)))
        expected.append(total if unit < 5 else total + 1000.0)
    np.testing.assert_array_equal(client.read(ho), np.array(expected, np.float32))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_mutable_local_carried_from_one_iteration_to_the_next(runtime):
    client = cp.client(runtime)
    ho = client.zeros(16, np.float32)
    carried.launch(client, cp.CubeCount(1), cp.CubeDim(16), cp.ArrayArg(ho), 4)
    previous = np.zeros(16, np.float32)
    for r in range(4):
        tile = previous + np.arange(16, dtype=np.float32)
        previous = tile[(np.arange(16) + r) % 16]
    np.testing.assert_array_equal(client.read(ho), previous)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("flag_count", [8, 4])
def test_local_arrays_bools_and_lines_across_barriers(runtime, flag_count):
    client = cp.client(runtime)
    ho, hf = client.zeros(8, np.float32), client.zeros(flag_count, np.uint32)
    pairs = client.create(np.arange(16, dtype=np.float32) * 10)
    args = (cp.ArrayArg(ho), cp.ArrayArg(hf), cp.ArrayArg(pairs, line_size=2))
    local_then_shared.launch(client, cp.CubeCount(1), cp.CubeDim(8), *args)
    units = np.arange(8)
    tile = (units * 3 + 2).astype(np.float32)
    tile = tile[(units + 1) % 8] + units * 3 if flag_count > 4 else tile - 1
    value = tile[(units + 7) % 8] + (2 * units + 1) * 10  # lane 1 of line u
    value = np.where(units % 2 == 1, -value, value)
    np.testing.assert_array_equal(client.read(ho), value.astype(np.float32))
    np.testing.assert_array_equal(client.read(hf), (units[:flag_count] % 2).astype(np.uint32))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_unit_positions_of_a_3d_cube(runtime):
    client = cp.client(runtime)
    ho = client.zeros(60, np.uint32)
    positions_3d.launch(client, cp.CubeCount(1), cp.CubeDim(5, 4, 3), cp.ArrayArg(ho))
    z, y, x = np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij")
    tile = (x * 100 + y * 10 + z).ravel()
    np.testing.assert_array_equal(client.read(ho), (tile[59 - np.arange(60)] * 1000 + np.arange(60)).astype(np.uint32))


def test_a_checked_miss_names_the_unit_that_made_it():
    client = cp.client("cpu", sanitize=True)
    hx, ho = client.create(np.arange(16, dtype=np.float32)), client.zeros(16, np.float32)
    with pytest.raises(SanitizerError, match=r"at index 16 .*unit \(13, 0, 0\)"):
        shift_read.launch(client, cp.CubeCount(1), cp.CubeDim(16), cp.ArrayArg(hx), cp.ArrayArg(ho), 16)
    np.testing.assert_array_equal(client.read(ho), np.zeros(16, np.float32))


@pytest.mark.parametrize(
    ("kernel", "args"),
    [
        (shift_read, (*_arrays("f32", "f32"), 16)),
        (divergent_barrier, _arrays("f32")),
        (break_out_of_barrier_loop, (*_arrays("f32"), cp.ScalarCompilationArg("u32"))),
        (halving_sum, (*_arrays("f32"), cp.ScalarCompilationArg("u32"))),
        (rotate_in_plane, _arrays("f32")),
    ],
)
def test_kernels_only_compiled_for_the_host_here_also_assemble_for_the_gpu(kernel, args):
    from cubepy.compiler import ptxas

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas is not installed: the PTX is not assembled")
    assert kernel.compile(cp.CubeDim(32), *args).cubin


@cube(launch=True)
def rotate_until(data: Array[f32], out: Array[f32], rounds: u32, skip: u32):
    """``while True`` left by a ``break`` every unit takes alike, a ``continue`` too, a barrier in between."""
    tile = SharedMemory[f32](32)
    value = data[UNIT_POS]
    done = u32(0)
    while True:
        done += 1
        if done == skip:
            continue
        tile[UNIT_POS] = value
        cp.sync_cube()
        value = tile[(UNIT_POS + 1) % 32] + value
        cp.sync_cube()
        if done >= rounds:
            break
    out[UNIT_POS] = value


def test_while_loops_whose_exits_every_unit_takes_alike_split():
    u = cp.ScalarCompilationArg("u32")
    assert plan_fission(_definition(halving_sum, cp.CubeDim(32), *_arrays("f32"), u)) is not None
    rotating = _definition(rotate_until, cp.CubeDim(32), *_arrays("f32", "f32"), u, u)
    assert plan_fission(rotating) is not None
    assert compile_host(rotating).shape == "unit loops"


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("width", [32, 20, 1])
def test_a_while_loop_tree_reduction_matches_numpy(runtime, width):
    client = cp.client(runtime)
    ho = client.zeros(32, np.float32)
    halving_sum.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(ho), width)
    tile = np.arange(32, dtype=np.float32)
    stride = width // 2
    while stride > 0:  # the same additions in the same order, by hand
        tile[:stride] += tile[stride : 2 * stride]
        stride //= 2
    np.testing.assert_array_equal(client.read(ho), np.full(32, tile[0], np.float32))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(("rounds", "skip"), [(4, 0), (5, 2), (1, 1)])
def test_break_and_continue_of_a_split_while_loop(runtime, rounds, skip):
    client = cp.client(runtime)
    data = np.arange(32, dtype=np.float32)
    hd, ho = client.create(data), client.zeros(32, np.float32)
    rotate_until.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(hd), cp.ArrayArg(ho), rounds, skip)
    value, done = data.copy(), 0
    while True:
        done += 1
        if done == skip:
            continue
        value = np.roll(value, -1) + value
        if done >= rounds:
            break
    np.testing.assert_array_equal(client.read(ho), value)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_break_each_unit_takes_on_its_own_still_runs(runtime):
    client = cp.client(runtime)
    hd, ho = client.create(np.zeros(32, np.float32)), client.zeros(32, np.float32)
    leave_when_mine.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(hd), cp.ArrayArg(ho))
    np.testing.assert_array_equal(client.read(ho), (np.arange(32) % 4 + 1).astype(np.float32))
