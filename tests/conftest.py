"""Shared fixtures: the CPU client every runtime test uses, and skips for optional parts."""

from __future__ import annotations

import shutil

import pytest

import cubepy as cp


@pytest.fixture
def client():
    """The interp (CPU) client."""
    return cp.client("interp")


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``ptxas`` when no ptxas is installed, saying so."""
    if shutil.which("ptxas") is None:
        from cubepy.compiler import ptxas

        if ptxas.find_ptxas() is None:
            skip = pytest.mark.skip(reason="ptxas not found (PATH, CUDA_HOME, nvidia-cuda-nvcc wheel)")
            for item in items:
                if "ptxas" in item.keywords:
                    item.add_marker(skip)
