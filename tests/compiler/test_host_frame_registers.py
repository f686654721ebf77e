"""Mutable locals kept in a unit's frame (the host's loop fission) and assigned under a branch go through a
private alloca, loaded before the branch and stored back after it (``lower_control.frame_locals_in_registers``):
the vectorized loop over units then stores them unconditionally instead of with a masked store per
assignment.  The bits must be the interp's for an ``if``, an ``if_else``, nested branches, a lane written
under a branch, and a branch that leaves its loop early (which keeps the frame slot)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Line, cube, f32, u32
from cubepy.compiler.emit_host import compile_host
from cubepy_layouts.reduce import cube_sum
from tests.compiler.fission import _arrays, _definition, on_interp_and_cpu

PER_UNIT = 8


@cube(launch=True)
def guarded_sums(data: Array[f32], out: Array[f32], n: u32):
    """Per unit: values u, u + 64, ... below n added (``if``), the odd ones' count kept apart (``if_else`` with
    a nested ``if``), a line's lane set under a branch; then the cube's sum and every unit's own figures."""
    acc = f32(0.0)
    odd = u32(0)
    even = u32(0)
    lanes = Line(f32(0.0), 2)
    for k in range(PER_UNIT):
        i = CUBE_POS * (64 * PER_UNIT) + UNIT_POS + k * 64
        if i < n:
            acc += data[i]
            if i % 2 == 1:
                odd += 1
            else:
                even += 1
                if data[i] > f32(0.0):
                    lanes[1] = data[i]
    total = cube_sum(acc)
    base = (CUBE_POS * 64 + UNIT_POS) * 5
    out[base] = total
    out[base + 1] = acc
    out[base + 2] = f32(odd)
    out[base + 3] = f32(even)
    out[base + 4] = lanes[1]


@cube(launch=True)
def first_above(data: Array[f32], out: Array[f32], limit: f32):
    """Per unit: the first of its values above ``limit`` (a ``break`` under the branch), then a barrier."""
    found = f32(-1.0)
    for k in range(PER_UNIT):
        value = data[UNIT_POS * PER_UNIT + k]
        if value > limit:
            found = value
            break
    cp.sync_cube()
    out[UNIT_POS] = found


def _one_cube(kernel, data: np.ndarray, scalar):  # noqa: ANN001
    """``kernel(data, out, scalar)`` on one cube of 64 units, on the interp and the cpu runtime: (data, out) each."""

    def launch(client, src, out):
        kernel.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(src), cp.ArrayArg(out), scalar)

    return on_interp_and_cpu(launch, lambda client: (client.create(data), client.zeros(64, np.float32)))


def _guarded_sums(runtime: str, data: np.ndarray, n: int) -> np.ndarray:
    client = cp.client(runtime)
    out = client.zeros(2 * 64 * 5, np.float32)
    args = (cp.ArrayArg(client.create(data)), cp.ArrayArg(out), cp.ScalarArg(n, u32))
    guarded_sums.launch(client, cp.CubeCount(2), cp.CubeDim(64), *args)
    return client.read(out).reshape(128, 5)


@pytest.mark.parametrize("n", [1024, 777, 0])
def test_branches_that_assign_frame_locals_give_the_interps_bits(n):
    data = np.random.default_rng(2).standard_normal(1024).astype(np.float32)
    interp = _guarded_sums("interp", data, n)
    cpu = _guarded_sums("cpu", data, n)
    np.testing.assert_array_equal(cpu.view(np.uint32), interp.view(np.uint32))
    # by hand: unit u of cube c reads c * 512 + u + 64 k
    units = np.arange(128)
    index = (units // 64 * 512 + units % 64)[:, None] + 64 * np.arange(PER_UNIT)[None, :]
    inside = index < n
    np.testing.assert_array_equal(interp[:, 2], ((index % 2 == 1) & inside).sum(axis=1))
    np.testing.assert_array_equal(interp[:, 3], ((index % 2 == 0) & inside).sum(axis=1))
    values = np.where(inside, data[np.minimum(index, 1023)], 0)
    np.testing.assert_allclose(interp[:, 1], values.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("limit", [0.5, 3.0, -10.0])
def test_a_branch_that_breaks_keeps_its_frame_slot(limit):
    data = np.random.default_rng(3).standard_normal(64 * PER_UNIT).astype(np.float32)
    (_, interp), (_, cpu) = _one_cube(first_above, data, cp.ScalarArg(limit, f32))
    rows = data.reshape(64, PER_UNIT)
    above = rows > np.float32(limit)
    want = np.where(above.any(axis=1), rows[np.arange(64), above.argmax(axis=1)], -1.0).astype(np.float32)
    np.testing.assert_array_equal(interp, want)
    np.testing.assert_array_equal(cpu, want)


def test_the_guarded_accumulation_stores_without_masks():
    args = (*_arrays("f32", "f32"), cp.ScalarCompilationArg("u32"))
    host = compile_host(_definition(guarded_sums, cp.CubeDim(64), *args))
    assert host.shape == "unit loops"
    assert not re.search(r"@llvm\.masked\.store", host.llvm_opt)


@cube(launch=True)
def strided_sums(data: Array[f32], out: Array[f32], n: u32):
    """Per unit: data[u], data[u + 64], ... below n, a lockstep loop whose units stop at different rounds."""
    acc = f32(0.0)
    for c in range(UNIT_POS, n, 64):
        acc += data[c]
    cp.sync_cube()
    out[UNIT_POS] = acc


def test_a_lockstep_loops_finished_bytes_are_stored_without_branches():
    """The tested rounds store each unit's finished byte whether or not it changes, and write the frame locals
    their bodies assign back after them: no predicated scalar store, no masked store into the frame (address
    space 0; the checked store of ``out``, in address space 1, stays masked)."""
    args = (*_arrays("f32", "f32"), cp.ScalarCompilationArg("u32"))
    host = compile_host(_definition(strided_sums, cp.CubeDim(64), *args))
    assert host.shape == "unit loops"
    assert "pred.store" not in host.llvm_opt
    assert not re.search(r"@llvm\.masked\.store\.\w+\.p0\(", host.llvm_opt)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 200, 1000])
def test_strided_sums_give_the_interps_bits(n):
    data = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    (_, interp), (_, cpu) = _one_cube(strided_sums, data, cp.ScalarArg(n, u32))
    np.testing.assert_array_equal(cpu.view(np.uint32), interp.view(np.uint32))
    want = [np.float32(sum(np.float64(v) for v in data[u:n:64])) for u in range(64)]
    np.testing.assert_allclose(interp, want, rtol=1e-5, atol=1e-5)
