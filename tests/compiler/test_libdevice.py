"""The libdevice subset: only the called functions (and their callees) linked, kept per process and on disk.

A small stand-in library built here with llvmlite plays libdevice for the cache behaviour (no CUDA
toolkit needed); the end-to-end test uses the toolkit's libdevice when there is one.
"""

from __future__ import annotations

import pytest

from cubepy.compiler import libdevice, toolkit
from cubepy.compiler.compiled import compile_definition
from cubepy.compiler.llvm_process import binding
from cubepy.ir import F32, builtin
from cubepy.sealed import sealed_folder
from tests.irbuild import KernelBuilder, T

FAKE_LIBRARY = """
define float @__nv_expf(float %x) {
  %y = call float @__nv_helper(float %x)
  ret float %y
}
define float @__nv_helper(float %x) {
  %y = fadd float %x, RESULT
  ret float %y
}
define double @__nv_pow(double %x, double %y) {
  ret double %x
}
"""


@pytest.fixture(autouse=True)
def _forget_subsets():
    libdevice.clear_memory()
    yield
    libdevice.clear_memory()


def _write_library(path, addend: str = "1.0"):
    module = binding().parse_assembly(FAKE_LIBRARY.replace("RESULT", addend))
    path.write_bytes(module.as_bitcode())
    return path


def _defined(found: libdevice.Subset) -> set[str]:
    return {f.name for f in libdevice.parse(found).functions if not f.is_declaration and f.name.startswith("__nv_")}


def test_subset_holds_the_wanted_functions_and_their_callees_only(tmp_path):
    library = _write_library(tmp_path / "libdevice.bc")
    found = libdevice.subset({"__nv_expf"}, None, library)
    assert found.origin == "built" and not found.missing
    assert _defined(found) == {"__nv_expf", "__nv_helper"}


def test_a_hit_reuses_the_subset_from_memory_then_from_disk(tmp_path):
    library = _write_library(tmp_path / "libdevice.bc")
    cache = tmp_path / "cache"
    built = libdevice.subset({"__nv_expf"}, cache, library)
    assert built.origin == "built"
    entries = list(cache.glob("*.bc"))
    assert len(entries) == 1 and sealed_folder(cache).read(entries[0].name) == built.bitcode
    assert libdevice.subset({"__nv_expf"}, cache, library).origin == "memory"
    libdevice.clear_memory()  # as a fresh process: only the disk has it
    again = libdevice.subset({"__nv_expf"}, cache, library)
    assert again.origin == "disk" and again.bitcode == built.bitcode


def test_a_changed_function_set_misses(tmp_path):
    library = _write_library(tmp_path / "libdevice.bc")
    cache = tmp_path / "cache"
    libdevice.subset({"__nv_expf"}, cache, library)
    libdevice.clear_memory()
    other = libdevice.subset({"__nv_expf", "__nv_pow"}, cache, library)
    assert other.origin == "built"
    assert _defined(other) == {"__nv_expf", "__nv_helper", "__nv_pow"}
    assert len(list(cache.glob("*.bc"))) == 2


def test_a_changed_libdevice_file_misses(tmp_path):
    library = _write_library(tmp_path / "libdevice.bc")
    cache = tmp_path / "cache"
    first = libdevice.subset({"__nv_expf"}, cache, library)
    _write_library(library, "2.5")  # same size, other contents
    second = libdevice.subset({"__nv_expf"}, cache, library)
    assert second.origin == "built" and second.bitcode != first.bitcode
    assert "2.5" in str(libdevice.parse(second).get_function("__nv_helper"))
    assert len(list(cache.glob("*.bc"))) == 2


def test_a_function_libdevice_lacks_is_reported_and_not_stored(tmp_path):
    library = _write_library(tmp_path / "libdevice.bc")
    cache = tmp_path / "cache"
    found = libdevice.subset({"__nv_expf", "__nv_frobnicate"}, cache, library)
    assert found.missing == {"__nv_frobnicate"}
    assert not cache.exists() or not list(cache.glob("*.bc"))


def test_a_corrupt_entry_is_rebuilt(tmp_path):
    library = _write_library(tmp_path / "libdevice.bc")
    cache = tmp_path / "cache"
    built = libdevice.subset({"__nv_expf"}, cache, library)
    (entry,) = cache.glob("*.bc")
    entry.write_bytes(b"BC\xc0\xde truncated")
    libdevice.clear_memory()
    again = libdevice.subset({"__nv_expf"}, cache, library)
    assert again.origin == "built" and sealed_folder(cache).read(entry.name) == built.bitcode


def test_an_unwritable_cache_folder_only_costs_the_reuse(tmp_path):
    library = _write_library(tmp_path / "libdevice.bc")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    found = libdevice.subset({"__nv_expf"}, blocker / "cache", library)
    assert found.origin == "built" and _defined(found) == {"__nv_expf", "__nv_helper"}


def _exp_kernel():
    kb = KernelBuilder("exp_kernel")
    data = kb.array(T(F32), "data")
    pos = builtin("absolute_pos")
    kb.store(data, pos, kb.unary("exp", kb.index(data, pos)))
    return kb.build()


@pytest.mark.skipif(toolkit.find_libdevice() is None, reason="libdevice not found (no CUDA toolkit)")
def test_compile_writes_the_subset_and_a_later_compile_reads_it(tmp_path, monkeypatch):
    cache = tmp_path / "libdevice"
    first = compile_definition(_exp_kernel(), assemble=False, libdevice_cache=cache)
    (entry,) = cache.glob("*.bc")
    stored = sealed_folder(cache).read(entry.name)
    assert stored is not None and {"__nv_expf"} <= _defined(libdevice.Subset(stored, frozenset(), "disk"))
    libdevice.clear_memory()

    def no_parse(*args):
        raise AssertionError("libdevice parsed again although its subset is on disk")

    monkeypatch.setattr(libdevice, "_build", no_parse)
    second = compile_definition(_exp_kernel(), assemble=False, libdevice_cache=cache)
    assert second.ptx == first.ptx and "__nv_" not in first.ptx
