"""ptxas discovery, the -v report parser, failures and the no-ptxas path."""

from __future__ import annotations

import os
import stat

import pytest

from cubepy.compiler import ptxas, toolkit
from cubepy.compiler.compiled import compile_definition
from cubepy.errors import CompileError
from cubepy.ir import F32
from tests.irbuild import vector_add

from .conftest import needs_ptxas

LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'first' for 'sm_90a'
ptxas info    : Function properties for first
    176 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8200 bytes smem, 368 bytes cmem[0]
ptxas info    : Compile time = 27.002 ms
ptxas info    : Compiling entry function 'second' for 'sm_90a'
ptxas info    : Function properties for second
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
"""


def test_parse_resources_reads_the_named_entry():
    assert ptxas.parse_resources(LOG, "first") == ptxas.Resources(
        registers=40, shared_bytes=8200, spill_store_bytes=8, spill_load_bytes=12, stack_bytes=176, barriers=1
    )
    assert ptxas.parse_resources(LOG, "second") == ptxas.Resources(10, 0, 0, 0, 0, 0)
    with pytest.raises(CompileError, match="third"):
        ptxas.parse_resources(LOG, "third")


@needs_ptxas
def test_bad_ptx_is_a_compile_error_with_the_log():
    ptx = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry broken() { frobnicate.b32 %r1; }\n"
    with pytest.raises(CompileError, match="ptxas failed on kernel broken") as info:
        ptxas.assemble(ptx, "sm_90a")
    assert "frobnicate" in str(info.value) or "syntax error" in str(info.value)


@needs_ptxas
def test_assemble_defaults_to_the_first_entry():
    compiled = compile_definition(vector_add(F32), assemble=False)
    cubin, resources = ptxas.assemble(compiled.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF" and resources.registers > 0


@pytest.fixture
def fresh_toolkit_cache():
    toolkit.find_ptxas.cache_clear()
    toolkit.find_libdevice.cache_clear()
    yield
    toolkit.find_ptxas.cache_clear()
    toolkit.find_libdevice.cache_clear()


def test_without_ptxas_there_is_ptx_but_no_cubin(monkeypatch, fresh_toolkit_cache, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(toolkit, "_toolkit_roots", lambda: [tmp_path])
    assert not ptxas.available()
    assert "ptxas not found" in ptxas.unavailable_reason()
    compiled = compile_definition(vector_add(F32))
    assert ".entry vector_add" in compiled.ptx
    assert compiled.cubin is None and compiled.resources is None
    assert "ptxas not found" in compiled.ptxas_status
    assert "ptxas" not in compiled.timings


def test_ptxas_is_found_under_cuda_home(monkeypatch, fresh_toolkit_cache, tmp_path):
    fake = tmp_path / "cuda" / "bin" / "ptxas"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert toolkit.find_ptxas() == str(fake)


def test_ptxas_is_found_in_the_nvcc_wheel(monkeypatch, fresh_toolkit_cache, tmp_path):
    wheel = tmp_path / "site" / "nvidia" / "cuda_nvcc"
    (wheel / "bin").mkdir(parents=True)
    (wheel / "bin" / "ptxas").write_text("#!/bin/sh\n")
    os.chmod(wheel / "bin" / "ptxas", 0o755)
    (wheel / "nvvm" / "libdevice").mkdir(parents=True)
    (wheel / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr("sys.path", [str(tmp_path / "site")])
    monkeypatch.setattr(toolkit, "Path", _NoSystemCuda)
    assert toolkit.find_ptxas() == str(wheel / "bin" / "ptxas")
    assert toolkit.find_libdevice() == wheel / "nvvm" / "libdevice" / "libdevice.10.bc"


class _NoSystemCuda(type(toolkit.Path())):
    """A Path that hides /usr/local/cuda, so the wheel is the only toolkit."""

    def is_file(self) -> bool:
        return not str(self).startswith("/usr/local/cuda") and super().is_file()

    def is_dir(self) -> bool:
        return not str(self).startswith("/usr/local/cuda") and super().is_dir()
