"""``CpuBackend``: compile for the host, pack the cuda runtime's parameter block, run cubes on every core."""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from collections.abc import Callable

import numpy as np

from cubepy import config
from cubepy.compiler import abi
from cubepy.compiler.emit_host import HostKernel, compile_host, host_target_name
from cubepy.compiler.targets.host_abi import CTX_EPOCH, CTX_FAULT, CTX_NCTAID, SHARED_ALIGN, CubeContext
from cubepy.errors import CubeError, LaunchError
from cubepy.ir import walk
from cubepy.ir.kernel import KernelDefinition, written_slots
from cubepy.ir.ops.branch import Loop, RangeLoop
from cubepy.runtime.bindings import Bindings
from cubepy.runtime.cpu import emulation, loader, packing, pool, workers
from cubepy.runtime.handle import Handle
from cubepy.runtime.host_heap import keep_medium_blocks
from cubepy.runtime.rollback import restore_on_failure

NO_OUT_OF_BOUNDS_REPORTS = (
    "this cpu client was made without sanitize=True; its kernels were compiled without out-of-bounds reports"
)
MAX_SHARED_BYTES = 227 * 1024
MAX_CUBES = 2**31 - 1
CANCELLED = -2  # the fault word of a cube context stopped by Ctrl-C
SPREAD_MIN_UNITS = 4096  # launches of fewer units run on the caller's thread (a hand-off costs more)
CHUNKS_PER_THREAD = 8  # a spread launch's cubes are claimed in chunks of 1/8 of a thread's share
SHORT_LAUNCH_STEPS = 1 << 24  # units x IR operations under which a loop-free launch is not made cancellable
IDLE_KERNELS = 8  # kernels whose cube contexts are kept between launches (each holds shared memory and frames)
# Indices of the cube context's 32-bit words a launch rewrites (``_Workspace._words``).
_WORD_BYTES = np.dtype(np.int32).itemsize
_NCTAID_WORD, _EPOCH_WORD, _FAULT_WORD = CTX_NCTAID // _WORD_BYTES, CTX_EPOCH // _WORD_BYTES, CTX_FAULT // _WORD_BYTES


_LIBC_FREE = ctypes.CDLL(None).free  # frees the frames the compiled code took from the C library's aligned_alloc
_LIBC_FREE.argtypes = [ctypes.c_void_p]
_LIBC_FREE.restype = None


class _Workspace:
    """One worker's cube context: the shared block and the per-unit scheduler arrays, reused cube after cube."""

    def __init__(self, kernel: HostKernel, counts: tuple[int, int, int]) -> None:
        padded = kernel.padded_units
        self.shared = _aligned_zeros(max(kernel.shared_bytes, 1), SHARED_ALIGN)
        self.state = np.zeros(padded, np.int32)
        self.site = np.zeros(padded, np.int32)
        self.mask = np.zeros(padded, np.int32)
        self.publish = np.zeros(padded, np.int64)
        self.snapshot = np.zeros(padded, np.int64)
        self.handles = np.zeros(padded, np.uint64)
        self.frames = np.zeros(padded, np.uint64)  # each unit's coroutine frame, allocated by the compiled code
        self.ctx = np.zeros(ctypes.sizeof(CubeContext), np.uint8)
        self.address = int(self.ctx.ctypes.data)  # the ``cube`` argument of ``cubepy_run_cubes``
        # The context's 32-bit words, kept: a numpy view and ``.ctypes.data`` cost microseconds per launch, and
        # a ctypes array reads a word in a third of a numpy array's time.
        self._words = (ctypes.c_int32 * (self.ctx.size // _WORD_BYTES)).from_address(self.address)
        context = CubeContext.from_address(self.address)  # writes into ``self.ctx``
        for name in ("shared", "state", "site", "mask", "publish", "snapshot", "handles", "frames"):
            setattr(context, name, getattr(self, name).ctypes.data)
        context.nctaid[:] = counts
        self._counts = tuple(counts)

    def start_launch(self, counts: tuple[int, int, int]) -> None:
        """Ready a reused context for a new launch: its cube counts, no barrier changes and no fault yet."""
        words = self._words
        if counts != self._counts:
            words[_NCTAID_WORD], words[_NCTAID_WORD + 1], words[_NCTAID_WORD + 2] = counts
            self._counts = tuple(counts)
        words[_EPOCH_WORD] = 0
        words[_FAULT_WORD] = 0

    def cancel(self) -> None:
        """Stop the cube running on this context and the ones after it (Ctrl-C; from another thread)."""
        self._words[_FAULT_WORD] = CANCELLED

    @property
    def fault(self) -> int:
        """The cube context's fault word (0: none)."""
        return self._words[_FAULT_WORD]

    def __del__(self, _free: Callable[[int], object] = _LIBC_FREE) -> None:
        # ``_free`` is bound at definition: contexts kept by a backend die at interpreter exit, after the
        # module's globals are gone.
        for frame in self.frames.tolist():
            if frame:
                _free(frame)


class _KernelPlan:
    """What every launch of one compiled kernel uses, worked out at its first launch."""

    __slots__ = ("kernel", "packer", "run", "steps")

    def __init__(self, kernel: HostKernel) -> None:
        self.kernel = kernel
        self.packer = packing.KernelPacker(abi.param_layout(kernel.definition), kernel.name)
        self.run = loader.entry(kernel)  # ``cubepy_run_cubes`` (loads the object code)
        # the IR operations one unit runs at most; None: it loops, waits or calls the runtime (no bound)
        self.steps = _unit_steps(kernel)


class CpuBackend:
    """The compiled CPU runtime's back end (``ComputeClient`` calls prepare, check_launch and run)."""

    name = "cpu"
    disk_cache_kind = "cpu"

    def __init__(self, threads: int | None = None, report_out_of_bounds: bool = False) -> None:
        self.threads = threads  # None: CUBEPY_CPU_THREADS, whose 0 means one per usable CPU
        keep_medium_blocks()  # launch temporaries (restored buffers, emulated copies) come from the heap
        # sanitize=True on the cpu runtime: checked-mode accesses that miss are reported (unit, index, line);
        # races, barrier misuse and the rest of the sanitizer stay on the interp.
        self.report_out_of_bounds = report_out_of_bounds
        cpus = workers.usable_cpus()
        self._workers = workers.Workers(cpus)  # the hand-off where the native pool is not available
        self._pool = pool.NativePool(cpus) if pool.available() and len(cpus) <= 64 else None
        self._spread = workers.SpreadChoice(spread_first=self._pool is not None)
        self._helper_lists: dict[tuple[int, int], list[int]] = {}  # (caller's CPU, threads) -> ``_helpers``
        self._plans: dict[int, _KernelPlan] = {}
        # id(kernel) -> (kernel, idle cube contexts): allocating them cost a small launch more than its run
        self._idle: dict[int, tuple[HostKernel, list[_Workspace]]] = {}
        self._idle_lock = workers.fork_safe(threading.Lock())

    @property
    def disk_cache_target(self) -> str:
        """The machine the object code is for (another CPU never loads it), and whether it reports misses."""
        return host_target_name() + ("+oob-reports" if self.report_out_of_bounds else "")

    def prepare(self, definition: KernelDefinition) -> HostKernel:
        """Compile for the host (unsupported operations raise CompileError naming them)."""
        return compile_host(definition, report_out_of_bounds=self.report_out_of_bounds)

    def check_launch(self, kernel: HostKernel, cube_count: tuple[int, int, int]) -> None:
        """Reject launches the GPU would refuse: too much shared memory, too many cubes for the driver's i32."""
        if kernel.shared_bytes > MAX_SHARED_BYTES:
            raise LaunchError(
                f"kernel {kernel.name} needs {kernel.shared_bytes} bytes of shared memory; a cube has "
                f"at most {MAX_SHARED_BYTES} (227 KiB on sm_90)"
            )
        if cube_count[0] * cube_count[1] * cube_count[2] > MAX_CUBES:
            raise LaunchError(f"kernel {kernel.name}: cube_count {cube_count} has more than {MAX_CUBES} cubes")

    def _plan(self, kernel: HostKernel) -> _KernelPlan:
        """What every launch of ``kernel`` uses: its packer, entry point and bound on a unit's steps."""
        found = self._plans.get(id(kernel))
        if found is None or found.kernel is not kernel:
            found = self._plans[id(kernel)] = _KernelPlan(kernel)
        return found

    def run(
        self,
        kernel: HostKernel,
        cube_count: tuple[int, int, int],
        bindings: Bindings,
        *,
        sanitize: bool,
        cluster: tuple[int, int, int] = (1, 1, 1),
    ) -> None:
        """Pack the parameter block (as the cuda runtime does) and run every cube; returns when all finished."""
        if cluster != (1, 1, 1):
            raise LaunchError(
                f"kernel {kernel.name}: the cpu runtime runs no clusters (ClusterDim{cluster}); use the interp runtime"
            )
        if sanitize and not self.report_out_of_bounds:
            raise CubeError(NO_OUT_OF_BOUNDS_REPORTS)
        plan = self._plan(kernel)
        packer = plan.packer
        buffers = bindings.buffers
        maps = (
            [emulation.tensor_map_handle(slot) for slot in range(len(bindings.tensor_maps))]
            if bindings.tensor_maps
            else []
        )
        block, params = packer.pack(
            lambda: [_address(b.handle) for b in buffers], buffers, bindings.scalars, maps, bindings.memo
        )
        try:
            self._run_packed(kernel, cube_count, bindings, params, plan)
        finally:
            packer.release(block, params)  # the compiled code has returned: the block may serve the next launch

    def _run_packed(
        self, kernel: HostKernel, cube_count: tuple[int, int, int], bindings: Bindings, params: int, plan: _KernelPlan
    ) -> None:
        """Run the launch whose parameter block is at ``params``."""
        if not kernel.host_calls:
            self._release_spaces(kernel, self._run_cubes(kernel, cube_count, params, plan))
            return
        # Emulated TMA copies and mbarriers can fail while the kernel runs: then restore every buffer the
        # kernel may write, so a failed launch writes nothing (as on the interp).
        with (
            restore_on_failure(bindings, written_slots(kernel.definition)),
            emulation.launch(params, kernel, list(bindings.tensor_maps), cube_count) as record,
        ):
            spaces = self._run_cubes(kernel, cube_count, params, plan)
            try:
                if record.error is not None:
                    raise record.error
                for space in spaces:
                    fault = space.fault
                    if fault > 0:
                        unit = fault - 1
                        call = kernel.host_calls[int(space.publish[unit])]
                        raise record.deadlock(space.address, unit, call)
            finally:
                self._release_spaces(kernel, spaces)

    def _take_spaces(self, kernel: HostKernel, count: int, cube_count: tuple[int, int, int]) -> list[_Workspace]:
        """``count`` cube contexts for a launch of ``kernel``: idle ones from earlier launches first."""
        found = self._idle.get(id(kernel))
        taken: list[_Workspace] = []
        if found is not None and found[0] is kernel:
            idle = found[1]
            while len(taken) < count:
                try:
                    taken.append(idle.pop())  # atomic: two launches never take the same context
                except IndexError:
                    break
        for space in taken:
            space.start_launch(cube_count)
        while len(taken) < count:
            taken.append(_Workspace(kernel, cube_count))
        return taken

    def _release_spaces(self, kernel: HostKernel, spaces: list[_Workspace]) -> None:
        """Keep the contexts of a finished launch for the next one (a faulted context is dropped)."""
        kept = [space for space in spaces if space.fault == 0]
        idle = self._idle
        key = id(kernel)
        found = idle.get(key)
        try:
            latest = next(reversed(idle), None)
        except RuntimeError:  # another thread changed the dict meanwhile: take the locked way
            latest = None
        if found is not None and found[0] is kernel and latest == key:
            found[1].extend(kept)  # the most recently used kernel already: no reordering
            return
        with self._idle_lock:
            found = idle.pop(key, None)
            if found is None or found[0] is not kernel:
                found = (kernel, [])
            found[1].extend(kept)
            idle[key] = found  # the most recently used last
            while len(idle) > IDLE_KERNELS:
                del idle[next(iter(idle))]

    def _run_cubes(
        self, kernel: HostKernel, cube_count: tuple[int, int, int], params: int, plan: _KernelPlan
    ) -> list[_Workspace]:
        """Run every cube of the launch; the cube contexts used (for their fault words; release them after)."""
        run = plan.run
        total = cube_count[0] * cube_count[1] * cube_count[2]  # ints: CubeCount checked them
        if total == 1 or total * kernel.units < SPREAD_MIN_UNITS:
            spread = timed = False
            threads = 1
        else:
            threads = min(self._thread_limit(), total)
            spread, timed = (False, False) if threads <= 1 else self._spread.spread(kernel, total)
        helpers = self._helpers(threads) if spread else []
        if spread and self._pool is not None and not helpers:  # the caller's CPU is the only one
            spread = timed = False
        start = time.perf_counter() if timed else 0.0
        # The contexts must outlive the call: the code uses their arrays.
        count = (len(helpers) + 1 if self._pool is not None else threads) if spread else 1
        spaces = self._take_spaces(kernel, count, cube_count)
        # A loop-free kernel's launch of few steps in all ends before a Ctrl-C would matter; routing SIGINT to
        # it (a system call) would cost more than its run.
        armed = None
        steps = plan.steps
        if steps is None or total * kernel.units * steps > SHORT_LAUNCH_STEPS:
            armed = _INTERRUPTS.arm(functools.partial(_cancel_all, spaces))
        try:
            if not spread:
                run(params, spaces[0].address, 0, total)
            elif self._pool is not None:
                self._run_pooled(kernel, params, total, helpers, spaces)
            else:
                self._run_spread(params, run, total, threads, spaces)
        finally:
            _INTERRUPTS.disarm(armed)
        if timed:
            self._spread.record(kernel, total, spread, time.perf_counter() - start)
        return spaces

    def _thread_limit(self) -> int:
        """How many threads a launch may use: the client's own count, else ``CUBEPY_CPU_THREADS``, else every CPU."""
        if self.threads:
            return self.threads
        return config.get("CUBEPY_CPU_THREADS") or len(self._workers.cpus)

    def _helpers(self, threads: int) -> list[int]:
        """The indices of the pool's workers a spread launch uses: those of CPUs other than the caller's, at most
        ``threads - 1`` (a worker on the caller's CPU would only take turns with it)."""
        here = workers._current_cpu()
        found = self._helper_lists.get((here, threads))
        if found is None:
            found = [index for index, cpu in enumerate(self._workers.cpus) if cpu != here][: threads - 1]
            self._helper_lists[here, threads] = found
        return found

    def _run_pooled(
        self, kernel: HostKernel, params: int, total: int, helpers: list[int], spaces: list[_Workspace]
    ) -> None:
        """Run the cubes on the caller (``spaces[0]``) and the native pool's workers ``helpers`` (one context each),
        chunks claimed from an atomic counter in compiled code; on the caller alone while another launch holds
        the pool."""
        assert self._pool is not None
        contexts = [0] * (len(self._workers.cpus) + 1)
        mask = 0
        for index, space in zip(helpers, spaces[1:]):
            contexts[index] = space.address
            mask |= 1 << index
        contexts[-1] = spaces[0].address
        # Chunks of a fraction of a thread's share: small enough to even out a slow thread, large enough
        # that claiming one (an atomic add on a shared line) is nothing beside its cubes.
        chunk = max(1, total // (CHUNKS_PER_THREAD * (len(helpers) + 1)))
        address = loader.entry_address(kernel)
        if not self._pool.try_run(address, params, contexts, total, chunk, mask):
            loader.entry(kernel)(params, spaces[0].address, 0, total)

    def _run_spread(
        self,
        params: int,
        run: Callable[[int, int, int, int], object],
        total: int,
        threads: int,
        spaces: list[_Workspace],
    ) -> None:
        """Run the cubes in chunks on the caller and the workers of the other CPUs, one cube context each."""
        tasks = min(total, threads * 4)
        bounds = [total * t // tasks for t in range(tasks + 1)]
        next_task = iter(range(tasks))  # tasks are handed out in order; uneven cubes still balance
        lock = threading.Lock()

        def work(space: _Workspace) -> None:
            while True:
                with lock:
                    task = next(next_task, None)
                if task is None:
                    return
                if bounds[task] < bounds[task + 1]:
                    run(params, space.address, bounds[task], bounds[task + 1])  # ctypes releases the GIL

        self._workers.run([functools.partial(work, space) for space in spaces])


_INTERRUPTS = workers.Interrupts()


def _cancel_all(spaces: list[_Workspace]) -> None:
    for space in spaces:
        space.cancel()


def _unit_steps(kernel: HostKernel) -> int | None:
    """How many IR operations a unit of ``kernel`` runs at most: its operation count when it has no loop, waits
    at no barrier and calls no emulation; else None."""
    if kernel.coroutine or kernel.host_calls:
        return None
    steps = 0
    for instruction in walk(kernel.definition.body):
        if isinstance(instruction.operation, (Loop, RangeLoop)):
            return None
        steps += 1
    return steps


def _aligned_zeros(nbytes: int, align: int) -> np.ndarray:
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    start = (-int(raw.ctypes.data)) % align
    return raw[start : start + nbytes]


def _address(handle: Handle) -> int:
    """A host handle's first element's address (its storage is a numpy array, which always has one)."""
    address = handle.first_address()
    if address is None:
        raise LaunchError(f"{handle!r}: the cpu runtime needs a numpy storage, got {type(handle.storage).__name__}")
    return address
