"""Arrays of mbarriers (``cp.Barrier.shared_array``) indexed by a run-time stage, on the interp and cpu runtimes.

The kernel is a TMA ring: one unit loads tile ``t`` of its cube's rows into stage ``t % stages`` and completes it
on ``full[t % stages]``; a plane of consumers waits for that stage, adds its rows column by column and frees it on
``empty[t % stages]``.  The stage is a run-time value, so every barrier operation names its element by an index.
The expected sums are a float32 loop in the kernel's order, written here by hand.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, PLANE_POS, UNIT_POS, Array, Comptime, TensorMap, f32, i32, u32
from cubepy.errors import SanitizerError, SanitizerKind

ROWS, COLS = 8, 32


@cp.cube(launch=True)
def ring_sum(src: TensorMap[f32], out: Array[f32], tiles: u32, stages: Comptime[int], skew: u32):
    """out[cube, c] = sum of column c of the cube's ``tiles`` tiles of ROWS rows, through a ring of stages.

    ``skew`` shifts the stage the consumers wait for (0 in a correct kernel; 1 makes them wait on the next one)."""
    full = cp.Barrier.shared_array(stages, 1, UNIT_POS == 0)
    empty = cp.Barrier.shared_array(stages, 32, UNIT_POS == 0)
    ring = cp.SharedMemory.aligned(f32, stages * ROWS * COLS, 128)
    if PLANE_POS == 0:
        if UNIT_POS == 0:
            for t in range(tiles):
                s = t % stages
                empty[s].wait_parity(((t // stages) % 2) ^ 1)  # a fresh barrier passes parity 1 at once
                full[s].arrive_and_expect_tx(1, ROWS * COLS * 4)
                stage = ring.slice(s * ROWS * COLS, (s + 1) * ROWS * COLS)
                full[s].tma_load_2d(src, stage, i32((CUBE_POS * tiles + t) * ROWS), i32(0))
    else:
        unit = UNIT_POS % 32
        total = f32(0.0)
        for t in range(tiles):
            s = t % stages
            full[(s + skew) % stages].wait_parity((t // stages) % 2)
            for r in range(ROWS):
                total += ring[s * ROWS * COLS + r * COLS + unit]
            empty[s].arrive()
        out[CUBE_POS * COLS + unit] = total


def _run(client, cubes: int = 3, tiles: int = 7, stages: int = 3, skew: int = 0):
    rng = np.random.default_rng(1)
    src = rng.standard_normal((cubes * tiles * ROWS, COLS)).astype(np.float32)
    out = client.zeros((cubes * COLS,), np.float32)
    source = cp.TensorMapArg.tiled(cp.TensorArg(client.create(src)), (ROWS, COLS))
    ring_sum.launch(
        client,
        cp.CubeCount(cubes),
        cp.CubeDim(64),
        source,
        cp.ArrayArg(out),
        cp.ScalarArg(tiles, u32),
        stages,
        cp.ScalarArg(skew, u32),
    )
    want = np.zeros((cubes, COLS), np.float32)
    for cube in range(cubes):
        for row in range(tiles * ROWS):
            want[cube] += src[cube * tiles * ROWS + row]
    return client.read(out), want.ravel()


@pytest.mark.parametrize(
    "runtime, options",
    [
        ("interp", {}),
        ("interp", {"schedule": "random", "seed": 3, "sanitize": True}),
        ("interp", {"schedule": "adversarial", "sanitize": True}),
        ("cpu", {}),
    ],
)
@pytest.mark.parametrize("tiles, stages", [(7, 3), (2, 4), (8, 2)])
def test_a_ring_indexed_by_a_runtime_stage_sums_every_tile(runtime, options, tiles, stages):
    got, want = _run(cp.client(runtime, **options), tiles=tiles, stages=stages)
    np.testing.assert_array_equal(got, want)


def test_waiting_on_the_wrong_element_deadlocks_naming_it():
    # the consumers wait on stage 1 for tile 0: phase 0 of full[1] never completes while empty[0] is not freed
    with pytest.raises(SanitizerError) as info:
        _run(cp.client("interp"), tiles=1, stages=2, skew=1)
    assert info.value.kind is SanitizerKind.BARRIER_DEADLOCK
    assert "barrier[0][1]" in str(info.value) and "test_barrier_arrays.py" in str(info.value)


def test_reading_a_stage_after_waiting_on_another_element_is_an_uncovered_access():
    # tile 0 lands in stage 0 on full[0]; the consumers wait on full[1] (tile 1) and read stage 0 unordered
    with pytest.raises(SanitizerError) as info:
        _run(cp.client("interp", sanitize=True, schedule="adversarial"), tiles=2, stages=2, skew=1)
    assert info.value.kind is SanitizerKind.TMA_UNCOVERED_ACCESS
    assert "test_barrier_arrays.py" in str(info.value)


@cp.cube(launch=True)
def outside(out: Array[u32], element: u32):
    """Arrive on element ``element`` of an array of 2 barriers."""
    bars = cp.Barrier.shared_array(2, 1, UNIT_POS == 0)
    if UNIT_POS == 0:
        bars[element].arrive()
        out[0] = u32(1)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_an_index_outside_the_array_is_reported_with_its_line(runtime):
    client = cp.client(runtime)
    out = client.zeros((1,), np.uint32)
    with pytest.raises(SanitizerError) as info:
        outside.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), cp.ScalarArg(2, u32))
    text = str(info.value)
    assert info.value.kind is SanitizerKind.OUT_OF_BOUNDS
    assert "barrier index 2 is outside barrier[0], an array of 2 barriers" in text
    assert "test_barrier_arrays.py" in text
    outside.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), cp.ScalarArg(1, u32))
    assert client.read(out)[0] == 1


def test_a_constant_index_outside_the_array_fails_at_trace_time():
    @cp.cube(launch=True)
    def constant_outside():
        bars = cp.Barrier.shared_array(2, 1, UNIT_POS == 0)
        bars[2].arrive()

    with pytest.raises(cp.ExpandError, match="barrier index 2 is outside an array of 2 barriers"):
        constant_outside.compile(cp.CubeDim(32))


@pytest.mark.parametrize("count", [0, 1.5, 2000])
def test_the_array_size_is_a_python_int_in_range(count):
    @cp.cube(launch=True)
    def sized():
        cp.Barrier.shared_array(count, 1, UNIT_POS == 0)

    with pytest.raises(cp.ExpandError, match="count must be an int in"):
        sized.compile(cp.CubeDim(32))


@pytest.mark.ptxas
def test_the_ring_assembles_with_each_element_initialised_and_named_by_address():
    client = cp.client("interp")
    source = cp.TensorMapArg.tiled(cp.TensorArg(client.zeros((56, COLS), np.float32)), (ROWS, COLS))
    args = (cp.ArrayArg(client.zeros((96,), np.float32)), cp.ScalarArg(7, u32), 3, cp.ScalarArg(0, u32))
    compiled = ring_sum.compile(cp.CubeDim(64), source, *args, target="sm_90a")
    ptx = compiled.ptx
    assert ".shared .align 8 .b8 barrier0[24];" in ptx and ".shared .align 8 .b8 barrier1[24];" in ptx
    for element in ("[barrier0]", "[barrier0+8]", "[barrier0+16]", "[barrier1+16]"):
        assert f"mbarrier.init.shared.b64 \t{element}" in ptx, element
    assert ptx.count("bar.sync") == 2  # one synchronisation per array, not one per element
    # the run-time stage names the barrier by a register address, not a switch over the stages
    waits = re.findall(r"mbarrier\.try_wait\.parity\.shared\.b64 %p\d+, \[([^\]]+)\]", ptx)
    assert len(waits) == 2 and all(re.fullmatch(r"%r\d+", address) for address in waits), waits
    assert compiled.cubin
