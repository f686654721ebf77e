"""Plane collectives between two stretches of the host's loop fission run on a 32-lane vector (a
``shufflevector`` per shuffle step): the bits must be the interp's for every kind, element type and literal
source or offset, including offsets past the plane, where a lane reads its own value."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, UNIT_POS_PLANE, Array, cube, f32, i32, u32
from cubepy.compiler.emit_host import compile_host
from tests.compiler.fission import _definition

LITERAL_MOVES = 12


@cube(launch=True)
def literal_moves(data: Array[f32], ints: Array[i32], out: Array[f32], out_int: Array[i32]):
    """Moves with literal sources and offsets, in range and past the plane (33, 40, 64)."""
    value = data[UNIT_POS]
    count = ints[UNIT_POS]
    base = UNIT_POS * LITERAL_MOVES
    out[base] = cp.plane_shuffle_xor(value, u32(17))
    out[base + 1] = cp.plane_shuffle_xor(value, u32(33))  # past the plane: its own value
    out[base + 2] = cp.plane_shuffle_up(value, u32(7))
    out[base + 3] = cp.plane_shuffle_up(value, u32(40))
    out[base + 4] = cp.plane_shuffle_down(value, u32(31))
    out[base + 5] = cp.plane_shuffle_down(value, u32(64))
    out[base + 6] = cp.plane_broadcast(value, u32(35))  # a source lane is taken modulo 32
    out[base + 7] = cp.plane_shuffle(value, u32(0))
    out_int[base] = cp.plane_shuffle_xor(count, u32(1))
    out_int[base + 1] = cp.plane_shuffle_down(count, u32(2))
    out_int[base + 2] = cp.plane_min(count)
    out_int[base + 3] = cp.plane_max(count)
    out_int[base + 4] = cp.plane_sum(count)
    out_int[base + 5] = cp.plane_inclusive_sum(count)
    out_int[base + 6] = cp.plane_exclusive_sum(count)
    out_int[base + 7] = i32(cp.plane_all(count > -50))
    out[base + 8] = cp.plane_max(value)
    out[base + 9] = cp.plane_min(value)
    out[base + 10] = cp.plane_exclusive_prod(value)
    out[base + 11] = cp.plane_inclusive_sum(value)


def _run(runtime: str, data: np.ndarray, ints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    client = cp.client(runtime)
    out = client.zeros(64 * LITERAL_MOVES, np.float32)
    out_int = client.zeros(64 * LITERAL_MOVES, np.int32)
    args = [cp.ArrayArg(client.create(data)), cp.ArrayArg(client.create(ints)), cp.ArrayArg(out)]
    literal_moves.launch(client, cp.CubeCount(1), cp.CubeDim(64), *args, cp.ArrayArg(out_int))
    return client.read(out).reshape(64, -1), client.read(out_int).reshape(64, -1)


def test_literal_moves_and_reductions_give_the_interps_bits_and_the_hand_values():
    rng = np.random.default_rng(11)
    data = rng.standard_normal(64).astype(np.float32)
    data[5] = np.nan
    data[40] = -0.0
    ints = rng.integers(-100, 100, 64).astype(np.int32)
    interp, interp_int = _run("interp", data, ints)
    cpu, cpu_int = _run("cpu", data, ints)
    np.testing.assert_array_equal(cpu.view(np.uint32), interp.view(np.uint32))
    np.testing.assert_array_equal(cpu_int, interp_int)
    # by hand: the moves' source lanes, plane by plane
    lane = np.arange(64) % 32
    plane = np.arange(64) - lane

    def moved(source: np.ndarray) -> np.ndarray:
        return data[plane + source]

    np.testing.assert_array_equal(interp[:, 0], moved(lane ^ 17))
    np.testing.assert_array_equal(interp[:, 1], data)
    np.testing.assert_array_equal(interp[:, 2], moved(np.where(lane >= 7, lane - 7, lane)))
    np.testing.assert_array_equal(interp[:, 3], data)
    np.testing.assert_array_equal(interp[:, 4], moved(np.where(lane + 31 < 32, lane + 31, lane)))
    np.testing.assert_array_equal(interp[:, 5], data)
    np.testing.assert_array_equal(interp[:, 6], moved(np.full(64, 3)))
    np.testing.assert_array_equal(interp[:, 7], moved(np.zeros(64, int)))
    planes = ints.reshape(2, 32)
    np.testing.assert_array_equal(interp_int[:, 2], np.repeat(planes.min(axis=1), 32))
    np.testing.assert_array_equal(interp_int[:, 3], np.repeat(planes.max(axis=1), 32))
    np.testing.assert_array_equal(interp_int[:, 4], np.repeat(planes.sum(axis=1), 32))
    np.testing.assert_array_equal(interp_int[:, 5], np.cumsum(planes, axis=1).ravel())
    exclusive = np.cumsum(planes, axis=1) - planes
    np.testing.assert_array_equal(interp_int[:, 6], exclusive.ravel())
    np.testing.assert_array_equal(interp_int[:, 7], np.repeat((planes > -50).all(axis=1), 32).astype(np.int32))


@pytest.mark.parametrize("kernel", [literal_moves])
def test_the_planes_are_vector_code_not_gathers_across_planes(kernel):
    args = (
        cp.BufferCompilationArg("f32", 1),
        cp.BufferCompilationArg("i32", 1),
        cp.BufferCompilationArg("f32", 1),
        cp.BufferCompilationArg("i32", 1),
    )
    host = compile_host(_definition(kernel, cp.CubeDim(64), *args))
    assert host.shape == "unit loops"
    assert "shufflevector <32 x float>" in host.llvm_opt or "shufflevector <16 x float>" in host.llvm_opt
    # across planes, a lane's values sit 32 units apart: a loop vectorized that way gathers them
    assert "masked.gather" not in host.llvm_opt


@cube(launch=True)
def lane_sums(out: Array[u32]):
    """A literal-offset move of the unit's own lane number, after a barrier."""
    cp.sync_cube()
    out[UNIT_POS] = cp.plane_shuffle_xor(UNIT_POS_PLANE, u32(3)) + cp.plane_sum(u32(1))


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_move_of_a_builtin_after_a_barrier(runtime):
    client = cp.client(runtime)
    out = client.zeros(96, np.uint32)
    lane_sums.launch(client, cp.CubeCount(1), cp.CubeDim(96), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), (np.arange(96) % 32 ^ 3) + 32)


@cube(launch=True)
def plane_chain(data: Array[f32], out: Array[f32]):
    """A value kept between stretches, moved and reduced by whole planes, the results kept again."""
    value = data[UNIT_POS]
    moved = cp.plane_shuffle_xor(value, u32(1))
    total = cp.plane_sum(moved)
    scanned = cp.plane_exclusive_sum(value)
    out[UNIT_POS] = total + scanned * f32(2.0)


def test_frame_kept_operands_and_results_move_as_whole_plane_rows():
    """A plane's 32 operands sit side by side in the unit frame: one vector load, the shuffles, one vector
    store, with no per-lane scalar moves in between (those were 64 scalar loads and stores per plane)."""
    host = compile_host(
        _definition(plane_chain, cp.CubeDim(64), cp.BufferCompilationArg("f32", 1), cp.BufferCompilationArg("f32", 1))
    )
    assert host.shape == "unit loops"
    assert host.llvm.count("load <32 x float>") == 3
    assert host.llvm.count("store <32 x float>") == 3
    rng = np.random.default_rng(3)
    data = rng.standard_normal(64).astype(np.float32)
    results = {}
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        out = client.zeros(64, np.float32)
        plane_chain.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(client.create(data)), cp.ArrayArg(out))
        results[runtime] = client.read(out)
    np.testing.assert_array_equal(results["cpu"].view(np.uint32), results["interp"].view(np.uint32))
    planes = data.reshape(2, 32).astype(np.float64)
    exclusive = np.cumsum(planes, axis=1) - planes
    expected = np.repeat(planes.sum(axis=1), 32) + 2 * exclusive.ravel()
    np.testing.assert_allclose(results["interp"], expected, rtol=1e-5, atol=1e-5)


@cube(launch=True)
def accumulated_then_reduced(data: Array[f32], out: Array[f32]):
    """A mutable local (kept in the frame) reduced by its plane: its row is read as one vector too."""
    acc = f32(0.0)
    for k in range(2):
        acc += data[UNIT_POS + k * 64]
    out[UNIT_POS] = cp.plane_sum(acc)


def test_a_mutable_local_is_read_as_a_whole_plane_row():
    args = (cp.BufferCompilationArg("f32", 1), cp.BufferCompilationArg("f32", 1))
    host = compile_host(_definition(accumulated_then_reduced, cp.CubeDim(64), *args))
    assert host.llvm.count("load <32 x float>") == 1
    data = np.random.default_rng(5).standard_normal(128).astype(np.float32)
    results = {}
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        out = client.zeros(64, np.float32)
        launch_args = (cp.ArrayArg(client.create(data)), cp.ArrayArg(out))
        accumulated_then_reduced.launch(client, cp.CubeCount(1), cp.CubeDim(64), *launch_args)
        results[runtime] = client.read(out)
    np.testing.assert_array_equal(results["cpu"].view(np.uint32), results["interp"].view(np.uint32))
    sums = (data[:64].astype(np.float64) + data[64:]).reshape(2, 32).sum(axis=1)
    np.testing.assert_allclose(results["interp"], np.repeat(sums, 32), rtol=1e-5, atol=1e-5)
