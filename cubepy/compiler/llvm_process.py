"""LLVM inside this process: the lazily imported binding, the lock every use holds, and the forked child.

LLVM must never take the user's process down.  Parsing and verifying raise, so they run in-process; everything
that can hit an ``LLVM ERROR`` or crash (libdevice linking, O3, coroutine splitting, instruction selection,
emission) runs in another process: the compile server (``cubepy.compiler.llvm_server``), or, where none can
start, a forked child through ``run_isolated``.  A helper killed by a signal, reporting ``LLVM ERROR`` or
running past its timeout becomes a ``CompileError`` carrying its stderr and the kernel's name (``failure``).
Both back ends use them: ``cubepy.compiler.emit_ptx`` (NVPTX) and ``cubepy.compiler.emit_host`` (the host CPU).

``llvmlite.binding`` is imported on first use, never when cubepy is imported.
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import os
import select
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from cubepy.compiler.llvm_jobs import initialize, optimize, pack_parts, unpack_parts
from cubepy.errors import CompileError

__all__ = [
    "CHILD_TIMEOUT_S",
    "LLVM_LOCK",
    "binding",
    "failure",
    "optimize",
    "pack_parts",
    "parse_verified",
    "run_isolated",
    "unpack_parts",
]

CHILD_TIMEOUT_S = 600.0  # O3 + emission of one kernel; far beyond any real kernel

# llvmlite parses into LLVM's one global context, which is not thread-safe, and a fork must not copy
# it half-updated: every use of LLVM in cubepy holds this lock.
LLVM_LOCK = threading.RLock()


def _llvmlite_lock() -> Any:
    """llvmlite's own lock around every call into LLVM (an RLock), or None before llvmlite is imported."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    return getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)


def _before_fork() -> None:
    # llvmlite's lock is taken around a fork, so that no other thread is inside a call into LLVM: the child
    # (the compile child included) gets LLVM's state whole.  Not ``LLVM_LOCK``: ``run_isolated`` forks while
    # holding it, and its fork waits for other fork hooks' locks (logging's) that this thread may hold.
    inner = _llvmlite_lock()
    if inner is not None:
        inner.acquire()


def _after_fork_in_parent() -> None:
    inner = _llvmlite_lock()
    if inner is not None:
        inner.release()


def _after_fork_in_child() -> None:
    # The child has only the forking thread: a lock held in the parent would never be released.
    LLVM_LOCK._at_fork_reinit()  # type: ignore[attr-defined]
    inner = _llvmlite_lock()
    if inner is not None and hasattr(inner, "_at_fork_reinit"):
        inner._at_fork_reinit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


@functools.cache
def binding() -> Any:
    """``llvmlite.binding``, imported and initialized for NVPTX on first use (thread-safe)."""
    with LLVM_LOCK:  # two threads' first launches must not initialize LLVM at once
        import llvmlite.binding as llvm

        _initialize(llvm)
    return llvm


@functools.cache
def _initialize(llvm: Any) -> None:
    initialize(llvm)


def parse_verified(text: str, what: str) -> Any:
    """``text`` parsed and verified by LLVM (hold ``LLVM_LOCK``); ``what`` starts the ``CompileError`` it raises."""
    try:
        module = binding().parse_assembly(text)
        module.verify()
    except RuntimeError as error:
        raise CompileError(f"{what}: {error}") from error
    return module


def run_isolated(
    work: Callable[[], bytes], kernel_name: str, timeout_s: float = CHILD_TIMEOUT_S, emitting: str = "PTX"
) -> bytes:
    """Run ``work`` in a forked child and return its bytes; a crash, ``LLVM ERROR`` or hang raises CompileError.

    Holds the LLVM lock: no other cubepy thread is inside LLVM while the child is created.
    """
    die_with = _parent_death_signal()  # resolved before the fork: the child calls no dynamic loader
    parent = os.getpid()
    with LLVM_LOCK:
        read_fd, write_fd = os.pipe()
        with tempfile.TemporaryFile() as log:
            pid = os.fork()
            if pid == 0:  # child: never return into the caller's stack, never run atexit handlers
                die_with(parent)
                _child_main(work, read_fd, write_fd, log.fileno())
            os.close(write_fd)
            try:
                payload = _read_until_eof(read_fd, pid, timeout_s, kernel_name)
            finally:
                os.close(read_fd)
                _, status = os.waitpid(pid, 0)
            log.seek(0)
            stderr = log.read().decode(errors="replace").strip()
    if os.WIFSIGNALED(status) or "LLVM ERROR" in stderr or not payload.startswith((b"ok", b"ex")):
        raise failure(kernel_name, emitting, os.waitstatus_to_exitcode(status), stderr)
    if payload.startswith(b"ex"):
        raise CompileError(
            f"kernel {kernel_name}: LLVM failed:\n{payload[2:].decode(errors='replace')}"
            + (f"\n{stderr}" if stderr else "")
        )
    return payload[2:]


def failure(kernel_name: str, emitting: str, returncode: int, stderr: str) -> CompileError:
    """The error for a helper process that crashed (``returncode`` < 0: killed by that signal) or exited failing."""
    if returncode < 0:
        return CompileError(
            f"kernel {kernel_name}: LLVM crashed ({signal.Signals(-returncode).name}) while optimizing or emitting "
            f"{emitting}:\n{stderr or '(no output)'}"
        )
    return CompileError(f"kernel {kernel_name}: LLVM failed (exit status {returncode}):\n{stderr or '(no output)'}")


@functools.cache
def _parent_death_signal() -> Callable[[int], None]:
    """A function the compile child calls first: make it die with ``parent`` (Linux ``PR_SET_PDEATHSIG``).

    Elsewhere it does nothing (the child still ends at its timeout).
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return lambda parent: None
    prctl.restype = ctypes.c_int

    def die_with(parent: int) -> None:
        prctl(
            _PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
        )
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(4)

    return die_with


_PR_SET_PDEATHSIG = 1


def _child_main(work: Callable[[], bytes], read_fd: int, write_fd: int, log_fd: int) -> None:
    status = 3
    try:
        faulthandler.disable()  # the parent's handler would print this child's expected aborts
        os.close(read_fd)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        try:
            payload = b"ok" + work()
        except BaseException:  # noqa: BLE001 - reported to the parent as text
            payload = b"ex" + traceback.format_exc().encode()
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view) :]
        status = 0
    finally:
        os._exit(status)


def _read_until_eof(fd: int, pid: int, timeout: float, kernel_name: str) -> bytes:
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            raise CompileError(f"kernel {kernel_name}: LLVM did not finish within {timeout:.0f} s")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
