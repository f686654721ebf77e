"""The NVPTX target: architecture validation, LLVM's O3 pipeline and PTX emission, isolated from LLVM aborts.

LLVM must never take the user's process down.  The cubepy IR verifier runs before lowering; here,
``parse_assembly`` and ``verify`` run in-process (they raise), unknown ``llvm.*`` intrinsics and
unresolved calls are rejected (LLVM would accept them and ptxas fail later), and everything that can
hit an ``LLVM ERROR`` (libdevice linking, O3, instruction selection, emission) runs in a forked child
that inherits the loaded llvmlite.  A child killed by a signal or reporting ``LLVM ERROR`` becomes a
``CompileError`` carrying its stderr and the kernel's name.

``llvmlite.binding`` is imported on first use, never when cubepy is imported.
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import json
import os
import re
import select
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable

import attrs

from cubepy.compiler import libdevice
from cubepy.errors import CompileError

TRIPLE = "nvptx64-nvidia-cuda"
# Exactly str(target_machine.target_data) for this triple with ``--nvptx-short-ptr``: 64-bit generic and
# global pointers, 32-bit shared (3, and shared::cluster 7), constant (4) and local (5) ones, as nvcc emits.
DATA_LAYOUT = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
DEFAULT_ARCH = "sm_90a"
CHILD_TIMEOUT_S = 600.0  # O3 + emission of one kernel; far beyond any real kernel
# llvmlite parses into LLVM's one global context, which is not thread-safe, and a fork must not copy
# it half-updated: every use of LLVM in this module holds this lock.
_LLVM_LOCK = threading.RLock()


def _llvmlite_lock():
    """llvmlite's own lock around every call into LLVM (an RLock), or None before llvmlite is imported."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    return getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)


def _before_fork() -> None:
    # llvmlite's lock is taken around a fork, so that no other thread is inside a call into LLVM: the child
    # (the compile child included) gets LLVM's state whole.  Not ``_LLVM_LOCK``: ``run_isolated`` forks while
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
    _LLVM_LOCK._at_fork_reinit()  # type: ignore[attr-defined]
    inner = _llvmlite_lock()
    if inner is not None and hasattr(inner, "_at_fork_reinit"):
        inner._at_fork_reinit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
MIN_PTX = 80  # PTX 8.0: fence.proxy.async, elect.sync and the TMA forms
# Every NVPTX architecture LLVM 22 knows from sm_70 on, with the minimum PTX ISA version it needs (x10).
ARCH_MIN_PTX = {
    "sm_70": 60,
    "sm_72": 61,
    "sm_75": 63,
    "sm_80": 70,
    "sm_86": 71,
    "sm_87": 74,
    "sm_88": 90,
    "sm_89": 78,
    "sm_90": 78,
    "sm_90a": 80,
    "sm_100": 86,
    "sm_100a": 86,
    "sm_100f": 88,
    "sm_101": 86,
    "sm_101a": 86,
    "sm_101f": 88,
    "sm_103": 88,
    "sm_103a": 88,
    "sm_103f": 88,
    "sm_110": 90,
    "sm_110a": 90,
    "sm_110f": 90,
    "sm_120": 87,
    "sm_120a": 87,
    "sm_120f": 88,
    "sm_121": 88,
    "sm_121a": 88,
    "sm_121f": 88,
}


@attrs.frozen
class Target:
    """A GPU architecture (``sm_90a``), its compute capability number (90) and LLVM feature string."""

    arch: str
    sm: int
    features: str


def parse_target(name: str) -> Target:
    """Validate ``sm_XX[a|f]`` (XX >= 70, known to LLVM 22) before LLVM ever sees it."""
    match = re.fullmatch(r"sm_(\d+)([af]?)", name or "")
    if match is None or int(match.group(1)) < 70:
        raise CompileError(
            f"target {name!r} is not supported: expected sm_XX with XX >= 70 (for example {DEFAULT_ARCH!r})"
        )
    if name not in ARCH_MIN_PTX:
        raise CompileError(f"target {name!r} is unknown to LLVM 22's NVPTX back end; known: {', '.join(ARCH_MIN_PTX)}")
    ptx = max(MIN_PTX, ARCH_MIN_PTX[name])
    return Target(name, int(match.group(1)), f"+ptx{ptx}")


@functools.cache
def binding():
    """``llvmlite.binding``, imported and initialized for NVPTX on first use (thread-safe)."""
    with _LLVM_LOCK:  # two threads' first launches must not initialize LLVM at once
        import llvmlite.binding as llvm

        _initialize(llvm)
    return llvm


@functools.cache
def _initialize(llvm) -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.set_option("", "--nvptx-short-ptr")  # 32-bit shared/local/constant addresses (NVPTX only)


def optimize(machine, module) -> str:
    """Run LLVM's O3 pipeline for ``machine`` over ``module`` in place; the optimized IR text."""
    llvm = binding()
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return str(module)


@attrs.frozen
class EmitResult:
    """What the LLVM stage produced: optimized IR text, PTX and the child's own stage timings."""

    llvm_opt: str
    ptx: str
    timings: dict[str, float]


def check_module(
    text: str,
    kernel_name: str,
    libdevice_calls: frozenset[str] = frozenset(),
    libdevice_cache: str | os.PathLike | None = None,
):
    """Parse and verify LLVM IR in-process and reject calls LLVM would pass through to ptxas.

    ``libdevice_cache`` is the folder of libdevice subsets (``cubepy.compiler.libdevice``), or None.
    """
    with _LLVM_LOCK:
        return _check_module(text, kernel_name, libdevice_calls, libdevice_cache)


# Functions the CUDA driver provides to every module (ptxas leaves them to the linker): debug_print's vprintf.
DEVICE_RUNTIME_FUNCTIONS = frozenset({"vprintf"})


def libdevice_names(module, libdevice_calls: frozenset[str] = frozenset()) -> frozenset[str]:
    """The libdevice functions a parsed kernel ``module`` declares, with those its lowering recorded."""
    return frozenset(f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_")) | set(
        libdevice_calls
    )


def _libdevice_subset(names: frozenset[str], kernel_name: str, cache) -> libdevice.Subset | None:
    """The libdevice subset defining ``names`` (None when there are none); raises when libdevice lacks one."""
    if not names:
        return None
    found = libdevice.subset(names, cache)
    if found is None:
        raise CompileError(
            f"kernel {kernel_name}: needs libdevice ({', '.join(sorted(names))}) but no "
            "CUDA toolkit with nvvm/libdevice/libdevice.10.bc was found (set CUDA_HOME)"
        )
    if found.missing:
        raise CompileError(f"kernel {kernel_name}: libdevice has no function {min(found.missing)!r}")
    return found


def _check_module(text: str, kernel_name: str, libdevice_calls: frozenset[str], libdevice_cache):
    llvm = binding()
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as error:
        raise CompileError(f"kernel {kernel_name}: LLVM rejected the lowered IR: {error}") from error
    _libdevice_subset(libdevice_names(module, libdevice_calls), kernel_name, libdevice_cache)
    for function in module.functions:
        if not function.is_declaration:
            continue
        name = function.name
        if name.startswith("llvm."):
            # A recognized intrinsic gets attributes when parsed; an unknown name gets none
            # (an LLVM quirk) and would become a call ptxas cannot parse.
            if not list(function.attributes):
                raise CompileError(f"kernel {kernel_name}: unknown LLVM intrinsic {name!r}")
        elif not name.startswith("__nv_") and name not in DEVICE_RUNTIME_FUNCTIONS:
            raise CompileError(f"kernel {kernel_name}: call to unresolved external function {name!r}")
    return module


def optimize_and_emit(
    module,
    target: Target,
    kernel_name: str,
    libdevice_calls: frozenset[str] = frozenset(),
    *,
    isolate: bool = True,
    libdevice_cache: str | os.PathLike | None = None,
) -> EmitResult:
    """Link libdevice, run O3 and emit PTX for a checked module; in a forked child unless ``isolate=False``."""

    lib = _libdevice_subset(libdevice_names(module, libdevice_calls), kernel_name, libdevice_cache)

    def work() -> bytes:
        llvm = binding()
        timings: dict[str, float] = {}
        start = time.perf_counter()
        if lib is not None:
            module.link_in(libdevice.parse(lib))
            for function in module.functions:
                if not function.is_declaration and function.name != kernel_name:
                    function.linkage = "internal"
        timings["link"] = time.perf_counter() - start
        machine = llvm.Target.from_triple(TRIPLE).create_target_machine(
            cpu=target.arch, features=target.features, opt=3
        )
        start = time.perf_counter()
        optimized = optimize(machine, module)
        timings["o3"] = time.perf_counter() - start
        start = time.perf_counter()
        ptx = machine.emit_assembly(module)
        timings["emit"] = time.perf_counter() - start
        return _pack([json.dumps(timings), optimized, ptx])

    if isolate and hasattr(os, "fork"):
        payload = run_isolated(work, kernel_name)
    else:
        with _LLVM_LOCK:
            payload = work()
    timings_text, optimized, ptx = _unpack(payload)
    return EmitResult(optimized, ptx, json.loads(timings_text))


def run_isolated(
    work: Callable[[], bytes], kernel_name: str, timeout_s: float = CHILD_TIMEOUT_S, emitting: str = "PTX"
) -> bytes:
    """Run ``work`` in a forked child and return its bytes; a crash, ``LLVM ERROR`` or hang raises CompileError.

    Holds the LLVM lock: no other cubepy thread is inside LLVM while the child is created.
    """
    die_with = _parent_death_signal()  # resolved before the fork: the child calls no dynamic loader
    parent = os.getpid()
    with _LLVM_LOCK:
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
    if os.WIFSIGNALED(status):
        signame = signal.Signals(os.WTERMSIG(status)).name
        raise CompileError(
            f"kernel {kernel_name}: LLVM crashed ({signame}) while optimizing or emitting "
            f"{emitting}:\n{stderr or '(no output)'}"
        )
    if "LLVM ERROR" in stderr or not payload.startswith((b"ok", b"ex")):
        raise CompileError(
            f"kernel {kernel_name}: LLVM failed (exit status {os.waitstatus_to_exitcode(status)})"
            f":\n{stderr or '(no output)'}"
        )
    if payload.startswith(b"ex"):
        raise CompileError(
            f"kernel {kernel_name}: LLVM failed:\n{payload[2:].decode(errors='replace')}"
            + (f"\n{stderr}" if stderr else "")
        )
    return payload[2:]


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


def _pack(parts: list[str]) -> bytes:
    out = []
    for part in parts:
        data = part.encode()
        out.append(struct.pack("<Q", len(data)) + data)
    return b"".join(out)


def _unpack(payload: bytes) -> list[str]:
    parts, offset = [], 0
    while offset < len(payload):
        (size,) = struct.unpack_from("<Q", payload, offset)
        offset += 8
        parts.append(payload[offset : offset + size].decode())
        offset += size
    return parts
