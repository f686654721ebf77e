"""The cpu runtime's native hand-off: worker threads that wait, claim cubes and report back in compiled code.

A launch spread over the workers is one ctypes call, ``cubepy_pool_launch``: it writes the job (the kernel's
``cubepy_run_cubes``, the parameter block, one cube context per thread, the cube count and the chunk size) into
the pool's block, opens the launch, bumps the *go* word of each worker it uses, runs chunks itself, closes the
launch and returns once every worker that joined it has left.  Chunks are claimed from one atomic counter
(``atomicrmw add``), so no lock is taken per chunk and a thread that finishes early takes the next chunk.  A
worker (``cubepy_pool_worker``, which a Python thread calls once and which returns only when the pool stops)
spins on its go word for a while after its last job, then sleeps on it in the kernel (``futex``); when woken it
joins the launch only while the launch is open (a compare-and-swap on the state word, which holds the open bit
and the count of workers in the launch).  So a worker that the OS runs late, after the caller has claimed every
chunk, does not hold the launch up: the caller closes it and returns.  The launching thread spins, then
sleeps, until the workers in the launch have left.  No Python runs between a launch's start and its end, and
the GIL is released throughout (code that calls back into Python, the emulated TMA copies, takes it as any
ctypes callback does).

Each worker has its own go word, in its own cache line: a launch wakes only the workers it uses (those of the
CPUs the caller is not on).  The job is written while the launch is closed, and the next launch starts only
after every worker in this one left, so a worker never reads a job that changes under it; one woken late for
an earlier launch that joins the current one finds no context of its own in it and leaves at once.

The block is Linux-only (the futex system call, x86-64 and aarch64 numbers); elsewhere ``available()`` is
false and the runtime hands chunks to its Python workers instead (``workers.Workers``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from cubepy.runtime.cpu.workers import _bind_to_cpu, fork_safe

__all__ = ["NativePool", "available"]

_FUTEX = {"x86_64": 202, "aarch64": 98}  # SYS_futex
_PAUSE = {"x86_64": "call void @llvm.x86.sse2.pause()", "aarch64": "call void @llvm.aarch64.hint(i32 1)"}
_PAUSE_DECL = {"x86_64": "declare void @llvm.x86.sse2.pause()", "aarch64": "declare void @llvm.aarch64.hint(i32)"}

# The pool block's layout (bytes); words that different threads write sit in different cache lines.
STOP = 0  # i32: the pool is stopping (workers return)
NEXT = 64  # i64: the next cube to claim
STATE = 128  # i32: bit 31, the launch takes helpers; bits 0-30, the workers helping with it now
WAITING = 132  # i32: the launching thread sleeps on STATE
JOB = 192  # run (ptr), params (ptr), contexts (ptr), total (i32), chunk (i32)
WORKER = 256  # per worker, 64 bytes: go (i32), sleeping (i32)
LINE = 64
SPIN = 4000  # pause instructions a thread spins before it sleeps (~0.1-0.5 ms: back-to-back launches stay hot)

_IR = r"""
declare i64 @syscall(i64, ...)
{pause_decl}

define internal void @cubepy_pause() alwaysinline {{
  {pause}
  ret void
}}

define internal void @cubepy_futex(ptr %addr, i64 %op, i32 %value) {{
  %v = zext i32 %value to i64
  %r = call i64 (i64, ...) @syscall(i64 {futex}, ptr %addr, i64 %op, i64 %v, ptr null)
  ret void
}}

; claim chunks of cubes from the counter and run them on the cube context %ctx, until none are left
define internal void @cubepy_pool_work(ptr %pool, ptr %ctx) {{
entry:
  %runp = getelementptr i8, ptr %pool, i64 {job}
  %run = load ptr, ptr %runp
  %paramsp = getelementptr i8, ptr %pool, i64 {job_params}
  %params = load ptr, ptr %paramsp
  %totalp = getelementptr i8, ptr %pool, i64 {job_total}
  %total32 = load i32, ptr %totalp
  %total = sext i32 %total32 to i64
  %chunkp = getelementptr i8, ptr %pool, i64 {job_chunk}
  %chunk32 = load i32, ptr %chunkp
  %chunk = sext i32 %chunk32 to i64
  %nextp = getelementptr i8, ptr %pool, i64 {next}
  br label %claim
claim:
  %first = atomicrmw add ptr %nextp, i64 %chunk monotonic
  %more = icmp slt i64 %first, %total
  br i1 %more, label %body, label %done
body:
  %end0 = add i64 %first, %chunk
  %short = icmp slt i64 %end0, %total
  %end = select i1 %short, i64 %end0, i64 %total
  %first32 = trunc i64 %first to i32
  %end32 = trunc i64 %end to i32
  call void %run(ptr %params, ptr %ctx, i32 %first32, i32 %end32)
  br label %claim
done:
  ret void
}}

; spin on %word while it equals %seen (up to %spin pauses), then sleep on it; returns its new value
define internal i32 @cubepy_await(ptr %word, ptr %sleeping, i32 %seen, i32 %spin) {{
entry:
  %k = alloca i32
  store i32 0, ptr %k
  br label %test
test:
  %now = load atomic i32, ptr %word acquire, align 4
  %changed = icmp ne i32 %now, %seen
  br i1 %changed, label %done, label %spinning
spinning:
  %kv = load i32, ptr %k
  %kn = add i32 %kv, 1
  store i32 %kn, ptr %k
  %hot = icmp slt i32 %kv, %spin
  br i1 %hot, label %pause, label %sleep
pause:
  call void @cubepy_pause()
  br label %test
sleep:
  store atomic i32 1, ptr %sleeping seq_cst, align 4
  %again = load atomic i32, ptr %word seq_cst, align 4
  %same = icmp eq i32 %again, %seen
  br i1 %same, label %wait, label %awake
wait:
  call void @cubepy_futex(ptr %word, i64 128, i32 %seen)
  br label %awake
awake:
  store atomic i32 0, ptr %sleeping seq_cst, align 4
  store i32 0, ptr %k
  br label %test
done:
  ret i32 %now
}}

; a worker thread's life: wait for its go word to change, join the launch if it is still open, run chunks on
; its context (none: it was not asked to help), leave; until the pool stops
define void @cubepy_pool_worker(ptr %pool, i32 %index, i32 %spin) {{
entry:
  %seen = alloca i32
  store i32 0, ptr %seen
  %i64 = zext i32 %index to i64
  %offset0 = mul i64 %i64, {line}
  %offset = add i64 %offset0, {worker}
  %go = getelementptr i8, ptr %pool, i64 %offset
  %sleeping = getelementptr i8, ptr %go, i64 4
  %stopp = getelementptr i8, ptr %pool, i64 {stop}
  %state = getelementptr i8, ptr %pool, i64 {state}
  %waiting = getelementptr i8, ptr %pool, i64 {waiting}
  %ctxsp = getelementptr i8, ptr %pool, i64 {job_contexts}
  br label %wait
wait:
  %s = load i32, ptr %seen
  %g = call i32 @cubepy_await(ptr %go, ptr %sleeping, i32 %s, i32 %spin)
  store i32 %g, ptr %seen
  %stop = load atomic i32, ptr %stopp acquire, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %run
run:
  %now = load atomic i32, ptr %state acquire, align 4
  %open = icmp slt i32 %now, 0
  br i1 %open, label %join, label %wait
join:
  %more = add i32 %now, 1
  %pair = cmpxchg ptr %state, i32 %now, i32 %more seq_cst seq_cst
  %joined = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %joined, label %member, label %run
member:
  %ctxs = load ptr, ptr %ctxsp
  %slot = getelementptr ptr, ptr %ctxs, i64 %i64
  %ctx = load ptr, ptr %slot
  %none = icmp eq ptr %ctx, null
  br i1 %none, label %leave, label %work
work:
  call void @cubepy_pool_work(ptr %pool, ptr %ctx)
  br label %leave
leave:
  %old = atomicrmw sub ptr %state, i32 1 seq_cst
  %last = icmp eq i32 %old, 1
  br i1 %last, label %check, label %wait
check:
  %w = load atomic i32, ptr %waiting seq_cst, align 4
  %asleep = icmp ne i32 %w, 0
  br i1 %asleep, label %wake, label %wait
wake:
  call void @cubepy_futex(ptr %state, i64 129, i32 1)
  br label %wait
exit:
  ret void
}}

; hand the job to the workers whose bit is set in %mask, run chunks on %own, close the launch to helpers and
; return once the workers that joined it have left
define void @cubepy_pool_launch(ptr %pool, ptr %run, ptr %params, ptr %ctxs, i32 %total, i32 %chunk,
                                i64 %mask, i32 %workers, ptr %own, i32 %spin) {{
entry:
  %i = alloca i32
  %k = alloca i32
  %runp = getelementptr i8, ptr %pool, i64 {job}
  store ptr %run, ptr %runp
  %paramsp = getelementptr i8, ptr %pool, i64 {job_params}
  store ptr %params, ptr %paramsp
  %ctxsp = getelementptr i8, ptr %pool, i64 {job_contexts}
  store ptr %ctxs, ptr %ctxsp
  %totalp = getelementptr i8, ptr %pool, i64 {job_total}
  store i32 %total, ptr %totalp
  %chunkp = getelementptr i8, ptr %pool, i64 {job_chunk}
  store i32 %chunk, ptr %chunkp
  %nextp = getelementptr i8, ptr %pool, i64 {next}
  store atomic i64 0, ptr %nextp monotonic, align 8
  %waiting = getelementptr i8, ptr %pool, i64 {waiting}
  store atomic i32 0, ptr %waiting seq_cst, align 4
  %state = getelementptr i8, ptr %pool, i64 {state}
  store atomic i32 -2147483648, ptr %state seq_cst, align 4
  store i32 0, ptr %k
  store i32 0, ptr %i
  br label %next_worker
next_worker:
  %iv = load i32, ptr %i
  %in = icmp slt i32 %iv, %workers
  br i1 %in, label %test_bit, label %work
test_bit:
  %iv64 = zext i32 %iv to i64
  %in2 = add i32 %iv, 1
  store i32 %in2, ptr %i
  %bit = lshr i64 %mask, %iv64
  %used = trunc i64 %bit to i1
  br i1 %used, label %wake_worker, label %next_worker
wake_worker:
  %offset0 = mul i64 %iv64, {line}
  %offset = add i64 %offset0, {worker}
  %go = getelementptr i8, ptr %pool, i64 %offset
  %prev = atomicrmw add ptr %go, i32 1 seq_cst
  %sleepingp = getelementptr i8, ptr %go, i64 4
  %sleeping = load atomic i32, ptr %sleepingp seq_cst, align 4
  %asleep = icmp ne i32 %sleeping, 0
  br i1 %asleep, label %futex_wake, label %next_worker
futex_wake:
  call void @cubepy_futex(ptr %go, i64 129, i32 1)
  br label %next_worker
work:
  call void @cubepy_pool_work(ptr %pool, ptr %own)
  %before = atomicrmw and ptr %state, i32 2147483647 seq_cst
  %members = and i32 %before, 2147483647
  %none0 = icmp eq i32 %members, 0
  br i1 %none0, label %done, label %spin_test
spin_test:
  %left = load atomic i32, ptr %state acquire, align 4
  %none = icmp eq i32 %left, 0
  br i1 %none, label %done, label %spin_more
spin_more:
  %kv = load i32, ptr %k
  %kn = add i32 %kv, 1
  store i32 %kn, ptr %k
  %hot = icmp slt i32 %kv, %spin
  br i1 %hot, label %spin_pause, label %sleep
spin_pause:
  call void @cubepy_pause()
  br label %spin_test
sleep:
  store atomic i32 1, ptr %waiting seq_cst, align 4
  %again = load atomic i32, ptr %state seq_cst, align 4
  %zero = icmp eq i32 %again, 0
  br i1 %zero, label %done, label %futex_wait
futex_wait:
  call void @cubepy_futex(ptr %state, i64 128, i32 %again)
  br label %sleep
done:
  ret void
}}

"""

_Launch = ctypes.CFUNCTYPE(
    None,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int32,
    ctypes.c_int32,
    ctypes.c_uint64,
    ctypes.c_int32,
    ctypes.c_void_p,
    ctypes.c_int32,
)
_Worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)


def _machine() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def available() -> bool:
    """Whether this process can run the native pool (Linux on x86-64 or aarch64)."""
    return sys.platform.startswith("linux") and _machine() in _FUTEX


@functools.cache
def _compiled() -> tuple[object, int, int]:
    """The pool's code, compiled once per process: (engine and its module, launch address, worker address)."""
    from cubepy.compiler.emit_host import host_machine
    from cubepy.compiler.llvm_process import LLVM_LOCK, binding

    machine = _machine()
    text = _IR.format(
        pause=_PAUSE[machine],
        pause_decl=_PAUSE_DECL[machine],
        futex=_FUTEX[machine],
        job=JOB,
        job_params=JOB + 8,
        job_contexts=JOB + 16,
        job_total=JOB + 24,
        job_chunk=JOB + 28,
        next=NEXT,
        state=STATE,
        waiting=WAITING,
        stop=STOP,
        worker=WORKER,
        line=LINE,
    )
    with LLVM_LOCK:
        llvm = binding()
        module = llvm.parse_assembly(text)
        module.verify()
        engine = llvm.create_mcjit_compiler(module, host_machine())
        engine.finalize_object()
        return (
            (engine, module),
            engine.get_function_address("cubepy_pool_launch"),
            engine.get_function_address("cubepy_pool_worker"),
        )


class NativePool:
    """Worker threads bound one to each of ``cpus``, fed by ``cubepy_pool_launch`` (started on first use)."""

    def __init__(self, cpus: list[int], spin: int = SPIN) -> None:
        self.cpus = cpus
        self.spin = spin
        self._lock = fork_safe(threading.Lock())  # one launch at a time uses the workers
        self._start_lock = fork_safe(threading.Lock())
        self._pid = -1
        self._block: np.ndarray | None = None
        self._block_address = 0
        # one cube context address per worker, read by the workers during a launch (set element by element: for a
        # handful of workers that is cheaper than a numpy copy, and the address is taken once)
        self._contexts = (ctypes.c_uint64 * max(len(cpus), 1))()
        self._contexts_address = ctypes.addressof(self._contexts)
        self._launch: Any = None  # the ctypes function of cubepy_pool_launch, once started

    def try_run(self, run: int, params: int, contexts: list[int], total: int, chunk: int, mask: int) -> bool:
        """Run cubes ``[0, total)`` in chunks of ``chunk`` on the calling thread (context ``contexts[-1]``) and
        the workers whose bit is set in ``mask`` (worker ``i``: context ``contexts[i]``); False, having run
        nothing, when another launch holds the workers."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            launch, block_address = self._started()
            slots = self._contexts
            for index in range(len(self.cpus)):  # 0 for a worker not asked: one woken late for an earlier launch
                slots[index] = contexts[index]  # helps none
            launch(
                block_address,
                run,
                params,
                self._contexts_address,
                total,
                chunk,
                mask,
                len(self.cpus),
                contexts[-1],
                self.spin,
            )
        finally:
            self._lock.release()
        return True

    def _started(self) -> tuple[Any, int]:
        if self._pid == os.getpid():  # started in this process: no lock to take (the fields are set before _pid)
            return self._launch, self._block_address
        with self._start_lock:
            if self._pid != os.getpid():  # first use, or a forked child (which has none of the parent's threads)
                _, launch_address, worker_address = _compiled()
                block = np.zeros(WORKER + LINE * len(self.cpus) + LINE, np.uint8)
                start = (-int(block.ctypes.data)) % LINE
                self._block = block[start : start + WORKER + LINE * len(self.cpus)]
                self._block_address = self._block.ctypes.data
                worker = _Worker(worker_address)
                for index, cpu in enumerate(self.cpus):
                    threading.Thread(
                        target=_serve,
                        args=(worker, self._block, index, cpu, self.spin),
                        name=f"cubepy-cpu-{cpu}",
                        daemon=True,
                    ).start()
                weakref.finalize(self, _stop, self._block, len(self.cpus)).atexit = False
                self._launch = _Launch(launch_address)
                self._pid = os.getpid()
            return self._launch, self._block_address


def _serve(worker: Callable[..., object], block: np.ndarray, index: int, cpu: int, spin: int) -> None:
    """A worker thread: bind to ``cpu``, then live in the compiled loop (GIL released) until the pool stops."""
    _bind_to_cpu(cpu)
    worker(block.ctypes.data, index, spin)


def _stop(block: np.ndarray, workers: int) -> None:
    """Tell every worker to return: the stop word, then each go word bumped and woken."""
    words = block.view(np.int32)
    words[STOP // 4] = 1
    libc = ctypes.CDLL(None, use_errno=True)
    for index in range(workers):
        go = (WORKER + LINE * index) // 4
        words[go] += 1
        libc.syscall(ctypes.c_long(_FUTEX[_machine()]), ctypes.c_void_p(block.ctypes.data + 4 * go), 129, 1)
