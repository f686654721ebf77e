"""Launches from several threads on one client, and several processes sharing one cache folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cubepy.runtime import cache
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.interp.backend import InterpBackend

from . import workloads

ROOT = Path(__file__).resolve().parents[2]


def _job(client, index: int) -> bool:
    """One thread's work: alternating kernels and specializations (some shared, some its own)."""
    if index % 2:
        return workloads.run_saxpy(client, 100 + index, 0.5 + index, seed=index)
    return workloads.run_block_sum(client, (8, 16, 32)[index % 3], 3, seed=index)


def test_threads_launching_on_one_client_get_correct_results():
    client = ComputeClient("interp", InterpBackend())  # a fresh one: every specialization is a first build
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: _job(client, i), range(48)))
    assert all(results)
    assert client.stats["misses"] == 4  # saxpy once, block_sum for 8, 16 and 32 units: no double builds


def test_threads_under_the_sanitizer_get_correct_results():
    client = ComputeClient("interp", InterpBackend(), sanitize=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(lambda i: _job(client, i), range(16)))


_WORKER = textwrap.dedent("""
    import sys
    import cubepy as cp
    from tests.reliability import workloads
    client = cp.client("interp")
    ok = all(workloads.run_block_sum(client, units, 4, seed=int(sys.argv[1]) + units) for units in (8, 16, 32))
    ok = ok and workloads.run_saxpy(client, 77, 1.5, seed=int(sys.argv[1]))
    print("OK" if ok else "WRONG")
""")


def _run_workers(cache_dir: Path, count: int) -> list[str]:
    env = {**os.environ, "CUBEPY_CACHE_DIR": str(cache_dir), "CUBEPY_TEST_PTXAS": "0", "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(i)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        outputs.append(out.strip())
    return outputs


def _entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.rglob("*.pkl"))


def test_processes_sharing_one_cache_folder(tmp_path):
    assert _run_workers(tmp_path, 4) == ["OK"] * 4
    entries = _entries(tmp_path)
    assert len(entries) == 4, entries  # saxpy and three block_sum specializations, one entry each
    assert not list(tmp_path.rglob("*.tmp"))  # no half-written leftovers
    for path in entries:  # every entry is whole and loads
        assert cache.DiskCache(tmp_path, path.parent.parent.name).load(path.stem) is not None
    assert _run_workers(tmp_path, 2) == ["OK"] * 2  # and a second round reuses them
