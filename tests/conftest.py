"""Shared fixtures: an isolated kernel cache, ptxas on every launched kernel, and skips for optional parts.

The ``client`` fixture and the ``races_by_design``/``cubepy_sanitize`` markers come from cubepy's pytest plugin
(``cubepy.testing.plugin``): the interp client of a test has the sanitizer on unless the test says otherwise.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# Each test session gets an empty on-disk kernel cache of its own, never the user's (set before cubepy reads it,
# even over a CUBEPY_CACHE_DIR of the user's: a warm cache would skip the builds the tests watch), removed at exit.
_CACHE_DIR = tempfile.mkdtemp(prefix="cubepy-test-cache-")
os.environ["CUBEPY_CACHE_DIR"] = _CACHE_DIR

import cubepy as cp  # noqa: E402

# Loaded here too so the suite runs from a checkout whose cubepy is not installed (no entry point); the entry
# point has the same name, so pytest loads the plugin once either way.
pytest_plugins = ["cubepy.testing.plugin", "pytester"]

# The suite's tests run on the interp unless CUBEPY_TEST_RUNTIME or --cubepy-runtimes names others (the device
# check sets cuda; `--cubepy-runtimes=interp,cpu` runs every client test on both).  "differential" runs each
# launch on interp and cpu and compares them (tests/runtime/cpu/differential.py, run by the slow differential
# test); the plugin then selects the interp and the fixture below wraps it.
_DIFFERENTIAL_RUN = os.environ.get("CUBEPY_TEST_RUNTIME") == "differential"
if _DIFFERENTIAL_RUN:
    os.environ["CUBEPY_TEST_RUNTIME"] = "interp"
os.environ.setdefault("CUBEPY_TEST_RUNTIME", "interp")

_DIFFERENTIAL: list = []

if _DIFFERENTIAL_RUN:

    @pytest.fixture
    def client():
        """Every launch runs on interp and on cpu, and their buffers are compared."""
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


def pytest_unconfigure(config):
    """Remove the session's kernel cache."""
    if os.environ.get("CUBEPY_CACHE_DIR") == _CACHE_DIR:
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``ptxas`` when no ptxas is installed."""
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
