"""Threads, forks and signals: first launches from many threads, forks mid-launch, SIGINT, the compile child.

Hangs and crashes are checked in subprocesses with timeouts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest

from cubepy.ir.ops import OpTable
from cubepy.ir.ops.arith import Add

ROOT = Path(__file__).resolve().parents[2]

KERNEL = """
import os, sys, threading, time
import numpy as np
import cubepy as cp
from cubepy import cube, f32, Array, ABSOLUTE_POS, Comptime


@cube(launch=True)
def add(x: Array[f32], out: Array[f32], k: Comptime[int]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = x[ABSOLUTE_POS] + f32(k)


def launch(client, k, n=256):
    x = client.create(np.arange(n, dtype=np.float32))
    out = client.empty((n,), np.float32)
    add.launch(client, cp.CubeCount(n // 32), cp.CubeDim(32), cp.ArrayArg(x), cp.ArrayArg(out), k)
    got = client.read(out)
    assert np.array_equal(got, np.arange(n, dtype=np.float32) + k), (k, got[:4])
"""

FIRST_LAUNCHES = """
errors = []
barrier = threading.Barrier(8)


def job(i):
    try:
        client = cp.client("interp" if i % 2 else "cpu")
        barrier.wait()
        launch(client, i)
    except BaseException as e:
        import traceback

        errors.append(f"thread {i}: {type(e).__name__}: {e}\\n{traceback.format_exc()}")


threads = [threading.Thread(target=job, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("\\n".join(errors) or "ok")
sys.exit(1 if errors else 0)
"""

FORKS = """
clients = {name: cp.client(name) for name in ("interp", "cpu")}
stop = False


def loop():
    i = 0
    while not stop:
        launch(clients["cpu"], i % 3, 4096)  # warm launches over the worker threads
        launch(clients["interp"], 0)
        if i % 4 == 0:
            launch(clients["cpu"], 100 + i)  # a compile now and then: LLVM and the build lock in use
        i += 1


launch(clients["cpu"], 0, 4096)
launch(clients["interp"], 0)
thread = threading.Thread(target=loop)
thread.start()
failures = []
for trial in range(FORKS):
    time.sleep(0.02)
    pid = os.fork()
    if pid == 0:
        try:
            launch(clients["cpu"], 1, 4096)
            launch(clients["interp"], 1)
            if trial % COMPILE_EVERY == 0:
                launch(clients["cpu"], 7777 + trial)
        except BaseException as e:
            print("child", trial, repr(e), file=sys.stderr)
            os._exit(1)
        os._exit(0)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.waitstatus_to_exitcode(status) != 0:
                failures.append(f"child {trial}: exit status {os.waitstatus_to_exitcode(status)}")
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            failures.append(f"child {trial}: hung")
            break
        time.sleep(0.01)
stop = True
thread.join()
print("\\n".join(failures) or "ok")
sys.exit(1 if failures else 0)
"""


def _run_script(tmp_path: Path, body: str, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run KERNEL + ``body`` as a file (``@cube`` reads its source) in a fresh process with a fresh cache."""
    script = tmp_path / f"script_{time.monotonic_ns()}.py"
    script.write_text(KERNEL + textwrap.dedent(body))
    full_env = {**os.environ, "CUBEPY_CACHE_DIR": str(tmp_path / f"cache_{script.stem}"), **(env or {})}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=ROOT
    )


# -- 1. lazy registration -----------------------------------------------------------------------------------


def test_a_table_is_complete_for_every_thread_while_its_modules_import(monkeypatch):
    """Threads looking up while the table's slow module imports all find the implementation (never a miss)."""
    name = "cubepy_test_slow_registrations"
    table = OpTable("test", modules=(name,), by_family={"arith": (name,)})
    started = threading.Event()

    def import_slowly(module_name: str):
        assert module_name == name
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
            started.set()
            time.sleep(0.2)  # the first thread is mid-import: the others must wait, not miss
            table.implements(Add)(lambda *args: None)
        return sys.modules[name]

    monkeypatch.setattr("cubepy.ir.ops.record.importlib.import_module", import_slowly)
    monkeypatch.delitem(sys.modules, name, raising=False)
    found: list[object] = []

    def look_up():
        found.append(table.get(Add))

    threads = [threading.Thread(target=look_up) for _ in range(8)]
    threads[0].start()
    started.wait(5)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(10)
    assert len(found) == 8 and all(f is not None for f in found)


def test_a_whole_table_load_marks_itself_loaded_only_when_filled(monkeypatch):
    name = "cubepy_test_slow_table"
    table = OpTable("test", modules=(name,))
    started = threading.Event()

    def import_slowly(module_name: str):
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
            started.set()
            time.sleep(0.2)
            table.implements(Add)(lambda *args: None)
        return sys.modules[name]

    monkeypatch.setattr("cubepy.ir.ops.record.importlib.import_module", import_slowly)
    monkeypatch.delitem(sys.modules, name, raising=False)
    first = threading.Thread(target=table.load)
    first.start()
    started.wait(5)
    assert table.get(Add) is not None  # waits for the first thread's import instead of seeing half a table
    first.join(10)


@pytest.mark.slow
def test_eight_threads_first_launches_in_ten_fresh_processes(tmp_path):
    for trial in range(10):
        result = _run_script(tmp_path, FIRST_LAUNCHES, timeout=120)
        assert result.returncode == 0, f"process {trial}:\n{result.stdout}\n{result.stderr[-3000:]}"


def test_eight_threads_first_launches_in_a_fresh_process(tmp_path):
    result = _run_script(tmp_path, FIRST_LAUNCHES, timeout=120)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"


# -- 2. forks -----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.slow
def test_twenty_forks_while_another_thread_launches_and_compiles(tmp_path):
    result = _run_script(tmp_path, "FORKS, COMPILE_EVERY = 20, 1\n" + FORKS, timeout=300)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forks_while_another_thread_launches(tmp_path):
    result = _run_script(tmp_path, "FORKS, COMPILE_EVERY = 10, 5\n" + FORKS, timeout=120)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"


# -- 3. SIGINT --------------------------------------------------------------------------------------------

RUNAWAYS = """
from cubepy import u32


@cube(launch=True)
def spins_on_memory(flag: Array[u32], out: Array[u32]):
    while flag[0] == u32(0):
        out[ABSOLUTE_POS] = out[ABSOLUTE_POS] + u32(1)


@cube(launch=True)
def spins_on_nothing(flag: Array[u32], out: Array[u32]):
    while cp.runtime(True):
        pass


@cube(launch=True)
def spins_with_a_barrier(flag: Array[u32], out: Array[u32]):
    while flag[0] == u32(0):
        cp.sync_cube()
        out[ABSOLUTE_POS] = out[ABSOLUTE_POS] + u32(1)


@cube(launch=True)
def spins_as_coroutines(flag: Array[u32], out: Array[u32]):
    if ABSOLUTE_POS % u32(2) == u32(0):
        while flag[0] == u32(0):
            out[ABSOLUTE_POS] = cp.plane_sum(out[ABSOLUTE_POS])


failures = []
for runtime, kernel_name, cubes in CASES:
    client = cp.client(runtime)
    kernel = globals()[kernel_name]
    flag, out = client.zeros((1,), np.uint32), client.zeros((cubes * 32,), np.uint32)
    launch(client, 0, cubes * 32)  # compiled and warm
    kernel.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.create(np.ones(1, np.uint32))),
                  cp.ArrayArg(out)) if kernel_name != "spins_on_nothing" else None
    sent = []

    def interrupt():
        time.sleep(1.5 if kernel_name == "spins_on_nothing" else 0.5)  # that one compiles first (no warm-up)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        kernel.launch(client, cp.CubeCount(cubes), cp.CubeDim(32), cp.ArrayArg(flag), cp.ArrayArg(out))
        failures.append(f"{runtime} {kernel_name}: the launch returned")
        continue
    except KeyboardInterrupt:
        took = time.monotonic() - sent[0]
        if took > 1.0:
            failures.append(f"{runtime} {kernel_name}: KeyboardInterrupt {took:.2f} s after SIGINT")
    launch(client, 3, cubes * 32)  # the client still works
print("\\n".join(failures) or "ok")
sys.exit(1 if failures else 0)
"""


def _interrupt_script(cases: list[tuple[str, str, int]]) -> str:
    return "import signal\nCASES = " + repr(cases) + "\n" + RUNAWAYS


def test_sigint_stops_a_runaway_launch_and_leaves_the_client_usable(tmp_path):
    cases = [("cpu", "spins_on_memory", 64), ("cpu", "spins_on_nothing", 1), ("interp", "spins_on_memory", 2)]
    result = _run_script(tmp_path, _interrupt_script(cases), timeout=120)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"


@pytest.mark.slow
def test_sigint_stops_runaway_launches_of_every_cpu_shape(tmp_path):
    cases = [("cpu", "spins_with_a_barrier", 4), ("cpu", "spins_as_coroutines", 4), ("cpu", "spins_on_memory", 1)]
    result = _run_script(tmp_path, _interrupt_script(cases), timeout=120)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"


# -- 4. the compile child and server die with their parent -------------------------------------------------------


def _dies_with_its_killed_parent(tmp_path, what: str, parent_code: str, after_kill=None) -> None:
    """Run ``parent_code`` (which writes a helper's pid with ``publish(pid)``), kill it, see the helper end."""
    pid_file = tmp_path / "helper.pid"
    script = tmp_path / "parent.py"
    publish = textwrap.dedent(
        f"""
        import os

        def publish(pid):
            with open({str(pid_file)!r} + ".tmp", "w") as f:
                f.write(str(pid))
            os.rename({str(pid_file)!r} + ".tmp", {str(pid_file)!r})
        """
    )
    script.write_text(publish + textwrap.dedent(parent_code))
    parent = subprocess.Popen([sys.executable, str(script)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists():
            assert parent.poll() is None, f"the parent ended before its {what} started"
            assert time.monotonic() < deadline, f"the {what} never started"
            time.sleep(0.02)
        helper = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        if after_kill is not None:
            after_kill(helper)
        deadline = time.monotonic() + 10
        while _alive(helper):
            assert time.monotonic() < deadline, f"{what} {helper} outlived its killed parent"
            time.sleep(0.02)
    finally:
        if parent.poll() is None:
            parent.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_compile_child_dies_when_its_parent_is_killed(tmp_path):
    code = """
        import time
        from cubepy.compiler.llvm_process import run_isolated

        def work():
            publish(os.getpid())
            time.sleep(60)  # a compile that takes long
            return b""

        run_isolated(work, "slow_kernel")
        """
    _dies_with_its_killed_parent(tmp_path, "compile child", code)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_compile_server_dies_when_its_parent_is_killed(tmp_path):
    code = """
        import signal, time
        from cubepy.compiler import llvm_server

        llvm_server.start()
        pid = llvm_server._server.process.pid
        os.kill(pid, signal.SIGSTOP)  # it runs again only after this process is gone
        publish(pid)
        time.sleep(60)
        """
    _dies_with_its_killed_parent(tmp_path, "compile server", code, lambda pid: os.kill(pid, signal.SIGCONT))


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
