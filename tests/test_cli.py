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


EARLY_READ = """
import cubepy as cp
from cubepy import UNIT_POS, Array, LocalArray, SharedMemory, cube, f32


@cube(launch=True)
def early_read(out: Array[f32]):
    tile = SharedMemory[cp.f16](64 * 64, alignment=1024)
    for i in range(UNIT_POS, 64 * 64, 128):
        tile[i] = cp.f16(0.0)
    cp.sync_cube()
    acc = LocalArray[f32](32)
    for i in cp.unroll(range(32)):
        acc[i] = f32(0.0)
    desc = cp.wgmma_descriptor(tile, 16, 1024, "128B")
    cp.wgmma_fence()
    cp.wgmma_mma_async(acc, desc, desc, shape=(64, 64, 16), elem=cp.f16)
    cp.wgmma_commit_group()
    out[UNIT_POS] = acc[0]  # read while the wgmma may still write it: ptxas waits here of its own accord
    cp.wgmma_wait_group(0)
    out[UNIT_POS + 128] = acc[1]
"""


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not found")
def test_compile_prints_the_synchronization_ptxas_adds(tmp_path):
    (tmp_path / "early.py").write_text(EARLY_READ)
    result = _cubepy("compile", "early.py:early_read", "--cube-dim", "128", "--emit", "resources", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("cubepy compile: ptxas: ")]
    assert len(notes) == 1 and "(C7517) warpgroup.wait is injected" in notes[0], result.stderr


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


GENERIC_KERNEL = """
import cubepy as cp

F = cp.TypeVar("F", cp.Float)


@cp.cube(launch=True)
def scale(x: cp.Array[F], factor: F):
    x[cp.ABSOLUTE_POS] = x[cp.ABSOLUTE_POS] * factor
"""


def test_compile_binds_a_generic_kernels_type_parameter(tmp_path):
    (tmp_path / "generic_mod.py").write_text(GENERIC_KERNEL)
    result = _cubepy("compile", "generic_mod.py:scale", "--emit", "ir", "--comptime", "F=f64", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "f64 = mul" in result.stdout
    missing = _cubepy("compile", "generic_mod.py:scale", cwd=tmp_path)
    assert missing.returncode != 0 and "--comptime F=TYPE (one of f16, bf16, f32, f64)" in missing.stderr


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


LAUNCHING_FILE = """
import numpy as np
import cubepy as cp


@cp.cube(launch=True)
def first(out: cp.Array[cp.f32]):
    out[cp.ABSOLUTE_POS] = 1.0


client = cp.client()
buf = client.zeros((4,), np.float32)
first.launch(client, cp.CubeCount(1), cp.CubeDim(4), cp.ArrayArg(buf))
open("launched.flag", "w").write("the launch ran")


@cp.cube(launch=True)
def later(out: cp.Array[cp.f32]):
    out[0] = 2.0
"""


def test_compile_runs_no_launch_and_prints_its_cube_dim(tmp_path):
    (tmp_path / "launching.py").write_text(LAUNCHING_FILE)
    result = _cubepy("compile", "launching.py:first", "--emit", "ir", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "launched.flag").exists()  # the file's top-level launch did not run
    assert "stopped importing launching.py at launching.py:13 (a launch of first)" in result.stderr
    assert "first with cube_dim=(256, 1, 1) (the default; --cube-dim" in result.stderr
    assert "kernel first cube_dim=(256, 1, 1) checked" in result.stdout
    later = _cubepy("compile", "launching.py:later", "--emit", "ir", "--cube-dim", "8,2", cwd=tmp_path)
    assert (
        later.returncode != 0 and "no kernel named 'later' before its first launch, at launching.py:13" in later.stderr
    )
    assert not (tmp_path / "launched.flag").exists()


def test_compile_help_states_the_default_cube_dim(tmp_path):
    usage = _cubepy("compile", "--help", cwd=tmp_path)
    assert "(default 256:" in " ".join(usage.stdout.split())
    assert "stops the import at the first kernel launch" in " ".join(usage.stdout.split())


def test_dumps_keep_one_file_per_target(tmp_path):
    import os

    env = dict(os.environ, CUBEPY_DUMP="ptx", CUBEPY_DUMP_DIR=str(tmp_path / "dumps"))
    kernel = str(ROOT / "examples/vector_add.py") + ":vector_add"
    for target in ("sm_90a", "sm_80"):
        done = subprocess.run(
            [sys.executable, "-m", "cubepy.cli", "compile", kernel, "--target", target, "--cube-dim", "64"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert "vector_add with cube_dim=(64, 1, 1)" in done.stderr and "the default" not in done.stderr
    folder = tmp_path / "dumps" / "vector_add"
    assert ".target sm_90a" in (folder / "kernel.sm_90a.ptx").read_text()
    assert ".target sm_80" in (folder / "kernel.sm_80.ptx").read_text()
