"""``python -m cubepy.devcheck``: every kernel case cubepy has, on the GPU and on the interp runtime, in one report.

For a person with a GPU.  It runs, within a time budget (8 minutes by default):

1. the pytest suites whose tests take the ``client`` fixture (``tests/runtime/cubecl`` and any other, TMA
   ones included), once with ``CUBEPY_TEST_RUNTIME=interp`` and once with ``cuda``, and compares the
   outcome of every test case; plus the cuda runtime's own GPU tests (``tests/runtime/cuda -m gpu``);
2. every ``examples/*.py`` module's ``run(client)`` on both runtimes, comparing the errors they report;
3. a TMA weight-gradient convolution (``cubepy_layouts.conv.conv2d_wgrad``) against
   ``torch.nn.grad.conv2d_weight``, checked and timed, when torch and that module exist
   (``cubepy.devcheck_wgrad``);
4. the warp-specialized wgmma GEMM (``cubepy_layouts.matmul.wgmma_matmul``) against the interp on a
   ragged shape, and against ``torch.matmul`` (cuBLAS) in bf16 at 4096^3 and two ragged shapes, with
   TFLOP/s beside cuBLAS's (``cubepy.devcheck_gemm``);
5. both FlashAttention kernels (``cubepy_layouts.attention``, wgmma and mma_sync) against the float64 oracle
   at ragged shapes, f16 and bf16, causal and not, and the Hopper kernel against torch's
   ``scaled_dot_product_attention`` at training sizes, with TFLOP/s beside torch's
   (``cubepy.devcheck_attention``).

Each phase runs in its own process, so a kernel fault that poisons the CUDA context (or a crash) costs
one phase, not the run.  The JSON report (``devcheck_report.json``, ``--report PATH``) holds the device,
driver and package versions, every case's status (``pass``, ``fail``: wrong only on the GPU,
``fail_both``: wrong on both runtimes, ``skip``, ``error``: the harness could not tell) and timings.
Without a GPU it writes a report saying ``skipped: <reason>`` and exits 0; otherwise it exits 1 when a
case failed.  ``--list`` shows what would run, on any machine.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pkgutil
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, cast

from cubepy.devcheck_attention import attention_phase
from cubepy.devcheck_gemm import gemm_phase
from cubepy.devcheck_wgrad import WGRAD_PROBLEMS, wgrad_phase

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUDGET_S = 480
# An example passes on the GPU when each error it reports is within this of the interp's.
EXAMPLE_ABS_TOL = 1e-3
EXAMPLE_REL_FACTOR = 10.0
_CLIENT_FIXTURE = re.compile(r"def test_\w+\([^)]*\bclient\b", re.S)
_DETAIL_CHARS = 1500


# ---------------------------------------------------------------------------------------- discovery


def discover_suites(root: Path = ROOT) -> list[dict[str, Any]]:
    """Test files that take the ``client`` fixture (so run on either runtime), grouped by folder."""
    tests = root / "tests"
    if not tests.is_dir():
        return []
    own = {tests / "runtime" / "cuda", tests / "runtime" / "interp"}  # runtime-specific, not comparable
    by_folder: dict[Path, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        if any(folder in path.parents for folder in own):
            continue
        text = path.read_text(errors="replace")
        if _CLIENT_FIXTURE.search(text):
            by_folder.setdefault(path.parent, []).append(str(path.relative_to(root)))
    suites = []
    for folder, files in by_folder.items():
        tma = [f for f in files if "tma" in Path(f).name.lower() or "TensorMapArg" in (root / f).read_text()]
        suites.append({"name": str(folder.relative_to(root)), "files": files, "tma_files": tma})
    return suites


def discover_examples(root: Path = ROOT) -> list[str]:
    """Module names under ``examples/`` (each defines ``run(client) -> dict``)."""
    folder = root / "examples"
    if not folder.is_dir():
        return []
    return sorted(info.name for info in pkgutil.iter_modules([str(folder)]) if not info.name.startswith("_"))


# ---------------------------------------------------------------------------------------- environment


def environment() -> dict[str, Any]:
    """Python, platform and the versions of every package the check depends on."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
    }
    for package in ("numpy", "llvmlite", "ml_dtypes", "cuda-bindings", "torch", "pytest", "pytest-xdist"):
        try:
            env[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            env[package] = None
    try:
        from cubepy.compiler.toolkit import find_ptxas

        ptxas = find_ptxas()
        env["ptxas"] = ptxas
        if ptxas:
            out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=30).stdout
            release = re.search(r"release [\d.]+, V[\d.]+", out)
            env["ptxas_version"] = release.group(0) if release else out.strip()[-80:]
    except Exception as exc:  # the report is still worth writing
        env["ptxas"] = f"error: {exc}"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        env["git_commit"] = head.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = None
    return env


def device_report() -> dict[str, Any]:
    """The GPU as the cuda runtime sees it."""
    from cubepy.runtime.cuda.device import get_device

    info = get_device(0).info
    return {
        "name": info.name,
        "compute_capability": list(info.compute_capability),
        "target": info.target,
        "driver_version": info.driver_version_text,
        "total_memory_gib": round(info.total_memory / 2**30, 1),
        "multiprocessors": info.multiprocessors,
        "max_shared_per_block_optin": info.max_shared_per_block_optin,
    }


# ---------------------------------------------------------------------------------------- pytest phase


def pytest_command(files: list[str], junit: Path, *, marker: str, jobs: int) -> list[str]:
    """The pytest command line for one run (the project's ``addopts`` replaced: we pick the markers)."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        *files,
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-m",
        marker,
        f"--junitxml={junit}",
    ]
    if jobs > 1 and importlib.util.find_spec("xdist") is not None:
        command += ["-n", str(jobs)]
    return command


def parse_junit(path: Path) -> dict[str, dict[str, Any]]:
    """Outcome, message and seconds of every test case in a JUnit XML file."""
    cases: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return cases
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        classname, test = case.get("classname") or "", case.get("name") or ""
        name = f"{classname}::{test}" if classname else f"{test}::(collection)"  # a module that failed to import
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped" and outcome == "passed":
                outcome, message = "skipped", child.get("message") or ""
        cases[name] = {
            "outcome": outcome,
            "message": message.strip()[:_DETAIL_CHARS],
            "seconds": float(case.get("time") or 0.0),
        }
    return cases


def compare_pytest(
    suite: str, interp: dict[str, dict[str, Any]], cuda: dict[str, dict[str, Any]], tma_files: list[str]
) -> list[dict[str, Any]]:
    """One report case per test: its status on the GPU, judged against the interp's outcome."""
    tma_modules = {Path(f).with_suffix("").as_posix().replace("/", ".") for f in tma_files}
    cases = []
    for name in sorted(set(interp) | set(cuda)):
        on_cpu, on_gpu = interp.get(name), cuda.get(name)
        case: dict[str, Any] = {
            "suite": suite,
            "name": name,
            "tma": any(name.startswith(module) for module in tma_modules),
            "interp": on_cpu and on_cpu["outcome"],
            "cuda": on_gpu and on_gpu["outcome"],
            "seconds": {"interp": on_cpu and on_cpu["seconds"], "cuda": on_gpu and on_gpu["seconds"]},
        }
        if on_gpu is None:
            case.update(status="error", detail="not run on cuda (collection failed or the run timed out)")
        elif on_gpu["outcome"] == "passed":
            case["status"] = "pass"
        elif on_gpu["outcome"] == "skipped":
            case.update(status="skip", detail=on_gpu["message"])
        elif on_cpu is not None and on_cpu["outcome"] == "failed":
            case.update(status="fail_both", detail=on_gpu["message"])
        else:
            case.update(status="fail", detail=on_gpu["message"])
        cases.append(case)
    return cases


def run_pytest_phase(
    suites: list[dict[str, Any]], deadline: float, jobs: int, workdir: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Both runtimes' runs of every suite and the GPU tests, concurrently; the compared cases."""
    files = [f for suite in suites for f in suite["files"]]
    runs: dict[str, tuple[subprocess.Popen[bytes], Path, Any]] = {}
    base_env = dict(os.environ, PYTHONUNBUFFERED="1")

    def start(label: str, paths: list[str], runtime: str, marker: str) -> None:
        junit = workdir / f"{label}.xml"
        log = open(workdir / f"{label}.log", "w")  # noqa: SIM115  (closed once the run ends, below)
        env = dict(base_env, CUBEPY_TEST_RUNTIME=runtime)
        runs[label] = (
            subprocess.Popen(
                pytest_command(paths, junit, marker=marker, jobs=jobs),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            ),
            junit,
            log,
        )

    if files:
        start("interp", files, "interp", "not slow and not gpu")
        start("cuda", files, "cuda", "not slow and not gpu")
    if (ROOT / "tests" / "runtime" / "cuda").is_dir():
        start("cuda_gpu_tests", ["tests/runtime/cuda"], "cuda", "gpu")
    notes: dict[str, Any] = {}
    for label, (process, _, log) in runs.items():
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 1))
            notes[label] = {"returncode": process.returncode}
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            notes[label] = {"returncode": None, "timed_out": True}
        log.close()
        notes[label]["log_tail"] = (workdir / f"{label}.log").read_text(errors="replace")[-_DETAIL_CHARS:]
    cases: list[dict[str, Any]] = []
    results = {label: parse_junit(junit) for label, (_, junit, _) in runs.items()}
    for suite in suites:
        prefix = suite["name"].replace("/", ".")
        cases += compare_pytest(
            suite["name"],
            _starting_with(results.get("interp", {}), prefix),
            _starting_with(results.get("cuda", {}), prefix),
            suite["tma_files"],
        )
    gpu_tests = results.get("cuda_gpu_tests", {})
    cases += compare_pytest("tests/runtime/cuda (gpu)", {}, gpu_tests, [])
    for label, note in notes.items():
        if note.get("timed_out") or not results.get(label):  # a run that reported nothing must not pass silently
            cases.append(
                {
                    "suite": "pytest",
                    "name": f"pytest run '{label}'",
                    "status": "error",
                    "detail": ("timed out (raise --budget); " if note.get("timed_out") else "no results; ")
                    + note["log_tail"],
                }
            )
    return cases, notes


def _starting_with(outcomes: dict[str, dict[str, Any]], prefix: str) -> dict[str, dict[str, Any]]:
    return {name: outcome for name, outcome in outcomes.items() if name.startswith(prefix)}


# ---------------------------------------------------------------------------------------- in-process phases


def examples_phase() -> list[dict[str, Any]]:
    """Every example's ``run(client)`` on interp then cuda, their reported errors compared."""
    from cubepy.runtime.client import client

    sys.path.insert(0, str(ROOT))
    cases = []
    for name in discover_examples():
        case: dict[str, Any] = {"suite": "examples", "name": name, "seconds": {}}
        results = {}
        for runtime in ("interp", "cuda"):
            start = time.perf_counter()
            try:
                module = importlib.import_module(f"examples.{name}")
                results[runtime] = module.run(client(runtime))
                if runtime == "cuda":
                    client("cuda").sync()
            except Exception as exc:
                results[runtime] = None
                case.setdefault("detail", "")
                case["detail"] += f"{runtime}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-800:]}"
            case["seconds"][runtime] = round(time.perf_counter() - start, 3)
        case["interp"], case["cuda"] = results.get("interp"), results.get("cuda")
        case["status"] = judge_example(results.get("interp"), results.get("cuda"), case)
        cases.append(case)
    return cases


def judge_example(interp: dict[str, Any] | None, cuda: dict[str, Any] | None, case: dict[str, Any]) -> str:
    """``pass`` when every error the GPU run reports is within tolerance of the CPU run's."""
    if cuda is None:
        return "fail" if interp is not None else "fail_both"
    if interp is None:
        return "error"  # no reference: the GPU numbers are in the report, unjudged
    problems = []
    for key in sorted(set(interp) | set(cuda)):
        want, got = interp.get(key), cuda.get(key)
        if isinstance(want, (int, float)) and isinstance(got, (int, float)):
            limit = max(EXAMPLE_ABS_TOL, EXAMPLE_REL_FACTOR * abs(want))
            if not abs(got) <= limit:  # also catches NaN
                problems.append(f"{key}: {got} on cuda, {want} on interp (limit {limit:g})")
        elif want != got:
            problems.append(f"{key}: {got!r} on cuda, {want!r} on interp")
    if problems:
        case["detail"] = "; ".join(problems)
        return "fail"
    return "pass"


PHASES = {"examples": examples_phase, "wgrad": wgrad_phase, "gemm": gemm_phase, "attention": attention_phase}


def run_phase_subprocess(name: str, deadline: float, workdir: Path) -> list[dict[str, Any]]:
    """Run one in-process phase in a child process (a sticky CUDA error or a crash stays there)."""
    output = workdir / f"{name}.json"
    command = [sys.executable, "-m", "cubepy.devcheck", "--phase", name, "--phase-output", str(output)]
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=max(deadline - time.monotonic(), 1)
        )
    except subprocess.TimeoutExpired:
        return [{"suite": name, "name": name, "status": "error", "detail": "timed out (raise --budget)"}]
    if output.exists():
        return cast("list[dict[str, Any]]", json.loads(output.read_text()))
    return [
        {
            "suite": name,
            "name": name,
            "status": "error",
            "detail": f"the phase exited with {done.returncode}:\n{(done.stdout + done.stderr)[-_DETAIL_CHARS:]}",
        }
    ]


# ---------------------------------------------------------------------------------------- the report


def summarize(cases: list[dict[str, Any]]) -> dict[str, int]:
    """How many cases ended in each status."""
    counts: dict[str, int] = {}
    for case in cases:
        counts[case["status"]] = counts.get(case["status"], 0) + 1
    return counts


def write_report(report: dict[str, Any], path: Path) -> None:
    """Write the JSON report atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str))
    os.replace(tmp, path)


def print_summary(report: dict[str, Any]) -> None:
    """A short human summary: device, counts, and every case that did not pass."""
    device = report.get("device") or {}
    print(
        f"cubepy devcheck: {report['status']}"
        + (f" on {device.get('name')} (driver {device.get('driver_version')})" if device else "")
    )
    for case in report.get("cases", []):
        if case["status"] not in ("pass", "skip"):
            detail = (case.get("detail") or "").strip().splitlines()
            print(
                f"  {case['status']:>9}  {case['suite']}: {case['name']}"
                + (f"  -- {detail[0][:160]}" if detail else "")
            )
    for case in report.get("cases", []):
        if case.get("suite") == "gemm" and "cubepy_tflops" in case:
            print(
                f"  gemm {case['name']}: cubepy {case['cubepy_tflops']} TFLOP/s, cuBLAS {case['torch_tflops']} "
                f"TFLOP/s ({case['ratio_to_cublas']}x)"
            )
        if case.get("suite") == "attention" and "cubepy_tflops" in case:
            print(
                f"  attention {case['name']}: cubepy {case['cubepy_tflops']} TFLOP/s, torch SDPA "
                f"{case['torch_tflops']} TFLOP/s ({case['ratio_to_torch']}x)"
            )
        if case.get("suite") == "wgrad" and "cubepy_ms" in case:
            print(
                f"  wgrad {case['name']}: cubepy {case['cubepy_ms']} ms ({case['cubepy_tflops']} TFLOP/s), "
                f"torch f16 {case['torch_f16_ms']} ms"
            )
    print(f"  summary: {report.get('summary', {})}; {report.get('duration_s', 0):.0f} s; report: {report['path']}")


def main(argv: list[str] | None = None) -> int:
    """Run the device check; 0 when everything passed or there is no GPU, 1 when a case failed."""
    parser = argparse.ArgumentParser(prog="python -m cubepy.devcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--report", default="devcheck_report.json", help="where to write the JSON report")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds for the whole check")
    parser.add_argument("--jobs", type=int, default=4, help="pytest-xdist workers per pytest run (1: none)")
    parser.add_argument(
        "--skip", default="", help="comma-separated phases to leave out: pytest,examples,wgrad,gemm,attention"
    )
    parser.add_argument("--list", action="store_true", help="print what would run and exit")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--phase-output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.phase:  # a child process of run_phase_subprocess
        write_report(PHASES[args.phase](), Path(args.phase_output))  # type: ignore[arg-type]
        return 0
    if args.list:
        print(
            json.dumps(
                {"pytest_suites": discover_suites(), "examples": discover_examples(), "wgrad_problems": WGRAD_PROBLEMS},
                indent=2,
            )
        )
        return 0

    started = time.monotonic()
    deadline = started + args.budget
    path = Path(args.report).resolve()
    report: dict[str, Any] = {
        "cubepy_devcheck": 1,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "path": str(path),
        "environment": environment(),
        "device": None,
        "cases": [],
    }
    from cubepy.runtime import cuda

    reason = cuda.unavailable_reason()
    if reason is not None:
        report.update(status=f"skipped: {reason}", reason=reason, summary={}, duration_s=time.monotonic() - started)
        write_report(report, path)
        print(f"cubepy devcheck skipped: {reason}\n  report: {path}")
        return 0
    report["device"] = device_report()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    with tempfile.TemporaryDirectory(prefix="cubepy-devcheck-") as scratch:
        workdir = Path(scratch)
        if "pytest" not in skip:
            # pytest first, with most of the budget; the GPU is quiet again before wgrad times anything.
            cases, notes = run_pytest_phase(discover_suites(), started + 0.55 * args.budget, args.jobs, workdir)
            report["cases"] += cases
            report["pytest_runs"] = notes
        if "examples" not in skip:
            report["cases"] += run_phase_subprocess("examples", started + 0.7 * args.budget, workdir)
        if "wgrad" not in skip:
            report["cases"] += run_phase_subprocess("wgrad", started + 0.8 * args.budget, workdir)
        if "gemm" not in skip:
            report["cases"] += run_phase_subprocess("gemm", started + 0.88 * args.budget, workdir)
        if "attention" not in skip:
            report["cases"] += run_phase_subprocess("attention", deadline, workdir)
    report["summary"] = summarize(report["cases"])
    failed = any(case["status"] in ("fail", "fail_both", "error") for case in report["cases"])
    report["status"] = "failed" if failed else "passed"
    report["duration_s"] = round(time.monotonic() - started, 1)
    write_report(report, path)
    print_summary(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
