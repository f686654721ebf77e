"""The host path of a warm launch: arguments, cache key, lookup and binding, apart from execution.

A ``ComputeClient`` whose back end is the interp one with ``run`` replaced by a no-op (in this
benchmark only) launches a cached kernel of 4 and of 16 arguments; every figure is the median over
batches of the mean time per launch.  The last row is a whole warm launch of the 4-argument kernel on the
compiled cpu runtime (one cube): the host path plus the cpu back end's packing, cube contexts and call.  "prebuilt args" reuses the ``ArrayArg`` objects (as a framework
holding its tensors would); "args built per launch" includes making the ``cp.ArrayArg`` wrappers.
Beside them, the same 4-argument kernel (``out[i] = x[i] + y[i]`` under ``i < n``) launched warm on one
block of 256 on the CPU runtimes a user would compare with: Warp's ``wp.launch`` (``dim=256``, on its cpu
device), numba's call of an ``@njit`` function (its dispatch: the type check of the arguments and the call) and
of an ``@njit(parallel=True)`` one, Taichi's call of a ``@ti.kernel`` on ndarrays; each skipped with the reason
when its package is absent (``pip install -e '.[cpu-peers]'``).  Run alone: ``python -m benchmarks.warm_launch``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cubepy as cp  # noqa: E402
from cubepy import f32, u32  # noqa: E402
from cubepy.runtime.client import ComputeClient  # noqa: E402
from cubepy.runtime.interp.backend import InterpBackend  # noqa: E402


class NoRunBackend(InterpBackend):
    """The interp back end with execution removed: what is left of a launch is its host path."""

    def run(self, definition, cube_count, bindings, *, sanitize: bool) -> None:
        pass


@cp.cube(launch=True)
def add4(x: cp.Array[f32], y: cp.Array[f32], out: cp.Array[f32], n: u32):
    i = cp.ABSOLUTE_POS
    if i < n:
        out[i] = x[i] + y[i]


@cp.cube(launch=True)
def axpy16(
    x0: cp.Array[f32],
    x1: cp.Array[f32],
    x2: cp.Array[f32],
    x3: cp.Array[f32],
    x4: cp.Array[f32],
    x5: cp.Array[f32],
    x6: cp.Array[f32],
    x7: cp.Array[f32],
    out: cp.Array[f32],
    a0: f32,
    a1: f32,
    a2: f32,
    a3: f32,
    n: u32,
    base: u32,
    tile: cp.Comptime[int],
):
    i = cp.ABSOLUTE_POS
    if i < n:
        s = a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i]
        out[i] = s + x4[i] + x5[i] + x6[i] + x7[i] + f32(base + tile)


def _batches(fn, batch: int, batches: int) -> list[float]:
    out = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        out.append((time.perf_counter() - start) / batch)
    return out


def bench(quick: bool = False, peers: bool | None = None) -> dict:
    """Median seconds per warm launch for 4 and 16 arguments, prebuilt and per-launch ArrayArgs; with ``peers``
    (default: unless ``quick``) the peers' launches of the 4-argument kernel too."""
    client = ComputeClient("interp-norun", NoRunBackend())
    n = 1024
    handles = [client.create(np.ones(n, np.float32)) for _ in range(9)]
    count, dim = cp.CubeCount(n // 256), cp.CubeDim(256)
    args4 = (cp.ArrayArg(handles[0]), cp.ArrayArg(handles[1]), cp.ArrayArg(handles[2]), n)
    args16 = tuple(cp.ArrayArg(h) for h in handles) + (1.0, 2.0, 3.0, 4.0, n, 0, 16)
    cases = {
        "4 args, prebuilt args": lambda: add4.launch(client, count, dim, *args4),
        "4 args, args built per launch": lambda: add4.launch(
            client, count, dim, cp.ArrayArg(handles[0]), cp.ArrayArg(handles[1]), cp.ArrayArg(handles[2]), n
        ),
        "16 args, prebuilt args": lambda: axpy16.launch(client, count, dim, *args16),
        "16 args, args built per launch": lambda: axpy16.launch(
            client, count, dim, *(cp.ArrayArg(h) for h in handles), 1.0, 2.0, 3.0, 4.0, n, 0, 16
        ),
    }
    # The whole of a warm launch on the compiled cpu runtime: the host path above, the parameter block, the cube
    # contexts and the native call (one cube of 256 units: its run is a few hundred nanoseconds).
    cpu = cp.client("cpu")
    cpu_handles = [cpu.create(np.ones(n, np.float32)) for _ in range(3)]
    cpu_args = (*(cp.ArrayArg(h) for h in cpu_handles), n)
    cases["cpu runtime, 4 args, 1 cube, whole launch"] = lambda: add4.launch(cpu, cp.CubeCount(1), dim, *cpu_args)
    batch, batches = (200, 25) if quick else (200, 101)  # many short batches: a robust median on a shared machine
    out = {}
    for name, fn in cases.items():
        fn()  # compile (cached from here on)
        fn()
        samples = _batches(fn, batch, batches)
        out[name] = {"median_s": statistics.median(samples), "min_s": min(samples), "batch": batch, "batches": batches}
    for name, (fn, reason) in (_peer_launches(n) if (not quick if peers is None else peers) else {}).items():
        if fn is None:
            out[name] = {"skipped": reason}
            continue
        fn()
        fn()
        samples = _batches(fn, batch, batches)
        out[name] = {"median_s": statistics.median(samples), "min_s": min(samples), "batch": batch, "batches": batches}
    out["_stats"] = dict(client.stats)
    return out


def _peer_launches(n: int) -> dict[str, tuple[object, str]]:
    """The peers' warm launch of the 4-argument kernel on one block of 256: (callable, "") or (None, why not)."""
    found: dict[str, tuple[object, str]] = {}
    x, y, out = (np.ones(n, np.float32) for _ in range(3))
    try:
        import warp as wp

        wp.config.quiet = True
        wp.init()

        @wp.kernel
        def warp_add4(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float), m: int):
            i = wp.tid()
            if i < m:
                c[i] = a[i] + b[i]

        wa, wb, wc = (wp.array(v, dtype=float, device="cpu") for v in (x, y, out))
        found["warp wp.launch, 4 args, dim 256"] = (
            lambda: wp.launch(warp_add4, dim=256, inputs=[wa, wb, wc, n], device="cpu"),
            "",
        )
    except ImportError as exc:
        found["warp wp.launch, 4 args, dim 256"] = (None, f"warp not installed ({exc})")
    try:
        import numba

        def add4_loop(a, b, c, m):
            for i in range(256):
                if i < m:
                    c[i] = a[i] + b[i]

        def add4_prange(a, b, c, m):
            for i in numba.prange(256):
                if i < m:
                    c[i] = a[i] + b[i]

        serial, parallel = numba.njit(add4_loop), numba.njit(parallel=True)(add4_prange)
        found["numba @njit call, 4 args, 256 items"] = (lambda: serial(x, y, out, n), "")
        found["numba @njit(parallel) call, 4 args"] = (lambda: parallel(x, y, out, n), "")
    except ImportError as exc:
        found["numba @njit call, 4 args, 256 items"] = (None, f"numba not installed ({exc})")
    try:
        import taichi as ti

        ti.init(arch=ti.cpu, log_level=ti.ERROR)

        def taichi_add4(a, b, c, m):
            for i in range(256):
                if i < m:
                    c[i] = a[i] + b[i]

        # Taichi reads the annotations as objects; this module's are strings (``from __future__ import annotations``)
        array = ti.types.ndarray()
        taichi_add4.__annotations__ = {"a": array, "b": array, "c": array, "m": ti.i32}
        taichi_add4 = ti.kernel(taichi_add4)
        found["taichi @ti.kernel call, 4 args"] = (lambda: taichi_add4(x, y, out, n), "")
    except ImportError as exc:
        found["taichi @ti.kernel call, 4 args"] = (None, f"taichi not installed ({exc})")
    return found


def main() -> int:
    for name, r in bench().items():
        if name.startswith("_"):
            continue
        if "skipped" in r:
            print(f"{name:42s} skipped: {r['skipped']}")
        else:
            print(f"{name:42s} median {r['median_s'] * 1e6:6.2f} us  (min {r['min_s'] * 1e6:.2f} us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
