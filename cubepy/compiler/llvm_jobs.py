"""The LLVM work that can abort a process, as functions of text and bytes, and the loop that serves them.

Linking libdevice, O3 and emission can end a process (an ``LLVM ERROR`` exits, a bug crashes), so cubepy
runs them outside the user's process.  Each job here takes only plain data (LLVM IR text, bitcode, a target
description) and returns bytes, so it can run anywhere: in the compile server ``cubepy.compiler.llvm_server``
starts (this file run by path as a script, so the server imports llvmlite and the standard library only, not
cubepy or numpy), in a forked child (``run_isolated``), or in-process when isolation is turned off.

This module imports nothing of cubepy.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any


def initialize(llvm: Any) -> None:
    """Make every target LLVM has (NVPTX and the host CPU) usable, with 32-bit NVPTX shared addresses."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.set_option("", "--nvptx-short-ptr")  # 32-bit shared/local/constant addresses (NVPTX only)


@functools.cache
def _llvm() -> Any:
    import llvmlite.binding as llvm

    initialize(llvm)
    return llvm


def optimize(machine: Any, module: Any) -> str:
    """Run LLVM's O3 pipeline for ``machine`` over ``module`` in place; the optimized IR text."""
    llvm = _llvm()
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return str(module)


def pack_parts(parts: list[str]) -> bytes:
    """Strings as one payload (each length-prefixed)."""
    out = []
    for part in parts:
        data = part.encode()
        out.append(struct.pack("<Q", len(data)) + data)
    return b"".join(out)


def unpack_parts(payload: bytes) -> list[str]:
    """The strings ``pack_parts`` packed."""
    parts, offset = [], 0
    while offset < len(payload):
        (size,) = struct.unpack_from("<Q", payload, offset)
        offset += 8
        parts.append(payload[offset : offset + size].decode())
        offset += size
    return parts


def _optimize_and_emit(
    machine: Any, module: Any, emit: Callable[[Any], Any], timings: dict[str, float]
) -> tuple[str, Any]:
    start = time.perf_counter()
    optimized = optimize(machine, module)
    timings["o3"] = time.perf_counter() - start
    start = time.perf_counter()
    emitted = emit(module)
    timings["emit"] = time.perf_counter() - start
    return optimized, emitted


def emit_ptx(
    text: str, libdevice_bitcode: bytes | None, kernel_name: str, triple: str, arch: str, features: str
) -> bytes:
    """Link libdevice into the verified module ``text``, run O3, emit PTX: timings, optimized IR, PTX (packed)."""
    llvm = _llvm()
    timings: dict[str, float] = {}
    module = llvm.parse_assembly(text)
    start = time.perf_counter()
    if libdevice_bitcode is not None:
        module.link_in(llvm.parse_bitcode(libdevice_bitcode))
        for function in module.functions:
            if not function.is_declaration and function.name != kernel_name:
                function.linkage = "internal"
    timings["link"] = time.perf_counter() - start
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=arch, features=features, opt=3)
    optimized, ptx = _optimize_and_emit(machine, module, machine.emit_assembly, timings)
    return pack_parts([json.dumps(timings), optimized, ptx])


def emit_object(text: str, triple: str, cpu: str, features: str) -> bytes:
    """O3 and object code for the host CPU of the verified module ``text``: timings, optimized IR, object (hex)."""
    llvm = _llvm()
    timings: dict[str, float] = {}
    module = llvm.parse_assembly(text)
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3, jit=True)
    optimized, code = _optimize_and_emit(machine, module, machine.emit_object, timings)
    return pack_parts([json.dumps(timings), optimized, bytes(code).hex()])


JOBS: dict[str, Callable[..., bytes]] = {"ptx": emit_ptx, "object": emit_object}
READY = b"ready"  # the server's first answer: it started and loaded LLVM
TAKEN = b"taken"  # said as each job is read, before it runs: a server that dies before it never ran the job


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_frame(fd: int, payload: bytes) -> None:
    """``payload`` behind its 8-byte length, all of it."""
    view = memoryview(struct.pack("<Q", len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(5)


def serve(parent: int) -> None:
    """Answer jobs until the request pipe (standard input) closes: each request a pickled ``(job, args)``.

    The first answer is ``ready``, once LLVM is loaded; then per job ``taken`` as it is read, and ``ok`` and the
    job's bytes, or ``ex`` and a traceback.  Ctrl-C is the parent's to handle
    (it ends this process when it gives up on a job); anything printed goes to standard error, the parent's log.
    """
    # Not PR_SET_PDEATHSIG: it fires when the *thread* that started this process ends, and any of the
    # parent's threads may be the first to compile.  A watcher ends this process within a second of the
    # parent's death even in the middle of a job (between jobs the request pipe closing ends it).
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.dup(1)
    os.dup2(2, 1)
    _llvm()
    write_frame(answers, READY)
    while True:
        header = _read_exactly(0, 8)
        if header is None:
            return
        request = _read_exactly(0, struct.unpack("<Q", header)[0])
        if request is None:
            return
        write_frame(answers, TAKEN)
        try:
            job, args = pickle.loads(request)  # noqa: S301 - written by the process that started this one
            payload = b"ok" + JOBS[job](*args)
        except BaseException:  # noqa: BLE001 - reported to the parent as text
            payload = b"ex" + traceback.format_exc().encode()
        write_frame(answers, payload)


if __name__ == "__cubepy_llvm_server__":
    serve(int(sys.argv[-1]))
