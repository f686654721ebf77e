"""The compile server: one process for every LLVM job, a new one after a crash, a timeout or a fork."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from cubepy.compiler import llvm_jobs, llvm_server
from cubepy.compiler.abi import TRIPLE
from cubepy.compiler.emit_host import host_machine_spec
from cubepy.compiler.llvm_process import unpack_parts
from cubepy.errors import CompileError

TEXT = "define i32 @twice(i32 %x) {\n  %y = add i32 %x, %x\n  ret i32 %y\n}\n"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the tests read /proc")


def _object(timeout_s: float = llvm_server.CHILD_TIMEOUT_S) -> bytes:
    payload = llvm_server.run_job("object", (TEXT, *host_machine_spec()), "twice", "object code", timeout_s)
    return bytes.fromhex(unpack_parts(payload)[2])


@pytest.fixture(autouse=True)
def _a_server_running():
    llvm_server.start()  # whatever this worker's size


def _server_pid() -> int:
    llvm_server.start()
    assert llvm_server._server is not None
    llvm_server._server.wait_until_ready(30)  # stopped or killed later, it is mid-job, not starting
    return llvm_server._server.process.pid


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie waiting for its reaper counts as gone


def test_jobs_run_in_one_server_that_loads_no_cubepy():
    first = _object()
    pid = _server_pid()
    assert _object() == first and _server_pid() == pid != os.getpid()
    assert first == bytes.fromhex(unpack_parts(llvm_jobs.emit_object(TEXT, *host_machine_spec()))[2])
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "llvmlite" in maps and "numpy" not in maps  # a bare interpreter: llvmlite, no numpy


def test_a_server_killed_before_it_read_the_job_hands_the_job_to_a_new_one():
    """Killed from outside between jobs and seen dead only once the job is sent: it never said ``taken``, so the
    job never ran and goes to a new server (a server that dies after taking a job is a crash: see
    ``test_the_servers_log_is_emptied_between_jobs_once_it_grows_and_still_quoted_after``)."""
    pid = _server_pid()
    os.kill(pid, signal.SIGSTOP)  # the job waits unread in its pipe until the kill
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(_object()))
    worker.start()
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    worker.join(30)
    assert len(results) == 1 and results[0] and _server_pid() != pid


def test_a_server_that_keeps_dying_before_it_reads_a_job_is_an_error(monkeypatch):
    """Two servers in a row that end before reading the job: a CompileError, not a loop."""
    original = llvm_server._Server.run

    def dies_first(self, *args, **kwargs):
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(llvm_server._Server, "run", dies_first)
    with pytest.raises(CompileError, match="ended twice before it took the job"):
        _object()
    monkeypatch.undo()
    assert _object()


def test_a_job_past_its_timeout_ends_the_server():
    pid = _server_pid()
    os.kill(pid, signal.SIGSTOP)
    with pytest.raises(CompileError, match="did not finish within"):
        _object(timeout_s=0.3)
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, "the timed-out server was left running"
        time.sleep(0.02)
    assert _object() and _server_pid() != pid


def test_the_servers_log_is_emptied_between_jobs_once_it_grows_and_still_quoted_after():
    server = llvm_server._server
    assert server is not None
    os.write(server.log.fileno(), b"w" * (llvm_server._LOG_KEEP + 1))  # as if the server had written it
    assert _object() and os.fstat(server.log.fileno()).st_size < llvm_server._LOG_KEEP
    # PTX 7.8 cannot target sm_90a: LLVM prints an LLVM ERROR and exits, and the error quotes it
    args = ("define void @k() {\n  ret void\n}\n", None, "k", TRIPLE, "sm_90a", "+ptx78")
    with pytest.raises(CompileError, match="LLVM ERROR.*PTX version") as info:
        llvm_server.run_job("ptx", args, "k")
    assert "\x00" not in str(info.value)  # written from the start of the emptied log, not past a hole
    assert _object()


def test_a_server_that_does_not_start_in_time_is_ended(monkeypatch):
    monkeypatch.setattr(llvm_server, "_server", None)
    llvm_server.start()
    starting = llvm_server._server
    assert starting is not None
    os.kill(starting.process.pid, signal.SIGSTOP)  # before it could say it is ready
    with pytest.raises(CompileError, match="did not start within"):
        _object(timeout_s=0.3)
    assert starting.process.returncode is not None and llvm_server._server is None


def test_a_server_ended_between_jobs_is_replaced():
    pid = _server_pid()
    os.kill(pid, signal.SIGKILL)
    # Not /proc's state: its main thread is a zombie before its other threads end and it can be reaped.
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.01)
    assert _object() and _server_pid() != pid


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_server_and_leaves_the_parents():
    pid = _server_pid()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            ok = _object() == _object() and _server_pid() != pid
            os.write(write_end, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(child, 0)
    assert answer == b"1"
    assert _alive(pid) and _object() and _server_pid() == pid


def test_without_a_server_jobs_run_in_a_forked_child(monkeypatch):
    expected = _object()
    monkeypatch.setattr(llvm_server, "_server", None)
    monkeypatch.setattr(llvm_server, "_unavailable", "no interpreter (test)")
    assert _object() == expected
    assert llvm_server._server is None


def test_an_interpreter_that_cannot_run_the_server_compiles_in_forked_children(monkeypatch):
    expected = _object()
    monkeypatch.setattr(llvm_server, "_server", None)
    monkeypatch.setattr(llvm_server, "_unavailable", None)
    monkeypatch.setattr(llvm_server, "_forked", llvm_server.FORKS_BEFORE_SERVER)  # past the first compiles
    monkeypatch.setattr(sys, "executable", "/bin/false")  # starts, then ends before it says it is ready
    assert _object() == expected
    assert llvm_server._server is None and "ended as it started" in (llvm_server._unavailable or "")
    assert _object() == expected  # and from then on, without trying again


def test_a_process_forks_for_its_first_compiles_then_starts_the_server(monkeypatch):
    monkeypatch.setattr(llvm_server, "_server", None)
    monkeypatch.setattr(llvm_server, "_forked", 0)
    for _ in range(llvm_server.FORKS_BEFORE_SERVER):
        llvm_server.warm()
        assert _object() and llvm_server._server is None
    llvm_server.warm()
    server = llvm_server._server
    assert server is not None
    assert _object() and llvm_server._server is server  # once started, kept
    server.stop()  # the server this test started; the worker's own comes back after it
