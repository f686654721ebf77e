"""The native hand-off (``cubepy.runtime.cpu.pool``) and the plain driver's loops over z, y, x.

Every cube of a spread launch runs exactly once (counted by atomics, whatever thread claimed it); launches from
several threads at once share the pool; a forked child starts its own workers; a 2-D plain kernel is vector code
and gives the interp's bits; a 3-D cube's units see their own positions.
"""

from __future__ import annotations

import os
import re
import threading

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, CUBE_POS, UNIT_POS, Array, Atomic, Tensor, cube, f32, u32
from cubepy.runtime.cpu import pool, workers

needs_pool = pytest.mark.skipif(not pool.available(), reason="the native pool needs Linux on x86-64 or aarch64")


def _spreading_client():
    """A cpu client whose launches always spread (no timing trials), over every usable CPU."""
    if len(workers.usable_cpus()) < 2:
        pytest.skip("one usable CPU: every launch runs on the calling thread")
    client = cp.client("cpu")
    client.backend.threads = len(workers.usable_cpus())
    client.backend._spread.spread = lambda owner, cubes: (True, False)
    return client


@cube(launch=True)
def count_cubes(counts: Array[Atomic[u32]], units: Array[Atomic[u32]]):
    if UNIT_POS == 0:
        counts[CUBE_POS].fetch_add(u32(1))
    units[0].fetch_add(u32(1))


@needs_pool
def test_every_cube_of_a_spread_launch_runs_once():
    client = _spreading_client()
    assert client.backend._pool is not None
    cubes = 5003  # not a multiple of any chunk size
    counts, units = client.zeros(cubes, np.uint32), client.zeros(1, np.uint32)
    for _ in range(3):  # the workers stay between launches: each launch claims from a fresh counter
        count_cubes.launch(client, cp.CubeCount(cubes), cp.CubeDim(4), cp.ArrayArg(counts), cp.ArrayArg(units))
    np.testing.assert_array_equal(client.read(counts), np.full(cubes, 3, np.uint32))
    assert int(client.read(units)[0]) == 3 * cubes * 4


@cube(launch=True)
def scale(a: Array[f32], out: Array[f32], factor: f32):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = a[ABSOLUTE_POS] * factor


@needs_pool
def test_launches_from_several_threads_at_once_are_all_right():
    """One launch at a time holds the pool; the others run their cubes on their own thread meanwhile."""
    client = _spreading_client()
    n = 1 << 16
    a = np.arange(n, dtype=np.float32)
    ha = client.create(a)
    errors: list[BaseException] = []

    def launches(factor: float) -> None:
        try:
            out = client.empty(n, np.float32)
            for _ in range(20):
                scale.launch(client, cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(ha), cp.ArrayArg(out), factor)
                np.testing.assert_array_equal(client.read(out), a * np.float32(factor))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=launches, args=(float(k + 1),)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]


def test_threads_that_load_one_kernel_at_once_share_its_code():
    """The first launches of a kernel from several threads load its object code once: a second engine would
    replace the first and free its code under the launch running it (a crash, or a launch that wrote nothing)."""
    from cubepy.runtime.cpu import loader

    @cube(launch=True)
    def triple(a: Array[f32], out: Array[f32]):
        if ABSOLUTE_POS < out.len():
            out[ABSOLUTE_POS] = a[ABSOLUTE_POS] * 3.0

    client = cp.client("cpu")
    triple.launch(
        client, cp.CubeCount(1), cp.CubeDim(32), *(cp.ArrayArg(client.zeros((32,), np.float32)) for _ in "ab")
    )
    (artifact,) = [a for a in client._cache.values() if a.name == "triple"]
    loader._loaded.pop(id(artifact), None)  # as if nothing had loaded it yet
    start = threading.Barrier(4)
    addresses: list[int] = []

    def load() -> None:
        start.wait()
        addresses.append(loader.entry_address(artifact))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(addresses) == 4 and len(set(addresses)) == 1


@needs_pool
@pytest.mark.skipif(not hasattr(os, "fork"), reason="this OS has no fork")
def test_a_forked_child_starts_its_own_pool():
    import signal

    client = _spreading_client()
    n = 1 << 14
    ha, out = client.create(np.ones(n, np.float32)), client.empty(n, np.float32)
    args = (cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(ha), cp.ArrayArg(out), 2.0)
    scale.launch(client, *args)  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # the child: exit 0 when the launch is right, 1 otherwise; SIGALRM ends a hang
        signal.alarm(20)
        try:
            scale.launch(client, *args[:-1], 3.0)
            os._exit(0 if (client.read(out) == 3.0).all() else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


@cube(launch=True)
def stencil5(grid: Tensor[f32], out: Tensor[f32]):
    i = cp.ABSOLUTE_POS_Y
    j = cp.ABSOLUTE_POS_X
    rows = grid.shape(0)
    cols = grid.shape(1)
    if i < rows and j < cols:
        if i > 0 and j > 0 and i + 1 < rows and j + 1 < cols:
            out[i, j] = grid[i - 1, j] + grid[i + 1, j] + grid[i, j - 1] + grid[i, j + 1] - f32(4.0) * grid[i, j]
        else:
            out[i, j] = grid[i, j]


def test_a_2d_plain_cube_runs_its_rows_as_vector_code_with_the_interps_bits():
    from cubepy.compiler.emit_host import compile_host

    cpu, interp = cp.client("cpu"), cp.client("interp")
    rows, cols = 45, 70  # cubes hanging over both edges
    g = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    results = []
    for client in (cpu, interp):
        hg, ho = client.create(g), client.zeros((rows, cols), np.float32)
        args = (cp.TensorArg(hg), cp.TensorArg(ho))
        stencil5.launch(client, cp.CubeCount(3, 6), cp.CubeDim(32, 8), *args)
        results.append(client.read(ho))
    host = compile_host(stencil5.compile(cp.CubeDim(32, 8), *args).definition)
    assert host.shape == "plain"
    assert re.search(r"<\d+ x float>", host.llvm_opt), "the row loop over tid.x was not vectorized"
    np.testing.assert_array_equal(results[0].view(np.uint32), results[1].view(np.uint32))
    expected = g.copy()  # numpy's Laplacian of the interior, the border kept
    expected[1:-1, 1:-1] = g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:] - np.float32(4) * g[1:-1, 1:-1]
    np.testing.assert_array_equal(results[0], expected)


@cube(launch=True)
def positions(out: Array[u32]):
    base = (CUBE_POS * 30 + UNIT_POS) * 4  # a 5x3x2 cube: 30 units
    out[base] = cp.UNIT_POS_X
    out[base + 1] = cp.UNIT_POS_Y
    out[base + 2] = cp.UNIT_POS_Z
    out[base + 3] = UNIT_POS


def test_the_units_of_a_3d_cube_see_their_own_positions():
    cpu = cp.client("cpu")
    dims, cubes = (5, 3, 2), 7
    out = cpu.zeros(cubes * 30 * 4, np.uint32)
    positions.launch(cpu, cp.CubeCount(cubes), cp.CubeDim(*dims), cp.ArrayArg(out))
    got = cpu.read(out).reshape(cubes, 30, 4)
    z, y, x = np.meshgrid(np.arange(2), np.arange(3), np.arange(5), indexing="ij")  # unit = x + 5y + 15z
    expected = np.stack([x.ravel(), y.ravel(), z.ravel(), np.arange(30)], axis=1)
    for index in range(cubes):
        np.testing.assert_array_equal(got[index], expected)


@cube(launch=True)
def cube_positions(out: Array[u32]):
    if UNIT_POS == 0:
        out[CUBE_POS * 3] = cp.CUBE_POS_X
        out[CUBE_POS * 3 + 1] = cp.CUBE_POS_Y
        out[CUBE_POS * 3 + 2] = cp.CUBE_POS_Z


@pytest.mark.parametrize("spread", [False, True])
def test_a_3d_cube_count_split_into_chunks_gives_every_cube_its_position(spread):
    """The driver steps x, y, z from its first cube on (no division per cube): chunks start mid-row and mid-plane."""
    client = _spreading_client() if spread else cp.client("cpu")
    counts = (7, 5, 13)  # 455 cubes: chunks of 28 (two threads) or 56 cubes start anywhere in a row
    out = client.zeros(455 * 3, np.uint32)
    cube_positions.launch(client, cp.CubeCount(*counts), cp.CubeDim(64), cp.ArrayArg(out))
    z, y, x = np.meshgrid(np.arange(13), np.arange(5), np.arange(7), indexing="ij")  # CUBE_POS = x + 7y + 35z
    np.testing.assert_array_equal(client.read(out).reshape(455, 3), np.stack([x.ravel(), y.ravel(), z.ravel()], 1))
