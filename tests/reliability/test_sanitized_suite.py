"""The runtime test suite with the sanitizer on reports nothing (slow: it reruns ``tests/runtime``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_runtime_suite_is_clean_under_the_sanitizer():
    env = {**os.environ, "CUBEPY_SANITIZE": "1", "CUBEPY_TEST_PTXAS": "0"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/runtime"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
