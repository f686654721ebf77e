"""The compiled cpu runtime against numpy: indexing, planes, barriers, atomics, divergence, errors."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, CUBE_POS, UNIT_POS, Array, cube, f32, i32, u32
from cubepy.errors import SanitizerError, SanitizerKind


@pytest.fixture
def cpu():
    return cp.client("cpu")


def test_runtimes_lists_cpu():
    assert "cpu" in cp.runtimes()


@cube(launch=True)
def vector_add(a: Array[f32], b: Array[f32], out: Array[f32]):
    i = ABSOLUTE_POS
    if i < out.len():
        out[i] = a[i] + b[i]


def test_vector_add_over_many_cubes_uses_threads_and_matches_numpy(cpu):
    n = 100_003
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ha, hb, ho = cpu.create(a), cpu.create(b), cpu.empty(n, f32)
    vector_add.launch(
        cpu, cp.CubeCount((n + 255) // 256), cp.CubeDim(256), cp.ArrayArg(ha), cp.ArrayArg(hb), cp.ArrayArg(ho)
    )
    np.testing.assert_array_equal(cpu.read(ho), a + b)


@cube(launch=True)
def plane_sums(x: Array[u32], out: Array[u32]):
    out[ABSOLUTE_POS] = cp.plane_sum(x[ABSOLUTE_POS])


def test_plane_sum_is_per_32_units(cpu):
    x = np.arange(128, dtype=np.uint32)
    hx, ho = cpu.create(x), cpu.zeros(128, u32)
    plane_sums.launch(cpu, cp.CubeCount(2), cp.CubeDim(64), cp.ArrayArg(hx), cp.ArrayArg(ho))
    expected = np.repeat(x.reshape(4, 32).sum(axis=1), 32)
    np.testing.assert_array_equal(cpu.read(ho), expected)


@cube(launch=True)
def divergent_plane_sum(x: Array[u32], out: Array[u32]):
    if UNIT_POS % 2 == 0:
        out[UNIT_POS] = cp.plane_sum(x[UNIT_POS])
    else:
        out[UNIT_POS] = cp.plane_max(x[UNIT_POS])


def test_plane_ops_in_divergent_branches_see_only_their_units(cpu):
    x = np.arange(32, dtype=np.uint32) * 3
    hx, ho = cpu.create(x), cpu.zeros(32, u32)
    divergent_plane_sum.launch(cpu, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(hx), cp.ArrayArg(ho))
    expected = np.where(np.arange(32) % 2 == 0, x[0::2].sum(), x[1::2].max())
    np.testing.assert_array_equal(cpu.read(ho), expected)


@cube(launch=True)
def reverse_in_shared(x: Array[f32], out: Array[f32]):
    tile = cp.SharedMemory[f32](256)
    tile[UNIT_POS] = x[CUBE_POS * 256 + UNIT_POS]
    cp.sync_cube()
    out[CUBE_POS * 256 + UNIT_POS] = tile[255 - UNIT_POS]


def test_sync_cube_orders_shared_memory_between_units(cpu):
    x = np.arange(1024, dtype=np.float32)
    hx, ho = cpu.create(x), cpu.zeros(1024, f32)
    reverse_in_shared.launch(cpu, cp.CubeCount(4), cp.CubeDim(256), cp.ArrayArg(hx), cp.ArrayArg(ho))
    np.testing.assert_array_equal(cpu.read(ho), x.reshape(4, 256)[:, ::-1].reshape(-1))


@cube(launch=True)
def count_odd(x: Array[u32], total: Array[cp.Atomic[u32]]):
    if x[ABSOLUTE_POS] % 2 == 1:
        total[0].fetch_add(u32(1))


def test_atomics_across_cubes_on_threads(cpu):
    x = np.arange(4096 * 8, dtype=np.uint32)
    hx, ht = cpu.create(x), cpu.zeros(1, u32)
    count_odd.launch(cpu, cp.CubeCount(256), cp.CubeDim(128), cp.ArrayArg(hx), cp.ArrayArg(ht))
    assert int(cpu.read(ht)[0]) == x.size // 2


@cube(launch=True)
def early_exit_loop(limits: Array[u32], out: Array[u32]):
    acc = u32(0)
    i = u32(0)
    while True:
        if i >= limits[UNIT_POS]:
            break
        acc += i
        i += 1
    if UNIT_POS == 3:
        return
    cp.sync_cube()
    out[UNIT_POS] = acc


def test_divergent_break_and_return(cpu):
    limits = np.array([0, 1, 5, 9, 2, 7, 3, 4], dtype=np.uint32)
    hl, ho = cpu.create(limits), cpu.zeros(8, u32)
    early_exit_loop.launch(cpu, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(hl), cp.ArrayArg(ho))
    expected = np.array([int(n) * (int(n) - 1) // 2 for n in limits], dtype=np.uint32)
    expected[3] = 0
    np.testing.assert_array_equal(cpu.read(ho), expected)


@cube(launch=True)
def read_past_end(x: Array[f32], out: Array[f32]):
    out[UNIT_POS] = x[UNIT_POS + 30]


def test_checked_out_of_bounds_reads_zero_and_writes_nothing(cpu):
    x = np.arange(32, dtype=np.float32)
    hx, ho = cpu.create(x), cpu.zeros(4, f32)
    read_past_end.launch(cpu, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(hx), cp.ArrayArg(ho))
    np.testing.assert_array_equal(cpu.read(ho), [30, 31, 0, 0])


@cube(launch=True)
def with_barrier_object(out: Array[f32]):
    barrier = cp.Barrier.shared(cp.CUBE_DIM, UNIT_POS == 0)
    barrier.wait(barrier.arrive())
    out[UNIT_POS] = f32(1)


def test_mbarrier_arrive_and_wait_run_on_the_host(cpu):
    ho = cpu.zeros(32, f32)
    with_barrier_object.launch(cpu, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(ho))
    np.testing.assert_array_equal(cpu.read(ho), np.ones(32, np.float32))


@cube(launch=True)
def write_past_end(out: Array[f32]):
    out[UNIT_POS + 2] = f32(UNIT_POS)


@cube(launch=True)
def shared_past_end(out: Array[f32]):
    tile = cp.SharedMemory[f32](4)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    out[UNIT_POS] = tile[UNIT_POS + 1]


def _report(client, kernel, *args) -> str:
    with pytest.raises(SanitizerError) as failure:
        kernel.launch(client, cp.CubeCount(1), cp.CubeDim(4), *args)
    assert failure.value.kind is SanitizerKind.OUT_OF_BOUNDS
    return str(failure.value)


def test_sanitize_reports_checked_misses_as_the_interp_does():
    """sanitize=True on cpu: a checked read or write that misses is the interp's out-of-bounds report, and
    the launch writes nothing."""
    reports = []
    for runtime in ("cpu", "interp"):
        # The interp's default schedule (a --cubepy-schedule run may set another, and its reports name it).
        client = cp.client(runtime, sanitize=True, schedule="lockstep" if runtime == "interp" else None)
        x, out = client.create(np.arange(4, dtype=np.float32)), client.zeros(4, f32)
        reports.append(_report(client, read_past_end, cp.ArrayArg(x), cp.ArrayArg(out)))
        np.testing.assert_array_equal(client.read(out), np.zeros(4, np.float32))
    assert reports[0] == reports[1]
    assert "out-of-bounds read of global buffer 0 (x) at index 30 (length 4) in checked mode" in reports[0]
    assert "by unit (0, 0, 0) of cube (0, 0, 0)" in reports[0] and "test_cpu_runtime.py:123" in reports[0]

    cpu = cp.client("cpu", sanitize=True)
    out = cpu.zeros(4, f32)
    text = _report(cpu, write_past_end, cp.ArrayArg(out))
    assert "out-of-bounds write of global buffer 0 (out) at index 4 (length 4)" in text and "unit (2, 0, 0)" in text
    text = _report(cpu, shared_past_end, cp.ArrayArg(cpu.zeros(4, f32)))
    assert "out-of-bounds read of shared memory" in text and "at index 4 (length 4)" in text
    interp = cp.client("interp", sanitize=True, schedule="lockstep")
    assert _report(interp, shared_past_end, cp.ArrayArg(interp.zeros(4, f32))) == text
    assert _report(interp, write_past_end, cp.ArrayArg(interp.zeros(4, f32))) == _report(
        cpu, write_past_end, cp.ArrayArg(cpu.zeros(4, f32))
    )


def test_without_sanitize_a_miss_reads_zero_and_the_object_code_has_no_report(cpu):
    out = cpu.zeros(4, f32)
    write_past_end.launch(cpu, cp.CubeCount(1), cp.CubeDim(4), cp.ArrayArg(out))
    np.testing.assert_array_equal(cpu.read(out), np.array([0, 0, 0, 1], np.float32))
    reporting = cp.client("cpu", sanitize=True)
    definition = write_past_end.compile(cp.CubeDim(4), cp.ArrayArg(out)).definition
    plain, reported = cpu.backend.prepare(definition), reporting.backend.prepare(definition)
    assert plain.host_calls == () and [call.kind for call in reported.host_calls] == ["oob_write"]
    assert cpu.backend.disk_cache_target != reporting.backend.disk_cache_target


def test_disk_cache_keeps_the_object_code(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import numpy as np, cubepy as cp\n"
        "from tests.runtime.cpu.test_cpu_runtime import vector_add\n"
        "c = cp.client('cpu'); a = c.create(np.ones(300, np.float32)); o = c.empty(300, cp.f32)\n"
        "vector_add.launch(c, cp.CubeCount(2), cp.CubeDim(256), cp.ArrayArg(a), cp.ArrayArg(a), cp.ArrayArg(o))\n"
        "assert (c.read(o) == 2).all()\n"
    )
    env = dict(os.environ, CUBEPY_CACHE_DIR=str(tmp_path), CUBEPY_DEBUG="1")
    root = Path(__file__).resolve().parents[3]
    runs = [
        subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert "compiled vector_add" in runs[0].stderr
    assert "loaded from disk vector_add" in runs[1].stderr
    assert list((tmp_path / "cpu").rglob("*.pkl"))


def test_debug_print_gives_the_interps_lines(capsys):
    @cube(launch=True)
    def show(a: Array[f32]):
        cp.debug_print("x=%f i=%d u=%u c=%c", a[ABSOLUTE_POS], i32(0) - i32(ABSOLUTE_POS), ABSOLUTE_POS, i32(65))
        if ABSOLUTE_POS % 2 == 0:
            print("even", ABSOLUTE_POS)

    lines = []
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        data = client.create(np.arange(6, dtype=np.float32) / 4)
        show.launch(client, cp.CubeCount(2), cp.CubeDim(3), cp.ArrayArg(data))
        lines.append(capsys.readouterr().out)
    assert lines[1] == lines[0]
    assert lines[1].splitlines()[:2] == [
        "[cube (0, 0, 0) unit (0, 0, 0)] x=0.000000 i=0 u=0 c=A",
        "[cube (0, 0, 0) unit (1, 0, 0)] x=0.250000 i=-1 u=1 c=A",
    ]
    assert lines[1].splitlines()[6:] == [
        "[cube (0, 0, 0) unit (0, 0, 0)] even 0",
        "[cube (0, 0, 0) unit (2, 0, 0)] even 2",
        "[cube (1, 0, 0) unit (1, 0, 0)] even 4",
    ]


def test_a_plain_unit_loop_is_vectorized_over_the_read_only_parameter_block(cpu):
    import re

    from cubepy.compiler.emit_host import compile_host

    n = 1000
    ha, hb, ho = cpu.create(np.ones(n, np.float32)), cpu.create(np.ones(n, np.float32)), cpu.empty(n, f32)
    args = (cp.ArrayArg(ha), cp.ArrayArg(hb), cp.ArrayArg(ho))
    host = compile_host(vector_add.compile(cp.CubeDim(256), *args).definition)
    driver = next(line for line in host.llvm.splitlines() if "cubepy_run_cubes" in line and line.startswith("define"))
    # three pointers and six u32 lengths: 48 bytes, packed 64-byte aligned by the runtime
    assert "noalias readonly align 64 dereferenceable(48)" in driver
    # a length read under the guard is hoisted, so the loop over units becomes vector code with masks
    assert re.search(r"<\d+ x float>", host.llvm_opt), "the unit loop was not vectorized"
    vector_add.launch(cpu, cp.CubeCount(4), cp.CubeDim(256), *args)
    np.testing.assert_array_equal(cpu.read(ho), np.full(n, 2, np.float32))
