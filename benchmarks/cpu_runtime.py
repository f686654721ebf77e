"""``python -m benchmarks.cpu_runtime [--repeats N]``: the compiled cpu runtime beside the interp and numpy.

Workloads: vector add 2^20 (f32), tiled matmul 256^3 (examples/matmul_tiled.py, 16x16 tiles, two
``sync_cube`` per k-step), row softmax 1024x1024 (examples/softmax.py, one plane per row with
``plane_max``/``plane_sum``) and a butterfly plane sum of 2^20 values written with five ``plane_shuffle_xor``
(numpy's peer: the 32-value sums, repeated).  Run time is the median of ``--repeats`` (15) launches after three
untimed ones (compiled and cached, inputs resident; the interp's: of a fifth as many); every cpu figure is taken
first, then the interp's, then numpy's, so that OpenBLAS's spinning threads never share a core with the cpu
runtime's.  Compile time is the cpu runtime's first launch minus a warm one (lowering, O3 and object code
in a forked child, MCJIT load).  Targets: vector add within 3x of numpy; matmul and softmax at least 20x
faster than the interp.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cubepy as cp  # noqa: E402
from cubepy import ABSOLUTE_POS, Array, cube, f32, u32  # noqa: E402
from examples.matmul_tiled import matmul  # noqa: E402
from examples.softmax import softmax_rows  # noqa: E402
from examples.vector_add import vector_add  # noqa: E402


@cube(launch=True)
def butterfly_sum(x: Array[f32], out: Array[f32]):
    """Every unit gets its plane's sum by five butterfly steps (each unit adds its partner's value)."""
    value = x[ABSOLUTE_POS]
    for k in cp.unroll(range(5)):
        value += cp.plane_shuffle_xor(value, u32(16 >> k))
    out[ABSOLUTE_POS] = value


WARMUP_LAUNCHES = 3


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _workloads(client):
    """name -> (launch, numpy) closures over data already on ``client``."""
    rng = np.random.default_rng(0)
    n = 1 << 20
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ha, hb, ho = client.create(a), client.create(b), client.empty(n, np.float32)
    size, tile = 256, 16
    ma = rng.standard_normal((size, size)).astype(np.float32)
    mb = rng.standard_normal((size, size)).astype(np.float32)
    hma, hmb, hmc = client.create(ma), client.create(mb), client.zeros((size, size), np.float32)
    x = rng.standard_normal((1024, 1024)).astype(np.float32)
    hx, hs = client.create(x), client.empty((1024, 1024), np.float32)

    def softmax_numpy():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return {
        "vector add 2^20": (
            lambda: vector_add.launch(
                client, cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(ha), cp.ArrayArg(hb), cp.ArrayArg(ho)
            ),
            lambda: np.add(a, b),
        ),
        "matmul 256^3": (
            lambda: matmul.launch(
                client,
                cp.CubeCount(size // tile, size // tile),
                cp.CubeDim(tile, tile),
                cp.TensorArg(hma),
                cp.TensorArg(hmb),
                cp.TensorArg(hmc),
                tile,
            ),
            lambda: ma @ mb,
        ),
        "softmax 1024x1024": (
            lambda: softmax_rows.launch(client, cp.CubeCount(1024), cp.CubeDim(32), cp.TensorArg(hx), cp.TensorArg(hs)),
            softmax_numpy,
        ),
        "shuffle_xor sum 2^20": (
            lambda: butterfly_sum.launch(
                client, cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(ha), cp.ArrayArg(ho)
            ),
            lambda: np.repeat(a.reshape(-1, 32).sum(axis=1), 32),
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the table (milliseconds, medians) and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    os.environ.setdefault("CUBEPY_CACHE_DIR", "")  # measure compiling, not the disk cache
    cpu, interp = cp.client("cpu"), cp.client("interp")
    cpu_work, interp_work = _workloads(cpu), _workloads(interp)
    rows = {}
    for name, (launch_cpu, _) in cpu_work.items():
        start = time.perf_counter()
        launch_cpu()
        first = (time.perf_counter() - start) * 1e3
        for _ in range(WARMUP_LAUNCHES):  # the first launches after a compile still fault pages and fill caches
            launch_cpu()
        rows[name] = {"cpu": _median_ms(launch_cpu, args.repeats), "first": first}
    for name, (launch_interp, _) in interp_work.items():
        launch_interp()  # compile + warm
        rows[name]["interp"] = _median_ms(launch_interp, max(1, args.repeats // 5))
    # numpy last: after a matmul, OpenBLAS's threads spin for a while and would take a core from the runs after it
    for name, (_, numpy_fn) in cpu_work.items():
        rows[name]["numpy"] = _median_ms(numpy_fn, args.repeats)
    print(f"cores: {os.cpu_count()}; medians of {args.repeats} warm launches, ms")
    print(
        f"{'workload':<20}{'numpy':>10}{'interp':>12}{'cpu':>10}{'cpu compile':>13}{'cpu/numpy':>11}{'interp/cpu':>12}"
    )
    for name, row in rows.items():
        cpu_ms, interp_ms, numpy_ms = row["cpu"], row["interp"], row["numpy"]
        print(
            f"{name:<20}{numpy_ms:>10.2f}{interp_ms:>12.1f}{cpu_ms:>10.2f}{row['first'] - cpu_ms:>13.0f}"
            f"{cpu_ms / numpy_ms:>11.2f}{interp_ms / cpu_ms:>12.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
