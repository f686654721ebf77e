"""Shared fixtures: the CPU client every runtime test uses, and skips for optional parts."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# Each test session gets an empty on-disk kernel cache of its own, never the user's (set before cubepy reads it).
os.environ.setdefault("CUBEPY_CACHE_DIR", tempfile.mkdtemp(prefix="cubepy-test-cache-"))

import cubepy as cp  # noqa: E402


@pytest.fixture
def client():
    """The client the runtime tests use: interp, or ``CUBEPY_TEST_RUNTIME`` (the device check sets cuda;
    ``differential`` runs every launch on interp and cpu and compares, see tests/runtime/cpu/differential.py)."""
    name = os.environ.get("CUBEPY_TEST_RUNTIME", "interp")
    if name == "differential":
        return _differential_client()
    return cp.client(name)


_DIFFERENTIAL: list = []


def _differential_client():
    from tests.runtime.cpu.differential import DifferentialReport, differential_client

    if not _DIFFERENTIAL:
        report = DifferentialReport()
        _DIFFERENTIAL.extend([report, differential_client(report)])
    return _DIFFERENTIAL[1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a runtime that declines an operation (``op X is not supported by back end cpu: why``), the test is
    skipped with that reason rather than failed: the runtime says what it cannot run, and why."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or call.when != "call":
        return
    from cubepy.errors import CompileError

    message = str(call.excinfo.value)
    if call.excinfo.errisinstance(CompileError) and "is not supported by back end cpu" in message:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, "Skipped: " + message.splitlines()[0])


def pytest_sessionfinish(session, exitstatus):
    """Write the differential report where ``CUBEPY_DIFFERENTIAL_REPORT`` says."""
    path = os.environ.get("CUBEPY_DIFFERENTIAL_REPORT")
    if _DIFFERENTIAL and path:
        _DIFFERENTIAL[0].write(path)


def pytest_configure(config):
    """Register the marker of tests whose kernels race on purpose (the sanitizer would report them)."""
    config.addinivalue_line("markers", "races_by_design: the kernel has a data race CUDA allows and the test "
                            "tolerates; skipped when CUBEPY_SANITIZE is set")


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``ptxas`` when no ptxas is installed, and ``races_by_design`` under the sanitizer."""
    if os.environ.get("CUBEPY_SANITIZE", "0") not in ("", "0"):
        racy = pytest.mark.skip(reason="races on purpose; CUBEPY_SANITIZE would rightly report it")
        for item in items:
            if "races_by_design" in item.keywords:
                item.add_marker(racy)
    if shutil.which("ptxas") is None:
        from cubepy.compiler import ptxas

        if ptxas.find_ptxas() is None:
            skip = pytest.mark.skip(reason="ptxas not found (PATH, CUDA_HOME, nvidia-cuda-nvcc wheel)")
            for item in items:
                if "ptxas" in item.keywords:
                    item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _assemble_every_launched_kernel():
    """Compile every kernel the suite launches on interp for sm_90a and assemble it with ptxas.

    A kernel that LLVM or ptxas rejects fails the test that launched it.  Set
    ``CUBEPY_TEST_PTXAS=0`` to skip this (it roughly doubles the time of a first launch).
    """
    from cubepy.compiler import ptxas
    from cubepy.compiler.compiled import compile_definition
    from cubepy.runtime.interp.backend import InterpBackend

    if os.environ.get("CUBEPY_TEST_PTXAS", "1") == "0":
        yield
        return
    assemble = ptxas.find_ptxas() is not None
    original = InterpBackend.prepare

    def prepare_and_assemble(self, definition):
        compiled = compile_definition(definition, "sm_90a", assemble=assemble)
        if assemble:
            assert compiled.cubin, f"ptxas produced no cubin for {definition.name}"
        return original(self, definition)

    InterpBackend.prepare = prepare_and_assemble
    try:
        yield
    finally:
        InterpBackend.prepare = original


@pytest.fixture(autouse=True)
def _sanitizer_only_on_interp(request):
    """Under ``CUBEPY_SANITIZE=1`` keep the cuda runtime's own tests running: the cuda backend refuses it."""
    if "runtime/cuda" not in request.node.nodeid or os.environ.get("CUBEPY_SANITIZE", "0") in ("", "0"):
        yield
        return
    with cp.config.override(CUBEPY_SANITIZE=False):
        yield
