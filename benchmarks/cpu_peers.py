"""``python -m benchmarks.cpu_peers [--rounds N] [--repeats N] [--threads N]``: the cpu runtime beside the CPU
runtimes a user would pick instead: Warp, Taichi, numba (``parallel=True``), JAX (``jit``) and numpy.

Five workloads, each written the way its runtime's own docs write it: vector add 2^20, row softmax 1024x1024,
tiled matmul 256^3 (a user kernel on every runtime; numpy's BLAS and XLA's dot are shown but are not "peers"
for it), sum of 2^20 values, 5-point stencil 1024x1024.  Every result is checked against numpy first; a runtime
whose result differs is reported and left out.  Rounds interleave the runtimes (round 1: every workload on every
runtime, then round 2, ...), so a noisy minute hits all alike; each figure is the median of ``--repeats`` calls
after three untimed ones.  The table gives cubepy-cpu's time over each peer's (below 1: cubepy faster) per
round, and the geometric mean over the workloads of cubepy / best peer.  Peers that are not installed
(``pip install -e '.[cpu-peers]'`` brings them all) are skipped with the reason.  ``--threads 1`` pins every runtime to one thread (where the peer has such a switch).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cubepy as cp  # noqa: E402
from cubepy import Array, Tensor, cube, f32  # noqa: E402
from cubepy_layouts.reduce import cube_sum  # noqa: E402
from examples.matmul_tiled import matmul  # noqa: E402
from examples.vector_add import vector_add  # noqa: E402

VECTOR_N = 1 << 20
ROWS = COLS = 1024
MATMUL_N, TILE = 256, 16
GRID = 1024
WARMUP = 3
WORKLOADS = ("vector add 2^20", "row softmax 1024^2", "tiled matmul 256^3", "sum 2^20", "5-point stencil 1024^2")
NOT_PEERS = {"tiled matmul 256^3": ("numpy", "jax")}  # a library GEMM is not a user kernel


SUM_PER_UNIT = 16  # each unit adds 16 values 256 apart, then the cube adds its 256 units' sums


@cube(launch=True)
def block_sums(data: Array[f32], partial: Array[f32], per_unit: cp.Comptime[int]):
    """One partial sum per cube of ``256 * per_unit`` consecutive values: unit ``u`` adds values ``u, u + 256,
    ...`` of its cube's block (the coalesced order a GPU kernel reads in), then ``cube_sum`` adds the units'."""
    base = cp.CUBE_POS * (cp.CUBE_DIM * per_unit) + cp.UNIT_POS
    acc = f32(0.0)
    for k in range(per_unit):
        if base + k * cp.CUBE_DIM < data.len():
            acc += data[base + k * cp.CUBE_DIM]
    total = cube_sum(acc)
    if cp.UNIT_POS == 0:
        partial[cp.CUBE_POS] = total


@cube(launch=True)
def row_softmax(x: Tensor[f32], out: Tensor[f32]):
    """out[r, :] = softmax(x[r, :]), one cube of 32 units per row, ``exp`` computed once per item: stored into
    ``out``, then divided by the row's sum (the algorithm of the peers' kernels below)."""
    row = cp.CUBE_POS
    cols = x.shape(1)
    local_max = f32(-3.0e38)
    for c in range(cp.UNIT_POS, cols, 32):
        local_max = cp.max(local_max, x[row, c])
    row_max = cp.plane_max(local_max)
    local_sum = f32(0.0)
    for c in range(cp.UNIT_POS, cols, 32):
        e = cp.exp(x[row, c] - row_max)
        out[row, c] = e
        local_sum += e
    row_sum = cp.plane_sum(local_sum)
    for c in range(cp.UNIT_POS, cols, 32):
        out[row, c] = out[row, c] / row_sum


@cube(launch=True)
def stencil5(grid: Tensor[f32], out: Tensor[f32]):
    """out[i, j] = the 5-point Laplacian of the interior; the border keeps its value."""
    i = cp.ABSOLUTE_POS_Y
    j = cp.ABSOLUTE_POS_X
    rows = grid.shape(0)
    cols = grid.shape(1)
    if i < rows and j < cols:
        if i > 0 and j > 0 and i + 1 < rows and j + 1 < cols:
            out[i, j] = grid[i - 1, j] + grid[i + 1, j] + grid[i, j - 1] + grid[i, j + 1] - f32(4.0) * grid[i, j]
        else:
            out[i, j] = grid[i, j]


def _inputs() -> dict:
    rng = np.random.default_rng(0)
    return {
        "a": rng.standard_normal(VECTOR_N).astype(np.float32),
        "b": rng.standard_normal(VECTOR_N).astype(np.float32),
        "x": rng.standard_normal((ROWS, COLS)).astype(np.float32),
        "ma": rng.standard_normal((MATMUL_N, MATMUL_N)).astype(np.float32),
        "mb": rng.standard_normal((MATMUL_N, MATMUL_N)).astype(np.float32),
        "g": rng.standard_normal((GRID, GRID)).astype(np.float32),
    }


def _numpy_references(d: dict) -> dict[str, Callable[[], np.ndarray]]:
    def softmax():
        e = np.exp(d["x"] - d["x"].max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def stencil():
        g, out = d["g"], d["g"].copy()
        out[1:-1, 1:-1] = g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:] - 4 * g[1:-1, 1:-1]
        return out

    return {
        WORKLOADS[0]: lambda: d["a"] + d["b"],
        WORKLOADS[1]: softmax,
        WORKLOADS[2]: lambda: d["ma"] @ d["mb"],
        WORKLOADS[3]: lambda: np.asarray(d["a"].sum(dtype=np.float32)),
        WORKLOADS[4]: stencil,
    }


def _cubepy(d: dict) -> dict[str, tuple[Callable[[], object], Callable[[], np.ndarray]]]:
    client = cp.client("cpu")
    ha, hb, ho = client.create(d["a"]), client.create(d["b"]), client.empty(VECTOR_N, np.float32)
    hx, hs = client.create(d["x"]), client.empty((ROWS, COLS), np.float32)
    hma, hmb, hmc = client.create(d["ma"]), client.create(d["mb"]), client.zeros((MATMUL_N, MATMUL_N), np.float32)
    sum_cubes = VECTOR_N // (256 * SUM_PER_UNIT)
    partial = client.empty(sum_cubes, np.float32)
    hg, hgo = client.create(d["g"]), client.empty((GRID, GRID), np.float32)
    blocks = MATMUL_N // TILE

    def total():
        block_sums.launch(
            client, cp.CubeCount(sum_cubes), cp.CubeDim(256), cp.ArrayArg(ha), cp.ArrayArg(partial), SUM_PER_UNIT
        )
        return np.asarray(client.read(partial).sum(dtype=np.float32))

    work = {
        WORKLOADS[0]: (
            lambda: vector_add.launch(
                client,
                cp.CubeCount(VECTOR_N // 256),
                cp.CubeDim(256),
                cp.ArrayArg(ha),
                cp.ArrayArg(hb),
                cp.ArrayArg(ho),
            ),
            lambda: client.read(ho),
        ),
        WORKLOADS[1]: (
            lambda: row_softmax.launch(client, cp.CubeCount(ROWS), cp.CubeDim(32), cp.TensorArg(hx), cp.TensorArg(hs)),
            lambda: client.read(hs),
        ),
        WORKLOADS[2]: (
            lambda: matmul.launch(
                client,
                cp.CubeCount(blocks, blocks),
                cp.CubeDim(TILE, TILE),
                cp.TensorArg(hma),
                cp.TensorArg(hmb),
                cp.TensorArg(hmc),
                TILE,
            ),
            lambda: client.read(hmc),
        ),
        WORKLOADS[3]: (total, total),
        WORKLOADS[4]: (
            lambda: stencil5.launch(
                client, cp.CubeCount(GRID // 32, GRID // 8), cp.CubeDim(32, 8), cp.TensorArg(hg), cp.TensorArg(hgo)
            ),
            lambda: client.read(hgo),
        ),
    }
    for run, _ in work.values():  # compile now, before a peer starts threads (the compile child is a fork)
        run()
    return work


def _numpy(d: dict) -> dict:
    references = _numpy_references(d)
    return {name: (fn, fn) for name, fn in references.items()}


def _numba(d: dict, threads: int | None) -> dict:
    import numba

    if threads:
        numba.set_num_threads(threads)
    prange = numba.prange

    @numba.njit(parallel=True, fastmath=False)
    def add(a, b, out):
        for i in prange(a.size):
            out[i] = a[i] + b[i]

    @numba.njit(parallel=True)
    def softmax(x, out):
        for r in prange(x.shape[0]):
            peak = x[r, 0]
            for c in range(x.shape[1]):
                peak = max(peak, x[r, c])
            total = np.float32(0.0)
            for c in range(x.shape[1]):
                out[r, c] = np.exp(x[r, c] - peak)
                total += out[r, c]
            for c in range(x.shape[1]):
                out[r, c] /= total

    @numba.njit(parallel=True)
    def mm(a, b, c):
        n = a.shape[0]
        for i in prange(n):
            for j in range(n):
                c[i, j] = 0.0
            for k in range(n):
                aik = a[i, k]
                for j in range(n):
                    c[i, j] += aik * b[k, j]

    @numba.njit(parallel=True)
    def total(a):
        s = np.float32(0.0)
        for i in prange(a.size):
            s += a[i]
        return s

    @numba.njit(parallel=True)
    def stencil(g, out):
        n, m = g.shape
        for i in prange(n):
            for j in range(m):
                if 0 < i < n - 1 and 0 < j < m - 1:
                    out[i, j] = g[i - 1, j] + g[i + 1, j] + g[i, j - 1] + g[i, j + 1] - np.float32(4.0) * g[i, j]
                else:
                    out[i, j] = g[i, j]

    out, sm, mc, go = (
        np.empty(VECTOR_N, np.float32),
        np.empty((ROWS, COLS), np.float32),
        np.empty((MATMUL_N,) * 2, np.float32),
        np.empty((GRID, GRID), np.float32),
    )
    holder: dict = {}
    return {
        WORKLOADS[0]: (lambda: add(d["a"], d["b"], out), lambda: out),
        WORKLOADS[1]: (lambda: softmax(d["x"], sm), lambda: sm),
        WORKLOADS[2]: (lambda: mm(d["ma"], d["mb"], mc), lambda: mc),
        WORKLOADS[3]: (lambda: holder.__setitem__("s", total(d["a"])), lambda: np.asarray(holder["s"])),
        WORKLOADS[4]: (lambda: stencil(d["g"], go), lambda: go),
    }


def _jax(d: dict) -> dict:
    import jax
    import jax.numpy as jnp

    a, b, x, ma, mb, g = (jnp.asarray(d[k]) for k in ("a", "b", "x", "ma", "mb", "g"))
    add = jax.jit(lambda p, q: p + q)
    softmax = jax.jit(lambda v: jax.nn.softmax(v, axis=1))
    mm = jax.jit(lambda p, q: p @ q)
    total = jax.jit(jnp.sum)

    @jax.jit
    def stencil(v):
        inner = v[:-2, 1:-1] + v[2:, 1:-1] + v[1:-1, :-2] + v[1:-1, 2:] - 4 * v[1:-1, 1:-1]
        return v.at[1:-1, 1:-1].set(inner)

    holder: dict = {}

    def run(name, fn, *args):
        def call():
            holder[name] = fn(*args).block_until_ready()

        return call, lambda: np.asarray(holder[name])

    return {
        WORKLOADS[0]: run("add", add, a, b),
        WORKLOADS[1]: run("softmax", softmax, x),
        WORKLOADS[2]: run("mm", mm, ma, mb),
        WORKLOADS[3]: run("sum", total, a),
        WORKLOADS[4]: run("stencil", stencil, g),
    }


def _warp(d: dict) -> dict:
    import warp as wp

    wp.config.quiet = True
    wp.init()

    @wp.kernel
    def add(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] + b[i]

    @wp.kernel
    def softmax(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
        r = wp.tid()
        peak = x[r, 0]
        for c in range(x.shape[1]):
            peak = wp.max(peak, x[r, c])
        total = float(0.0)  # noqa: UP018  (warp: a dynamic variable, mutable in the loop)
        for c in range(x.shape[1]):
            e = wp.exp(x[r, c] - peak)
            out[r, c] = e
            total += e
        for c in range(x.shape[1]):
            out[r, c] = out[r, c] / total

    @wp.kernel
    def mm(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float), c: wp.array2d(dtype=float)):
        i, j = wp.tid()
        acc = float(0.0)  # noqa: UP018  (warp: a dynamic variable, mutable in the loop)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc

    @wp.kernel
    def total(a: wp.array(dtype=float), s: wp.array(dtype=float)):
        wp.atomic_add(s, 0, a[wp.tid()])

    @wp.kernel
    def stencil(g: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
        i, j = wp.tid()
        n = g.shape[0]
        m = g.shape[1]
        if i > 0 and j > 0 and i < n - 1 and j < m - 1:
            out[i, j] = g[i - 1, j] + g[i + 1, j] + g[i, j - 1] + g[i, j + 1] - 4.0 * g[i, j]
        else:
            out[i, j] = g[i, j]

    dev = "cpu"
    a, b, out = wp.array(d["a"], device=dev), wp.array(d["b"], device=dev), wp.empty(VECTOR_N, dtype=float, device=dev)
    x, sm = wp.array(d["x"], device=dev), wp.empty((ROWS, COLS), dtype=float, device=dev)
    ma, mb = wp.array(d["ma"], device=dev), wp.array(d["mb"], device=dev)
    mc = wp.empty((MATMUL_N, MATMUL_N), dtype=float, device=dev)
    s = wp.zeros(1, dtype=float, device=dev)
    g, go = wp.array(d["g"], device=dev), wp.empty((GRID, GRID), dtype=float, device=dev)

    def summed():
        s.zero_()
        wp.launch(total, dim=VECTOR_N, inputs=[a, s], device=dev)

    return {
        WORKLOADS[0]: (lambda: wp.launch(add, dim=VECTOR_N, inputs=[a, b, out], device=dev), out.numpy),
        WORKLOADS[1]: (lambda: wp.launch(softmax, dim=ROWS, inputs=[x, sm], device=dev), sm.numpy),
        WORKLOADS[2]: (lambda: wp.launch(mm, dim=(MATMUL_N, MATMUL_N), inputs=[ma, mb, mc], device=dev), mc.numpy),
        WORKLOADS[3]: (summed, lambda: s.numpy()[0]),
        WORKLOADS[4]: (lambda: wp.launch(stencil, dim=(GRID, GRID), inputs=[g, go], device=dev), go.numpy),
    }


def _taichi(d: dict, threads: int | None) -> dict:
    import taichi as ti

    ti.init(arch=ti.cpu, cpu_max_num_threads=threads or os.cpu_count(), log_level=ti.ERROR)
    a, b, out = (ti.field(ti.f32, VECTOR_N) for _ in range(3))
    x, sm = ti.field(ti.f32, (ROWS, COLS)), ti.field(ti.f32, (ROWS, COLS))
    ma, mb, mc = (ti.field(ti.f32, (MATMUL_N, MATMUL_N)) for _ in range(3))
    s = ti.field(ti.f32, ())
    g, go = ti.field(ti.f32, (GRID, GRID)), ti.field(ti.f32, (GRID, GRID))
    for field, key in ((a, "a"), (b, "b"), (x, "x"), (ma, "ma"), (mb, "mb"), (g, "g")):
        field.from_numpy(d[key])

    @ti.kernel
    def add():
        for i in a:
            out[i] = a[i] + b[i]

    @ti.kernel
    def softmax():
        for r in range(ROWS):
            peak = x[r, 0]
            for c in range(COLS):
                peak = ti.max(peak, x[r, c])
            total = 0.0
            for c in range(COLS):
                e = ti.exp(x[r, c] - peak)
                sm[r, c] = e
                total += e
            for c in range(COLS):
                sm[r, c] /= total

    @ti.kernel
    def mm():
        for i, j in mc:
            acc = 0.0
            for k in range(MATMUL_N):
                acc += ma[i, k] * mb[k, j]
            mc[i, j] = acc

    @ti.kernel
    def total():
        s[None] = 0.0
        for i in a:
            s[None] += a[i]

    @ti.kernel
    def stencil():
        for i, j in g:
            if 0 < i < GRID - 1 and 0 < j < GRID - 1:
                go[i, j] = g[i - 1, j] + g[i + 1, j] + g[i, j - 1] + g[i, j + 1] - 4.0 * g[i, j]
            else:
                go[i, j] = g[i, j]

    def synced(kernel):
        def call():
            kernel()
            ti.sync()

        return call

    return {
        WORKLOADS[0]: (synced(add), out.to_numpy),
        WORKLOADS[1]: (synced(softmax), sm.to_numpy),
        WORKLOADS[2]: (synced(mm), mc.to_numpy),
        WORKLOADS[3]: (synced(total), lambda: np.asarray(s[None])),
        WORKLOADS[4]: (synced(stencil), go.to_numpy),
    }


def _tolerance(name: str) -> float:
    return 2e-2 if name == WORKLOADS[3] else 1e-4  # sums of 2^20 terms in different orders


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _load(threads: int | None, d: dict) -> tuple[dict[str, dict], dict[str, str]]:
    runtimes: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    makers: dict[str, Callable[[], dict]] = {
        "cubepy-cpu": lambda: _cubepy(d),
        "warp": lambda: _warp(d),
        "taichi": lambda: _taichi(d, threads),
        "numba": lambda: _numba(d, threads),
        "numpy": lambda: _numpy(d),
        "jax": lambda: _jax(d),
    }
    for name, make in makers.items():
        try:
            runtimes[name] = make()
        except ImportError as error:
            skipped[name] = f"not installed ({error.name or error})"
        except Exception as error:  # a peer that fails to start is reported, not fatal
            skipped[name] = f"{type(error).__name__}: {error}"
    return runtimes, skipped


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one table per round and the geometric means."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=0, help="threads per runtime (0: each runtime's default)")
    args = parser.parse_args(argv)
    threads = args.threads or None
    if threads:
        os.environ["CUBEPY_CPU_THREADS"] = str(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    d = _inputs()
    references = _numpy_references(d)
    runtimes, skipped = _load(threads, d)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    wrong: set[tuple[str, str]] = set()
    for runtime, work in runtimes.items():
        for workload, (run, read) in work.items():
            run()
            expected = references[workload]()
            if not np.allclose(np.asarray(read()), expected, rtol=_tolerance(workload), atol=_tolerance(workload)):
                wrong.add((runtime, workload))
                print(f"WRONG RESULT: {runtime} on {workload}: left out")
    peers = [name for name in runtimes if name != "cubepy-cpu"]
    ratios_by_round: list[dict[str, float]] = []
    for round_index in range(args.rounds):
        times: dict[tuple[str, str], float] = {}
        for workload in WORKLOADS:
            for runtime, work in runtimes.items():
                if (runtime, workload) not in wrong and workload in work:
                    times[runtime, workload] = _median_ms(work[workload][0], args.repeats)
        print(f"\n== round {round_index + 1} (ms; ratio = cubepy-cpu / peer, below 1: cubepy faster)")
        print(f"{'workload':26s} {'cubepy-cpu':>11s} " + " ".join(f"{p:>16s}" for p in peers))
        best: dict[str, float] = {}
        for workload in WORKLOADS:
            mine = times.get(("cubepy-cpu", workload))
            cells = []
            candidates = []
            for peer in peers:
                theirs = times.get((peer, workload))
                if theirs is None or mine is None:
                    cells.append(f"{'-':>16s}")
                    continue
                excluded = peer in NOT_PEERS.get(workload, ())
                cells.append(f"{theirs:7.3f} ({mine / theirs:5.2f}){'*' if excluded else ' '}")
                if not excluded:
                    candidates.append(theirs)
            if mine is not None and candidates:
                best[workload] = mine / min(candidates)
            print(f"{workload:26s} {mine if mine is not None else float('nan'):11.3f} " + " ".join(cells))
        ratios_by_round.append(best)
        if best:
            geo = math.exp(sum(math.log(r) for r in best.values()) / len(best))
            print(f"cubepy / best peer per workload: {', '.join(f'{r:.2f}' for r in best.values())}; geomean {geo:.2f}")
    print("\n(*: a library GEMM, shown beside the user kernels but not counted as a peer)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
