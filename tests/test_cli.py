"""The `cubepy` command: compile, info and demo, run as a user would (in a subprocess)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cubepy(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cubepy.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_compile_emits_ir_and_ptx(tmp_path):
    result = _cubepy(
        "compile", str(ROOT / "examples/vector_add.py") + ":vector_add", "--emit", "ir", "ptx", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "kernel vector_add cube_dim=(256, 1, 1) checked" in result.stdout
    assert ".entry vector_add" in result.stdout
    assert ".target sm_90a" in result.stdout


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not found")
def test_compile_resources_with_comptime(tmp_path):
    result = _cubepy(
        "compile",
        str(ROOT / "examples/matmul_tiled.py") + ":matmul",
        "--emit",
        "resources",
        "--comptime",
        "tile=16",
        "--cube-dim",
        "16,16",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    # Two 16x16 f32 tiles of shared memory.
    assert "shared_bytes=2048" in result.stdout


def test_compile_missing_comptime_is_a_clear_error(tmp_path):
    result = _cubepy("compile", str(ROOT / "examples/matmul_tiled.py") + ":matmul", cwd=tmp_path)
    assert result.returncode != 0
    assert "--comptime tile=VALUE" in result.stderr


def test_compile_unknown_kernel(tmp_path):
    result = _cubepy("compile", str(ROOT / "examples/vector_add.py") + ":nope", cwd=tmp_path)
    assert result.returncode != 0
    assert "no kernel named 'nope'" in result.stderr


def test_info_lists_runtimes_and_settings(tmp_path):
    result = _cubepy("info", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "runtimes: interp" in result.stdout
    assert "CUBEPY_RUNTIME=" in result.stdout


def test_bad_setting_is_named(tmp_path):
    import os

    env = dict(os.environ, CUBEPY_RUNTIME="metal")
    result = subprocess.run(
        [sys.executable, "-m", "cubepy.cli", "demo"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode != 0
    assert "CUBEPY_RUNTIME='metal'" in result.stderr


def test_python_dash_m_cubepy_is_the_cubepy_command(tmp_path):
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cubepy",
            "compile",
            str(ROOT / "examples/vector_add.py") + ":vector_add",
            "--emit",
            "ir",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "kernel vector_add cube_dim=(256, 1, 1) checked" in result.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "cubepy", "--help"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    script = subprocess.run(
        [sys.executable, "-m", "cubepy.cli", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert usage.returncode == 0 and usage.stdout.startswith("usage: cubepy ")
    assert usage.stdout == script.stdout  # the same command as the `cubepy` script (cubepy.cli:main)
    missing = subprocess.run(
        [sys.executable, "-m", "cubepy"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    assert missing.returncode == 2 and "the following arguments are required: command" in missing.stderr
