"""The on-disk kernel cache (cubepy/runtime/cache.py): hits, invalidation, corruption, atomic writes, processes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import numpy as np
import pytest

import cubepy as cp
from cubepy import config
from cubepy.compiler import toolkit
from cubepy.compiler.compiled import CompiledKernel
from cubepy.runtime import cache
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.interp.backend import InterpBackend
from cubepy.sealed import sealed_folder

ROOT = Path(__file__).resolve().parents[2]

KERNEL_MODULE = """
import cubepy as cp
from cubepy import f32


@cp.cube
def helper(x: f32) -> f32:
    return x + f32({offset})


@cp.cube(launch=True)
def kernel(data: cp.Array[f32], out: cp.Array[f32]):
    i = cp.ABSOLUTE_POS
    if i < data.len():
        out[i] = helper(data[i])
"""


def _write_module(folder: Path, name: str, offset: float) -> None:
    (folder / f"{name}.py").write_text(KERNEL_MODULE.format(offset=offset))


def _import_fresh(folder: Path, name: str):
    import importlib
    import linecache

    sys.modules.pop(name, None)
    linecache.clearcache()
    importlib.invalidate_caches()
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


def _fresh_client() -> ComputeClient:
    return ComputeClient("interp", InterpBackend())


def _launch(client, kernel, n: int = 64) -> np.ndarray:
    data = client.create(np.arange(n, dtype=np.float32))
    out = client.zeros((n,), np.float32)
    kernel.launch(client, cp.CubeCount(1), cp.CubeDim(n), cp.ArrayArg(data), cp.ArrayArg(out))
    return client.read(out)


def _entries(root: Path, kind: str = "interp") -> list[Path]:
    return sorted((root / kind).rglob("*.pkl")) if (root / kind).exists() else []


@pytest.fixture
def cache_root(tmp_path):
    root = tmp_path / "cache"
    with config.override(CUBEPY_CACHE_DIR=str(root)):
        yield root


def test_a_second_client_loads_the_artifact_instead_of_expanding(cache_root, tmp_path, monkeypatch):
    _write_module(tmp_path, "cache_hit_mod", 1.0)
    module = _import_fresh(tmp_path, "cache_hit_mod")
    first = _launch(_fresh_client(), module.kernel)
    assert np.array_equal(first, np.arange(64, dtype=np.float32) + 1)
    assert len(_entries(cache_root)) == 1

    def no_expansion(*args, **kwargs):
        raise AssertionError("a disk hit must not expand the kernel")

    monkeypatch.setattr(module.kernel, "define", no_expansion)
    client = _fresh_client()
    assert np.array_equal(_launch(client, module.kernel), first)
    assert client.stats == {"hits": 0, "misses": 1}


def test_loaded_definitions_keep_the_ir_element_singletons(cache_root, tmp_path):
    from cubepy import ir

    _write_module(tmp_path, "cache_singleton_mod", 1.0)
    module = _import_fresh(tmp_path, "cache_singleton_mod")
    _launch(_fresh_client(), module.kernel)
    (entry,) = _entries(cache_root)
    key = entry.stem
    definition = cache.DiskCache(cache_root, "interp").load(key)
    elems = [param.var.type.elem for param in definition.params]
    assert elems
    for elem in elems:
        assert elem is ir.ELEM_BY_NAME[elem.name]
    assert cache._elem_type("f32") is ir.F32
    assert pickle.loads(cache._dumps(ir.F32)) is ir.F32


def test_equal_item_types_and_locations_are_stored_once():
    from cubepy import ir

    types = [ir.Type(ir.F32, 4), ir.Type(ir.F32, 4), ir.Type(ir.U32)]
    locs = [ir.SourceLoc("k.py", 3), ir.SourceLoc("k.py", 3)]
    assert types[0] is not types[1] and locs[0] is not locs[1]
    loaded_types, loaded_locs = pickle.loads(cache._dumps((types, locs)))
    assert loaded_types == types and loaded_locs == locs
    assert loaded_types[0] is loaded_types[1] and loaded_types[2] is not loaded_types[0]
    assert loaded_locs[0] is loaded_locs[1]


def test_editing_a_callee_in_its_source_file_misses(cache_root, tmp_path):
    _write_module(tmp_path, "cache_edit_mod", 1.0)
    before = _import_fresh(tmp_path, "cache_edit_mod")
    identity_before = before.kernel.identity
    assert np.array_equal(_launch(_fresh_client(), before.kernel), np.arange(64, dtype=np.float32) + 1)

    _write_module(tmp_path, "cache_edit_mod", 5.0)  # only the callee `helper` changes
    after = _import_fresh(tmp_path, "cache_edit_mod")
    assert after.kernel.identity != identity_before
    assert np.array_equal(_launch(_fresh_client(), after.kernel), np.arange(64, dtype=np.float32) + 5)
    assert len(_entries(cache_root)) == 2


TABLE_MODULE = """
from pathlib import Path

import numpy as np

import cubepy as cp
from cubepy import f32

TABLE = np.load(Path(__file__).with_name("{name}.npy"))  # the source never changes, only this file


@cp.cube
def scaled(i):
    return cp.const_array(TABLE)[i]


@cp.cube(launch=True)
def kernel(data: cp.Array[f32], out: cp.Array[f32]):
    i = cp.ABSOLUTE_POS
    if i < data.len():
        out[i] = data[i] * scaled(i % 4)
"""


def test_a_const_array_table_with_other_values_misses(cache_root, tmp_path):
    (tmp_path / "cache_table_mod.py").write_text(TABLE_MODULE.format(name="cache_table_mod"))
    data = np.arange(64, dtype=np.float32)
    results, identities = [], []
    for table in ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, -4.0], [1.0, 2.0, 3.0, 4.0]):
        np.save(tmp_path / "cache_table_mod.npy", np.array(table, dtype=np.float32))
        module = _import_fresh(tmp_path, "cache_table_mod")
        identities.append(module.kernel.identity)
        client = _fresh_client()
        results.append(_launch(client, module.kernel))
        np.testing.assert_array_equal(results[-1], data * np.array(table, dtype=np.float32)[np.arange(64) % 4])
    assert identities[0] != identities[1] and identities[0] == identities[2]
    assert len(_entries(cache_root)) == 2  # the third run is the first table again: a hit


def test_a_corrupt_entry_is_ignored_rebuilt_and_reported(cache_root, tmp_path, capsys):
    _write_module(tmp_path, "cache_corrupt_mod", 2.0)
    module = _import_fresh(tmp_path, "cache_corrupt_mod")
    expected = _launch(_fresh_client(), module.kernel)
    (entry,) = _entries(cache_root)
    for garbage in (b"", b"not a pickle at all", entry.read_bytes()[:40]):
        entry.write_bytes(garbage)
        with config.override(CUBEPY_DEBUG=1):
            assert np.array_equal(_launch(_fresh_client(), module.kernel), expected)
        assert "ignoring unreadable entry" in capsys.readouterr().err
        payload = sealed_folder(cache_root).read(entry.relative_to(cache_root).as_posix())
        assert payload is not None and pickle.loads(payload)[0] == entry.stem  # rewritten whole, sealed again


def test_store_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    store = cache.DiskCache(tmp_path, "plain-data")  # a kind with no artifact class: any plain data round-trips
    key = "ab" + "0" * 62
    assert store.store(key, {"payload": 1})
    assert store.load(key) == {"payload": 1}

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", failing_replace)
    assert not store.store(key, {"payload": 2})  # the old entry stays whole, the temporary file is removed
    monkeypatch.undo()
    assert store.load(key) == {"payload": 1}
    assert [p.name for p in store.path(key).parent.iterdir()] == [store.path(key).name]


def test_unpicklable_artifacts_and_unstable_keys_are_not_stored(tmp_path):
    store = cache.DiskCache(tmp_path, "plain-data")
    assert not store.store("cd" + "0" * 62, lambda: None)
    assert cache.entry_key("interp", "interp", "k:abc", (1, 1, 1), True, (object(),)) is None
    assert cache.entry_key("interp", "interp", "k:abc", (1, 1, 1), True, (1,)) != cache.entry_key(
        "interp", "interp", "k:abc", (1, 1, 1), False, (1,)
    )


def test_the_cache_can_be_disabled(tmp_path):
    with config.override(CUBEPY_CACHE_DIR="off"):
        assert cache.cache_dir() is None and cache.for_kind("interp") is None


def test_kernel_compile_uses_the_disk_cache(cache_root, tmp_path, monkeypatch):
    from cubepy.frontend import hooks

    _write_module(tmp_path, "cache_compile_mod", 3.0)
    module = _import_fresh(tmp_path, "cache_compile_mod")
    calls = []

    def fake_compile(definition, target):
        calls.append(target)
        return CompiledKernel(definition.name, definition, "", "", "", "// ptx", None, None, target, {})

    monkeypatch.setattr(hooks, "COMPILE", fake_compile)
    first = module.kernel.compile(
        (32, 1, 1),
        cp.ArrayArg(cp.client("interp").create(np.zeros(4, np.float32))),
        cp.ArrayArg(cp.client("interp").create(np.zeros(5, np.float32))),  # unequal lengths: the default args' key
    )
    # the default arguments, with the launch's one fact about these handles: they start 16-byte aligned
    args = [attrs.evolve(p.launch.default_compilation_arg(), address_multiple_of=16) for p in module.kernel.params]
    second = module.kernel.compile((32, 1, 1), *args)
    assert first == second and calls == ["sm_90a"]
    assert len(_entries(cache_root, "compile")) == 1


@pytest.mark.skipif(toolkit.find_libdevice() is None, reason="libdevice not found (no CUDA toolkit)")
def test_kernel_compile_keeps_its_libdevice_subset_in_the_cache_folder(cache_root):
    from cubepy.compiler import libdevice

    @cp.cube(launch=True)
    def exp_kernel(data: cp.Array[cp.f32]):
        i = cp.ABSOLUTE_POS
        if i < data.len():
            data[i] = cp.exp(data[i])

    libdevice.clear_memory()
    args = [p.launch.default_compilation_arg() for p in exp_kernel.params]
    compiled = exp_kernel.compile((32, 1, 1), *args)
    assert "__nv_" not in compiled.ptx
    assert len(list((cache_root / "libdevice").glob("*.bc"))) == 1


WORKER = """
import sys
import numpy as np
import cubepy as cp
sys.path.insert(0, sys.argv[1])
import {module} as m
client = cp.client("interp")
data = client.create(np.arange(32, dtype=np.float32))
out = client.zeros((32,), np.float32)
m.kernel.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(data), cp.ArrayArg(out))
assert np.array_equal(client.read(out), np.arange(32, dtype=np.float32) + 4)
print("OK")
"""


def test_several_processes_share_one_cache_directory(tmp_path):
    root = tmp_path / "shared-cache"
    _write_module(tmp_path, "cache_procs_mod", 4.0)
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(WORKER.format(module="cache_procs_mod")))
    env = dict(os.environ, CUBEPY_CACHE_DIR=str(root), PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "OK" in out, err
    entries = _entries(root)
    assert len(entries) == 1 and not list((root / "interp").rglob("*.tmp"))
    # A later process loads it.
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        env=dict(env, CUBEPY_DEBUG="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "disk cache: hit" in proc.stderr, proc.stderr


MOVABLE_MODULE = """
import cubepy as cp
from cubepy import i32
{padding}

@cp.cube(launch=True)
def kernel(out: cp.Array[i32], lo: i32, hi: i32):
    for i in range(lo, hi, hi - lo + 1):
        out[0] += 1
"""


def _kernel_line(text: str) -> int:
    """The 1-based line of the kernel's loop in ``text``, counted by hand from the module text."""
    return text.splitlines().index("    for i in range(lo, hi, hi - lo + 1):") + 1


def test_lines_inserted_above_an_unchanged_kernel_give_the_new_line_numbers(cache_root, tmp_path):
    # The key holds the kernel's file and first line: a cached artifact never names the old lines.
    messages, locs = [], []
    for padding in (0, 7):
        text = MOVABLE_MODULE.format(padding="\n" * padding)
        (tmp_path / "cache_moved_mod.py").write_text(text)
        module = _import_fresh(tmp_path, "cache_moved_mod")
        client = ComputeClient("interp", InterpBackend(), sanitize=True)
        out = client.zeros((1,), np.int32)
        with pytest.raises(cp.SanitizerError) as caught:  # lo=1, hi=0: a zero step
            module.kernel.launch(
                client,
                cp.CubeCount(1),
                cp.CubeDim(1),
                cp.ArrayArg(out),
                cp.ScalarArg(1, cp.i32),
                cp.ScalarArg(0, cp.i32),
            )
        messages.append(str(caught.value))
        compiled = module.kernel.compile((1, 1, 1), cp.ArrayArg(out), cp.ScalarArg(1, cp.i32), cp.ScalarArg(0, cp.i32))
        locs.append(compiled.ptx)
        line = _kernel_line(text)
        assert f"cache_moved_mod.py:{line}" in messages[-1]
        assert f".loc\t1 {line} " in compiled.ptx or f".loc 1 {line} " in compiled.ptx
    assert _kernel_line(MOVABLE_MODULE.format(padding="\n" * 7)) == _kernel_line(MOVABLE_MODULE.format(padding="")) + 7
    assert len(_entries(cache_root, "compile")) == 2 and len(_entries(cache_root)) == 2
