"""CPU runtime throughput and cold expand time of the example kernels.

Reports, as medians of several runs: the wall time of one launch on the interp runtime (after the
kernel is cached), the lane-instructions it executed per second (every IR instruction times the lanes
active when it ran, counted by the runtime), and the cold expand time (expand + verify) of each kernel.
Run: ``python -m benchmarks.interp_throughput [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cubepy as cp  # noqa: E402
from cubepy.runtime import interp  # noqa: E402
from examples import matmul_tiled, reduce_sum, softmax, vector_add  # noqa: E402


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _launch_stats(client, launch, repeats: int) -> dict:
    launch()  # compile and warm the cache
    with interp.counting() as counter:
        launch()
    seconds = _median_time(launch, repeats)
    return {
        "median_s": seconds,
        "lane_instructions": counter.lane_instructions,
        "lane_instructions_per_s": counter.lane_instructions / seconds,
    }


def bench_vector_add(client, n: int = 1 << 20, repeats: int = 5) -> dict:
    """vector_add over n f32 elements, cube_dim 256."""
    x = client.create(np.ones(n, np.float32))
    y = client.create(np.ones(n, np.float32))
    out = client.empty((n,), np.float32)

    def launch():
        vector_add.vector_add.launch(
            client, cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(x), cp.ArrayArg(y), cp.ArrayArg(out)
        )

    stats = _launch_stats(client, launch, repeats)
    assert np.all(client.read(out) == 2.0)
    return stats


def bench_matmul(client, size: int = 256, tile: int = 16, repeats: int = 3) -> dict:
    """The shared-memory tiled matmul on size^3, 16x16 tiles."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    ha, hb, hc = client.create(a), client.create(b), client.zeros((size, size), np.float32)
    cubes = cp.CubeCount(size // tile, size // tile)

    def launch():
        matmul_tiled.matmul.launch(
            client, cubes, cp.CubeDim(tile, tile), cp.TensorArg(ha), cp.TensorArg(hb), cp.TensorArg(hc), tile
        )

    stats = _launch_stats(client, launch, repeats)
    assert np.allclose(client.read(hc), a @ b, atol=1e-3)
    return stats


def launchers(client, small: bool = False) -> dict:
    """Per case, a callable launching it on ``client`` (the section's sizes, or small ones for the disk-cache test).

    The sizes are those of ``benchmarks.peers`` (the peers run the same cases).
    """
    from benchmarks import peers

    n = 4096 if small else peers.VECTOR_N
    rows, cols = (8, 64) if small else (peers.SOFTMAX_ROWS, peers.SOFTMAX_COLS)
    size, tile = (32 if small else peers.MATMUL_N), peers.MATMUL_TILE
    rng = np.random.default_rng(0)
    x, y, out = (
        client.create(np.ones(n, np.float32)),
        client.create(np.ones(n, np.float32)),
        client.empty((n,), np.float32),
    )
    sx = client.create(rng.standard_normal((rows, cols)).astype(np.float32))
    so = client.empty((rows, cols), np.float32)
    ha = client.create(rng.standard_normal((size, size)).astype(np.float32))
    hb = client.create(rng.standard_normal((size, size)).astype(np.float32))
    hc = client.zeros((size, size), np.float32)
    planes = client.zeros((n // 32,), np.float32)
    return {
        "vector_add": lambda: vector_add.vector_add.launch(
            client, cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(x), cp.ArrayArg(y), cp.ArrayArg(out)
        ),
        "softmax_rows": lambda: softmax.softmax_rows.launch(
            client, cp.CubeCount(rows), cp.CubeDim(32), cp.TensorArg(sx), cp.TensorArg(so)
        ),
        "matmul": lambda: matmul_tiled.matmul.launch(
            client,
            cp.CubeCount(size // tile, size // tile),
            cp.CubeDim(tile, tile),
            cp.TensorArg(ha),
            cp.TensorArg(hb),
            cp.TensorArg(hc),
            tile,
        ),
        "plane_sum": lambda: reduce_sum.plane_sum_kernel.launch(
            client, cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(x), cp.ArrayArg(planes)
        ),
    }


def bench_cases(client, repeats: int = 5) -> dict:
    """Median launch time and lane-instruction rate of vector add 2^20, row softmax and the 256^3 matmul."""
    launch = launchers(client)
    return {name: _launch_stats(client, launch[name], repeats) for name in ("vector_add", "softmax_rows", "matmul")}


def bench_expand(repeats: int = 5) -> dict:
    """Cold expansion (AST rewrite is cached per function; expand + verify per call) of each example kernel."""
    from cubepy.cli import default_compilation_args

    cases = {
        "vector_add": (vector_add.vector_add, {}),
        "block_sum": (reduce_sum.block_sum, {"block": 256}),
        "matmul": (matmul_tiled.matmul, {"tile": 16}),
        "softmax": (softmax.softmax_rows, {}),
    }
    out = {}
    for name, (kernel, comptime) in cases.items():
        comp = tuple(default_compilation_args(kernel, dict(comptime)))
        out[name] = {"median_s": _median_time(lambda k=kernel, c=comp: k.define(c, (256, 1, 1), True), repeats)}
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    client = cp.client("interp")
    results = {
        "vector_add_2^20": bench_vector_add(client),
        "matmul_256^3": bench_matmul(client),
        "expand": bench_expand(),
    }
    print(f"{'case':24s} {'median':>10s} {'lane-instr':>12s} {'lane-instr/s':>14s}")
    for name in ("vector_add_2^20", "matmul_256^3"):
        r = results[name]
        print(
            f"{name:24s} {r['median_s'] * 1e3:8.1f}ms {r['lane_instructions']:12d} {r['lane_instructions_per_s']:14.3e}"
        )
    for name, r in results["expand"].items():
        print(f"{'expand ' + name:24s} {r['median_s'] * 1e3:8.2f}ms")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
