"""``python -m benchmarks [--quick] [--json PATH] [--only SECTION ...]``: every cubepy benchmark, side by side with its peers.

Sections (each figure the median of several runs; the peer's figure and the ratio cubepy/peer beside it):

- ``import``: ``import cubepy`` in a fresh process (and whether ml_dtypes / llvmlite stayed out); peers'
  import times for reference.
- ``cold_compile``: the first compile of a kernel in a fresh process with an empty cache, after the
  import, down to an sm_90a cubin (expand, verify, passes, LLVM, PTX, ptxas timed apart); Triton 3.x
  (``triton.compile`` to a cubin, empty ``TRITON_CACHE_DIR``) and numba-cuda (``compile_ptx`` + ptxas,
  vector add only) the same way.  Target: cubepy <= 1/3 of Triton.
- ``warm_launch``: the host path of a cached launch (no execution), 4 and 16 arguments, then whole warm
  launches on the cpu runtime and on Warp, numba and Taichi (``benchmarks.warm_launch``).  Target: <= 5 us
  median for the host path of 4 arguments.
- ``disk_cache``: a fresh process finding the kernel in ``CUBEPY_CACHE_DIR``: ``kernel.compile`` and the
  first interp launch, against the same in a fresh process with an empty cache.  Target: < 5% of cold.
- ``interp``: interp runtime launches (vector add 2^20, row softmax 1024x1024, tiled matmul 256^3) against
  Triton's interpreter (``TRITON_INTERPRET=1``, same sizes) and numba's simulator (``NUMBA_ENABLE_CUDASIM=1``,
  reduced sizes extrapolated linearly in work: marked ``~``).

Peers are optional (``pip install -e .[bench]``); a missing one is skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BYTECODE = True  # workers keep Python's bytecode cache (``--no-bytecode`` measures without it)
WARMUP_MODULES = (
    "cubepy",
    "cubepy.compiler.compiled",
    "cubepy.compiler.lower",
    "cubepy.runtime.interp",
    "cubepy.runtime.cache",
    "benchmarks.compile_bench",
    "benchmarks.interp_throughput",
    "benchmarks.peers",
    "examples.tma_roundtrip",
)
SECTIONS = ("import", "cold_compile", "warm_launch", "disk_cache", "interp")
TARGETS = {
    "cold_compile": 1 / 3,
    "warm_launch_us": 5.0,
    "disk_cache": 0.05,
    "interp_triton_add": 10.0,
    "interp_triton_matmul": 1.0,
    "interp_numba": 1000.0,
    "import_ms": 150.0,
}


# ----------------------------------------------------------------------------------------------- plumbing


def run_worker(task: str, args: dict | None = None, env: dict | None = None, timeout: float = 600) -> dict:
    """Run ``benchmarks._worker TASK`` in a fresh process with ``env`` added; its result, or a skip reason."""
    full_env = dict(os.environ)
    if BYTECODE:
        # As an installed package runs: with cached bytecode (this sandbox sets PYTHONDONTWRITEBYTECODE=1,
        # which would make every fresh process compile all of cubepy's sources; __pycache__ is git-ignored).
        full_env["PYTHONDONTWRITEBYTECODE"] = ""
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "benchmarks._worker", task, json.dumps(args or {})]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT ") :])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"skipped": f"worker failed (rc {proc.returncode}): {tail[0][:300]}"}


def median_of(task: str, args: dict, runs: int, env_fn=None, timeout: float = 600) -> dict:
    """``runs`` fresh processes of ``task``; the median of their ``s`` and every sample."""
    results = []
    for _ in range(runs):
        env = env_fn() if env_fn else None
        result = run_worker(task, args, env, timeout)
        if "skipped" in result:
            return result
        results.append(result)
    out = dict(results[len(results) // 2])
    out["s"] = statistics.median(r["s"] for r in results)
    out["samples_s"] = [r["s"] for r in results]
    if "stages" in results[0]:
        out["stages"] = {k: statistics.median(r["stages"].get(k, 0.0) for r in results) for k in results[0]["stages"]}
    return out


def _peer_available(module: str) -> str | None:
    """None when ``module`` can be imported here, else why not."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        return f"{module} not importable: {exc}"
    return None if found is not None else f"{module} is not installed (pip install -e .[bench])"


def _fresh_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)


# ----------------------------------------------------------------------------------------------- sections


def warm_bytecode() -> None:
    """One process importing everything the workers run, so that their bytecode is cached (not timed)."""
    if not BYTECODE:
        return
    code = "import importlib\nfor m in %r:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass\n"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="", PYTHONPATH=str(ROOT))
    subprocess.run(
        [sys.executable, "-c", code % (WARMUP_MODULES,)], env=env, cwd=ROOT, capture_output=True, timeout=600
    )


def section_import(runs: int) -> dict:
    run_worker("import", {})  # not counted: settles the bytecode cache and the page cache
    out = {
        "cubepy": median_of("import", {}, runs),
        "cubepy (no bytecode cache)": median_of("import", {}, runs, env_fn=lambda: {"PYTHONDONTWRITEBYTECODE": "1"}),
    }
    for peer, module in (("triton", "triton"), ("numba-cuda", "numba.cuda")):
        reason = _peer_available(module.split(".")[0])
        out[peer] = {"skipped": reason} if reason else median_of("import_peer", {"module": module}, max(1, runs // 2))
    return out


def section_cold_compile(runs: int) -> dict:
    from benchmarks import compile_bench

    out: dict = {}
    triton_reason = _peer_available("triton")
    for name in compile_bench.cubepy_cases():
        row = {
            "cubepy": median_of(
                "cold_cubepy",
                {"kernel": name},
                runs,
                env_fn=lambda: {"CUBEPY_CACHE_DIR": _fresh_dir("cubepy-bench-cold-")},
            )
        }
        if triton_reason:
            row["triton"] = {"skipped": triton_reason}
        else:
            row["triton"] = median_of(
                "cold_triton",
                {"kernel": name},
                runs,
                env_fn=lambda: {"TRITON_CACHE_DIR": _fresh_dir("triton-bench-cold-")},
            )
        if name == "vector_add":
            numba_reason = _peer_available("numba_cuda")
            row["numba-cuda"] = (
                {"skipped": numba_reason}
                if numba_reason
                else median_of(
                    "cold_numba",
                    {},
                    max(1, runs // 2) if runs > 2 else runs,
                    env_fn=lambda: {"NUMBA_CACHE_DIR": _fresh_dir("numba-bench-cold-")},
                )
            )
        out[name] = row
    return out


def section_warm_launch(quick: bool) -> dict:
    from benchmarks import warm_launch

    return warm_launch.bench(quick=quick)


def section_disk_cache(runs: int) -> dict:
    """Cold (empty cache) against warm-disk fresh processes, for kernel.compile and the first interp launch."""
    out: dict = {}
    for kind, task, kernels in (
        ("compile", "disk_compile", ("vector_add", "matmul", "softmax")),
        ("first launch (interp)", "disk_launch", ("vector_add", "matmul", "softmax_rows")),
    ):
        for name in kernels:
            args = {"kernel": name}
            cold = median_of(task, args, runs, env_fn=lambda: {"CUBEPY_CACHE_DIR": _fresh_dir("cubepy-bench-disk-")})
            shared = _fresh_dir("cubepy-bench-disk-")
            fill = run_worker(task, args, {"CUBEPY_CACHE_DIR": shared})
            warm = median_of(task, args, runs, env_fn=lambda d=shared: {"CUBEPY_CACHE_DIR": d})
            if "skipped" not in warm and not warm.get("disk_hit", True):
                # cubepy's sources changed between the fill and this process (the key covers them): refill once.
                run_worker(task, args, {"CUBEPY_CACHE_DIR": shared})
                warm = median_of(task, args, runs, env_fn=lambda d=shared: {"CUBEPY_CACHE_DIR": d})
            out[f"{kind}: {name}"] = {"cold": cold, "disk_hit": warm, "fill": fill}
    return out


def section_interp(runs: int, quick: bool) -> dict:
    import cubepy as cp
    from benchmarks import interp_throughput

    cube = interp_throughput.bench_cases(cp.client("interp"), repeats=runs)
    out: dict = {}
    triton_reason = _peer_available("triton")
    numba_reason = _peer_available("numba_cuda")
    peer_repeats = 1 if quick else 3
    for name in ("vector_add", "softmax_rows", "matmul"):
        row: dict = {"cubepy": cube[name]}
        row["triton-interp"] = (
            {"skipped": triton_reason}
            if triton_reason
            else run_worker("triton_interp", {"case": name, "repeats": peer_repeats}, {"TRITON_INTERPRET": "1"})
        )
        if name == "matmul" and not triton_reason:
            row["triton-interp (128x128x64 blocks)"] = run_worker(
                "triton_interp", {"case": "matmul_tutorial_blocks", "repeats": peer_repeats}, {"TRITON_INTERPRET": "1"}
            )
        row["numba-sim"] = (
            {"skipped": numba_reason}
            if numba_reason
            else run_worker("numba_sim", {"case": name, "repeats": 1}, {"NUMBA_ENABLE_CUDASIM": "1"})
        )
        out[name] = row
    return out


# ----------------------------------------------------------------------------------------------- report


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.2f} us"


def _cell(result: dict | None) -> str:
    if not result:
        return "-"
    if "skipped" in result:
        return "skipped"
    return ("~" if result.get("extrapolated") else "") + _ms(result["s"])


def _ratio(cube: dict, peer: dict | None) -> str:
    if not peer or "skipped" in peer or "skipped" in cube or not peer.get("s"):
        return "-"
    return f"{cube['s'] / peer['s']:.3f}"


def _print_table(title: str, header: tuple, rows: list[tuple]) -> None:
    print(f"\n== {title}")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def report(results: dict) -> list[str]:
    """Print every section's table; returns the skip reasons (printed at the end)."""
    skips: list[str] = []

    def note_skip(where: str, result: dict | None) -> None:
        if result and "skipped" in result:
            skips.append(f"{where}: {result['skipped']}")

    print(
        f"cubepy benchmarks  ({results['meta']['python']}, {results['meta']['machine']}, "
        f"runs per figure: {results['meta']['runs']}; ratio = cubepy / peer, lower is better for cubepy)"
    )
    sec = results.get("import")
    if sec:
        c = sec["cubepy"]
        rows = [
            (
                "import cubepy",
                _cell(c),
                f"<= {TARGETS['import_ms']:.0f} ms",
                "met" if "s" in c and c["s"] * 1e3 <= TARGETS["import_ms"] else "MISSED",
                f"ml_dtypes loaded: {c.get('ml_dtypes_loaded')}, llvmlite loaded: {c.get('llvmlite_loaded')}",
            )
        ]
        nob = sec.get("cubepy (no bytecode cache)")
        if nob:
            rows.append(
                (
                    "import cubepy, no bytecode cache",
                    _cell(nob),
                    "",
                    "",
                    "every fresh process compiles cubepy's sources (PYTHONDONTWRITEBYTECODE=1)",
                )
            )
        for peer in ("triton", "numba-cuda"):
            note_skip(f"import {peer}", sec[peer])
            rows.append((f"import {peer} (reference)", _cell(sec[peer]), "", "", ""))
        _print_table("import time (fresh process, median)", ("what", "time", "target", "", "note"), rows)
    sec = results.get("cold_compile")
    if sec:
        rows = []
        for name, row in sec.items():
            c, t = row["cubepy"], row.get("triton")
            note_skip(f"cold compile {name} cubepy", c)
            note_skip(f"cold compile {name} triton", t)
            ratio = _ratio(c, t)
            met = "-" if ratio == "-" else ("met" if float(ratio) <= TARGETS["cold_compile"] else "MISSED")
            n = row.get("numba-cuda")
            if n is not None:
                note_skip(f"cold compile {name} numba-cuda", n)
            rows.append((name, _cell(c), _cell(t), ratio, met, _cell(n) if n is not None else "-", _ratio(c, n)))
        _print_table(
            "cold compile to an sm_90a cubin (fresh process, empty cache, after import; median)",
            ("kernel", "cubepy", "triton", "c/t", "<=1/3", "numba-cuda", "c/n"),
            rows,
        )
        print(
            "  cubepy stages (median ms): "
            + "; ".join(
                f"{name}: "
                + " ".join(
                    f"{k}={v * 1e3:.1f}"
                    for k, v in row["cubepy"].get("stages", {}).items()
                    if not k.startswith("child_")
                )
                for name, row in sec.items()
                if "stages" in row["cubepy"]
            )
        )
    sec = results.get("warm_launch")
    if sec:
        rows = []
        for name, r in sec.items():
            if name.startswith("_"):
                continue
            if "skipped" in r:
                note_skip(f"warm launch {name}", r)
                continue
            target = f"<= {TARGETS['warm_launch_us']:.0f} us" if name.startswith("4 args, prebuilt") else ""
            met = ("met" if r["median_s"] * 1e6 <= TARGETS["warm_launch_us"] else "MISSED") if target else ""
            rows.append((name, _ms(r["median_s"]), _ms(r["min_s"]), target, met))
        _print_table(
            "warm launch (cached kernel; host path with execution stubbed, then whole launches on CPU runtimes)",
            ("case", "median", "min", "target", ""),
            rows,
        )
    sec = results.get("disk_cache")
    if sec:
        rows = []
        for name, r in sec.items():
            cold, hit = r["cold"], r["disk_hit"]
            note_skip(f"disk cache {name} cold", cold)
            note_skip(f"disk cache {name} hit", hit)
            kernel = name.split(": ", 1)[1].replace("softmax_rows", "softmax")
            cubin = sec.get(f"compile: {kernel}", {}).get("cold", {})
            ratio = _ratio(hit, cubin)
            met = "-" if ratio == "-" else ("met" if float(ratio) < TARGETS["disk_cache"] else "MISSED")
            if "skipped" not in hit and not hit.get("disk_hit", True):
                met = "(not a disk hit)"
            rows.append((name, _cell(cold), _cell(hit), _ratio(hit, cold), ratio, met))
        _print_table(
            "on-disk cache: fresh process, empty cache vs kernel found on disk (median)",
            ("case", "cold (same path)", "disk hit", "hit/cold", "hit/cold compile to cubin", "<5%"),
            rows,
        )
    sec = results.get("interp")
    if sec:
        rows = []
        for name, row in sec.items():
            c = {"s": row["cubepy"]["median_s"]}
            for peer, result in row.items():
                if peer == "cubepy":
                    continue
                note_skip(f"interp {name} {peer}", result)
                speedup = "-" if "skipped" in result or not result.get("s") else f"{result['s'] / c['s']:.1f}x"
                rows.append(
                    (
                        name,
                        _ms(c["s"]),
                        peer,
                        _cell(result),
                        _ratio(c, result),
                        speedup,
                        result.get("note", result.get("measured_size", "")),
                    )
                )
        _print_table(
            "interp runtime, one launch (median) vs peers' CPU modes (~ = extrapolated from a smaller size)",
            ("case", "cubepy", "peer", "peer time", "c/p", "cubepy speedup", "peer setup"),
            rows,
        )
        print("  targets: >= 10x Triton's interpreter on vector add, >= 1x on the matmul, >= 1000x numba's simulator")
    if skips:
        print("\nskipped:")
        for line in skips:
            print(f"  {line}")
    return skips


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", help="write every figure (and every sample) to this file")
    parser.add_argument("--quick", action="store_true", help="fewer runs per figure (3 instead of 5), smaller batches")
    parser.add_argument("--runs", type=int, help="runs per figure (default 5, or 3 with --quick)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="run the fresh processes without Python's bytecode cache (PYTHONDONTWRITEBYTECODE=1)",
    )
    args = parser.parse_args(argv)
    global BYTECODE
    BYTECODE = not args.no_bytecode
    warm_bytecode()
    runs = args.runs or (3 if args.quick else 5)
    sections = args.only or SECTIONS
    results: dict = {
        "meta": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "runs": runs,
            "bytecode_cache": BYTECODE,
            "cpus": os.cpu_count(),
            "quick": args.quick,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "targets": TARGETS,
        }
    }
    start = time.perf_counter()
    if "import" in sections:
        results["import"] = section_import(runs)
    if "cold_compile" in sections:
        results["cold_compile"] = section_cold_compile(runs)
    if "warm_launch" in sections:
        results["warm_launch"] = section_warm_launch(args.quick)
    if "disk_cache" in sections:
        results["disk_cache"] = section_disk_cache(runs)
    if "interp" in sections:
        results["interp"] = section_interp(runs, args.quick)
    results["meta"]["wall_s"] = time.perf_counter() - start
    report(results)
    print(f"\n(total benchmark wall time {results['meta']['wall_s']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
