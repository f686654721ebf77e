"""The compile server: one long-lived helper process that runs cubepy's LLVM jobs, restarted after a crash.

A forked child per compile (``run_isolated``) costs what copying this process's page tables costs, and then a
copy-on-write fault for each page either side writes: a fork that does nothing takes about 2 ms from a fresh
interpreter and 25 ms from one with 700 MB resident, and a compile's child, which writes much more, about
15 ms more than the server's round trip even in a small process.  The server is a fresh interpreter
(``python -c`` running ``cubepy/compiler/llvm_jobs.py`` by path, so it loads llvmlite and nothing of cubepy or
numpy), started once and sent each job as a pickled ``(name, args)`` over a pipe; its answer comes back the
same way.

What isolation promised still holds: an ``LLVM ERROR`` or a crash ends the server, not this process, and
becomes a ``CompileError`` carrying the server's standard error; the next job starts a new server.  The
server says ``taken`` as it reads each job, so a server killed from outside between jobs, whose death this
process sees only once it has sent the next job, is told apart from a job that crashed it: that job never ran,
and goes to a new server (once).  A job
past its timeout, or interrupted here (Ctrl-C), ends the server too.  The server dies with this process (its
request pipe closes, and a watcher thread in it sees its parent gone within a second, mid-job too); a forked
child of this process starts its own.  Where no server can be started (no ``sys.executable``, or one that
ends before it says it is ready: an embedding program's binary, an interpreter without llvmlite), jobs run in
a forked child as before, for the rest of the process.

A process's first ``FORKS_BEFORE_SERVER`` compiles still fork (each about 15 ms slower than through the
server, 23 ms with 4 GiB of arrays held; ``python -m benchmarks.compile_isolation``), because starting the
server costs a fresh interpreter importing llvmlite (about 0.15 s of CPU, and that long before its first
answer), which a script, a test's subprocess or a forked worker compiling one or two kernels would never earn
back.  Every compile calls ``warm()`` first, so from the next compile on the server starts while the IR
passes and the lowering run, and the process keeps using it.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

from cubepy.compiler import llvm_jobs
from cubepy.compiler.llvm_process import CHILD_TIMEOUT_S, failure, run_isolated
from cubepy.errors import CompileError
from cubepy.forks import fork_safe

_BOOT = (
    "import json, runpy, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "runpy.run_path(sys.argv[1], run_name='__cubepy_llvm_server__')"
)
_LOG_TAIL = 1 << 16  # bytes of the server's standard error a failure quotes at most
_LOG_KEEP = 1 << 20  # past this the log is emptied before the next job (a long session's warnings)
FORKS_BEFORE_SERVER = 2  # compiles a process forks for before it starts the server


class NotStarted(Exception):
    """The server ended before it was ready: this interpreter cannot run it."""


class NotTaken(Exception):
    """The server ended before it read the job (killed from outside between jobs): the job never ran."""


class _Server:
    """One running server: its process, its pipes and the file its standard error goes to."""

    def __init__(self) -> None:
        self.log: IO[bytes] = tempfile.TemporaryFile(prefix="cubepy-llvm-")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, llvm_jobs.__file__, json.dumps(sys.path), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = self.process.stdin.fileno()
        self.answers = self.process.stdout.fileno()
        self.ready = False

    def wait_until_ready(self, timeout_s: float) -> None:
        """Return once the server said it loaded LLVM; ``NotStarted`` with its output when it ended first."""
        if self.ready:
            return
        try:
            answer = self._answer(time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise
        if answer != llvm_jobs.READY:
            returncode = self.process.wait()
            stderr = self._log_since(0)
            self.stop()
            raise NotStarted(f"the compile server ended as it started (exit status {returncode}): {stderr[-2000:]}")
        self.ready = True

    def run(self, job: str, args: tuple[Any, ...], kernel_name: str, emitting: str, timeout_s: float) -> bytes:
        """The job's bytes; a CompileError when it failed, crashed the server or ran past ``timeout_s``."""
        log_start = self._log_size()
        deadline = time.monotonic() + timeout_s
        try:
            llvm_jobs.write_frame(self.requests, pickle.dumps((job, args), protocol=pickle.HIGHEST_PROTOCOL))
            taken = self._answer(deadline)
            if taken is not None and taken != llvm_jobs.TAKEN:  # not this protocol: never wait on it (stopped below)
                raise CompileError(f"kernel {kernel_name}: the compile server answered out of turn: {taken[:64]!r}")
            answer = self._answer(deadline) if taken is not None else None
        except BrokenPipeError:
            taken = answer = None
        except BaseException:  # a Ctrl-C or the timeout: the server is mid-job and must not answer a later one
            self.stop()
            raise
        if taken is None:  # it ended before reading the job (its death seen only now): another server may run it
            self.stop()
            raise NotTaken
        if answer is None:  # the server ended: LLVM aborted or crashed
            returncode = self.process.wait()
            stderr = self._log_since(log_start)
            self.stop()
            raise failure(kernel_name, emitting, returncode, stderr)
        stderr = self._log_since(log_start)
        if "LLVM ERROR" in stderr:
            raise failure(kernel_name, emitting, 0, stderr)
        if answer.startswith(b"ex"):
            raise CompileError(
                f"kernel {kernel_name}: LLVM failed:\n{answer[2:].decode(errors='replace')}"
                + (f"\n{stderr}" if stderr else "")
            )
        return answer[2:]

    def _answer(self, deadline: float) -> bytes | None:
        header = self._read(8, deadline)
        if header is None:
            return None
        return self._read(struct.unpack("<Q", header)[0], deadline)

    def _read(self, size: int, deadline: float) -> bytes | None:
        chunks, left = [], size
        while left:
            ready, _, _ = select.select([self.answers], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError
            chunk = os.read(self.answers, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _log_size(self) -> int:
        """The log's size, after emptying it if it grew past ``_LOG_KEEP`` (the server is between jobs here)."""
        fd = self.log.fileno()
        size = os.fstat(fd).st_size
        if size > _LOG_KEEP:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)  # the server writes through the same open file, at this offset
            size = 0
        return size

    def _log_since(self, start: int) -> str:
        size = os.fstat(self.log.fileno()).st_size
        start = max(start, size - _LOG_TAIL)
        return os.pread(self.log.fileno(), size - start, start).decode(errors="replace").strip()

    def stop(self) -> None:
        """End the server: close its request pipe (it exits at the end of its job) and kill it."""
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self.process.kill()
        self.process.wait()
        self.log.close()

    def forget(self) -> None:
        """In a forked child: drop this process's copies of the pipes, leave the parent's server running."""
        for stream in (self.process.stdin, self.process.stdout, self.log):
            if stream is not None:
                stream.close()
        self.process.returncode = 0  # not this process's child: never wait for it


_lock = fork_safe(threading.Lock())
_server: _Server | None = None
_unavailable: str | None = None  # why no server can start here; jobs then run in forked children
_forked = 0  # jobs this process ran in forked children before it started the server


def _current(start: bool) -> _Server | None:
    """The running server; one is started first when ``start`` and none runs (or the last one ended)."""
    global _server, _unavailable
    if _server is not None and _server.process.poll() is not None:
        _server.stop()  # ended between jobs (killed from outside): start another
        _server = None
        start = True
    if _server is None and start and _unavailable is None:
        try:
            if not sys.executable:
                raise OSError("sys.executable is empty")
            _server = _Server()
        except OSError as error:
            _unavailable = str(error)
    return _server


def warm() -> None:
    """Start the server now if this process has compiled enough to want one, without waiting for it to be ready."""
    with _lock:
        _current(_forked >= FORKS_BEFORE_SERVER)


def start() -> None:
    """Start the server now if none is running, whatever this process's size (tests, a long-lived service)."""
    with _lock:
        _current(True)


def run_job(
    job: str, args: tuple[Any, ...], kernel_name: str, emitting: str = "PTX", timeout_s: float = CHILD_TIMEOUT_S
) -> bytes:
    """Run ``llvm_jobs.JOBS[job](*args)`` in the server; its bytes, or a CompileError naming ``kernel_name``.

    A server found dead before it read the job (killed between jobs, its death not yet reaped when the job was
    sent) never ran it: the job goes to a new server, once.
    """
    global _server, _forked
    with _lock:
        for attempt in range(2):
            server = _ready_server(attempt > 0 or _forked >= FORKS_BEFORE_SERVER, kernel_name, timeout_s)
            if server is None:
                _forked += 1
                return run_isolated(lambda: llvm_jobs.JOBS[job](*args), kernel_name, timeout_s, emitting)
            try:
                return server.run(job, args, kernel_name, emitting, timeout_s)
            except NotTaken:
                _server = None
            except TimeoutError:
                _server = None
                raise CompileError(f"kernel {kernel_name}: LLVM did not finish within {timeout_s:.0f} s") from None
            except BaseException:
                if server.process.returncode is not None:  # stopped: the next job starts another
                    _server = None
                raise
        raise CompileError(f"kernel {kernel_name}: the compile server ended twice before it took the job")


def _ready_server(start: bool, kernel_name: str, timeout_s: float) -> _Server | None:
    """The server, ready for a job (started first when ``start``); None: fork for this job."""
    global _server, _unavailable
    server = _current(start)
    if server is None:
        return None
    try:
        server.wait_until_ready(timeout_s)
    except NotStarted as error:  # this interpreter cannot run it: fork from now on
        _server, _unavailable = None, str(error)
        return None
    except TimeoutError:
        _server = None
        raise CompileError(f"kernel {kernel_name}: the compile server did not start within {timeout_s:.0f} s") from None
    return server


def _stop_at_exit() -> None:
    global _server
    with _lock:
        if _server is not None:
            _server.stop()
            _server = None


def _forget_after_fork() -> None:
    global _server, _forked
    _forked = 0
    if _server is not None:
        _server.forget()
        _server = None


atexit.register(_stop_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
