"""Every kernel the CubeCL port and the examples launch, run on interp and on cpu and compared.

The launched tests run in a child pytest with ``CUBEPY_TEST_RUNTIME=differential``
(``tests/runtime/cpu/differential.py``): each launch runs on both runtimes, results must be bit-equal
(transcendental kernels: within ``ULP_BOUND``); kernels the cpu runtime does not support are listed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SUITES = ["tests/runtime/cubecl", "tests/test_examples.py", "tests/layouts"]
# Kernels the cpu runtime declines, each for a stated reason: the wgmma GEMM's default form is a cluster launch.
EXPECTED_UNSUPPORTED = {"wgmma_gemm"}


@pytest.mark.slow
def test_cubecl_suite_and_examples_agree_on_interp_and_cpu(tmp_path):
    report_path = tmp_path / "differential.json"
    env = dict(
        os.environ,
        CUBEPY_TEST_RUNTIME="differential",
        CUBEPY_DIFFERENTIAL_REPORT=str(report_path),
        CUBEPY_TEST_PTXAS="0",
    )
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *SUITES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-4000:]
    report = json.loads(report_path.read_text())
    shapes = sorted(report["shapes"].values())
    print(
        f"\ncompared {report['compared']} launches of {len(report['kernels'])} kernels; "
        f"within the ULP bound: {report['within_ulp']}; cpu-unsupported: {sorted(report['skipped'])}; "
        f"units ran as: {', '.join(f'{shape} {shapes.count(shape)}' for shape in sorted(set(shapes)))}"
    )
    assert report["differences"] == []
    assert "unit loops" in report["shapes"].values()  # loop fission at barriers is among what is compared
    assert len(report["kernels"]) >= 80
    assert set(report["skipped"]) == EXPECTED_UNSUPPORTED
    for reason in report["skipped"].values():
        assert "is not supported by back end cpu" in reason or "the cpu runtime runs no clusters" in reason
