"""The device check's harness: the no-GPU report, discovery, and judging outcomes (no GPU needed)."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from cubepy import devcheck
from cubepy.runtime import cuda


@pytest.mark.skipif(cuda.unavailable_reason() is None, reason="a GPU is available: the check would really run")
def test_without_a_gpu_the_check_writes_a_skipped_report_and_exits_0(tmp_path, capsys):
    path = tmp_path / "out" / "report.json"
    assert devcheck.main(["--report", str(path)]) == 0
    report = json.loads(path.read_text())
    reason = cuda.unavailable_reason()
    assert report["status"] == f"skipped: {reason}" and report["reason"] == reason
    assert report["environment"]["python"] and report["cases"] == []
    assert reason in capsys.readouterr().out


def test_discovery_finds_client_fixture_suites_and_examples():
    suites = {suite["name"]: suite for suite in devcheck.discover_suites()}
    assert "tests/runtime/cubecl" in suites
    assert not any(name.startswith(("tests/runtime/cuda", "tests/runtime/interp")) for name in suites)
    assert "vector_add" in devcheck.discover_examples()


def test_list_prints_the_plan(capsys):
    assert devcheck.main(["--list"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert set(plan) == {"pytest_suites", "examples", "wgrad_problems"}


@pytest.mark.parametrize(
    "interp, cuda_result, status",
    [
        ({"max error": 1e-7}, {"max error": 5e-7}, "pass"),
        ({"max error": 0.0}, {"max error": 9e-4}, "pass"),  # within the absolute floor
        ({"max error": 1e-7}, {"max error": 0.5}, "fail"),
        ({"max error": 1e-7}, {"max error": float("nan")}, "fail"),
        ({"max error": 1e-7}, None, "fail"),
        (None, None, "fail_both"),
        (None, {"max error": 0.0}, "error"),
        ({"shape": "4x4"}, {"shape": "4x5"}, "fail"),
    ],
)
def test_judge_example(interp, cuda_result, status):
    assert devcheck.judge_example(interp, cuda_result, {}) == status


def test_compare_pytest_tells_gpu_only_failures_from_shared_ones():
    interp = {
        "m::a": {"outcome": "passed", "message": "", "seconds": 0.1},
        "m::b": {"outcome": "passed", "message": "", "seconds": 0.1},
        "m::c": {"outcome": "failed", "message": "x", "seconds": 0.1},
        "m::d": {"outcome": "passed", "message": "", "seconds": 0.1},
    }
    gpu = {
        "m::a": {"outcome": "passed", "message": "", "seconds": 0.2},
        "m::b": {"outcome": "failed", "message": "mismatch", "seconds": 0.2},
        "m::c": {"outcome": "failed", "message": "x", "seconds": 0.2},
    }
    statuses = {case["name"]: case["status"] for case in devcheck.compare_pytest("s", interp, gpu, [])}
    assert statuses == {"m::a": "pass", "m::b": "fail", "m::c": "fail_both", "m::d": "error"}


@pytest.mark.slow  # reruns a small suite in-process on both runtimes
def test_the_pytest_phase_runs_both_runtimes_and_compares(tmp_path, monkeypatch):
    suite = tmp_path / "tests" / "kernels"
    suite.mkdir(parents=True)
    (tmp_path / "tests" / "conftest.py").write_text(
        textwrap.dedent("""
        import os, pytest

        @pytest.fixture
        def client():
            return os.environ["CUBEPY_TEST_RUNTIME"]
    """)
    )
    (suite / "test_tma_copy.py").write_text(
        textwrap.dedent("""
        import pytest

        def test_same(client):
            assert client in ("interp", "cuda")

        def test_gpu_only_bug(client):
            assert client == "interp"

        def test_skipped_on_gpu(client):
            if client == "cuda":
                pytest.skip("no TMA here")
    """)
    )
    (suite / "test_unrelated.py").write_text("def test_cpu_only():\n    pass\n")
    monkeypatch.setattr(devcheck, "ROOT", tmp_path)
    suites = devcheck.discover_suites(tmp_path)
    assert suites == [
        {
            "name": "tests/kernels",
            "files": ["tests/kernels/test_tma_copy.py"],
            "tma_files": ["tests/kernels/test_tma_copy.py"],
        }
    ]
    work = tmp_path / "work"
    work.mkdir()
    cases, notes = devcheck.run_pytest_phase(suites, time.monotonic() + 120, 1, work)
    by_name = {case["name"].split("::")[-1]: case for case in cases}
    assert by_name["test_same"]["status"] == "pass" and by_name["test_same"]["tma"]
    assert by_name["test_gpu_only_bug"]["status"] == "fail"
    assert "assert 'cuda' == 'interp'" in by_name["test_gpu_only_bug"]["detail"]
    assert by_name["test_skipped_on_gpu"]["status"] == "skip"
    assert notes["interp"]["returncode"] == 0 and notes["cuda"]["returncode"] == 1


def test_the_gemm_phase_compares_a_runtime_with_the_interp():
    # Without a GPU the comparison runs interp against interp: the harness, not the device, is under test.
    import numpy as np

    import cubepy as cp
    from cubepy.devcheck_gemm import _against_interp
    from cubepy_layouts.matmul import wgmma_matmul

    interp = cp.client("interp")
    case = _against_interp(np, wgmma_matmul, interp, interp)
    assert case["status"] == "pass" and case["max_excess_over_bound"] <= 0, case
    assert "gemm" in devcheck.PHASES


@pytest.mark.parametrize("kernel", ["wgmma", pytest.param("mma_sync", marks=pytest.mark.slow)])  # 4 s, 13 s on cpu
def test_the_attention_phase_judges_a_runtime_against_the_oracle(kernel):
    # Without a GPU the cpu runtime stands in for it: the harness's bounds are under test, on a real kernel run.
    import types

    import ml_dtypes
    import numpy as np

    import cubepy as cp
    import cubepy_layouts.attention as attention
    from cubepy.devcheck_attention import _against_oracle

    cpu = cp.client("cpu")
    shape, dtype = (1, 1, 70, 90, 64), np.dtype(ml_dtypes.bfloat16)
    case = _against_oracle(np, attention, cpu, kernel, shape, dtype, True)
    assert case["status"] == "pass", case
    assert case["o_excess_over_bound"] <= 0 and case["lse_max_error"] <= 1e-4

    def one_output_off(client, q, *args):
        """The real kernel, then one output element moved by more than the bound allows."""
        o, lse = attention.flash_attention(client, q, *args)
        wrong = client.read(o).astype(np.float64)
        wrong[0, 0, 5, 7] += 0.05
        return client.create(wrong.astype(dtype)), lse

    sabotaged = types.SimpleNamespace(
        flash_attention=one_output_off,
        AttentionConfig=attention.AttentionConfig,
        attention_reference=attention.attention_reference,
    )
    case = _against_oracle(np, sabotaged, cpu, kernel, shape, dtype, True)
    assert case["status"] == "fail" and case["o_excess_over_bound"] > 0, case
    assert "attention" in devcheck.PHASES


def test_speed_fields_give_milliseconds_and_tflops_of_both():
    from cubepy.devcheck_timing import speed_fields

    # 2e12 flops in 10 ms is 200 TFLOP/s, in 8 ms 250; times keep 4 places, rates 2
    assert speed_fields(10.000049, 8.0, 2e12) == {"cubepy_ms": 10.0, "cubepy_tflops": 200.0, "torch_tflops": 250.0}
