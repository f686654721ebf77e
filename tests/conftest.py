"""Shared fixtures: the CPU client every runtime test uses, and skips for optional parts."""

from __future__ import annotations

import os
import shutil

import pytest

import cubepy as cp


@pytest.fixture
def client():
    """The client the runtime tests use: interp, or ``CUBEPY_TEST_RUNTIME`` (the device check sets cuda)."""
    return cp.client(os.environ.get("CUBEPY_TEST_RUNTIME", "interp"))


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``ptxas`` when no ptxas is installed, saying so."""
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
    from cubepy.runtime.client import InterpBackend

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
