"""The cpu runtime's launch threads: one per usable CPU, each bound to its CPU.

A launch runs one share of its cubes on the calling thread and hands the others to the workers of the
CPUs the caller is *not* on.  Both halves matter on Linux: an unbound worker was often woken on its
waker's CPU, so that for tens of launches two threads shared one CPU while the other idled (a
1024-row softmax took 1.3 ms, then 0.7 ms once the scheduler had moved them apart); and a caller that
only waits pays one more cross-CPU wake-up per launch (a 2^20 vector add went from 0.3 to 0.4 ms).
Where the OS cannot bind threads or say which CPU a thread is on, the same code runs unbound.
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

__all__ = ["Workers", "usable_cpus"]


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask where the OS has one, else every CPU)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _bind_to_cpu(cpu: int) -> None:
    """Keep the calling thread on ``cpu`` (Linux; elsewhere, or when refused, the thread stays unbound)."""
    try:
        os.sched_setaffinity(0, {cpu})  # pid 0: the calling thread
    except (AttributeError, OSError):
        pass


def _cpu_query() -> Callable[[], int]:
    """A function giving the calling thread's CPU (glibc's ``sched_getcpu``), or -1 where there is none."""
    try:
        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (AttributeError, OSError):
        return lambda: -1
    getcpu.restype = ctypes.c_int
    getcpu.argtypes = []
    return getcpu


_current_cpu = _cpu_query()


class Workers:
    """Threads bound one to each of ``cpus``, started on first use (and again in a forked child)."""

    def __init__(self, cpus: list[int]) -> None:
        self.cpus = cpus
        self._lock = threading.Lock()
        self._queues: list[queue.SimpleQueue] = []
        self._pid = -1  # the process the threads were started in

    def run(self, jobs: list[Callable[[], None]]) -> None:
        """Run ``jobs``: the first on the calling thread, the rest on workers of other CPUs; raise the first error."""
        queues = self._started()
        here = _current_cpu()
        others = [q for cpu, q in zip(self.cpus, queues, strict=True) if cpu != here]
        futures: list[Future] = []
        inline = list(jobs[:1]) if others else list(jobs)  # one CPU: the caller runs every job
        for index, job in enumerate(jobs[1:] if others else ()):
            future: Future = Future()
            others[index % len(others)].put((job, future))
            futures.append(future)
        try:
            for job in inline:
                job()
        finally:
            for future in futures:
                future.result()

    def _started(self) -> list[queue.SimpleQueue]:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child (which has none of the parent's threads)
                self._queues = [queue.SimpleQueue() for _ in self.cpus]
                for cpu, jobs in zip(self.cpus, self._queues, strict=True):
                    threading.Thread(target=_serve, args=(cpu, jobs), name=f"cubepy-cpu-{cpu}", daemon=True).start()
                self._pid = os.getpid()
            return self._queues


def _serve(cpu: int, jobs: queue.SimpleQueue) -> None:
    """A worker: bind to ``cpu``, then run each job handed to it and settle its future."""
    _bind_to_cpu(cpu)
    while True:
        job, future = jobs.get()
        try:
            job()
        except BaseException as error:  # noqa: BLE001 - handed to the launching thread, which raises it
            future.set_exception(error)
        else:
            future.set_result(None)
