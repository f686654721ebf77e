"""The cpu runtime's launch threads: every job runs once, errors reach the caller, workers keep to their CPU."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import cubepy as cp
from cubepy.runtime.cpu import workers
from cubepy.runtime.cpu.workers import Workers


def _recording_jobs(count: int) -> tuple[list, list]:
    ran: list[tuple[int, str, object]] = []
    lock = threading.Lock()

    def job(index: int) -> None:
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        with lock:
            ran.append((index, threading.current_thread().name, affinity))

    return [lambda i=i: job(i) for i in range(count)], ran


def test_every_job_runs_once_and_the_first_on_the_caller():
    pool = Workers(workers.usable_cpus())
    jobs, ran = _recording_jobs(5)  # more jobs than this machine's CPUs: they go round the workers
    pool.run(jobs)
    assert sorted(index for index, _, _ in ran) == [0, 1, 2, 3, 4]
    assert dict((index, name) for index, name, _ in ran)[0] == threading.current_thread().name


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="this OS cannot bind threads to CPUs")
def test_workers_keep_to_one_cpu_each_and_not_the_callers():
    cpus = workers.usable_cpus()
    if len(cpus) < 2:
        pytest.skip("one usable CPU: the caller runs every job")
    pool = Workers(cpus)
    caller_affinity = os.sched_getaffinity(0)
    jobs, ran = _recording_jobs(len(cpus))
    pool.run(jobs)
    assert os.sched_getaffinity(0) == caller_affinity  # the caller is never bound
    for index, name, affinity in ran:
        if index:
            assert name.startswith("cubepy-cpu-") and affinity == {int(name.removeprefix("cubepy-cpu-"))}


def test_an_error_in_a_worker_reaches_the_caller_after_the_callers_job_ended(monkeypatch):
    monkeypatch.setattr(workers, "_current_cpu", lambda: -2)  # on no usable CPU: every worker takes jobs
    pool = Workers(workers.usable_cpus())
    finished = threading.Event()

    def fails() -> None:
        raise ValueError("cube 7 failed")

    def slow() -> None:
        finished.wait(0.05)
        finished.set()

    with pytest.raises(ValueError, match="cube 7 failed"):
        pool.run([slow, fails])
    assert finished.is_set()


def test_the_callers_cpu_gets_no_worker_job_and_one_cpu_runs_every_job_on_the_caller(monkeypatch):
    monkeypatch.setattr(workers, "_current_cpu", lambda: 0)
    pool = Workers([0])
    jobs, ran = _recording_jobs(3)
    pool.run(jobs)
    assert {name for _, name, _ in ran} == {threading.current_thread().name}


def _trial_run(choice, owner, cubes, seconds_of, launches=20):
    """Launch ``launches`` times, recording the time ``seconds_of(spread)`` of each timed one; the ways asked for."""
    asked = []
    for _ in range(launches):
        spread, timed = choice.spread(owner, cubes)
        asked.append((spread, timed))
        if timed:
            choice.record(owner, cubes, spread, seconds_of(spread))
    return asked


def test_spread_choice_tries_both_ways_in_pairs_then_keeps_the_faster():
    from cubepy.runtime.cpu.workers import SpreadChoice

    for serial_s, spread_s, expected in ((0.001, 0.002, False), (0.002, 0.001, True)):
        choice, owner = SpreadChoice(), object()
        asked = _trial_run(choice, owner, 64, lambda spread, s=spread_s, t=serial_s: s if spread else t, launches=40)
        trials = 4 * SpreadChoice.TRIALS
        assert asked[0] == (True, False)  # the first launch spreads, untimed
        # pairs of launches each way; the first of a pair, right after a switch, runs cold and is not timed
        assert (
            asked[1 : 1 + trials] == [(False, False), (False, True), (True, False), (True, True)] * SpreadChoice.TRIALS
        )
        chosen = asked[1 + trials :]
        assert [spread for spread, _ in chosen[: SpreadChoice.PROBE_FIRST - 1]] == [expected] * (
            SpreadChoice.PROBE_FIRST - 1
        )
        # a launch that follows one the same way is timed: the choice is never final
        assert all(timed for spread, timed in chosen[1 : SpreadChoice.PROBE_FIRST - 1])
        # per cube count: another count starts its own trials
        assert [choice.spread(owner, 65) for _ in range(3)] == [(True, False), (False, False), (False, True)]


def test_spread_choice_probes_the_other_way_in_pairs_less_often_while_it_stays_slower():
    from cubepy.runtime.cpu.workers import SpreadChoice

    choice, owner = SpreadChoice(), object()
    asked = _trial_run(choice, owner, 64, lambda spread: 0.001 if spread else 0.002, launches=200)
    decided = 1 + 4 * SpreadChoice.TRIALS
    probes = [index - decided for index, (spread, _) in enumerate(asked) if index >= decided and not spread]
    first = SpreadChoice.PROBE_FIRST
    # after 16, then 32, then 64 launches: two launches, the second timed
    assert probes == [first - 1, first, 3 * first - 1, 3 * first, 7 * first - 1, 7 * first]
    assert [asked[decided + i][1] for i in probes] == [False, True] * 3


def test_spread_first_starts_spread_and_probes_alone_then_switches_where_alone_is_faster():
    """With the native pool the choice starts as spread: no trial pairs; alone is probed from launch 16 on, in
    a pair whose second launch is timed, and chosen once it measures faster (and only then)."""
    from cubepy.runtime.cpu.workers import SpreadChoice

    first = SpreadChoice.PROBE_FIRST
    for alone_s, spread_s, switched in ((0.002, 0.001, False), (0.001, 0.002, True)):
        choice, owner = SpreadChoice(spread_first=True), object()
        asked = _trial_run(choice, owner, 64, lambda spread, s=spread_s, t=alone_s: s if spread else t, launches=60)
        assert asked[0] == (True, False)  # the first launch spreads, untimed
        assert asked[1 : first - 1] == [(True, True)] * (first - 2)  # spread from the start, every launch timed
        assert asked[first - 1 : first + 1] == [(False, False), (False, True)]  # the first probe: a pair alone
        after = [spread for spread, _ in asked[first + 1 : first + 11]]
        assert after == [not switched] * 10


def test_a_spread_way_that_is_slow_only_when_cold_is_still_chosen():
    """The first spread launch after launches alone is slow (workers asleep, caches cold); warm, it is faster."""
    from cubepy.runtime.cpu.workers import SpreadChoice

    choice, owner = SpreadChoice(), object()
    last: list[bool] = [True]

    def seconds_of(spread: bool) -> float:
        cold = spread and not last[0]
        last[0] = spread
        return 0.0021 if cold else 0.0012 if spread else 0.0018

    asked = []
    for _ in range(60):
        spread, timed = choice.spread(owner, 64)
        asked.append(spread)
        seconds = seconds_of(spread)  # every launch runs, timed or not
        if timed:
            choice.record(owner, 64, spread, seconds)
    assert asked[-20:] == [True] * 20


def test_spread_choice_switches_when_the_chosen_way_turns_slower():
    """A choice made on a lucky trial does not stay: once the kept way measures slower, the other takes over."""
    from cubepy.runtime.cpu.workers import SpreadChoice

    choice, owner = SpreadChoice(), object()
    _trial_run(choice, owner, 64, lambda spread: 0.001 if spread else 0.002)
    assert choice.spread(owner, 64)[0] is True
    # now spreading is slow (another process took the second core): within a window's launches, one thread wins
    asked = _trial_run(choice, owner, 64, lambda spread: 0.004 if spread else 0.002, launches=40)
    assert [spread for spread, _ in asked[-10:]] == [False] * 10


def test_spread_choice_decides_long_launches_after_one_timed_trial_each():
    from cubepy.runtime.cpu.workers import SpreadChoice

    choice, owner = SpreadChoice(), object()
    asked = _trial_run(choice, owner, 8, lambda spread: 0.05 if spread else 0.2, launches=5)
    # the first launch alone is cold (untimed); once a launch is long, every one is timed and one each decides
    assert asked == [(True, False), (False, False), (False, True), (True, True), (True, True)]


def test_spread_choice_forgets_a_gone_kernel_whose_id_is_reused():
    from cubepy.runtime.cpu.workers import SpreadChoice

    choice = SpreadChoice()
    first = object()
    _trial_run(choice, first, 8, lambda spread: 0.001 if spread else 0.002)
    assert choice.spread(first, 8) == (True, True)  # decided, and still timed
    other = object()
    choice._trials[(id(other), 8)] = choice._trials.pop((id(first), 8))  # as if ``other`` took ``first``'s id
    assert [choice.spread(other, 8) for _ in range(3)] == [(True, False), (False, False), (False, True)]  # anew


@pytest.mark.skipif(not hasattr(os, "fork"), reason="this OS has no fork")
def test_a_forked_child_starts_its_own_workers(monkeypatch):
    """The child of a fork has none of its parent's threads: jobs handed to them would wait forever."""
    import signal

    monkeypatch.setattr(workers, "_current_cpu", lambda: -2)  # hand the second job to a worker, not the caller
    pool = Workers(workers.usable_cpus())
    pool.run([lambda: None, lambda: None])  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # the child: exit 0 when both jobs ran, 1 on an error; SIGALRM ends a hang
        signal.alarm(10)
        ran = []
        try:
            pool.run([lambda: ran.append(0), lambda: ran.append(1)])
            os._exit(0 if sorted(ran) == [0, 1] else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_the_threads_end_with_their_workers_object():
    import gc
    import time

    before = set(threading.enumerate())
    pool = Workers(workers.usable_cpus())
    pool.run([lambda: None])
    started = [t for t in threading.enumerate() if t not in before]
    del pool
    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in started) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started and not any(t.is_alive() for t in started)


def _launch_vector_add(client) -> np.ndarray:
    from examples.vector_add import vector_add

    n = 1 << 14  # 64 cubes of 256 units: enough work to be spread
    a = np.arange(n, dtype=np.float32)
    ha, ho = client.create(a), client.empty(n, np.float32)
    vector_add.launch(
        client, cp.CubeCount(n // 256), cp.CubeDim(256), cp.ArrayArg(ha), cp.ArrayArg(ha), cp.ArrayArg(ho)
    )
    return client.read(ho)


def test_cpu_threads_setting_of_one_keeps_launches_on_the_calling_thread(monkeypatch):
    from cubepy import config
    from cubepy.runtime.cpu import make_client

    if len(workers.usable_cpus()) < 2:
        pytest.skip("one usable CPU: every launch runs on the calling thread anyway")
    monkeypatch.setenv("CUBEPY_CACHE_DIR", "off")
    with config.override(CUBEPY_CPU_THREADS=1):
        alone = make_client()
        result = _launch_vector_add(alone)
        assert alone.backend._spread._trials == {}  # never asked whether to spread: one thread
    np.testing.assert_array_equal(result, 2 * np.arange(1 << 14, dtype=np.float32))  # a + a, by numpy
    spread = make_client()
    np.testing.assert_array_equal(_launch_vector_add(spread), result)
    assert len(spread.backend._spread._trials) == 1  # the same launch is a candidate for spreading


def test_a_negative_cpu_thread_count_is_refused_with_the_variable_named(monkeypatch):
    from cubepy import config
    from cubepy.errors import CubeError

    monkeypatch.setenv("CUBEPY_CPU_THREADS", "-2")
    with pytest.raises(CubeError, match="CUBEPY_CPU_THREADS='-2': expected 0 or a positive count"):
        config.get("CUBEPY_CPU_THREADS")


def test_buffer_addresses_are_kept_weakly_and_never_taken_from_a_freed_array():
    import gc
    import weakref

    from cubepy.runtime import handle

    first = np.zeros(1000, np.float32)
    assert handle.storage_address(first) == first.ctypes.data
    alive = weakref.ref(first)
    del first
    gc.collect()
    assert alive() is None  # the kept address does not keep the array
    second = np.ones(1000, np.float32)
    dead = weakref.ref(np.zeros(1))  # stands for the freed array whose id ``second`` reuses
    handle._addresses[id(second)] = (dead, 12345)
    assert handle.storage_address(second) == second.ctypes.data
