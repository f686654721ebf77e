"""Local memory keeps the GPU's limit on every runtime, and the cpu runtime never overflows a stack (issue 28).

The GPU gives a thread at most 512 KiB of local memory.  More is an ``ExpandError`` at the line declaring
the array that crosses the limit, on interp, cpu and ``kernel.compile``.  Below it, the cpu runtime keeps
large local arrays in a per-unit heap scratch: a kernel with ~500 KiB of locals runs on the main thread and
on a thread with a 256 KiB stack (it used to be a SIGSEGV).  Crash tests run in a subprocess.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32, u32
from cubepy.errors import ExpandError
from cubepy.frontend.containers import MAX_LOCAL_BYTES

TOO_MANY = 150_000  # f32 items: 600,000 bytes, over 524,288


@cube(launch=True)
def too_much_local(out: Array[f32]):
    scratch = cp.LocalArray[f32](TOO_MANY)  # BAD
    scratch[0] = f32(1)
    out[ABSOLUTE_POS] = scratch[0]


@cube(launch=True)
def too_much_in_two(out: Array[f32]):
    first = cp.LocalArray[f32](100_000)
    second = cp.LocalArray[u32](40_000)  # BAD
    first[0] = f32(1)
    second[0] = u32(2)
    out[ABSOLUTE_POS] = first[0] + f32(second[0])


def _bad_line(kernel) -> int:
    lines, first = inspect.getsourcelines(kernel.fn if hasattr(kernel, "fn") else kernel.__wrapped__)
    return first + next(i for i, text in enumerate(lines) if "# BAD" in text)


def _check(error: ExpandError, kernel, asked: int, total: int) -> None:
    message = str(error)
    assert f"test_local_memory_limit.py:{_bad_line(kernel)}" in message
    assert f"limit of {MAX_LOCAL_BYTES} bytes" in message
    assert f"LocalArray of {asked} bytes" in message and f"{total} bytes per unit" in message


@pytest.mark.parametrize("runtime", [name for name in ("interp", "cpu") if name in cp.runtimes()])
@pytest.mark.parametrize(
    ("kernel", "asked", "total"), [(too_much_local, 600_000, 600_000), (too_much_in_two, 160_000, 560_000)]
)
def test_local_memory_over_the_gpu_limit_is_an_expand_error(runtime, kernel, asked, total):
    client = cp.client(runtime)
    out = client.zeros((32,), np.float32)
    with pytest.raises(ExpandError) as caught:
        kernel.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out))
    _check(caught.value, kernel, asked, total)
    assert not client.read(out).any()


def test_local_memory_over_the_gpu_limit_is_an_expand_error_when_compiling():
    with pytest.raises(ExpandError) as caught:
        too_much_local.compile(cp.CubeDim(32), cp.ArrayArg(cp.client("interp").zeros((32,), np.float32)))
    _check(caught.value, too_much_local, 600_000, 600_000)


def test_the_limit_is_the_gpus():
    assert MAX_LOCAL_BYTES == 512 * 1024  # CUDA C Programming Guide, compute capability 9.0: 512 KB per thread


# A kernel file of its own (kernels need their source): ~500 KiB of locals in the three shapes the cpu
# runtime compiles (a plain loop over units, loops split at a barrier, coroutines), checked against numpy,
# first on a thread with a 256 KiB stack, then on the main thread.
_SCRIPT = textwrap.dedent(
    """
    import threading
    import numpy as np
    import cubepy as cp
    from cubepy import ABSOLUTE_POS, UNIT_POS, Array, cube, f32

    N = 125_000  # 500,000 bytes of f32: under the 524,288-byte limit

    @cube(launch=True)
    def plain(out: Array[f32]):
        scratch = cp.LocalArray[f32](N)
        for i in range(N):
            scratch[i] = f32(i % 7) + f32(ABSOLUTE_POS)
        total = f32(0)
        for i in range(N):
            total += scratch[N - 1 - i]
        out[ABSOLUTE_POS] = total

    @cube(launch=True)
    def at_a_barrier(out: Array[f32]):
        scratch = cp.LocalArray[f32](N)
        for i in range(N):
            scratch[i] = f32(i % 7) + f32(ABSOLUTE_POS)
        cp.sync_cube()
        total = f32(0)
        for i in range(N):
            total += scratch[N - 1 - i]
        out[ABSOLUTE_POS] = total

    @cube(launch=True)
    def coroutine(out: Array[f32]):
        scratch = cp.LocalArray[f32](N)
        for i in range(N):
            scratch[i] = f32(i % 7) + f32(ABSOLUTE_POS)
        if UNIT_POS % 2 == 0:
            cp.sync_plane()
        total = f32(0)
        for i in range(N):
            total += scratch[N - 1 - i]
        out[ABSOLUTE_POS] = total

    def main():
        client = cp.client("cpu")
        expected = float(sum(i % 7 for i in range(N))) + N * np.arange(64)
        for kernel in (plain, at_a_barrier, coroutine):
            out = client.zeros((64,), np.float32)
            kernel.launch(client, cp.CubeCount(2), cp.CubeDim(32), cp.ArrayArg(out))
            assert np.allclose(client.read(out), expected, rtol=1e-6), kernel.name

    threading.stack_size(256 * 1024)
    worker = threading.Thread(target=main)
    worker.start()
    worker.join()
    main()
    print("done")
    """
)


@pytest.mark.skipif("cpu" not in cp.runtimes(), reason="the cpu runtime is not available here")
def test_local_arrays_under_the_limit_run_on_small_stacks(tmp_path):
    script = tmp_path / "big_locals.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "CUBEPY_CACHE_DIR": str(tmp_path / "cache")}  # compiled now, not loaded
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert result.stdout.strip().endswith("done")
