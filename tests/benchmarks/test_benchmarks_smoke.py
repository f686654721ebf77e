"""Smoke tests of ``python -m benchmarks``: the pieces run and the report prints (no timing asserts)."""

from __future__ import annotations

import json

import pytest

from benchmarks import __main__ as bench
from benchmarks import compile_isolation, warm_launch


def test_a_worker_reports_a_result_in_a_fresh_process():
    result = bench.run_worker("import", {})
    assert "s" in result and result["ml_dtypes_loaded"] is False and result["llvmlite_loaded"] is False


def test_an_unknown_or_failing_task_is_a_skip_not_a_crash():
    result = bench.run_worker("triton_interp", {"case": "no-such-case", "repeats": 1}, {"TRITON_INTERPRET": "1"})
    assert "skipped" in result


def test_warm_launch_measures_both_argument_counts():
    result = warm_launch.bench(quick=True)
    assert {"4 args, prebuilt args", "16 args, prebuilt args"} <= set(result)
    assert result["_stats"]["misses"] == 2  # one compile per kernel, every other launch a hit
    assert all(r["median_s"] > 0 for name, r in result.items() if not name.startswith("_"))


def test_compile_isolation_measures_fork_and_server():
    (row,) = compile_isolation.measure([0.0], repeats=1)
    assert set(row) == {"gib", "fork llvm ms", "fork compile ms", "server llvm ms", "server compile ms"}
    assert all(row[key] > 0 for key in row if key != "gib")


def test_the_report_prints_every_section_and_skips(capsys):
    results = {
        "meta": {"python": "3", "machine": "x", "runs": 1},
        "import": {
            "cubepy": {"s": 0.1, "ml_dtypes_loaded": False, "llvmlite_loaded": False},
            "triton": {"skipped": "not installed"},
            "numba-cuda": {"s": 1.0},
        },
        "cold_compile": {
            "vector_add": {
                "cubepy": {"s": 0.1, "stages": {"expand": 0.01}},
                "triton": {"s": 0.5},
                "numba-cuda": {"skipped": "no nvvm"},
            }
        },
        "warm_launch": {"4 args, prebuilt args": {"median_s": 4e-6, "min_s": 3e-6}, "_stats": {}},
        "disk_cache": {"compile: vector_add": {"cold": {"s": 0.1}, "disk_hit": {"s": 0.002}, "fill": {}}},
        "interp": {
            "vector_add": {
                "cubepy": {"median_s": 0.01},
                "triton-interp": {"s": 1.0, "note": "n"},
                "numba-sim": {"s": 100.0, "extrapolated": True},
            }
        },
    }
    skips = bench.report(results)
    out = capsys.readouterr().out
    for title in ("import time", "cold compile", "warm launch", "on-disk cache", "interp runtime"):
        assert title in out
    assert "~100000.0 ms" in out and len(skips) == 2
    json.dumps(results)


@pytest.mark.slow
def test_the_quick_run_of_one_section_writes_json(tmp_path):
    path = tmp_path / "out.json"
    assert bench.main(["--quick", "--runs", "1", "--only", "warm_launch", "--json", str(path)]) == 0
    assert "warm_launch" in json.loads(path.read_text())
