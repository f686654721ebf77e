"""Atomics serialized in lane order: old values are prefixes per address, final values complete."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from cubepy.errors import SanitizerError
from cubepy.ir import ops
from cubepy.runtime.interp import atomic

from .irb import F32, I32, U32, Builder, bi, c, launch


def atomic_kernel(op: str, ty, slots: int, units: int, cubes: int = 1, shared: bool = False):
    """Each active unit applies ``op`` with its value to counter[address] and records the old value."""
    b = Builder()
    counters, addresses, values, olds = b.buffer(ty), b.buffer(U32), b.buffer(ty), b.buffer(ty)
    pos = bi("absolute_pos")
    address, value = b.load(addresses, pos), b.load(values, pos)
    target = counters
    if shared:
        target = b.shared_memory(ty, slots)
        with b.if_(b.compare("lt", bi("unit_pos"), c(slots))):
            b.store(
                target,
                bi("unit_pos"),
                b.load(counters, b.binary("add", b.binary("mul", bi("cube_pos"), c(slots)), bi("unit_pos"))),
            )
        b.sync_cube()
    with b.if_(b.compare("ne", b.binary("mod", bi("unit_pos"), c(5)), c(4))):  # every 5th unit sits out
        b.store(olds, pos, b.atomic(op, target, address, value))
    if shared:
        b.sync_cube()
        with b.if_(b.compare("lt", bi("unit_pos"), c(slots))):
            b.store(
                counters,
                b.binary("add", b.binary("mul", bi("cube_pos"), c(slots)), bi("unit_pos")),
                b.load(target, bi("unit_pos")),
            )
    return b.kernel((units, 1, 1))


SERIAL = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "max": max,
    "min": min,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "exchange": lambda a, b: b,
}


def serial_reference(op, counters, addresses, values, units, cubes, slots, shared, dtype):
    counters = counters.astype(object).copy()
    olds = np.zeros(len(addresses), dtype=object)
    for lane in range(units * cubes):
        if (lane % units) % 5 == 4:
            continue
        key = (lane // units) * slots + addresses[lane] if shared else addresses[lane]
        olds[lane] = counters[key]
        counters[key] = SERIAL[op](counters[key], values[lane])
    wrap = (
        (lambda a: np.array([int(v) for v in a], dtype=np.int64).astype(dtype))
        if dtype != np.float32
        else (lambda a: a.astype(dtype))
    )
    return wrap(counters), wrap(olds)


@pytest.mark.parametrize("shared", [False, True], ids=["global", "shared"])
@pytest.mark.parametrize("op", sorted(SERIAL))
@pytest.mark.parametrize("contention", ["light", "heavy"])
def test_integer_atomics_serialize_in_lane_order(op, shared, contention):
    units, cubes = 96, 2
    slots = 7 if contention == "light" else 2  # "heavy": ~40 lanes per address, past the round limit
    rng = np.random.default_rng(zlib.crc32(f"{op}-{shared}-{contention}".encode()))
    addresses = rng.integers(0, slots, units * cubes).astype(np.uint32)
    values = rng.integers(-50, 50, units * cubes).astype(np.int32)
    counters = rng.integers(-100, 100, slots * (cubes if shared else 1)).astype(np.int32)
    kernel = atomic_kernel(op, I32, slots, units, cubes, shared)
    got_counters, _, _, got_olds = launch(kernel, cubes, [counters, addresses, values, np.zeros_like(values)])
    want_counters, want_olds = serial_reference(op, counters, addresses, values, units, cubes, slots, shared, np.int32)
    active = (np.arange(units * cubes) % units) % 5 != 4
    np.testing.assert_array_equal(got_counters, want_counters)
    np.testing.assert_array_equal(got_olds[active], want_olds[active])


def test_add_returns_an_exclusive_scan_in_lane_order():
    units = 64
    b = Builder()
    counter, olds = b.buffer(U32), b.buffer(U32)
    b.store(olds, bi("unit_pos"), b.atomic("add", counter, c(0), b.binary("add", bi("unit_pos"), c(1))))
    got_counter, got_olds = launch(b.kernel((units, 1, 1)), 1, [np.array([10], np.uint32), np.zeros(units, np.uint32)])
    increments = np.arange(1, units + 1)
    np.testing.assert_array_equal(got_olds, 10 + np.cumsum(increments) - increments)
    assert got_counter[0] == 10 + increments.sum()


@pytest.mark.parametrize("rounds", [2, 16, 1000])
def test_float_add_rounds_after_every_update(monkeypatch, rounds):
    monkeypatch.setattr(atomic, "ROUNDS_BEFORE_SCAN", rounds)
    units = 128
    values = np.random.default_rng(5).random(units, dtype=np.float32) * np.float32(1000)
    b = Builder()
    counter, inputs, olds = b.buffer(F32), b.buffer(F32), b.buffer(F32)
    b.store(olds, bi("unit_pos"), b.atomic("add", counter, c(0), b.load(inputs, bi("unit_pos"))))
    got_counter, _, got_olds = launch(
        b.kernel((units, 1, 1)), 1, [np.array([0.1], np.float32), values, np.zeros(units, np.float32)]
    )
    running = np.float32(0.1)
    for lane in range(units):
        assert got_olds[lane] == running
        running = np.float32(running + values[lane])
    assert got_counter[0] == running


@pytest.mark.parametrize("rounds", [3, 16])
def test_compare_exchange_serial_semantics(monkeypatch, rounds):
    # Every unit tries cmp = its unit_pos % 4 -> new = cmp + 1 on one counter, in lane order:
    # the counter climbs 0 -> 1 -> 2 -> 3 -> 4 as lanes with matching cmp come by.
    monkeypatch.setattr(atomic, "ROUNDS_BEFORE_SCAN", rounds)
    units = 64
    b = Builder()
    counter, olds = b.buffer(U32), b.buffer(U32)
    cmp = b.binary("mod", bi("unit_pos"), c(4))
    new = b.binary("add", cmp, c(1))
    old = b.emit(ops.AtomicCompareExchange(counter, c(0), cmp, new), U32)
    b.store(olds, bi("unit_pos"), old)
    got_counter, got_olds = launch(b.kernel((units, 1, 1)), 1, [np.zeros(1, np.uint32), np.zeros(units, np.uint32)])
    current, expected = 0, []
    for unit in range(units):
        expected.append(current)
        if current == unit % 4:
            current = unit % 4 + 1
    np.testing.assert_array_equal(got_olds, expected)
    assert got_counter[0] == current


def test_float_compare_exchange_compares_bits():
    b = Builder()
    counter, olds = b.buffer(F32), b.buffer(F32)
    old = b.emit(ops.AtomicCompareExchange(counter, c(0), c(-0.0, F32), c(5.0, F32)), F32)
    b.store(olds, c(0), old)
    got_counter, got_olds = launch(b.kernel((1, 1, 1)), 1, [np.zeros(1, np.float32), np.zeros(1, np.float32)])
    assert got_counter[0] == 0.0 and got_olds[0] == 0.0  # +0.0 and -0.0 differ bitwise


def test_atomic_load_store_and_bounds():
    b = Builder()
    cell, out = b.buffer(U32), b.buffer(U32)
    b.atomic("store", cell, c(0), bi("unit_pos"))
    b.store(out, bi("unit_pos"), b.atomic("load", cell, c(0)))
    got_cell, got_out = launch(b.kernel(), 1, [np.zeros(1, np.uint32), np.zeros(32, np.uint32)])
    assert got_cell[0] == 31 and (got_out == 31).all()
    b = Builder()
    cell = b.buffer(U32)
    b.atomic("add", cell, bi("unit_pos"), c(1))
    with pytest.raises(SanitizerError, match=r"out-of-bounds atomic add of global buffer 0 \(buf0\) at index 4"):
        launch(b.kernel(), 1, [np.zeros(4, np.uint32)])
