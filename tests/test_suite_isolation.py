"""The test suite keeps off the user's kernel cache and leaves no folder behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_run_ignores_a_warm_user_cache_and_removes_its_own(tmp_path):
    user_cache = tmp_path / "user-cache"
    (user_cache / "compile").mkdir(parents=True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "CUBEPY_CACHE_DIR": str(user_cache), "TMPDIR": str(scratch), "CUBEPY_TEST_PTXAS": "0"}
    test = "tests/frontend/test_kernel.py::test_compile_calls_the_hook_with_a_definition"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            test,
            "tests/runtime/cubecl/test_index.py::test_assign_index[f32]",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert list(scratch.glob("cubepy-test-cache-*")) == []
    assert list(user_cache.rglob("*.pkl")) == []
