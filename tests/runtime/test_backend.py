"""Every runtime's back end implements ``Backend``; ``cp.client`` finds runtimes through one registry."""

from __future__ import annotations

import pytest

import cubepy as cp
from cubepy.errors import CubeError
from cubepy.runtime import client as client_module
from cubepy.runtime.backend import Backend
from cubepy.runtime.client import RUNTIMES, Runtime, unavailable_reason
from cubepy.runtime.cpu.backend import CpuBackend
from cubepy.runtime.cuda.backend import CudaBackend
from cubepy.runtime.interp.backend import InterpBackend

MEMBERS = {"name", "disk_cache_kind", "disk_cache_target", "prepare", "check_launch", "run"}


def test_the_protocol_declares_exactly_these_members():
    declared = {n for n in vars(Backend) if not n.startswith("_")} | set(Backend.__annotations__)
    assert declared == MEMBERS


@pytest.mark.parametrize("backend", [InterpBackend, CudaBackend, CpuBackend])
def test_each_back_end_has_every_protocol_member(backend):
    missing = {m for m in MEMBERS if not hasattr(backend, m)}
    assert not missing


def test_back_ends_name_their_runtime_and_cache_kind():
    assert (InterpBackend.name, InterpBackend().disk_cache_kind) == ("interp", "interp")
    assert (CudaBackend.name, CudaBackend.disk_cache_kind) == ("cuda", None)
    assert (CpuBackend.name, CpuBackend.disk_cache_kind) == ("cpu", "cpu")


def test_the_registry_lists_interp_then_cuda_and_interp_is_always_usable():
    assert list(RUNTIMES)[:2] == ["interp", "cuda"]
    assert cp.runtimes()[0] == "interp"
    assert cp.client("interp").backend.name == "interp"
    assert unavailable_reason("interp") is None


def test_an_unknown_runtime_is_named_in_the_error():
    with pytest.raises(CubeError, match="unknown runtime 'nope'"):
        cp.client("nope")
    assert "unknown runtime 'nope'" in unavailable_reason("nope")


def test_an_unavailable_runtime_raises_with_its_reason(monkeypatch):
    reason = "no GPU in this test"
    monkeypatch.setitem(RUNTIMES, "cuda", Runtime(lambda: reason, RUNTIMES["cuda"].make_client))
    monkeypatch.setattr(client_module, "_clients", {})
    assert "cuda" not in cp.runtimes()
    with pytest.raises(CubeError, match="runtime 'cuda' is unavailable: no GPU in this test"):
        cp.client("cuda")
