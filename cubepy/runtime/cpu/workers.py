"""The cpu runtime's launch threads: one per usable CPU, each bound to its CPU, and when a launch uses them.

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
import signal
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

import attrs

from cubepy.forks import fork_safe

if TYPE_CHECKING:
    # A worker's queue: (job, its future) pairs, then None to stop.
    _Jobs = queue.SimpleQueue[tuple[Callable[[], None], Future[None]] | None]

__all__ = ["Interrupts", "SpreadChoice", "Workers", "fork_safe", "usable_cpus"]


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
        self._lock = fork_safe(threading.Lock())
        self._queues: list[_Jobs] = []
        self._pid = -1  # the process the threads were started in

    def run(self, jobs: list[Callable[[], None]]) -> None:
        """Run ``jobs``: the first on the calling thread, the rest on workers of other CPUs; raise the first error."""
        queues = self._started()
        here = _current_cpu()
        others = [q for cpu, q in zip(self.cpus, queues, strict=True) if cpu != here]
        if not others:  # one CPU: the caller runs every job
            for job in jobs:
                job()
            return
        futures: list[Future[None]] = []
        for index, job in enumerate(jobs[1:]):
            future: Future[None] = Future()
            others[index % len(others)].put((job, future))
            futures.append(future)
        try:
            jobs[0]()
        finally:
            for future in futures:
                future.result()

    def _started(self) -> list[_Jobs]:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child (which has none of the parent's threads)
                self._queues = [queue.SimpleQueue() for _ in self.cpus]
                for cpu, jobs in zip(self.cpus, self._queues, strict=True):
                    threading.Thread(target=_serve, args=(cpu, jobs), name=f"cubepy-cpu-{cpu}", daemon=True).start()
                weakref.finalize(self, _stop, self._queues)  # the threads end with the last reference to self
                self._pid = os.getpid()
            return self._queues


def _stop(queues: list[_Jobs]) -> None:
    for jobs in queues:
        jobs.put(None)


def _serve(cpu: int, jobs: _Jobs) -> None:
    """A worker: bind to ``cpu``, then run each job handed to it and settle its future, until handed None."""
    _bind_to_cpu(cpu)
    while True:
        item = jobs.get()
        if item is None:
            return
        job, future = item
        try:
            job()
        except BaseException as error:  # noqa: BLE001 - handed to the launching thread, which raises it
            future.set_exception(error)
        else:
            future.set_result(None)


@attrs.define
class _Trials:
    owner: object  # the kernel the trials are for (its id may be reused once it is gone)
    launches: int = 0
    recent: dict[bool, list[float]] = attrs.Factory(lambda: {False: [], True: []})  # spread? -> latest times
    choice: bool | None = None
    probe_in: int = 0  # launches until the other way is tried again
    interval: int = 0  # the current spacing of those tries
    probing: bool = False  # the next launch is a probe's second (timed) launch the other way
    last_way: bool | None = None  # whether the previous launch spread
    long: bool = False  # a recorded launch took over LONG_S: a switch's cold start is nothing beside it


class SpreadChoice:
    """Per kernel and cube count: whether a launch spreads over the workers or runs on the caller alone.

    Memory-bound kernels can run slower spread: on a 2-core machine a 2^20 vector add took 0.42 ms on two
    threads and 0.25 ms on one, where a row softmax took 0.8 ms on two and 1.3 ms on one.  So the first
    launch spreads (untimed: it faults in fresh memory), then the two ways take turns in pairs of launches,
    ``TRIALS`` pairs each, and the way with the shorter best time is chosen.  Only the second launch of a pair
    is timed: the first launch after a switch runs cold (spread after a run alone, the workers sleep and their
    caches hold none of the kernel's data: a 2^20-value block sum took 0.21 ms in median there, 0.15 in the next
    launch and 0.13 once warm, against 0.18 alone), and timing it made the spread way lose to one thread it
    beats.  Where a launch takes longer than ``LONG_S`` that cold start is nothing beside it: one timed launch of
    each way decides.  The choice is never final: every launch that follows one the same way is timed (a clock
    read costs nothing beside a launch), each way keeps its last ``WINDOW`` times, and the other way is tried
    again now and then, again as a pair (after ``PROBE_FIRST`` launches, then twice as long each time it loses,
    at most ``PROBE_MAX``).  Whenever the chosen way's best recent time is slower than the other's, the choice
    switches: a choice made on a noisy trial does not stay.  Results do not depend on it: cubes are
    independent, and their order was never fixed.

    ``spread_first`` (the native pool's hand-off, ``pool``): spreading starts as the choice, without the trial
    pairs.  That hand-off costs a launch a few microseconds and no wait for a worker that is not there, and on
    every workload of ``benchmarks.cpu_peers`` two threads beat one (a 2^20 vector add 0.10 against 0.19 ms);
    the trials ran 6 of a kernel's first 13 launches alone, and a kernel timed over its first dozen launches
    (as a benchmark times it) measured up to 2x its speed.  Running alone is still probed, from launch
    ``PROBE_FIRST`` on, and chosen where it measures faster.
    """

    TRIALS = 3
    LONG_S = 0.02  # launches this long decide after one trial of each way (a trial's noise is small beside them)
    CAPACITY = 256  # (kernel, cube count) pairs remembered, the least recently used dropped
    WINDOW = 8  # recent times kept per way: a lucky (or unlucky) time ages out
    PROBE_FIRST, PROBE_MAX = 16, 1024

    def __init__(self, spread_first: bool = False) -> None:
        self.spread_first = spread_first
        self._trials: dict[tuple[int, int], _Trials] = {}
        self._lock = fork_safe(threading.Lock())

    def spread(self, owner: object, cubes: int) -> tuple[bool, bool]:
        """(spread this launch?, time it and ``record`` the time?) for ``owner`` launched over ``cubes`` cubes."""
        key = (id(owner), cubes)
        with self._lock:
            trials = self._trials.pop(key, None)
            if trials is None or trials.owner is not owner:
                trials = _Trials(owner)
            self._trials[key] = trials  # the most recently used last
            while len(self._trials) > self.CAPACITY:
                del self._trials[next(iter(self._trials))]
            trials.launches += 1
            way = self._next_way(trials)
            timed = trials.launches > 1 and (way == trials.last_way or trials.long)
            trials.last_way = way
            return way, timed

    def _next_way(self, trials: _Trials) -> bool:
        if trials.choice is None and self.spread_first:
            trials.choice = True
            trials.probe_in = trials.interval = self.PROBE_FIRST
        if trials.choice is not None:
            trials.probe_in -= 1
            if trials.probing:
                trials.probing = False
                return not trials.choice
            if trials.probe_in <= 0:  # try the other way again, twice unless launches are long
                trials.probe_in = trials.interval = min(2 * trials.interval, self.PROBE_MAX)
                trials.probing = not trials.long
                return not trials.choice
            return trials.choice
        if trials.launches == 1:
            return True
        if trials.long:  # the way with fewer times
            return len(trials.recent[True]) <= len(trials.recent[False])
        return (trials.launches // 2) % 2 == 0  # launches 2 and 3 alone, 4 and 5 spread, ...

    def record(self, owner: object, cubes: int, spread: bool, seconds: float) -> None:
        """The time of a launch ``spread`` told to time: kept with the way's recent times; the way whose best
        recent time is shorter is chosen (once both ways were tried enough)."""
        with self._lock:
            trials = self._trials.get((id(owner), cubes))
            if trials is None or trials.owner is not owner:
                return
            recent = trials.recent[spread]
            recent.append(seconds)
            del recent[: -self.WINDOW]
            trials.long = trials.long or seconds > self.LONG_S
            if not (trials.recent[True] and trials.recent[False]):
                return
            faster = min(trials.recent[True]) <= min(trials.recent[False])
            if trials.choice is None:
                if trials.long or min(len(trials.recent[True]), len(trials.recent[False])) >= self.TRIALS:
                    trials.choice = faster
                    trials.probe_in = trials.interval = self.PROBE_FIRST
            elif faster != trials.choice:  # the other way measured faster: switch, and check it again soon
                trials.choice = faster
                trials.probe_in = trials.interval = self.PROBE_FIRST


class Interrupts:
    """Ctrl-C during a launch made by the main thread: the launch's cube contexts are told to stop.

    Python runs its SIGINT handler only on the main thread, and only once a ctypes call returns; so while
    the main thread launches, ``signal.set_wakeup_fd`` has the C-level handler write the signal's number
    to a pipe, and a watcher thread calls the launch's ``cancel`` (the compiled code then leaves its
    loops and cubes).  The main thread raises ``KeyboardInterrupt`` once the call returns.  A wakeup fd
    set by someone else (asyncio's) keeps getting the bytes, forwarded by the watcher.
    """

    def __init__(self) -> None:
        self._write_fd = -1
        self._pid = -1  # the process the watcher was started in (a forked child starts its own)
        self._cancel: Callable[[], None] | None = None
        self._forward = -1

    def arm(self, cancel: Callable[[], None]) -> int | None:
        """On the main thread: route SIGINT to ``cancel`` until ``disarm``; a token for ``disarm`` (None: not armed)."""
        if threading.get_ident() != threading.main_thread().ident:
            return None
        if self._pid != os.getpid():
            read_fd, self._write_fd = os.pipe()
            os.set_blocking(self._write_fd, False)
            self._pid = os.getpid()
            threading.Thread(target=self._watch, args=(read_fd,), name="cubepy-sigint", daemon=True).start()
        try:
            previous = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main interpreter's main thread
            return None
        if previous != self._write_fd:
            self._forward = previous
        self._cancel = cancel
        return previous

    def disarm(self, token: int | None) -> None:
        """Undo ``arm``.  Our pipe stays the wakeup fd when there was none (a syscall less per launch): the
        watcher then just drops the bytes; another one is put back."""
        if token is not None:
            self._cancel = None
            if token not in (-1, self._write_fd):
                signal.set_wakeup_fd(token)
                self._forward = -1

    def _watch(self, read_fd: int) -> None:
        while True:
            data = os.read(read_fd, 512)
            forward = self._forward
            if forward >= 0:
                try:
                    os.write(forward, data)
                except OSError:
                    pass
            cancel = self._cancel
            if cancel is not None and signal.SIGINT.value in data:
                cancel()
