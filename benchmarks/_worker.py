"""One measurement in a fresh process: ``python -m benchmarks._worker TASK JSON-ARGS``.

Prints one line ``BENCH-RESULT {json}`` (the last line of stdout).  The parent (``python -m
benchmarks``) sets the environment each task needs (an empty ``CUBEPY_CACHE_DIR`` or
``TRITON_CACHE_DIR``, ``TRITON_INTERPRET=1``, ``NUMBA_ENABLE_CUDASIM=1``) before the process starts,
because those libraries read it at import.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET = "sm_90a"


def _emit(result: dict) -> None:
    print("BENCH-RESULT " + json.dumps(result), flush=True)


# ----------------------------------------------------------------------------------------------- import


def task_import(_args: dict) -> dict:
    """Seconds to ``import cubepy`` (numpy and attrs included: nothing is imported before) and what stayed out."""
    assert "numpy" not in sys.modules
    start = time.perf_counter()
    import cubepy  # noqa: F401

    took = time.perf_counter() - start
    return {
        "s": took,
        "ml_dtypes_loaded": "ml_dtypes" in sys.modules,
        "llvmlite_loaded": any(m.startswith("llvmlite") for m in sys.modules),
    }


def task_import_peer(args: dict) -> dict:
    """Seconds to import a peer (``triton`` or ``numba.cuda``)."""
    start = time.perf_counter()
    __import__(args["module"])
    return {"s": time.perf_counter() - start}


# ----------------------------------------------------------------------------------------------- cold compile


def _cubepy_case(name: str):
    from benchmarks import compile_bench

    return compile_bench.cubepy_cases()[name]


def task_cold_cubepy(args: dict) -> dict:
    """The first compile in a fresh process (after ``import cubepy``): expand, verify, passes, LLVM, PTX, ptxas."""
    import cubepy  # noqa: F401 - import is not part of the compile
    from benchmarks import compile_bench

    result = compile_bench.cubepy_sample(args["kernel"])
    return {
        "stages": result["stages"],
        "s": result["stages"]["total"],
        "cubin": result["cubin"],
        "ptxas_status": result["ptxas_status"],
    }


def task_cold_triton(args: dict) -> dict:
    """Triton's first compile in a fresh process (after ``import triton``), into an empty cache."""
    import triton  # noqa: F401

    from benchmarks import compile_bench

    specs = compile_bench.triton_specs(compile_bench.triton_kernels(), args.get("matmul_dtype", "fp16"))
    if args["kernel"] not in specs:
        return {"skipped": f"no Triton equivalent of {args['kernel']} in the benchmark"}
    return {"s": compile_bench.triton_sample(specs[args["kernel"]]), "version": triton.__version__}


def task_cold_numba(args: dict) -> dict:
    """numba-cuda's first ``compile_ptx`` in a fresh process (after import) plus ptxas, of vector add."""
    from numba import cuda, float32

    def add(x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + y[i]

    start = time.perf_counter()
    ptx, _ = cuda.compile_ptx(add, (float32[::1], float32[::1], float32[::1]), cc=(9, 0))
    compiled = time.perf_counter()
    from cubepy.compiler import ptxas

    tool = ptxas.find_ptxas()
    if tool is None:
        return {"skipped": "ptxas not found"}
    with tempfile.TemporaryDirectory() as folder:
        src = Path(folder) / "k.ptx"
        src.write_text(ptx)
        subprocess.run(
            [str(tool), "-arch=sm_90", "-o", str(Path(folder) / "k.cubin"), str(src)], check=True, capture_output=True
        )
    end = time.perf_counter()
    import numba_cuda

    return {
        "s": end - start,
        "compile_ptx_s": compiled - start,
        "ptxas_s": end - compiled,
        "version": getattr(numba_cuda, "__version__", "?"),
    }


# ----------------------------------------------------------------------------------------------- disk cache


def _watch_disk_loads() -> list:
    """Record whether each on-disk cache lookup of this process found its entry."""
    from cubepy.runtime import cache

    found: list = []
    load = cache.DiskCache.load

    def watched(self, key):
        artifact = load(self, key)
        found.append(artifact is not None)
        return artifact

    cache.DiskCache.load = watched
    return found


def task_disk_compile(args: dict) -> dict:
    """``kernel.compile`` in this process (CUBEPY_CACHE_DIR set by the parent): cold, or a disk hit."""
    import cubepy  # noqa: F401
    from cubepy.cli import default_compilation_args

    found = _watch_disk_loads()
    kernel, comptime, cube_dim = _cubepy_case(args["kernel"])
    comp = tuple(default_compilation_args(kernel, dict(comptime)))
    start = time.perf_counter()
    compiled = kernel.compile(cube_dim, *comp, target=TARGET)
    took = time.perf_counter() - start
    return {"s": took, "cubin": compiled.cubin is not None, "disk_hit": any(found)}


def _interp_launch_case(name: str, client):
    """A small launch of ``name`` on ``client``: a callable that launches it."""
    from benchmarks import interp_throughput as it

    return it.launchers(client, small=True)[name]


def task_disk_launch(args: dict) -> dict:
    """Time to reach the first interp launch of a kernel in this process: first launch minus a warm one."""
    import cubepy as cp

    found = _watch_disk_loads()
    client = cp.client("interp")
    launch = _interp_launch_case(args["kernel"], client)
    start = time.perf_counter()
    launch()
    first = time.perf_counter() - start
    warm = []
    for _ in range(5):
        start = time.perf_counter()
        launch()
        warm.append(time.perf_counter() - start)
    return {
        "s": max(first - statistics.median(warm), 0.0),
        "first_launch_s": first,
        "warm_launch_s": statistics.median(warm),
        "stats": dict(client.stats),
        "disk_hit": any(found),
    }


# ----------------------------------------------------------------------------------------------- interp peers


def task_triton_interp(args: dict) -> dict:
    """Triton's interpreter (TRITON_INTERPRET=1, set by the parent) on numpy-backed tensors."""
    from benchmarks import peers

    return peers.triton_interp(args["case"], args["repeats"])


def task_numba_sim(args: dict) -> dict:
    """numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1, set by the parent) on a reduced size."""
    from benchmarks import peers

    return peers.numba_sim(args["case"], args["repeats"])


TASKS = {name[len("task_") :]: fn for name, fn in globals().items() if name.startswith("task_")}


def main(argv: list[str]) -> int:
    task, raw = argv[0], (argv[1] if len(argv) > 1 else "{}")
    try:
        result = TASKS[task](json.loads(raw))
    except Exception as exc:  # reported as a skip with the reason, never a crash of the whole benchmark
        result = {
            "skipped": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ''}"
        }
    result.setdefault("pid", os.getpid())
    _emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
