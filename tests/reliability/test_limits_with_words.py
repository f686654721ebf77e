"""Limits a user can hit say what happened (issue 28): big kernels, a full disk, deep recursion, bad shapes.

The size thresholds are lowered through their module constants (the real ones take seconds to reach).
"""

from __future__ import annotations

import errno
import inspect
import pathlib
import sys
import tempfile

import numpy as np
import pytest

import cubepy as cp
import cubepy.frontend.kernel as kernel_module
import cubepy.frontend.state as state_module
from cubepy import ABSOLUTE_POS, Array, Comptime, config, cube, f32
from cubepy.compiler import ptxas
from cubepy.errors import CompileError, CubeError, ExpandError, LaunchError
from cubepy.frontend.function import MAX_CALL_DEPTH

# -- big kernels: progress on stderr ----------------------------------------------------------------


@cube(launch=True)
def unrolled(out: Array[f32], n: Comptime[int]):
    x = out[ABSOLUTE_POS]
    for i in cp.unroll(range(n)):
        x = x * f32(1.5) + f32(i)  # PROGRESS
    out[ABSOLUTE_POS] = x


def _line(marker: str) -> int:
    lines, first = inspect.getsourcelines(unrolled.fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


@pytest.fixture
def small_thresholds(monkeypatch, tmp_path):
    """Progress every 100 instructions, a "large" kernel from 50, and an empty disk cache (so builds happen)."""
    monkeypatch.setattr(state_module, "PROGRESS_EVERY", 100)
    monkeypatch.setattr(kernel_module, "LARGE_KERNEL_INSTRUCTIONS", 50)
    with config.override(CUBEPY_CACHE_DIR=str(tmp_path)):
        yield


def _expected(n: int) -> np.ndarray:
    x = np.zeros(32, np.float64)
    for i in range(n):
        x = x * 1.5 + i
    return x.astype(np.float32)


@pytest.mark.parametrize("runtime", [name for name in ("interp", "cpu") if name in cp.runtimes()])
def test_a_large_kernel_reports_expansion_progress_and_its_size(runtime, small_thresholds, capsys):
    n = 101 if runtime == "interp" else 103  # a comptime value no other test launches: a fresh build
    client = cp.client(runtime)
    out = client.zeros((32,), np.float32)
    unrolled.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), n)
    np.testing.assert_allclose(client.read(out), _expected(n), rtol=1e-5)
    err = capsys.readouterr().err
    where = f"test_limits_with_words.py:{_line('# PROGRESS')}"
    assert "[cubepy] expanding kernel unrolled: 100 IR instructions so far" in err and where in err
    assert "[cubepy] kernel unrolled: " in err and "IR instructions (more than 50), expanded in" in err
    assert "docs/semantics/limits.md" in err
    llvm = "LLVM's O3 for the cpu runtime starts now"
    assert (llvm in err) == (runtime == "cpu")


@pytest.mark.skipif(not ptxas.available(), reason="no ptxas")
def test_compiling_a_large_kernel_says_when_llvm_starts(small_thresholds, capsys):
    compiled = unrolled.compile(cp.CubeDim(32), cp.ArrayArg(cp.client("interp").zeros((32,), np.float32)), 60)
    assert compiled.ptx
    assert "LLVM's O3 and PTX emission for sm_90a start now" in capsys.readouterr().err


def test_a_small_kernel_says_nothing(capsys, tmp_path):
    client = cp.client("interp")
    with config.override(CUBEPY_CACHE_DIR=str(tmp_path)):
        unrolled.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.zeros((32,), np.float32)), 7)
    assert "[cubepy]" not in capsys.readouterr().err


def test_the_documented_thresholds():
    assert kernel_module.LARGE_KERNEL_INSTRUCTIONS == 5_000
    assert state_module.PROGRESS_EVERY == 50_000


# -- a full disk while compiling ----------------------------------------------------------------------


@pytest.mark.skipif(not ptxas.available(), reason="no ptxas")
@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.ENOSPC, "the disk is full"), (errno.EDQUOT, "quota"), (errno.EFBIG, "file size limit")],
)
def test_a_full_disk_while_compiling_is_a_compile_error_naming_the_folder(monkeypatch, tmp_path, code, words):
    def no_room(self, *args, **kwargs):
        raise OSError(code, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", no_room)
    with config.override(CUBEPY_CACHE_DIR=str(tmp_path)), pytest.raises(CompileError) as caught:
        unrolled.compile(cp.CubeDim(32), cp.ArrayArg(cp.client("interp").zeros((32,), np.float32)), 3 + code % 7)
    message = str(caught.value)
    assert words in message
    assert tempfile.gettempdir() in message and "ptxas" in message
    assert errno.errorcode[code] in message
    assert isinstance(caught.value.__cause__, OSError)


def test_another_write_failure_is_a_compile_error_too(monkeypatch):
    if not ptxas.available():
        pytest.skip("no ptxas")

    def denied(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(pathlib.Path, "write_text", denied)
    with pytest.raises(CompileError, match=r"cannot write in .*EACCES"):
        ptxas.assemble(".version 8.0\n.target sm_90a\n.address_size 64\n.entry k() { ret; }\n", "sm_90a")


# -- comptime recursion ---------------------------------------------------------------------------------


@cube
def deeper(x: f32, n: Comptime[int]) -> f32:
    if n == 0:
        return x
    return deeper(x + f32(1), n - 1)  # RECURSE


@cube(launch=True)
def recursive(out: Array[f32], n: Comptime[int]):
    out[ABSOLUTE_POS] = deeper(out[ABSOLUTE_POS], n)


def _recurse_line() -> int:
    lines, first = inspect.getsourcelines(deeper.fn)
    return first + next(i for i, text in enumerate(lines) if "# RECURSE" in text)


def test_recursion_within_the_limit_expands():
    client = cp.client("interp")
    out = client.zeros((32,), np.float32)
    recursive.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), MAX_CALL_DEPTH - 1)
    assert (client.read(out) == MAX_CALL_DEPTH - 1).all()


def test_comptime_recursion_too_deep_is_an_expand_error_naming_the_limit_and_line():
    client = cp.client("interp")
    with pytest.raises(ExpandError) as caught:
        recursive.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.zeros((32,), np.float32)), 5000)
    message = str(caught.value)
    assert f"nest deeper than {MAX_CALL_DEPTH}" in message
    assert f"test_limits_with_words.py:{_recurse_line()}" in message
    assert MAX_CALL_DEPTH == 100


def test_pythons_recursion_limit_during_expansion_is_an_expand_error(monkeypatch):
    client = cp.client("interp")
    out = client.zeros((32,), np.float32)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 150)  # room for ~20 nested cube calls, not 60
    try:
        with pytest.raises(ExpandError) as caught:
            recursive.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), 60)
    finally:
        sys.setrecursionlimit(limit)
    message = str(caught.value)
    assert "Python's recursion limit" in message and f"may nest {MAX_CALL_DEPTH} deep" in message
    assert "test_limits_with_words.py:" in message
    assert not isinstance(caught.value, RecursionError)


# -- launch shapes and type parameters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda: cp.CubeCount((4, 2, 1)),
            "CubeCount((4, 2, 1)): a tuple was passed as x; CubeCount takes the axes as "
            "separate ints: CubeCount(4, 2, 1)",
        ),
        (
            lambda: cp.CubeDim([32, 4]),
            "CubeDim([32, 4]): a list was passed as x; CubeDim takes the axes as separate ints: CubeDim(32, 4)",
        ),
        (lambda: cp.ClusterDim((2, 1, 1)), "ClusterDim((2, 1, 1)): a tuple was passed as x"),
        (
            lambda: cp.CubeCount(4, "2"),
            "CubeCount.y = '2': expected a non-negative int (got a str), as in CubeCount(4, 2, 1)",
        ),
        (lambda: cp.CubeDim(32.0), "CubeDim.x = 32.0: expected a positive int (got a float), as in CubeDim(32, 4, 1)"),
    ],
)
def test_a_launch_shape_of_the_wrong_form_says_what_was_passed_and_what_is_expected(make, words):
    with pytest.raises(LaunchError) as caught:
        make()
    assert words in str(caught.value)


def test_a_launch_still_takes_a_tuple_shape():
    client = cp.client("interp")
    out = client.zeros((64,), np.float32)
    unrolled.launch(client, (2, 1, 1), (32, 1, 1), cp.ArrayArg(out), 1)
    np.testing.assert_array_equal(client.read(out), np.zeros(64, np.float32))


@pytest.mark.parametrize("bound", ["float", "f32", ("f16", cp.f32), 3])
def test_a_type_variable_bound_that_is_not_a_type_is_an_error_naming_the_accepted_forms(bound):
    with pytest.raises(CubeError) as caught:
        cp.TypeVar("G", bound)
    message = str(caught.value)
    assert message.startswith("cp.TypeVar('G', ")
    for form in ("cp.Float", "cp.Int", "cp.UInt", "cp.Numeric", "cp.f32"):
        assert form in message


def test_type_variable_bounds_that_are_types_still_work():
    assert cp.TypeVar("G", cp.Float).allowed == (cp.f16.ir, cp.bf16.ir, cp.f32.ir, cp.f64.ir)
    assert cp.TypeVar("G", (cp.f32, np.float16)).allowed == (cp.f32.ir, cp.f16.ir)
